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
use apiway_standin::pki::Ca;
use apiway_test_support::peers::StandinProcess;
use tokio::time::Instant;

use super::client_failover::{apiway_kube, plain_kube, whoami, Path};
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

    // The plain client, then apiway-client on each of its kube-rs paths.
    let sides: Vec<(&str, Option<Path>)> = [
        ("plain", None),
        ("h2", Some(Path::H2)),
        ("http1", Some(Path::Http1)),
    ]
    .into_iter()
    .filter(|(_, path)| {
        let c = if path.is_some() {
            Contender::Apiway
        } else {
            Contender::Direct
        };
        contenders.contains(&c)
    })
    .collect();
    // Per side: µs per GET, GETs/s concurrent, CPU µs per GET.
    let mut samples: Vec<[Vec<f64>; 3]> = sides.iter().map(|_| Default::default()).collect();
    for round in 0..settings.rounds {
        let order: Vec<usize> = (0..sides.len()).collect();
        for i in rotated(&order, round) {
            let (label, path) = sides[i];
            let client = match path {
                Some(path) => apiway_kube(&ca, &origin, "", path)?,
                None => plain_kube(&ca, &origin)?,
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
                "  client_overhead {label:>5} round {}: {:.0} µs/GET, {:.0} GETs/s concurrent, {:.0} µs CPU/GET",
                round + 1,
                per(elapsed),
                concurrent_rate,
                per(cpu_used)
            );
            samples[i][0].push(per(elapsed));
            samples[i][1].push(concurrent_rate);
            samples[i][2].push(per(cpu_used));
        }
    }
    let mut report = ScenarioReport::default();
    let plain = sides.iter().position(|(_, path)| path.is_none());
    for (i, (label, path)) in sides.iter().enumerate() {
        report.notes.push(format!(
            "client_overhead {label}: µs/GET {}; GETs/s {}; CPU µs/GET {} (per round)",
            list(&samples[i][0], 0),
            list(&samples[i][1], 0),
            list(&samples[i][2], 0)
        ));
        let Some(path) = path else { continue };
        let name = match path {
            Path::H2 => "HTTP/2 service",
            Path::Http1 => "HTTP/1.1 connector",
        };
        let rows = [
            Row::new(
                "client_overhead",
                &format!("GET latency, one at a time ({name})"),
                "µs",
                Better::Lower,
                0,
            )
            .target(Target::RatioAtMost(Contender::Direct, 1.05)),
            Row::new(
                "client_overhead",
                &format!("GETs/s, {CONCURRENCY} concurrent ({name})"),
                "req/s",
                Better::Higher,
                0,
            ),
            Row::new(
                "client_overhead",
                &format!("client CPU per GET, one at a time ({name})"),
                "µs",
                Better::Lower,
                0,
            ),
        ];
        for (k, mut row) in rows.into_iter().enumerate() {
            if let Some(v) = median(&samples[i][k]) {
                row.set(Contender::Apiway, v);
            }
            if let Some(v) = plain.and_then(|p| median(&samples[p][k])) {
                row.set(Contender::Direct, v);
            }
            report.rows.push(row);
        }
    }
    report.notes.push(format!(
        "client_overhead: one `apiway standin` process; apiway = kube::Client over apiway-client (origin = the stand-in, no alternatives) on its HTTP/2 service (one connection) or under kube's own HTTP/1.1 stack (Client::http1_kube_client); direct = plain kube::Client from a kube::Config (kube's hyper HTTP/1.1 pool); `GET /apis/bench/whoami` (a ~400-byte JSON answer) one at a time for {} s, then {CONCURRENCY} loops for {} s, per round; CPU = this process (the client side) over the sequential part, 10 ms ticks",
        settings.trial.as_secs_f64(),
        settings.trial.as_secs_f64(),
    ));
    Ok(report)
}
