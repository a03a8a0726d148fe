//! What apiway-client costs per request on a healthy endpoint, against a
//! plain kube-rs client talking to the same API server: `kube::Client`
//! over apiway-client (HTTP/2, origin = the stand-in, no alternatives)
//! against `kube::Client` from a `kube::Config` (kube's own hyper
//! HTTP/1.1 stack), both in this process, against one `apiway standin`
//! process on 127.0.0.2.
//!
//! Per round and client: 100 warm-up requests, then `GET`s one at a time
//! for the trial length (latency), then 16 concurrent request loops for
//! the trial length (rate). The client's CPU per request is this
//! process's CPU time over the sequential part (the stand-in runs
//! elsewhere).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Result};
use apiway_test_support::peers::StandinProcess;
use apiway_test_support::pki::Ca;
use tokio::time::Instant;

use super::client_failover::{apiway_kube, plain_kube, whoami};
use super::{list, median, rotated, Settings};
use crate::lineup::{process_cpu_time, Contender};
use crate::report::{Better, Row, ScenarioReport, Target};

/// Concurrent request loops in the rate part.
const CONCURRENCY: usize = 16;

/// Runs the rounds and reports latency, rate and CPU per request.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let contenders: Vec<Contender> = [Contender::Apiway, Contender::Direct]
        .into_iter()
        .filter(|c| settings.lineup.contenders.contains(c))
        .collect();
    if contenders.is_empty() {
        bail!("client_overhead compares apiway and direct; --contenders has neither");
    }
    let ca = Ca::new("apiway bench CA")?;
    let cert = ca.issue_server(
        &["kubernetes.default"],
        &[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))],
    )?;
    let listen = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), 0));
    let standin = StandinProcess::start(&settings.lineup.apiway, "s2", listen, &cert, None).await?;
    let origin = format!("https://{}", standin.addr());

    let mut latency = Row::new(
        "client_overhead",
        "GET latency, one at a time",
        "µs",
        Better::Lower,
        0,
    )
    .target(Target::RatioAtMost(Contender::Direct, 1.05));
    let mut rate = Row::new(
        "client_overhead",
        &format!("GETs/s, {CONCURRENCY} concurrent"),
        "req/s",
        Better::Higher,
        0,
    );
    let mut cpu = Row::new(
        "client_overhead",
        "client CPU per GET, one at a time",
        "µs",
        Better::Lower,
        0,
    );
    let mut samples: Vec<(Contender, [Vec<f64>; 3])> = contenders
        .iter()
        .map(|c| (*c, [Vec::new(), Vec::new(), Vec::new()]))
        .collect();
    for round in 0..settings.rounds {
        for c in rotated(&contenders, round) {
            let client = match c {
                Contender::Apiway => apiway_kube(&ca, &origin, "")?,
                _ => plain_kube(&ca, &origin)?,
            };
            for _ in 0..100 {
                whoami(client.clone()).await?;
            }
            let cpu_before = process_cpu_time(std::process::id());
            let started = Instant::now();
            let mut n = 0u32;
            while started.elapsed() < settings.trial {
                whoami(client.clone()).await?;
                n += 1;
            }
            let elapsed = started.elapsed();
            let cpu_used = process_cpu_time(std::process::id()).saturating_sub(cpu_before);

            let started = Instant::now();
            let mut loops = tokio::task::JoinSet::new();
            for _ in 0..CONCURRENCY {
                let client = client.clone();
                let trial = settings.trial;
                loops.spawn(async move {
                    let mut done = 0u32;
                    while started.elapsed() < trial {
                        whoami(client.clone()).await?;
                        done += 1;
                    }
                    anyhow::Ok(done)
                });
            }
            let mut concurrent = 0u32;
            while let Some(done) = loops.join_next().await {
                concurrent += done??;
            }
            let concurrent_rate = f64::from(concurrent) / started.elapsed().as_secs_f64();

            let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n.max(1));
            eprintln!(
                "  client_overhead {:>7} round {}: {:.0} µs/GET, {:.0} GETs/s concurrent, {:.0} µs CPU/GET",
                c.label(),
                round + 1,
                per(elapsed),
                concurrent_rate,
                per(cpu_used)
            );
            if let Some((_, s)) = samples.iter_mut().find(|(k, _)| *k == c) {
                s[0].push(per(elapsed));
                s[1].push(concurrent_rate);
                s[2].push(per(cpu_used));
            }
        }
    }
    let mut report = ScenarioReport::default();
    for (c, [l, r, u]) in &samples {
        if let (Some(l), Some(r), Some(u)) = (median(l), median(r), median(u)) {
            latency.set(*c, l);
            rate.set(*c, r);
            cpu.set(*c, u);
        }
        report.notes.push(format!(
            "client_overhead {}: µs/GET {}; GETs/s {}; CPU µs/GET {} (per round)",
            c.label(),
            list(l, 0),
            list(r, 0),
            list(u, 0)
        ));
    }
    report.rows = vec![latency, rate, cpu];
    report.notes.push(format!(
        "client_overhead: one `apiway standin` process; apiway = kube::Client over apiway-client (HTTP/2, one connection, origin = the stand-in, no alternatives); direct = plain kube::Client from a kube::Config (kube's hyper HTTP/1.1 pool); `GET /apis/bench/whoami` (a ~400-byte JSON answer) one at a time for {} s, then {CONCURRENCY} loops for {} s, per round; CPU = this process (the client side) over the sequential part, 10 ms ticks",
        settings.trial.as_secs_f64(),
        settings.trial.as_secs_f64(),
    ));
    Ok(report)
}
