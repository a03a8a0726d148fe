//! `apiway agent --upstream direct --discover-endpoints`: the API server
//! endpoints come from the `default/kubernetes` EndpointSlices of a
//! fixture Kubernetes API mounted behind real stand-in API servers, through
//! the agent itself; traffic (curl through the agent) follows the slices,
//! and the last list holds while the API is gone.

use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_standin::fixture_api::endpoint_slice;
use apiway_standin::{FixtureApi, StandinConfig, StandinServer};
use apiway_test_support::peers::kubeconfig_text;

use crate::agent_support::{answered_by, AgentProcess};
use crate::support::{any_port, eventually, Pki};

async fn standin(pki: &Pki, name: &str, api: &str) -> Result<StandinServer> {
    let cert = pki.ca.issue_server(
        &["kubernetes.default", "localhost"],
        &[std::net::IpAddr::from([127, 0, 0, 1])],
    )?;
    StandinServer::start(StandinConfig::new(name, any_port(), cert).with_api_upstream(api)).await
}

/// Which stand-in answers a request through the agent, waiting up to 5 s
/// for it to be `want`.
async fn traffic_goes_to(agent: &AgentProcess, pki: &Pki, want: &str) -> Result<()> {
    eventually(
        &format!("requests answered by {want}"),
        Duration::from_secs(5),
        || async {
            match answered_by(None, agent.addr(), pki).await {
                Ok(who) if who == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    // And it stays so.
    for _ in 0..5 {
        let who = answered_by(None, agent.addr(), pki).await?;
        ensure!(who == want, "answered by {who}, not {want}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_follows_the_endpoint_slices_and_the_last_list_holds() -> Result<()> {
    let pki = Pki::new()?;
    let api = FixtureApi::new();
    let fixture = api.serve(any_port()).await?;
    let seed = standin(&pki, "seed", &fixture.url()).await?;
    let b = standin(&pki, "b", &fixture.url()).await?;
    let c = standin(&pki, "c", &fixture.url()).await?;
    api.apply(endpoint_slice("kubernetes", b.addr(), true))?;

    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    // The server named here is not dialed: discovery goes through the
    // agent's own listener; the CA and the token are what count.
    std::fs::write(
        &kubeconfig,
        kubeconfig_text(seed.addr(), &pki.ca_pem, "discovery-token"),
    )?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let seed_addr = seed.addr().to_string();
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            &seed_addr,
            "--discover-endpoints",
            "--kubeconfig",
            &kubeconfig,
            "--ca",
            &pki.ca_pem.to_string_lossy(),
            "--health-check-interval",
            "100ms",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    let listed = |addr: std::net::SocketAddr| {
        let agent = &agent;
        async move {
            let m = agent.metrics().await.map_err(|e| e.to_string())?;
            Ok::<bool, String>(
                m.value("apiway_backend_healthy", &[("backend", &addr.to_string())])
                    .is_some(),
            )
        }
    };
    eventually("b discovered", Duration::from_secs(10), || async {
        listed(b.addr())
            .await?
            .then_some(())
            .ok_or("not yet".to_owned())
    })
    .await?;

    // The seed stops answering /readyz: traffic moves to the discovered one.
    seed.set_ready(false);
    traffic_goes_to(&agent, &pki, "b").await?;

    // An endpoint added, one removed: c replaces b.
    api.apply(endpoint_slice("kubernetes", c.addr(), true))?;
    traffic_goes_to(&agent, &pki, "c").await?;
    ensure!(
        !listed(b.addr()).await.map_err(anyhow::Error::msg)?,
        "b was removed from the slice"
    );

    // One not ready (c), one ready again (b, in a second slice).
    api.apply(endpoint_slice("kubernetes", c.addr(), false))?;
    api.apply(endpoint_slice("kubernetes-2", b.addr(), true))?;
    traffic_goes_to(&agent, &pki, "b").await?;

    // The API goes away (the stand-ins stay, answering 502 for API paths):
    // the agent keeps its last list.
    drop(fixture);
    tokio::time::sleep(Duration::from_secs(3)).await;
    traffic_goes_to(&agent, &pki, "b").await?;
    let m = agent.metrics().await?;
    ensure!(
        m.count("apiway_client_discovery_failures_total", &[]) >= 1.0,
        "{}",
        m.matching("apiway_client_discovery")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_needs_the_direct_upstream() -> Result<()> {
    let out = tokio::process::Command::new(crate::support::process::APIWAY)
        .args([
            "agent",
            "--check",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "proxy",
            "--gateway",
            "127.0.0.1:1",
            "--discover-endpoints",
        ])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{:?}: {stderr}", out.status);
    ensure!(stderr.contains("--discover-endpoints"), "{stderr}");
    Ok(())
}
