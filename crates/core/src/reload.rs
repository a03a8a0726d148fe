//! Configuration reload on file change and on SIGHUP.
//!
//! The file is polled (size and modification time, then content) rather than
//! watched with inotify, because Kubernetes updates mounted ConfigMaps by
//! swapping a symlink, which file watches miss. A new file is parsed and
//! validated into a snapshot first; only a good snapshot is applied, so a bad
//! file never replaces a good running configuration.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use tokio_util::sync::CancellationToken;

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
            "Unix time of the last successful reload",
            self.last_success.clone(),
        );
    }

    /// Counts a reload outcome.
    pub fn record(&self, ok: bool, took: Duration) {
        let result = if ok { "success" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
        if ok {
            self.last_apply_seconds.set(took.as_secs_f64());
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            self.last_success.set(now as i64);
        }
    }

    /// Reloads counted with `result`.
    pub fn count(&self, ok: bool) -> u64 {
        let result = if ok { "success" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).get()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// Watches `path` and applies each changed, valid version.
///
/// `apply` gets the new file's text and either applies it, returning the
/// poll interval the new configuration asks for, or returns an error that
/// names the problem; errors keep the running configuration. `initial` is
/// the text the running configuration was built from.
pub async fn watch(
    path: PathBuf,
    initial: String,
    mut poll: Duration,
    stop: CancellationToken,
    metrics: ReloadMetrics,
    mut apply: impl FnMut(&str) -> Result<Duration, String>,
) {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut last_stamp = stamp(&path);
    let mut last_text = initial;
    loop {
        let forced = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(poll) => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now_stamp = stamp(&path);
        if !forced && now_stamp == last_stamp {
            continue;
        }
        last_stamp = now_stamp;
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "config reload failed: cannot read the file; keeping the running config");
                metrics.record(false, Duration::ZERO);
                continue;
            }
        };
        if !forced && text == last_text {
            continue;
        }
        let started = Instant::now();
        match apply(&text) {
            Ok(next_poll) => {
                poll = next_poll;
                let took = started.elapsed();
                metrics.record(true, took);
                tracing::info!(path = %path.display(), took = ?took, trigger = if forced { "SIGHUP" } else { "file change" }, "config reloaded");
                last_text = text;
            }
            Err(e) => {
                metrics.record(false, started.elapsed());
                tracing::error!(path = %path.display(), "config reload rejected, keeping the running config: {e}");
            }
        }
    }
}
