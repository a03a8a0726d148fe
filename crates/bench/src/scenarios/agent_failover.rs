//! The agent as a per-node load balancer in front of three API servers,
//! against HAProxy doing the same job with its usual health checks: how
//! long clients see errors when the server they use dies (SIGKILL) or
//! hangs (SIGSTOP), and how many requests fail.
//!
//! Each trial starts three fresh `apiway standin` processes, the proxy in
//! front of them, and a client that starts an HTTPS request (a new TLS
//! connection, `GET /readyz`, 2 s timeout) every 10 ms; see
//! [`super::failover`] for the fault and how recovery is measured.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use apiway_standin::pki::{self, Ca};
use apiway_test_support::peers::{free_port, Haproxy, StandinProcess};
use apiway_test_support::process::{ChildProcess, Launcher};

use super::failover::{self, Fault, Outcome};
use super::Settings;
use crate::lineup::Contender;
use crate::report::ScenarioReport;

/// Runs kill and hang trials for the agent and HAProxy, interleaved.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let contenders = failover::apiway_and_haproxy(settings, "agent_failover")?;
    let ca = Ca::new("apiway bench CA")?;
    let mut report = failover::run_faults(
        settings,
        "agent_failover",
        &contenders,
        (0.5, 3.0),
        async |c, fault, phase| trial(settings, &ca, c, fault, phase).await,
    )
    .await?;
    report.notes.push(format!(
        "agent_failover: three `apiway standin` processes; a new TLS connection with `GET /readyz` every {} ms ({} s timeout); the stand-in that answers a request at the fault moment is signalled after 1 s (+0, +0.7, +1.4 s in rounds 1 to 3, to sample health-check phases); apiway = `apiway agent` with its defaults (https:/readyz every 1s, 1s timeout, down after 1 failure, prefer-local then lowest latency); HAProxy = {}; recovery = fault to the start of the first request after which none failed",
        failover::TICK.as_millis(),
        failover::REQUEST_TIMEOUT.as_secs(),
        failover::HAPROXY_CHECKS,
    ));
    Ok(report)
}

async fn trial(
    settings: &Settings,
    ca: &Ca,
    contender: Contender,
    fault: Fault,
    phase: Duration,
) -> Result<Outcome> {
    let apiway = settings.lineup.apiway.as_path();
    let cert = ca.issue_server(
        &["kubernetes.default", "kubernetes.default.svc"],
        &[Ipv4Addr::LOCALHOST.into()],
    )?;
    let mut standins = Vec::new();
    for i in 1..=3 {
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        standins.push(StandinProcess::start(apiway, &format!("s{i}"), listen, &cert, None).await?);
    }
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    // Held (and killed on drop) for the whole trial.
    let _proxy: (Option<AgentProcess>, Option<Haproxy>) = match contender {
        Contender::Apiway => (
            Some(AgentProcess::start(apiway, listen, &standins).await?),
            None,
        ),
        _ => (
            None,
            Some(Haproxy::start(&failover::haproxy_config(listen, &standins)).await?),
        ),
    };
    let config = pki::client_config(ca, None, &[b"http/1.1"])?;
    // Let the proxy's first health checks run.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if let Err(e) = request(listen, config.clone()).await {
        bail!(
            "the first request through {} failed: {e:#}",
            contender.label()
        );
    }
    failover::measure(&mut standins, fault, phase, || {
        request(listen, config.clone())
    })
    .await
}

/// One request on a new connection; the name of the stand-in that answered.
async fn request(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<String> {
    let r =
        apiway_standin::https_get_with_config(addr, "kubernetes.default", "/readyz", config, false)
            .await?;
    if r.status != 200 {
        bail!("status {}", r.status);
    }
    Ok(r.standin().unwrap_or_default().to_owned())
}

/// `apiway agent` in direct mode with its defaults, killed (with its
/// process group) on drop.
struct AgentProcess {
    _process: ChildProcess,
}

impl AgentProcess {
    async fn start(
        apiway: &Path,
        listen: SocketAddr,
        standins: &[StandinProcess],
    ) -> Result<AgentProcess> {
        let mut command = Command::new(apiway);
        command
            .arg("agent")
            .arg("--listen")
            .arg(listen.to_string())
            .env("TOKIO_WORKER_THREADS", "1");
        for s in standins {
            command.arg("--endpoint").arg(s.addr().to_string());
        }
        let mut process = Launcher::new(command)
            .log_name("agent.log")
            .deadline(None)
            .ready_file()
            .spawn()?;
        let report = process.wait_for_ready_file(Duration::from_secs(10)).await?;
        if report.listener(&listen.to_string()) != Some(listen) {
            bail!("apiway agent was to listen on {listen}, but reports {report:?}");
        }
        Ok(AgentProcess { _process: process })
    }
}
