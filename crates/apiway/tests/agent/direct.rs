//! `--upstream direct` in front of stand-in API servers: curl through the
//! agent, per-endpoint metrics, and a DNS name that never resolves.

use std::time::Duration;

use anyhow::{ensure, Result};

use crate::agent_support::{answered_by, AgentProcess, API_NAMES};
use crate::support::Pki;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_the_agent_reaches_the_api_servers() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("a", API_NAMES, false).await?;
    let b = pki.standin("b", API_NAMES, false).await?;
    let (a_addr, b_addr) = (a.addr().to_string(), b.addr().to_string());
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            &a_addr,
            "--endpoint",
            &b_addr,
            // Never resolves (RFC 6761 `.invalid`): down, and logged once.
            "--endpoint",
            "api-int.apiway-test.invalid:6443",
            "--health-check",
            "https:/readyz",
            "--health-check-interval",
            "100ms",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;

    for i in 0..6 {
        let who = answered_by(None, agent.addr(), &pki).await?;
        ensure!(who == "a" || who == "b", "request {i} answered by {who}");
    }
    // The probes measure latency of both stand-ins and reach them with the
    // default server name.
    for backend in [&a_addr, &b_addr] {
        agent
            .wait_metric(
                "apiway_backend_latency_seconds",
                &[("route", "direct"), ("backend", backend)],
                Duration::from_secs(5),
                |v| v > 0.0,
            )
            .await?;
    }
    let name = "api-int.apiway-test.invalid:6443";
    agent
        .wait_metric(
            "apiway_backend_health_checks_total",
            &[("backend", name), ("result", "failed")],
            Duration::from_secs(10),
            |v| v >= 3.0,
        )
        .await?;
    let m = agent.metrics().await?;
    ensure!(m.value("apiway_backend_healthy", &[("backend", name)]) == Some(0.0));
    let served = m.count("apiway_backend_connections_total", &[("backend", &a_addr)])
        + m.count("apiway_backend_connections_total", &[("backend", &b_addr)]);
    ensure!(
        served == 6.0,
        "{}",
        m.matching("apiway_backend_connections")
    );
    ensure!(m.count("apiway_listener_accepted_total", &[]) == 6.0);
    ensure!(m.count("apiway_listener_unavailable_total", &[]) == 0.0);
    let dns_lines = agent
        .log_lines()
        .iter()
        .filter(|l| l.contains("DNS resolution failed"))
        .count();
    ensure!(
        dns_lines == 1,
        "the unresolvable name must be logged once, got {dns_lines}"
    );
    ensure!(agent.admin_get("/readyz").await?.0 == 200);
    ensure!(agent.admin_get("/healthz").await?.0 == 200);
    Ok(())
}
