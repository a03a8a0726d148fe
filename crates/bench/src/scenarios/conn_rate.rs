//! Many short connections: connect, send the hello and a small request,
//! read a small answer, close. In plain mode the bytes after the hello are
//! not TLS (so no crypto shows); in TLS mode every connection is a full
//! TLS 1.3 handshake end to end (no resumption), through the proxy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use apiway_standin::pki::{client_config, server_config, Ca};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{list, median, quantile, rotated, Settings, SNI};
use crate::backend::Backend;
use crate::lineup::{Contender, Lineup, Route};
use crate::load::{self, Failure};
use crate::protocol;
use crate::report::{Better, Row, ScenarioReport, Target};

/// Plain or real TLS after the hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A rustls ClientHello, then plain bytes.
    Plain,
    /// A real TLS session per connection.
    Tls,
}

/// What a client needs for one connection.
#[derive(Clone)]
enum Client {
    Plain(Arc<[u8]>),
    Tls(TlsConnector, ServerName<'static>),
}

/// Figures of one trial.
#[derive(Default)]
struct Trial {
    connections: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
    failures: BTreeMap<Failure, u64>,
}

/// Connections per second and latency for every contender.
pub async fn run(settings: &Settings, mode: Mode) -> Result<ScenarioReport> {
    let (backend, client, sni) = match mode {
        Mode::Plain => {
            let hello = protocol::client_hello(SNI)?;
            let request: Arc<[u8]> = load::hello_and_request(&hello).into();
            (Backend::plain().await?, Client::Plain(request), SNI)
        }
        Mode::Tls => {
            let ca = Ca::new("apiway bench CA")?;
            let issued = ca.issue_server(&[SNI], &[])?;
            let mut server = (*server_config(&issued, None, &[])?).clone();
            // Resumption is off on the client; do not send unused tickets.
            server.send_tls13_tickets = 0;
            let mut client = (*client_config(&ca, None, &[])?).clone();
            client.resumption = Resumption::disabled();
            let name = ServerName::try_from(SNI.to_string()).context("server name")?;
            (
                Backend::tls(TlsAcceptor::from(Arc::new(server))).await?,
                Client::Tls(TlsConnector::from(Arc::new(client)), name),
                SNI,
            )
        }
    };
    let scenario = match mode {
        Mode::Plain => "conn_rate",
        Mode::Tls => "conn_rate (real TLS)",
    };
    let routes = vec![Route::new("main", sni, &[backend.addr()])];
    let lineup = Lineup::start(&settings.lineup, routes).await?;
    let contenders = lineup.contenders();

    let mut rates: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    let mut cpu_us: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    let mut latencies: BTreeMap<Contender, Vec<u32>> = BTreeMap::new();
    let mut failures: BTreeMap<Contender, BTreeMap<Failure, u64>> = BTreeMap::new();
    let mut attempted: BTreeMap<Contender, u64> = BTreeMap::new();

    for &c in &contenders {
        let target = lineup.target(c, sni)?;
        let _ = trial(
            target,
            &client,
            settings.workers,
            Duration::from_millis(300),
        )
        .await;
    }
    for round in 0..settings.rounds {
        for c in rotated(&contenders, round) {
            let target = lineup.target(c, sni)?;
            let cpu_before = lineup.cpu_time(c);
            let t = trial(target, &client, settings.workers, settings.trial).await;
            let cpu = lineup.cpu_time(c).saturating_sub(cpu_before);
            let rate = t.connections as f64 / t.elapsed.as_secs_f64().max(1e-9);
            let trial_failed: u64 = t.failures.values().sum();
            eprintln!(
                "  {scenario} {:>8}: {:8.0} conn/s, {} failed",
                c.label(),
                rate,
                trial_failed
            );
            rates.entry(c).or_default().push(rate);
            if c.is_proxy() && t.connections > 0 {
                cpu_us
                    .entry(c)
                    .or_default()
                    .push(cpu.as_secs_f64() * 1e6 / t.connections as f64);
            }
            *attempted.entry(c).or_default() += t.connections + trial_failed;
            latencies.entry(c).or_default().extend(t.latencies_us);
            let failed = failures.entry(c).or_default();
            for (kind, n) in t.failures {
                *failed.entry(kind).or_default() += n;
            }
        }
    }

    let mut report = ScenarioReport::default();
    let mut rate_row = Row::new(scenario, "connections", "conn/s", Better::Higher, 0);
    if mode == Mode::Plain {
        rate_row = rate_row.target(Target::RatioAtLeast(Contender::Haproxy, 1.2));
    }
    let mut p50_row = Row::new(scenario, "latency p50", "µs", Better::Lower, 0);
    let mut p99_row = Row::new(scenario, "latency p99", "µs", Better::Lower, 0);
    let mut cpu_row = Row::new(scenario, "proxy CPU", "µs/conn", Better::Lower, 1);
    let mut failed_row = Row::new(scenario, "failed connections", "count", Better::Lower, 0);
    for &c in &contenders {
        if let Some(m) = rates.get(&c).and_then(|v| median(v)) {
            rate_row.set(c, m);
            report.notes.push(format!(
                "{scenario}: {} rounds {} conn/s",
                c.label(),
                list(&rates[&c], 0)
            ));
        }
        if let Some(samples) = latencies.get_mut(&c) {
            samples.sort_unstable();
            if let Some(p) = quantile(samples, 0.5) {
                p50_row.set(c, f64::from(p));
            }
            if let Some(p) = quantile(samples, 0.99) {
                p99_row.set(c, f64::from(p));
            }
        }
        if let Some(m) = cpu_us.get(&c).and_then(|v| median(v)) {
            cpu_row.set(c, m);
        }
        let failed = failures.get(&c).cloned().unwrap_or_default();
        let total: u64 = failed.values().sum();
        failed_row.set(c, total as f64);
        if total > 0 {
            let kinds: Vec<String> = failed
                .iter()
                .map(|(kind, n)| format!("{n} {}", kind.label()))
                .collect();
            report.notes.push(format!(
                "{scenario}: {} had {total} failed connections of {} ({})",
                c.label(),
                attempted.get(&c).copied().unwrap_or(0),
                kinds.join(", ")
            ));
        }
    }
    report
        .rows
        .extend([rate_row, p50_row, p99_row, cpu_row, failed_row]);
    drop(lineup);
    drop(backend);
    Ok(report)
}

/// `workers` clients making connections back to back for `window`.
async fn trial(
    target: std::net::SocketAddr,
    client: &Client,
    workers: usize,
    window: Duration,
) -> Trial {
    let started = Instant::now();
    let deadline = started + window;
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let client = client.clone();
        tasks.spawn(async move {
            let mut trial = Trial::default();
            while Instant::now() < deadline {
                let outcome = match &client {
                    Client::Plain(request) => load::plain_exchange(target, request).await,
                    Client::Tls(connector, name) => {
                        load::tls_exchange(target, connector, name).await
                    }
                };
                match outcome {
                    Ok(took) => {
                        trial.connections += 1;
                        trial
                            .latencies_us
                            .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                    }
                    Err(kind) => {
                        *trial.failures.entry(kind).or_default() += 1;
                        // Do not spin on a dead target.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            trial
        });
    }
    let mut total = Trial::default();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(t) = joined {
            total.connections += t.connections;
            total.latencies_us.extend(t.latencies_us);
            for (kind, n) in t.failures {
                *total.failures.entry(kind).or_default() += n;
            }
        }
    }
    total.elapsed = started.elapsed();
    total
}
