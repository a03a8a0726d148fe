//! The agent as a per-node load balancer in front of three API servers,
//! against HAProxy doing the same job with its usual health checks: how
//! long clients see errors when the server they use dies (SIGKILL) or
//! hangs (SIGSTOP), and how many requests fail.
//!
//! Each trial starts three fresh `apiway standin` processes, the proxy in
//! front of them, and a client that starts an HTTPS request (a new TLS
//! connection, `GET /readyz`, 2 s timeout) every 10 ms. After 1 s (plus
//! a per-round shift) the stand-in that answers a request at that moment
//! is killed or stopped; the client goes on for 20 s more. A proxy that
//! has not recovered 18 s after the fault is reported with that window,
//! and a note says so.
//!
//! Recovery time is measured from the fault to the start of the first
//! request after which no request failed: for a proxy that spreads load
//! (HAProxy round-robin) a lucky request right after the fault does not
//! count as recovered while others still fail.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_test_support::peers::{free_port, wait_for_port, Haproxy, StandinProcess};
use apiway_test_support::pki::{self, Ca};
use tokio::time::Instant;

use super::{list, median, Settings};
use crate::lineup::Contender;
use crate::report::{Better, Row, ScenarioReport, Target};

/// Time between request starts.
const TICK: Duration = Duration::from_millis(10);
/// How long one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Added to [`BEFORE_FAULT`] per round, to sample health-check phases.
const PHASE_STEP: Duration = Duration::from_millis(700);
/// Requests before the fault (a warm, measured steady state).
const BEFORE_FAULT: Duration = Duration::from_secs(1);
/// Requests after the fault: longer than HAProxy needs to mark a hung
/// server down with `inter 2s fall 3` (each failed check of a hung server
/// also waits out its own timeout).
const AFTER_FAULT: Duration = Duration::from_secs(20);
/// A recovery counts only when the requests after it kept succeeding for
/// at least this long (else a round-robin proxy that still sends every
/// third request to the dead server would look recovered at the end).
const STABLE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Hang,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Kill => "SIGKILL",
            Fault::Hang => "SIGSTOP",
        }
    }
}

/// One trial's outcome.
struct Outcome {
    recovery: Duration,
    failed: usize,
    total: usize,
}

/// Runs kill and hang trials for the agent and HAProxy, interleaved.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let contenders: Vec<Contender> = [Contender::Apiway, Contender::Haproxy]
        .into_iter()
        .filter(|c| settings.lineup.contenders.contains(c))
        .collect();
    if contenders.is_empty() {
        bail!("agent_failover compares apiway and haproxy; --contenders has neither");
    }
    let rounds = if settings.rounds > 2 { 3 } else { 1 };
    let ca = Ca::new("apiway bench CA")?;
    let mut report = ScenarioReport::default();
    for fault in [Fault::Kill, Fault::Hang] {
        let target = match fault {
            Fault::Kill => 0.5,
            Fault::Hang => 3.0,
        };
        let mut recovery = Row::new(
            "agent_failover",
            &format!("time to recover after {}", fault.label()),
            "s",
            Better::Lower,
            2,
        )
        .target(Target::AtMost(target));
        let mut failed = Row::new(
            "agent_failover",
            &format!("failed requests after {}", fault.label()),
            "requests",
            Better::Lower,
            0,
        );
        for c in &contenders {
            let mut times = Vec::new();
            let mut failures = Vec::new();
            for round in 0..rounds {
                // Health checks run on a fixed period from the proxy's
                // start; shifting the fault by 0, 0.7 and 1.4 s samples
                // different phases of it (both the 1 s and the 2 s period).
                let phase = PHASE_STEP * round as u32;
                let o = trial(settings, &ca, *c, fault, phase)
                    .await
                    .with_context(|| {
                        format!("{} {} round {}", c.label(), fault.label(), round + 1)
                    })?;
                if o.recovery > AFTER_FAULT - STABLE {
                    report.notes.push(format!(
                        "agent_failover {} {} round {}: NOT recovered within {} s; the figure is that window",
                        c.label(),
                        fault.label(),
                        round + 1,
                        (AFTER_FAULT - STABLE).as_secs()
                    ));
                }
                eprintln!(
                    "  agent_failover {:>8} {}: recovered in {:.3} s, {} of {} requests failed",
                    c.label(),
                    fault.label(),
                    o.recovery.as_secs_f64(),
                    o.failed,
                    o.total
                );
                times.push(o.recovery.as_secs_f64());
                failures.push(o.failed as f64);
            }
            if let (Some(t), Some(f)) = (median(&times), median(&failures)) {
                recovery.set(*c, t);
                failed.set(*c, f);
            }
            report.notes.push(format!(
                "agent_failover {} {}: recovery {} s; failed requests {} (per round)",
                c.label(),
                fault.label(),
                list(&times, 3),
                list(&failures, 0)
            ));
        }
        report.rows.push(recovery);
        report.rows.push(failed);
    }
    report.notes.push(format!(
        "agent_failover: three `apiway standin` processes; a new TLS connection with `GET /readyz` every {} ms ({} s timeout); the stand-in that answers a request at the fault moment is signalled after {} s (+0, +0.7, +1.4 s in rounds 1 to 3, to sample health-check phases); apiway = `apiway agent` with its defaults (https:/readyz every 1s, 1s timeout, down after 1 failure, prefer-local then lowest latency); HAProxy = `balance roundrobin`, `option httpchk GET /readyz`, `check check-ssl verify none inter 2s fall 3 rise 2`; recovery = fault to the start of the first request after which none failed",
        TICK.as_millis(),
        REQUEST_TIMEOUT.as_secs(),
        BEFORE_FAULT.as_secs()
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
            Some(Haproxy::start(&haproxy_config(listen, &standins)).await?),
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

    let started = Instant::now();
    let fault_planned = started + BEFORE_FAULT + phase;
    let end = fault_planned + AFTER_FAULT;
    let mut tasks = tokio::task::JoinSet::new();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut fault_time = None;
    let mut victim = None;
    loop {
        let now = ticker.tick().await;
        if now >= end {
            break;
        }
        if fault_time.is_none() && now >= fault_planned {
            // The server the proxy sends to right now: the agent's choice
            // follows measured latency and may have moved since the start.
            let active = request(listen, config.clone())
                .await
                .context("the request that picks the victim failed")?;
            let index = standins
                .iter()
                .position(|s| s.name() == active)
                .with_context(|| format!("no stand-in named {active}"))?;
            match fault {
                Fault::Kill => standins[index].kill(),
                Fault::Hang => standins[index].hang()?,
            }
            fault_time = Some(Instant::now());
            victim = Some(index);
            continue;
        }
        let config = config.clone();
        tasks.spawn(async move { (now, request(listen, config).await.is_ok()) });
    }
    let fault_time = fault_time.context("the fault was never injected")?;
    let mut results = Vec::new();
    while let Some(r) = tasks.join_next().await {
        results.push(r?);
    }
    if let (Fault::Hang, Some(i)) = (fault, victim) {
        standins[i].resume()?;
    }
    results.sort_by_key(|(t, _)| *t);
    let after: Vec<&(Instant, bool)> = results.iter().filter(|(t, _)| *t >= fault_time).collect();
    // Requests in flight at the fault fail because of it too; failures
    // earlier than that mean the setup was broken.
    let in_flight = fault_time - REQUEST_TIMEOUT;
    let hit_in_flight = results
        .iter()
        .filter(|(t, ok)| *t >= in_flight && *t < fault_time && !ok)
        .count();
    let failed = after.iter().filter(|(_, ok)| !ok).count() + hit_in_flight;
    let before_failed = results
        .iter()
        .filter(|(t, ok)| *t < in_flight && !ok)
        .count();
    if before_failed > 0 {
        bail!("{before_failed} requests failed before the fault");
    }
    let last_failure = after.iter().rposition(|(_, ok)| !ok);
    let recovery = match last_failure {
        None => after
            .first()
            .map_or(Duration::ZERO, |(t, _)| *t - fault_time),
        Some(i) => match after.get(i + 1) {
            Some((t, _)) if end - *t >= STABLE => *t - fault_time,
            // Not recovered within the window: report the window, marked.
            _ => AFTER_FAULT - STABLE + Duration::from_nanos(1),
        },
    };
    Ok(Outcome {
        recovery,
        failed,
        total: after.len(),
    })
}

/// One request on a new connection; the name of the stand-in that answered.
async fn request(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<String> {
    let r = tokio::time::timeout(
        REQUEST_TIMEOUT,
        apiway_test_support::https_get_with_config(
            addr,
            "kubernetes.default",
            "/readyz",
            config,
            false,
        ),
    )
    .await
    .context("timed out")??;
    if r.status != 200 {
        bail!("status {}", r.status);
    }
    Ok(r.standin().unwrap_or_default().to_owned())
}

fn haproxy_config(listen: SocketAddr, standins: &[StandinProcess]) -> String {
    let mut c = format!(
        "global\n    nbthread 1\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\nfrontend api\n    bind {listen}\n    default_backend apiservers\nbackend apiservers\n    balance roundrobin\n    option httpchk GET /readyz\n"
    );
    for s in standins {
        c.push_str(&format!(
            "    server {} {} check check-ssl verify none inter 2s fall 3 rise 2\n",
            s.name(),
            s.addr()
        ));
    }
    c
}

/// `apiway agent` in direct mode with its defaults, killed on drop.
struct AgentProcess {
    child: Child,
    _dir: tempfile::TempDir,
}

impl AgentProcess {
    async fn start(
        apiway: &Path,
        listen: SocketAddr,
        standins: &[StandinProcess],
    ) -> Result<AgentProcess> {
        let dir = tempfile::Builder::new()
            .prefix("apiway-bench-agent-")
            .tempdir()?;
        let log = std::fs::File::create(dir.path().join("agent.log"))?;
        let mut command = Command::new(apiway);
        command
            .arg("agent")
            .arg("--listen")
            .arg(listen.to_string())
            .env("TOKIO_WORKER_THREADS", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for s in standins {
            command.arg("--endpoint").arg(s.addr().to_string());
        }
        let child = command.spawn().context("starting apiway agent")?;
        let mut agent = AgentProcess { child, _dir: dir };
        if let Err(e) = wait_for_port(listen, Duration::from_secs(10)).await {
            let log =
                std::fs::read_to_string(agent._dir.path().join("agent.log")).unwrap_or_default();
            let _ = agent.child.kill();
            bail!("{e}; agent log:\n{log}");
        }
        Ok(agent)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
