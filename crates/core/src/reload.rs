//! Reload metrics. Reloading itself is the role runtime's
//! ([`crate::runtime`]), fed by config sources ([`crate::config::source`]).

use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Reload metrics.
#[derive(Clone, Default)]
pub struct ReloadMetrics {
    reloads: Family<ResultLabels, Counter>,
    last_apply_seconds: Gauge<f64, AtomicU64>,
    last_success: Gauge,
}

impl ReloadMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "config_reloads",
            "Configuration reloads by result (success or error)",
            self.reloads.clone(),
        );
        registry.register(
            "config_last_apply_seconds",
            "Time the last successful reload took to parse, validate and apply",
            self.last_apply_seconds.clone(),
        );
        registry.register(
            "config_last_success_timestamp_seconds",
            "Unix time of the last successful load (the start) or reload",
            self.last_success.clone(),
        );
        // Both series exist from the start, so `increase()` sees the first
        // failure; the configuration the role started with is a success.
        for result in ["success", "error"] {
            let _ = self.reloads.get_or_create(&ResultLabels { result });
        }
        self.last_success.set(unix_now());
    }

    /// Counts a reload outcome.
    pub fn record(&self, ok: bool, took: Duration) {
        let result = if ok { "success" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
        if ok {
            self.last_apply_seconds.set(took.as_secs_f64());
            self.last_success.set(unix_now());
        }
    }

    /// Reloads counted with `result`.
    pub fn count(&self, ok: bool) -> u64 {
        let result = if ok { "success" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).get()
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_there_from_the_start() {
        let metrics = ReloadMetrics::default();
        let mut registry = Registry::with_prefix("apiway");
        metrics.register(&mut registry);
        let text = crate::metrics::render(&registry);
        assert!(
            text.contains("apiway_config_reloads_total{result=\"success\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("apiway_config_reloads_total{result=\"error\"} 0"),
            "{text}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("apiway_config_last_success_timestamp_seconds "))
            .expect("the gauge");
        let value: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(value > 1_700_000_000, "{line}");
    }
}
