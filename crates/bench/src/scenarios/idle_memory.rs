//! Memory a proxy spends on each established, idle connection.

use std::time::Duration;

use anyhow::Result;
use futures_util::stream::{self, StreamExt};

use super::{Settings, SNI};
use crate::backend::Backend;
use crate::lineup::{Contender, Lineup, Route};
use crate::load;
use crate::protocol;
use crate::report::{Better, Row, ScenarioReport, Target};

/// Connections opened at once while filling up.
const OPENING_CONCURRENCY: usize = 64;
/// Connections opened and closed before the baseline is taken.
const WARM_UP: usize = 200;

/// Opens the connections, holds them idle, and compares the proxy's PSS
/// (all its processes) before and after.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let backend = Backend::plain().await?;
    let routes = vec![Route::new("main", SNI, &[backend.addr()])];
    let lineup = Lineup::start(&settings.lineup, routes).await?;
    let hello = protocol::client_hello(SNI)?;
    let n = settings.idle_connections;

    let mut report = ScenarioReport::default();
    let mut per_conn = Row::new(
        "idle_memory",
        &format!("PSS per idle connection ({n} open)"),
        "bytes",
        Better::Lower,
        0,
    )
    .target(Target::AtMost(2048.0));
    let mut fds_row = Row::new(
        "idle_memory",
        "file descriptors per connection",
        "fds",
        Better::Lower,
        2,
    );
    let mut base_row = Row::new(
        "idle_memory",
        "PSS with no connections",
        "KiB",
        Better::Lower,
        0,
    );
    for c in lineup.proxies() {
        match measure(&lineup, c, &hello, n).await {
            Ok(m) => {
                eprintln!(
                    "  idle_memory {:>8}: {:.0} bytes/conn, {:.2} fds/conn",
                    c.label(),
                    m.bytes_per_connection,
                    m.fds_per_connection
                );
                per_conn.set(c, m.bytes_per_connection);
                fds_row.set(c, m.fds_per_connection);
                base_row.set(c, m.baseline_bytes as f64 / 1024.0);
                report.notes.push(format!(
                    "idle_memory: {} PSS {} KiB before, {} KiB with {n} idle connections ({} processes)",
                    c.label(),
                    m.baseline_bytes / 1024,
                    m.loaded_bytes / 1024,
                    lineup.pids(c).len()
                ));
            }
            Err(e) => {
                eprintln!("  idle_memory {}: FAILED {e:#}", c.label());
                report
                    .notes
                    .push(format!("idle_memory: {} FAILED: {e:#}", c.label()));
            }
        }
    }
    report.rows.extend([per_conn, fds_row, base_row]);
    Ok(report)
}

struct Memory {
    baseline_bytes: u64,
    loaded_bytes: u64,
    bytes_per_connection: f64,
    fds_per_connection: f64,
}

async fn measure(lineup: &Lineup, contender: Contender, hello: &[u8], n: usize) -> Result<Memory> {
    let target = lineup.target(contender, SNI)?;
    // Warm up so one-time allocations (pools, first-use tables) are not
    // charged to the idle connections.
    let warm = open_many(target, hello, WARM_UP).await?;
    drop(warm);
    settle(lineup, contender, None).await;
    let baseline_bytes = lineup.pss_bytes(contender)?;
    let baseline_fds = lineup.open_fds(contender);

    let held = open_many(target, hello, n).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded_bytes = lineup.pss_bytes(contender)?;
    let loaded_fds = lineup.open_fds(contender);
    drop(held);
    settle(lineup, contender, Some(baseline_fds)).await;

    Ok(Memory {
        baseline_bytes,
        loaded_bytes,
        bytes_per_connection: (loaded_bytes as f64 - baseline_bytes as f64) / n as f64,
        fds_per_connection: (loaded_fds as f64 - baseline_fds as f64) / n as f64,
    })
}

async fn open_many(
    target: std::net::SocketAddr,
    hello: &[u8],
    n: usize,
) -> Result<Vec<tokio::net::TcpStream>> {
    let opened: Vec<Result<tokio::net::TcpStream>> = stream::iter(0..n)
        .map(|_| load::open_echo(target, hello))
        .buffer_unordered(OPENING_CONCURRENCY)
        .collect()
        .await;
    opened.into_iter().collect()
}

/// Waits (up to 10 s) until the proxy has let go of closed connections.
async fn settle(lineup: &Lineup, contender: Contender, fds: Option<usize>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Some(expected) = fds {
        if lineup.open_fds(contender) <= expected + 2 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}
