//! Configuration changes: how long a 10,000-route config takes to apply, and
//! whether reloads under traffic break any connection.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::task::JoinSet;

use super::{list, median, Settings, SNI};
use crate::backend::Backend;
use crate::lineup::{Contender, Lineup, Route};
use crate::load::{self, Failure, Stream};
use crate::protocol;
use crate::report::{Better, Row, ScenarioReport, Target};

/// Pause between two short connections of one worker during reloads.
const SHORT_PAUSE: Duration = Duration::from_millis(1);
/// Reloads start at most this often (a slower reload starts the next one
/// at once), so every proxy gets traffic across each new config and the
/// fast ones are exposed for as long as `reloads × RELOAD_EVERY`.
const RELOAD_EVERY: Duration = Duration::from_millis(100);

/// Both halves.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let mut report = big_config(settings).await?;
    let under_traffic = under_traffic(settings).await?;
    report.rows.extend(under_traffic.rows);
    report.notes.extend(under_traffic.notes);
    Ok(report)
}

/// `count` routes, each its own hostname and backend, after a first route
/// to a live backend (used to check the proxy still routes).
fn big_routes(live: SocketAddr, count: usize, variant: usize) -> Vec<Route> {
    let mut routes = vec![Route::new("main", SNI, &[live])];
    for i in 0..count.saturating_sub(1) {
        // Port numbers only: nothing listens there and no health check
        // probes them. One route changes per variant.
        let shift = if i == variant % count { 1 } else { 0 };
        let port = 20_000 + u16::try_from(i % 40_000).unwrap_or(0) + shift;
        routes.push(Route::new(
            &format!("r{i}"),
            &format!("r{i}.clusters.example.com"),
            &[SocketAddr::from(([127, 0, 0, 1], port))],
        ));
    }
    routes
}

async fn check_routes(lineup: &Lineup, contender: Contender, request: &[u8]) -> Result<()> {
    let target = lineup.target(contender, SNI)?;
    load::plain_exchange(target, request)
        .await
        .map(|_| ())
        .map_err(|f| {
            anyhow::anyhow!(
                "{} does not route after the change: {}",
                contender.label(),
                f.label()
            )
        })
}

async fn big_config(settings: &Settings) -> Result<ScenarioReport> {
    let n = settings.big_routes;
    let backend = Backend::plain().await?;
    let request = load::hello_and_request(&protocol::client_hello(SNI)?);
    let mut options = settings.lineup.clone();
    options.contenders.retain(|c| c.is_proxy());
    let mut lineup = Lineup::start(&options, big_routes(backend.addr(), n, 0)).await?;
    let proxies = lineup.proxies();
    let mut report = ScenarioReport::default();

    let mut start_row = Row::new(
        "reload",
        &format!("start with {n} routes"),
        "ms",
        Better::Lower,
        0,
    );
    let mut memory_row = Row::new(
        "reload",
        &format!("PSS with {n} routes"),
        "MiB",
        Better::Lower,
        1,
    );
    for &c in &proxies {
        check_routes(&lineup, c, &request).await?;
        if let Some(t) = lineup.start_time(c) {
            start_row.set(c, t.as_secs_f64() * 1000.0);
        }
        memory_row.set(c, lineup.pss_bytes(c)? as f64 / f64::from(1u32 << 20));
    }

    let mut applies: Vec<f64> = Vec::new();
    let mut walls: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    for variant in 1..=settings.big_reloads {
        for &c in &proxies {
            let timed = lineup
                .reload(c, big_routes(backend.addr(), n, variant))
                .await?;
            check_routes(&lineup, c, &request).await?;
            if let Some(apply) = timed.apply {
                applies.push(apply.as_secs_f64() * 1000.0);
            }
            walls
                .entry(c)
                .or_default()
                .push(timed.wall.as_secs_f64() * 1000.0);
            eprintln!(
                "  reload {n} routes {:>8}: {:.1} ms{}",
                c.label(),
                timed.wall.as_secs_f64() * 1000.0,
                timed
                    .apply
                    .map(|a| format!(" (gateway apply {:.1} ms)", a.as_secs_f64() * 1000.0))
                    .unwrap_or_default()
            );
        }
    }
    let yaml_row = apply_row(n, "YAML", &applies, &mut report.notes);
    // The same reloads with the file written as JSON, the form a generator
    // of thousands of routes writes (and YAML parsers read slowly).
    let mut json_applies = Vec::new();
    if proxies.contains(&Contender::Apiway) {
        lineup.set_apiway_json(true);
        for variant in 1..=settings.big_reloads {
            let timed = lineup
                .reload(
                    Contender::Apiway,
                    big_routes(backend.addr(), n, variant + 1),
                )
                .await?;
            check_routes(&lineup, Contender::Apiway, &request).await?;
            if let Some(apply) = timed.apply {
                json_applies.push(apply.as_secs_f64() * 1000.0);
            }
        }
    }
    let json_row =
        apply_row(n, "JSON", &json_applies, &mut report.notes).target(Target::AtMost(50.0));
    // Back to a small configuration: does the memory of the large one
    // return? (HAProxy and nginx reload into new processes; apiway
    // replaces its tables in place, and what returns to the system is up
    // to the allocator.)
    let mut after_row = Row::new(
        "reload",
        &format!("PSS after going back from {n} routes to 2"),
        "MiB",
        Better::Lower,
        1,
    );
    for &c in &proxies {
        lineup.reload(c, big_routes(backend.addr(), 2, 0)).await?;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        after_row.set(c, lineup.pss_bytes(c)? as f64 / f64::from(1u32 << 20));
    }
    let mut wall_row = Row::new(
        "reload",
        &format!("reload {n} routes, wall time"),
        "ms",
        Better::Lower,
        0,
    );
    for (c, values) in &walls {
        if let Some(m) = median(values) {
            wall_row.set(*c, m);
        }
        report.notes.push(format!(
            "reload: {} wall time per {n}-route reload {} ms",
            c.label(),
            list(values, 0)
        ));
    }
    report.rows.extend([
        start_row, yaml_row, json_row, wall_row, memory_row, after_row,
    ]);
    Ok(report)
}

/// The row (median) and the note (every value) of apiway's apply time of
/// `n` routes from a file in `format`.
fn apply_row(n: usize, format: &str, applies: &[f64], notes: &mut Vec<String>) -> Row {
    let mut row = Row::new(
        "reload",
        &format!("apply {n} routes, {format} file (apiway_config_last_apply_seconds)"),
        "ms",
        Better::Lower,
        1,
    );
    if let Some(m) = median(applies) {
        row.set(Contender::Apiway, m);
        notes.push(format!(
            "reload: apiway apply of {n} routes from {format} per reload {} ms (the table shows the median)",
            list(applies, 1)
        ));
    }
    row
}

/// The small config of the reload-under-traffic test, version `i`:
/// even versions toggle an extra route, odd ones change the backend list of
/// an unrelated route.
fn small_routes(live: SocketAddr, others: [SocketAddr; 2], i: usize) -> Vec<Route> {
    let mut routes = vec![Route::new("main", SNI, &[live])];
    let extra_present = (i / 2 + i % 2) % 2 == 1;
    let other_backends: &[SocketAddr] = if (i / 2) % 2 == 1 {
        &others
    } else {
        &others[..1]
    };
    routes.push(Route::new(
        "other",
        "other.clusters.example.com",
        other_backends,
    ));
    if extra_present {
        routes.push(Route::new(
            "extra",
            "extra.clusters.example.com",
            &others[1..],
        ));
    }
    routes
}

struct ShortCounts {
    ok: u64,
    failures: BTreeMap<Failure, u64>,
}

async fn under_traffic(settings: &Settings) -> Result<ScenarioReport> {
    let backend = Backend::plain().await?;
    let other_a = Backend::plain().await?;
    let other_b = Backend::plain().await?;
    let others = [other_a.addr(), other_b.addr()];
    let hello = protocol::client_hello(SNI)?;
    let request: Arc<[u8]> = load::hello_and_request(&hello).into();
    let mut options = settings.lineup.clone();
    options.contenders.retain(|c| c.is_proxy());
    let mut lineup = Lineup::start(&options, small_routes(backend.addr(), others, 0)).await?;
    let reloads = settings.reloads;

    let mut report = ScenarioReport::default();
    let mut broken_row = Row::new(
        "reload",
        &format!("broken connections over {reloads} reloads under traffic"),
        "count",
        Better::Lower,
        0,
    )
    .target(Target::AtMost(0.0));
    let mut wall_row = Row::new(
        "reload",
        "reload under traffic, wall time",
        "ms",
        Better::Lower,
        1,
    );

    for c in lineup.proxies() {
        let target = lineup.target(c, SNI)?;
        let progress = Arc::new(AtomicU64::new(0));
        let mut streams = Vec::new();
        for _ in 0..settings.streams {
            streams.push(
                Stream::start(
                    target,
                    &hello,
                    4096,
                    Duration::from_millis(20),
                    progress.clone(),
                )
                .await?,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut short = JoinSet::new();
        for _ in 0..settings.short_workers {
            let stop = stop.clone();
            let request = request.clone();
            short.spawn(async move {
                let mut counts = ShortCounts {
                    ok: 0,
                    failures: BTreeMap::new(),
                };
                while !stop.load(Ordering::Relaxed) {
                    match load::plain_exchange(target, &request).await {
                        Ok(_) => counts.ok += 1,
                        Err(kind) => *counts.failures.entry(kind).or_default() += 1,
                    }
                    // A steady stream, not a flood that starves the
                    // proxies' own reload work.
                    tokio::time::sleep(SHORT_PAUSE).await;
                }
                counts
            });
        }

        let mut walls = Vec::new();
        let mut reload_error = None;
        for i in 1..=reloads {
            let next = tokio::time::Instant::now() + RELOAD_EVERY;
            match lineup
                .reload(c, small_routes(backend.addr(), others, i))
                .await
            {
                Ok(timed) => walls.push(timed.wall.as_secs_f64() * 1000.0),
                Err(e) => {
                    reload_error = Some(format!("reload {i} failed: {e:#}"));
                    break;
                }
            }
            tokio::time::sleep_until(next).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;

        stop.store(true, Ordering::Relaxed);
        let mut short_ok = 0;
        let mut short_failed: BTreeMap<Failure, u64> = BTreeMap::new();
        while let Some(joined) = short.join_next().await {
            if let Ok(counts) = joined {
                short_ok += counts.ok;
                for (kind, n) in counts.failures {
                    *short_failed.entry(kind).or_default() += n;
                }
            }
        }
        let mut stream_failures = Vec::new();
        for s in streams {
            if let Err(e) = s.finish().await {
                stream_failures.push(e);
            }
        }
        let short_total: u64 = short_failed.values().sum();
        let broken = stream_failures.len() as u64 + short_total;
        broken_row.set(c, broken as f64);
        if let Some(m) = median(&walls) {
            wall_row.set(c, m);
        }
        eprintln!(
            "  reload under traffic {:>8}: {} reloads, {} of {} streams broken, {} of {} short connections failed",
            c.label(),
            walls.len(),
            stream_failures.len(),
            settings.streams,
            short_total,
            short_ok + short_total
        );
        let kinds: Vec<String> = short_failed
            .iter()
            .map(|(kind, n)| format!("{n} {}", kind.label()))
            .collect();
        let mut note = format!(
            "reload under traffic: {} did {} reloads; {} of {} long-lived streams broke; {} of {} short connections failed{}; {:.1} MiB streamed",
            c.label(),
            walls.len(),
            stream_failures.len(),
            settings.streams,
            short_total,
            short_ok + short_total,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            },
            progress.load(Ordering::Relaxed) as f64 / f64::from(1u32 << 20)
        );
        if let Some(first) = stream_failures.first() {
            note.push_str(&format!("; first stream failure: {first}"));
        }
        if let Some(e) = reload_error {
            note.push_str(&format!("; {e}"));
        }
        report.notes.push(note);
    }
    report.rows.extend([broken_row, wall_row]);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_configs_alternate_the_two_kinds_of_change() {
        let live: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let others: [SocketAddr; 2] = [
            "127.0.0.1:2".parse().unwrap(),
            "127.0.0.1:3".parse().unwrap(),
        ];
        let shape = |i| {
            let routes = small_routes(live, others, i);
            (routes.len(), routes[1].backends.len())
        };
        // 0: base; 1: +extra; 2: other gets 2 backends; 3: -extra; 4: other back to 1.
        assert_eq!(shape(0), (2, 1));
        assert_eq!(shape(1), (3, 1));
        assert_eq!(shape(2), (3, 2));
        assert_eq!(shape(3), (2, 2));
        assert_eq!(shape(4), (2, 1));
    }

    #[test]
    fn big_configs_differ_in_one_route() {
        let live: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let a = big_routes(live, 100, 1);
        let b = big_routes(live, 100, 2);
        assert_eq!(a.len(), 100);
        assert_eq!(a.iter().zip(&b).filter(|(x, y)| x != y).count(), 2);
    }
}
