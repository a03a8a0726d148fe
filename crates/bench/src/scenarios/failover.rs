//! What the failover scenarios share: a client that starts a request every
//! 10 ms against three `apiway standin` processes, one of which is killed
//! (SIGKILL) or hung (SIGSTOP) while it serves; how long requests keep
//! failing, and how many fail.
//!
//! Recovery time is measured from the fault to the start of the first
//! request after which no request failed: for a proxy that spreads load
//! (HAProxy round-robin) a lucky request right after the fault does not
//! count as recovered while others still fail.

use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_test_support::peers::StandinProcess;
use tokio::time::Instant;

use super::{list, median};
use crate::lineup::Contender;
use crate::report::{Better, Row, ScenarioReport, Target};

/// Time between request starts.
pub const TICK: Duration = Duration::from_millis(10);
/// How long one request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
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

/// What happens to the stand-in in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL: the kernel resets its connections.
    Kill,
    /// SIGSTOP: connections stay open and nothing answers.
    Hang,
}

impl Fault {
    /// The signal's name.
    pub fn label(self) -> &'static str {
        match self {
            Fault::Kill => "SIGKILL",
            Fault::Hang => "SIGSTOP",
        }
    }
}

/// One trial's outcome.
pub struct Outcome {
    recovery: Duration,
    failed: usize,
    total: usize,
}

/// apiway and HAProxy, as far as `--contenders` lists them; an error
/// naming `scenario` when it lists neither.
pub fn apiway_and_haproxy(
    settings: &crate::scenarios::Settings,
    scenario: &str,
) -> Result<Vec<Contender>> {
    let contenders: Vec<Contender> = [Contender::Apiway, Contender::Haproxy]
        .into_iter()
        .filter(|c| settings.lineup.contenders.contains(c))
        .collect();
    if contenders.is_empty() {
        bail!("{scenario} compares apiway and haproxy; --contenders has neither");
    }
    Ok(contenders)
}

/// Runs `trial(contender, fault, phase)` for a kill and a hang, for each
/// of `contenders`, 3 rounds in a full run (1 with `--quick`), and reports
/// the median recovery time (targets `kill_target` and `hang_target`
/// seconds) and failed requests as rows of `scenario`.
pub async fn run_faults(
    settings: &crate::scenarios::Settings,
    scenario: &str,
    contenders: &[Contender],
    (kill_target, hang_target): (f64, f64),
    trial: impl AsyncFn(Contender, Fault, Duration) -> Result<Outcome>,
) -> Result<ScenarioReport> {
    let rounds = if settings.rounds > 2 { 3 } else { 1 };
    let mut report = ScenarioReport::default();
    for fault in [Fault::Kill, Fault::Hang] {
        let target = match fault {
            Fault::Kill => kill_target,
            Fault::Hang => hang_target,
        };
        let mut recovery = Row::new(
            scenario,
            &format!("time to recover after {}", fault.label()),
            "s",
            Better::Lower,
            2,
        )
        .target(Target::AtMost(target));
        let mut failed = Row::new(
            scenario,
            &format!("failed requests after {}", fault.label()),
            "requests",
            Better::Lower,
            0,
        );
        for c in contenders {
            let mut times = Vec::new();
            let mut failures = Vec::new();
            for round in 0..rounds {
                // Health checks run on a fixed period from the proxy's
                // start; shifting the fault by 0, 0.7 and 1.4 s samples
                // different phases of it (both the 1 s and the 2 s period).
                let phase = PHASE_STEP * round as u32;
                let o = trial(*c, fault, phase).await.with_context(|| {
                    format!("{} {} round {}", c.label(), fault.label(), round + 1)
                })?;
                if o.recovery > AFTER_FAULT - STABLE {
                    report.notes.push(format!(
                        "{scenario} {} {} round {}: NOT recovered within {} s; the figure is that window",
                        c.label(),
                        fault.label(),
                        round + 1,
                        (AFTER_FAULT - STABLE).as_secs()
                    ));
                }
                eprintln!(
                    "  {scenario} {:>8} {}: recovered in {:.3} s, {} of {} requests failed",
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
                "{scenario} {} {}: recovery {} s; failed requests {} (per round)",
                c.label(),
                fault.label(),
                list(&times, 3),
                list(&failures, 0)
            ));
        }
        report.rows.push(recovery);
        report.rows.push(failed);
    }
    Ok(report)
}

/// Starts `request()` every [`TICK`] for [`BEFORE_FAULT`] + `phase`, then
/// faults the stand-in that answers a request at that moment (`request`
/// resolves to the name of the stand-in that answered), and goes on for
/// [`AFTER_FAULT`]. A request fails on an error or after
/// [`REQUEST_TIMEOUT`]. A hung stand-in is resumed at the end.
pub async fn measure<F, Fut>(
    standins: &mut [StandinProcess],
    fault: Fault,
    phase: Duration,
    request: F,
) -> Result<Outcome>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String>> + Send + 'static,
{
    let timed = |fut: Fut| async move {
        match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
            Ok(result) => result,
            Err(_) => bail!("timed out"),
        }
    };
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
            // The server in use right now: a proxy's or client's choice may
            // have moved since the start.
            let active = timed(request())
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
        let attempt = timed(request());
        tasks.spawn(async move { (now, attempt.await.is_ok()) });
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

/// HAProxy in TCP mode in front of `standins` with the usual health
/// checks: `balance roundrobin`, `GET /readyz` over TLS every 2 s, down
/// after 3 failures.
pub fn haproxy_config(listen: std::net::SocketAddr, standins: &[StandinProcess]) -> String {
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

/// The HAProxy health-check settings, for the notes.
pub const HAPROXY_CHECKS: &str = "`balance roundrobin`, `option httpchk GET /readyz`, `check check-ssl verify none inter 2s fall 3 rise 2`";
