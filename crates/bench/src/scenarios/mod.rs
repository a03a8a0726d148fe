//! The benchmark scenarios. Each starts its own backends and proxies, runs
//! for a bounded time, and leaves nothing running behind it.

use std::time::Duration;

use crate::lineup::LineupOptions;

pub mod agent_failover;
pub mod client_failover;
pub mod client_overhead;
pub mod conn_rate;
pub mod failover;
pub mod gateway_api;
pub mod idle_memory;
pub mod reconnect_storm;
pub mod reload;
pub mod throughput;
pub mod tunnel;

/// Every scenario, in run order.
pub const ALL: [&str; 11] = [
    "throughput",
    "conn_rate",
    "conn_rate_tls",
    "idle_memory",
    "reconnect_storm",
    "reload",
    "agent_failover",
    "client_failover",
    "client_overhead",
    "gateway_api",
    "tunnel",
];

/// The SNI of the main route.
pub const SNI: &str = "api.bench.example.com";

/// Sizes and durations for one run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How the proxies are set up.
    pub lineup: LineupOptions,
    /// Length of one measured trial (throughput, conn_rate).
    pub trial: Duration,
    /// Trials per contender, interleaved round by round.
    pub rounds: usize,
    /// Concurrent workers in conn_rate.
    pub workers: usize,
    /// Connections held open in idle_memory.
    pub idle_connections: usize,
    /// Clients dropped at once and reconnecting in reconnect_storm.
    pub storm_clients: usize,
    /// reconnect_storm: apiway listens with `when_full: queue`.
    pub storm_apiway_queue: bool,
    /// Storms per contender in reconnect_storm, interleaved.
    pub storm_rounds: usize,
    /// Routes in the large reload configuration.
    pub big_routes: usize,
    /// Reloads of the large configuration per proxy.
    pub big_reloads: usize,
    /// Reloads under traffic per proxy.
    pub reloads: usize,
    /// Long-lived streams during the reloads.
    pub streams: usize,
    /// Workers making short connections during the reloads.
    pub short_workers: usize,
}

impl Settings {
    /// The full run (about 6 minutes) or the quick one (about 2).
    pub fn new(quick: bool, lineup: LineupOptions) -> Settings {
        Settings {
            lineup,
            // Many short rounds rather than few long ones: load from other
            // programs comes and goes, and interleaving spreads it evenly.
            trial: if quick {
                Duration::from_millis(1500)
            } else {
                Duration::from_secs(2)
            },
            rounds: if quick { 2 } else { 6 },
            workers: 64,
            idle_connections: 5_000,
            storm_clients: if quick { 3_000 } else { 9_000 },
            storm_apiway_queue: true,
            storm_rounds: if quick { 2 } else { 3 },
            big_routes: 10_000,
            big_reloads: if quick { 2 } else { 5 },
            reloads: if quick { 25 } else { 100 },
            streams: 50,
            short_workers: 4,
        }
    }
}

/// `items` (contenders, clients) in round `round`'s order: rotated, so
/// none is always first (cold) or last.
pub fn rotated<T: Clone>(items: &[T], round: usize) -> Vec<T> {
    let mut order = items.to_vec();
    if !order.is_empty() {
        let shift = round % order.len();
        order.rotate_left(shift);
    }
    order
}

/// The median of `values` (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// The `q` quantile (0..=1) of sorted samples, nearest rank.
pub fn quantile(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Values of one contender across rounds, for the notes.
pub fn list(values: &[f64], decimals: usize) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    items.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineup::Contender;

    #[test]
    fn rotation_moves_the_first_contender() {
        let all = Contender::ALL;
        assert_eq!(rotated(&all, 0)[0], Contender::Apiway);
        assert_eq!(rotated(&all, 1)[0], Contender::Haproxy);
        assert_eq!(rotated(&all, 5)[0], Contender::Haproxy);
    }

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let samples: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&samples, 0.5), Some(50));
        assert_eq!(quantile(&samples, 0.99), Some(99));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
