//! A reconnect storm: many clients hold a connection through the proxy,
//! the backend closes all of them at once (what an API server restart does
//! to every watch), the proxy passes the close on, and every client
//! reconnects at once through the proxy and makes one exchange. Measured:
//! the time from the drop until the last client has its answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use futures_util::stream::{self, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{list, median, quantile, rotated, Settings, SNI};
use crate::backend::Backend;
use crate::lineup::{Capacity, Contender, Lineup, Route};
use crate::load::{self, Failure};
use crate::protocol;
use crate::report::{Better, Row, ScenarioReport};

/// Connections opened at once while filling up (as idle_memory).
const OPENING_CONCURRENCY: usize = 64;
/// Attempts to open each client's first connection before the storm.
const OPENING_ATTEMPTS: usize = 3;
/// A client that has no answer this long after it saw the close gives up.
const STORM_DEADLINE: Duration = Duration::from_secs(60);
/// Pause after a failed attempt, so a refusing proxy is not spun on.
const RETRY_PAUSE: Duration = Duration::from_millis(1);
/// Quiet time between filling up and the drop.
const IDLE_BEFORE_DROP: Duration = Duration::from_millis(500);
/// Longest wait for a proxy to let go of the connections after a storm.
const SETTLE_LIMIT: Duration = Duration::from_secs(15);
/// Descriptors this process needs besides both ends of every client's
/// connection (runtimes, listeners, slack for the storm's overlap).
const BENCH_RESERVE: u64 = 500;
/// A reconnect this slow waited for a SYN retransmission (first after 1 s).
const SYN_RETRANSMIT: Duration = Duration::from_millis(900);
/// How often the proxy's descriptors are counted during a storm (a count
/// reads `/proc/PID/fd`, some milliseconds with 18,000 open).
const FD_SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Kernel counters (`/proc/net/netstat`, `TcpExt`) that show a full
/// listen queue and SYN retransmissions. They count for the whole network
/// namespace, so what else runs on the machine shows too.
const KERNEL_COUNTERS: [&str; 5] = [
    "ListenOverflows",
    "ListenDrops",
    "TCPReqQFullDoCookies",
    "TCPReqQFullDrop",
    "TCPSynRetrans",
];

/// What one client saw in one storm.
struct ClientOutcome {
    /// When it saw the close (EOF or reset) of its first connection.
    saw_close: Option<Instant>,
    /// When its new connection had the whole answer.
    answered: Option<Instant>,
    /// The successful attempt: until `connect` returned, and from then
    /// until the answer.
    phases: Option<(Duration, Duration)>,
    /// Failed attempts before that (each retried).
    failures: BTreeMap<Failure, u64>,
    /// The new connection, held until the storm is over.
    _held: Option<TcpStream>,
}

/// Figures of one storm.
struct Storm {
    /// Connections the backend closed.
    closed_by_backend: usize,
    /// From the drop until the last client had its answer; `None` when
    /// some never had one.
    all_answered: Option<Duration>,
    /// From the drop until the last client saw the close.
    last_close_seen: Option<Duration>,
    /// Per client, from seeing the close to the answer, in µs.
    reconnect_us: Vec<u32>,
    /// Per client, its successful attempt's connect time, in µs.
    connect_us: Vec<u32>,
    /// Per client, its successful attempt's time from connected to answer,
    /// in µs.
    answer_us: Vec<u32>,
    /// Failed attempts, retried.
    failures: BTreeMap<Failure, u64>,
    /// Clients without an answer when the storm ended.
    unfinished: usize,
    /// Of which never saw the close.
    never_closed: usize,
    /// CPU time of the proxy from the drop to the last answer.
    proxy_cpu: Option<Duration>,
    /// Growth of [`KERNEL_COUNTERS`] during the storm.
    kernel: BTreeMap<&'static str, u64>,
    /// The most descriptors the proxy held (sampled every
    /// [`FD_SAMPLE_EVERY`]), before the drop and during the storm.
    fds: Option<(usize, usize)>,
    /// apiway only: connections it closed at once because
    /// `max_connections` were open.
    apiway_rejected: Option<u64>,
}

/// Drops `settings.storm_clients` clients at once through every contender.
pub async fn run(settings: &Settings, open_files: u64) -> Result<ScenarioReport> {
    let n = settings.storm_clients;
    // Both ends of every connection live in this process (the backend is
    // in-process), and every proxy holds two descriptors per connection.
    let bench_needs = 2 * n as u64 + BENCH_RESERVE;
    if bench_needs > open_files {
        bail!(
            "{n} clients need about {bench_needs} open files in the bench (client and backend ends), but the limit is {open_files}: use --storm-clients {} or fewer",
            open_files.saturating_sub(BENCH_RESERVE) / 2
        );
    }
    let mut capacity = Capacity::fitting(open_files, 2 * n);
    capacity.apiway_queue = settings.storm_apiway_queue;
    if capacity.connections < n {
        bail!(
            "{n} clients need {} open files in each proxy, but the limit is {open_files}: use --storm-clients {} or fewer",
            2 * n as u64 + Capacity::RESERVE,
            capacity.connections
        );
    }
    let mut options = settings.lineup.clone();
    options.capacity = Some(capacity);
    let backend = Backend::plain().await?;
    let routes = vec![Route::new("main", SNI, &[backend.addr()])];
    let lineup = Lineup::start(&options, routes).await?;
    let hello = protocol::client_hello(SNI)?;
    let request: Arc<[u8]> = load::hello_and_request(&hello).into();
    let contenders = lineup.contenders();

    let mut report = ScenarioReport::default();
    report.notes.push(format!(
        "reconnect_storm: {n} clients per storm, {} storms per contender (interleaved); every proxy's connection limit set to {} (twice the clients, at most what the open-file limit of {open_files} holds at two descriptors per connection and {} kept aside): apiway listener `max_connections: {}, when_full: {}`, HAProxy `maxconn {}` with `maxpipes {}` (else HAProxy 2.6 reserves maxconn/4 splice pipes and refuses to start), nginx `worker_connections {}`, `worker_rlimit_nofile {open_files}`",
        settings.storm_rounds,
        capacity.connections,
        Capacity::RESERVE,
        capacity.connections,
        if capacity.apiway_queue { "queue" } else { "close" },
        capacity.connections,
        capacity.haproxy_maxpipes(),
        capacity.nginx_worker_connections(),
    ));
    report.notes.push(backlog_note(&lineup, &contenders));

    let mut baseline_fds: BTreeMap<Contender, usize> = BTreeMap::new();
    for c in lineup.proxies() {
        baseline_fds.insert(c, lineup.open_fds(c));
    }
    let mut storms: BTreeMap<Contender, Vec<Storm>> = BTreeMap::new();
    let mut failed: BTreeMap<Contender, String> = BTreeMap::new();
    for round in 0..settings.storm_rounds {
        for c in rotated(&contenders, round) {
            if failed.contains_key(&c) {
                continue;
            }
            let outcome = storm(&lineup, &backend, c, &request, n).await;
            if !settle(&lineup, &backend, c, baseline_fds.get(&c).copied()).await {
                report.notes.push(format!(
                    "reconnect_storm: round {}: {} still held connections {} s after the clients closed (backend: {})",
                    round + 1,
                    c.label(),
                    SETTLE_LIMIT.as_secs(),
                    backend.open_connections()
                ));
            }
            match outcome {
                Ok(s) => {
                    eprintln!(
                        "  reconnect_storm {:>8}: all {n} answered after {}, last close seen after {}, {} failed attempts, {} unfinished",
                        c.label(),
                        millis(s.all_answered),
                        millis(s.last_close_seen),
                        s.failures.values().sum::<u64>(),
                        s.unfinished
                    );
                    storms.entry(c).or_default().push(s);
                }
                Err(e) => {
                    eprintln!("  reconnect_storm {}: FAILED {e:#}", c.label());
                    failed.insert(c, format!("{e:#}"));
                }
            }
        }
    }

    let scenario = "reconnect_storm";
    let mut all_row = Row::new(
        scenario,
        &format!("all {n} clients re-established"),
        "ms",
        Better::Lower,
        0,
    );
    let mut p50_row = Row::new(scenario, "per-client reconnect p50", "ms", Better::Lower, 1);
    let mut p99_row = Row::new(scenario, "per-client reconnect p99", "ms", Better::Lower, 0);
    let mut close_row = Row::new(
        scenario,
        "last client saw the close",
        "ms",
        Better::Lower,
        0,
    );
    let mut cpu_row = Row::new(
        scenario,
        "proxy CPU during the storm",
        "ms",
        Better::Lower,
        0,
    );
    let mut failed_row = Row::new(
        scenario,
        "failed attempts per storm (retried)",
        "count",
        Better::Lower,
        0,
    );
    let mut unfinished_row = Row::new(
        scenario,
        "clients not re-established (all storms)",
        "count",
        Better::Lower,
        0,
    );
    for &c in &contenders {
        if let Some(error) = failed.get(&c) {
            report
                .notes
                .push(format!("{scenario}: {} FAILED: {error}", c.label()));
        }
        let Some(runs) = storms.get(&c) else {
            continue;
        };
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        let all: Vec<f64> = runs.iter().filter_map(|s| ms(s.all_answered)).collect();
        let closes: Vec<f64> = runs.iter().filter_map(|s| ms(s.last_close_seen)).collect();
        let cpu: Vec<f64> = runs.iter().filter_map(|s| ms(s.proxy_cpu)).collect();
        let failures: Vec<f64> = runs
            .iter()
            .map(|s| s.failures.values().sum::<u64>() as f64)
            .collect();
        let unfinished: usize = runs.iter().map(|s| s.unfinished).sum();
        // A storm with clients left over has no "all re-established" time.
        if all.len() == runs.len() {
            if let Some(m) = median(&all) {
                all_row.set(c, m);
            }
        }
        if let Some(m) = median(&closes) {
            close_row.set(c, m);
        }
        if let Some(m) = median(&cpu) {
            cpu_row.set(c, m);
        }
        if let Some(m) = median(&failures) {
            failed_row.set(c, m);
        }
        unfinished_row.set(c, unfinished as f64);
        let mut samples: Vec<u32> = runs
            .iter()
            .flat_map(|s| s.reconnect_us.iter().copied())
            .collect();
        samples.sort_unstable();
        let q = |p: f64| quantile(&samples, p).map(|us| f64::from(us) / 1e3);
        if let Some(v) = q(0.5) {
            p50_row.set(c, v);
        }
        if let Some(v) = q(0.99) {
            p99_row.set(c, v);
        }
        let slow = samples
            .iter()
            .filter(|us| u128::from(**us) >= SYN_RETRANSMIT.as_micros())
            .count();
        report.notes.push(format!(
            "{scenario}: {} all re-established after {} ms; last close seen after {} ms; proxy CPU {} ms; failed attempts {}",
            c.label(),
            list(&all, 0),
            list(&closes, 0),
            if c.is_proxy() { list(&cpu, 0) } else { "—".to_string() },
            list(&failures, 0),
        ));
        report.notes.push(format!(
            "{scenario}: {} per-client reconnect (close seen → answer, {} samples) p50 {} / p90 {} / p99 {} / max {} ms; {slow} took ≥ {} ms (a SYN retransmission: the first comes after 1 s)",
            c.label(),
            samples.len(),
            q(0.5).map_or("—".into(), |v| format!("{v:.1}")),
            q(0.9).map_or("—".into(), |v| format!("{v:.1}")),
            q(0.99).map_or("—".into(), |v| format!("{v:.0}")),
            samples.last().map_or("—".into(), |us| format!("{:.0}", f64::from(*us) / 1e3)),
            SYN_RETRANSMIT.as_millis(),
        ));
        report.notes.push(format!(
            "{scenario}: {} the successful attempt split: connect (SYN until the kernel completed the handshake; ≥ 1 s when a SYN was dropped) {}; then until the answer (waiting to be accepted, ClientHello, dial, request, answer) {}",
            c.label(),
            spread(runs.iter().flat_map(|s| s.connect_us.iter().copied())),
            spread(runs.iter().flat_map(|s| s.answer_us.iter().copied())),
        ));
        let kernel: Vec<String> = KERNEL_COUNTERS
            .iter()
            .map(|name| {
                let per_round: Vec<String> = runs
                    .iter()
                    .map(|s| s.kernel.get(name).copied().unwrap_or(0).to_string())
                    .collect();
                format!("{name} {}", per_round.join("/"))
            })
            .collect();
        report.notes.push(format!(
            "{scenario}: {} kernel counters grown during each storm (whole namespace): {}",
            c.label(),
            kernel.join(", ")
        ));
        if c.is_proxy() {
            let fds: Vec<String> = runs
                .iter()
                .filter_map(|s| s.fds)
                .map(|(before, peak)| format!("{before} → {peak}"))
                .collect();
            let rejected: Vec<String> = runs
                .iter()
                .filter_map(|s| s.apiway_rejected)
                .map(|r| r.to_string())
                .collect();
            report.notes.push(format!(
                "{scenario}: {} descriptors before the drop → most seen during the storm (every {} ms): {}{}",
                c.label(),
                FD_SAMPLE_EVERY.as_millis(),
                fds.join(", "),
                if rejected.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; connections it closed at once at max_connections ({}), per storm: {}",
                        capacity.connections,
                        rejected.join(", ")
                    )
                }
            ));
        }
        let mut kinds: BTreeMap<Failure, u64> = BTreeMap::new();
        for s in runs {
            for (kind, count) in &s.failures {
                *kinds.entry(*kind).or_default() += count;
            }
        }
        if !kinds.is_empty() || unfinished > 0 {
            let kinds: Vec<String> = kinds
                .iter()
                .map(|(kind, count)| format!("{count} {}", kind.label()))
                .collect();
            let never: usize = runs.iter().map(|s| s.never_closed).sum();
            report.notes.push(format!(
                "{scenario}: {} failed attempts, all storms: {}; {unfinished} clients not re-established within {} s of seeing the close ({never} never saw it)",
                c.label(),
                if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") },
                STORM_DEADLINE.as_secs()
            ));
        }
        let short: Vec<String> = runs
            .iter()
            .filter(|s| s.closed_by_backend != n)
            .map(|s| s.closed_by_backend.to_string())
            .collect();
        if !short.is_empty() {
            report.notes.push(format!(
                "{scenario}: {} the backend held {} connections at the drop, not {n}",
                c.label(),
                short.join(", ")
            ));
        }
    }
    report.rows.extend([
        all_row,
        p50_row,
        p99_row,
        close_row,
        cpu_row,
        failed_row,
        unfinished_row,
    ]);
    drop(lineup);
    drop(backend);
    Ok(report)
}

/// Fills up `contender` with `n` clients, drops them all at the backend,
/// and waits until every client has reconnected (or given up).
async fn storm(
    lineup: &Lineup,
    backend: &Backend,
    contender: Contender,
    request: &Arc<[u8]>,
    n: usize,
) -> Result<Storm> {
    let target = lineup.target(contender, SNI)?;
    let opened: Vec<Result<TcpStream, Failure>> = stream::iter(0..n)
        .map(|_| open_first(target, request))
        .buffer_unordered(OPENING_CONCURRENCY)
        .collect()
        .await;
    let mut streams = Vec::with_capacity(n);
    let mut open_failures: BTreeMap<Failure, u64> = BTreeMap::new();
    for outcome in opened {
        match outcome {
            Ok(stream) => streams.push(stream),
            Err(kind) => *open_failures.entry(kind).or_default() += 1,
        }
    }
    if !open_failures.is_empty() {
        let kinds: Vec<String> = open_failures
            .iter()
            .map(|(kind, count)| format!("{count} {}", kind.label()))
            .collect();
        bail!(
            "only {} of {n} clients could connect before the storm ({})",
            streams.len(),
            kinds.join(", ")
        );
    }

    let mut clients = JoinSet::new();
    for stream in streams {
        clients.spawn(client(stream, target, request.clone()));
    }
    tokio::time::sleep(IDLE_BEFORE_DROP).await;
    let fds_before = contender.is_proxy().then(|| lineup.open_fds(contender));
    let rejected_before = match contender {
        Contender::Apiway => lineup.apiway_metrics().await?.map(|m| m.listener_rejected),
        _ => None,
    };
    let cpu_before = contender.is_proxy().then(|| lineup.cpu_time(contender));
    let kernel_before = kernel_counters();
    let dropped = Instant::now();
    let closed_by_backend = backend.close_all().await?;

    // Every client finishes on its own (answer or its own deadline); this
    // outer limit catches clients that never see the close.
    let give_up = dropped + STORM_DEADLINE + load::EXCHANGE_TIMEOUT;
    let joined = async {
        let mut outcomes = Vec::with_capacity(n);
        loop {
            match tokio::time::timeout_at(give_up, clients.join_next()).await {
                Ok(Some(Ok(outcome))) => outcomes.push(outcome),
                Ok(Some(Err(e))) => bail!("a client task failed: {e}"),
                Ok(None) => break,
                Err(_) => {
                    clients.abort_all();
                    break;
                }
            }
        }
        anyhow::Ok(outcomes)
    };
    tokio::pin!(joined);
    let mut sample = tokio::time::interval(FD_SAMPLE_EVERY);
    let mut peak_fds = 0;
    let outcomes = loop {
        tokio::select! {
            outcomes = &mut joined => break outcomes?,
            _ = sample.tick(), if contender.is_proxy() => {
                peak_fds = peak_fds.max(lineup.open_fds(contender));
            }
        }
    };
    let proxy_cpu = cpu_before.map(|before| lineup.cpu_time(contender).saturating_sub(before));
    let apiway_rejected = match rejected_before {
        Some(before) => lineup
            .apiway_metrics()
            .await?
            .map(|m| m.listener_rejected.saturating_sub(before)),
        None => None,
    };
    let kernel_after = kernel_counters();
    let kernel = KERNEL_COUNTERS
        .iter()
        .map(|name| {
            let grown = kernel_after
                .get(name)
                .copied()
                .unwrap_or(0)
                .saturating_sub(kernel_before.get(name).copied().unwrap_or(0));
            (*name, grown)
        })
        .collect();

    let answered: Vec<Instant> = outcomes.iter().filter_map(|o| o.answered).collect();
    let closes: Vec<Instant> = outcomes.iter().filter_map(|o| o.saw_close).collect();
    let unfinished = n - answered.len();
    let never_closed = n - closes.len();
    let mut failures: BTreeMap<Failure, u64> = BTreeMap::new();
    for o in &outcomes {
        for (kind, count) in &o.failures {
            *failures.entry(*kind).or_default() += count;
        }
    }
    let reconnect_us = outcomes
        .iter()
        .filter_map(|o| Some(o.answered?.saturating_duration_since(o.saw_close?)))
        .map(micros)
        .collect();
    let connect_us = outcomes
        .iter()
        .filter_map(|o| o.phases)
        .map(|(connect, _)| micros(connect))
        .collect();
    let answer_us = outcomes
        .iter()
        .filter_map(|o| o.phases)
        .map(|(_, answer)| micros(answer))
        .collect();
    let since_drop = |last: Option<&Instant>| last.map(|t| t.saturating_duration_since(dropped));
    // Dropping the outcomes closes the new connections.
    Ok(Storm {
        closed_by_backend,
        all_answered: if unfinished == 0 {
            since_drop(answered.iter().max())
        } else {
            None
        },
        last_close_seen: since_drop(closes.iter().max()),
        reconnect_us,
        connect_us,
        answer_us,
        failures,
        unfinished,
        never_closed,
        proxy_cpu,
        kernel,
        fds: fds_before.map(|before| (before, peak_fds.max(before))),
        apiway_rejected,
    })
}

/// A client's first connection: hello and request, the whole answer, kept
/// open. Retried a few times (the storm has not started yet).
async fn open_first(target: SocketAddr, request: &[u8]) -> Result<TcpStream, Failure> {
    let mut last = Failure::Other;
    for _ in 0..OPENING_ATTEMPTS {
        match load::open_request(target, request).await {
            Ok(opened) => return Ok(opened.stream),
            Err(kind) => {
                last = kind;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    Err(last)
}

/// One client: waits for its connection to close, then reconnects at once
/// and makes one exchange, retrying failed attempts.
async fn client(mut stream: TcpStream, target: SocketAddr, request: Arc<[u8]>) -> ClientOutcome {
    let mut scratch = [0u8; 512];
    // Nothing is expected before the close; anything that comes is skipped.
    while let Ok(read) = stream.read(&mut scratch).await {
        if read == 0 {
            break;
        }
    }
    let saw_close = Instant::now();
    drop(stream);
    let mut failures: BTreeMap<Failure, u64> = BTreeMap::new();
    let give_up = saw_close + STORM_DEADLINE;
    while Instant::now() < give_up {
        match load::open_request(target, &request).await {
            Ok(opened) => {
                return ClientOutcome {
                    saw_close: Some(saw_close),
                    answered: Some(Instant::now()),
                    phases: Some((opened.connected, opened.took - opened.connected)),
                    failures,
                    _held: Some(opened.stream),
                }
            }
            Err(kind) => {
                *failures.entry(kind).or_default() += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    ClientOutcome {
        saw_close: Some(saw_close),
        answered: None,
        phases: None,
        failures,
        _held: None,
    }
}

/// Waits until the backend holds no connection and the proxy is back to
/// its descriptors before the storm; `false` if that took too long.
async fn settle(
    lineup: &Lineup,
    backend: &Backend,
    contender: Contender,
    fds: Option<usize>,
) -> bool {
    let deadline = Instant::now() + SETTLE_LIMIT;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let settled = loop {
        let proxy_done = match fds {
            Some(expected) => lineup.open_fds(contender) <= expected + 2,
            None => true,
        };
        if proxy_done && backend.open_connections() == 0 {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    settled
}

/// Every listener's backlog as the kernel has it (`ss`: Send-Q of a
/// listening socket), and the limits that apply to all.
fn backlog_note(lineup: &Lineup, contenders: &[Contender]) -> String {
    let mut parts = Vec::new();
    for &c in contenders {
        let Ok(addr) = lineup.target(c, SNI) else {
            continue;
        };
        let who = if c.is_proxy() {
            c.label().to_string()
        } else {
            "the backend (direct)".to_string()
        };
        let backlog = listen_backlog(addr).map_or("unknown".to_string(), |b| b.to_string());
        parts.push(format!("{who} {backlog}"));
    }
    let sysctl = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/{name}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    format!(
        "reconnect_storm: listen backlogs (accept queue, as `ss -lnt` shows them): {}; the proxies' backlogs are their configs' defaults (apiway binds with 4096, HAProxy uses the frontend's maxconn, nginx 511), capped by net.core.somaxconn {}; net.ipv4.tcp_max_syn_backlog {}, tcp_syncookies {}. A SYN that finds the accept queue full is dropped and sent again after 1 s, then 3 s",
        parts.join(", "),
        sysctl("core/somaxconn"),
        sysctl("ipv4/tcp_max_syn_backlog"),
        sysctl("ipv4/tcp_syncookies"),
    )
}

/// The backlog of the socket listening on `addr`, from `ss`.
fn listen_backlog(addr: SocketAddr) -> Option<u64> {
    let output = std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{}", addr.port())])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(3) == Some(&addr.to_string().as_str()))
        .and_then(|fields| fields.get(2)?.parse().ok())
}

/// The `TcpExt` counters of `/proc/net/netstat` named in
/// [`KERNEL_COUNTERS`].
fn kernel_counters() -> BTreeMap<&'static str, u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines();
    let mut counters = BTreeMap::new();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some(names), Some(values)) = (
            names.strip_prefix("TcpExt:"),
            values.strip_prefix("TcpExt:"),
        ) else {
            continue;
        };
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Some(known) = KERNEL_COUNTERS.iter().find(|k| **k == name) {
                counters.insert(*known, value.parse().unwrap_or(0));
            }
        }
    }
    counters
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// p50 / p99 of µs samples, in ms.
fn spread(samples: impl Iterator<Item = u32>) -> String {
    let mut sorted: Vec<u32> = samples.collect();
    sorted.sort_unstable();
    let ms = |q| {
        quantile(&sorted, q).map_or("—".to_string(), |us| {
            format!("{:.1}", f64::from(us) / 1e3)
        })
    };
    format!("p50 {} / p99 {} ms", ms(0.5), ms(0.99))
}

/// `1,234 ms` or `—`.
fn millis(d: Option<Duration>) -> String {
    d.map_or("—".to_string(), |d| {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_listen_queue_counters() {
        let counters = kernel_counters();
        // Every Linux kernel since 2.6 has these.
        assert!(counters.contains_key("ListenOverflows"), "{counters:?}");
        assert!(counters.contains_key("ListenDrops"), "{counters:?}");
    }

    #[tokio::test]
    async fn a_client_reconnects_after_the_backend_closes() -> Result<()> {
        let backend = Backend::plain().await?;
        let hello = protocol::client_hello(SNI)?;
        let request: Arc<[u8]> = load::hello_and_request(&hello).into();
        let first = open_first(backend.addr(), &request)
            .await
            .map_err(|kind| anyhow::anyhow!("first connection: {}", kind.label()))?;
        let task = tokio::spawn(client(first, backend.addr(), request.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(backend.close_all().await?, 1);
        let outcome = task.await?;
        assert!(outcome.saw_close.is_some() && outcome.answered.is_some());
        assert!(outcome.failures.is_empty());
        assert_eq!(backend.open_connections(), 1);
        Ok(())
    }
}
