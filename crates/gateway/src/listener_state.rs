//! What a listener shares with its connections: its spec (swapped on
//! reload) and its metric handles, looked up once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::config::ListenerSpec;
use crate::metrics::{CodeLabels, GatewayMetrics, ListenerLabels, ReasonLabels};

/// Metric handles of one listener, looked up once.
pub(crate) struct ListenerHandles {
    name: String,
    metrics: GatewayMetrics,
    pub(crate) accepted: Counter,
    pub(crate) rejected: Counter,
    pub(crate) open: Gauge,
    pub(crate) hello_timeouts: Counter,
    pub(crate) untrusted: Counter,
    pub(crate) proxy_header_timeouts: Counter,
    pub(crate) stacked_proxy_headers: Counter,
    rejections: Throttle,
}

/// At most one line per second: what a listener logs at info level about
/// the connections it refuses (a scanner or a broken client can send
/// thousands a second; each is also counted and logged at debug level).
#[derive(Default)]
struct Throttle {
    /// Milliseconds since [`epoch`] before which no line is written.
    next_ms: AtomicU64,
    /// Lines held back since the last one written.
    suppressed: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Throttle {
    /// `Some(lines held back since the last one)` when a line may be
    /// written now.
    fn allow(&self) -> Option<u64> {
        let now = epoch().elapsed().as_millis() as u64;
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(next, now + 1000, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl ListenerHandles {
    pub(crate) fn new(name: &str, metrics: &GatewayMetrics) -> ListenerHandles {
        let l = ListenerLabels {
            listener: name.to_owned(),
        };
        ListenerHandles {
            name: name.to_owned(),
            metrics: metrics.clone(),
            accepted: metrics.listeners.accepted.get_or_create_owned(&l),
            rejected: metrics.listeners.rejected.get_or_create_owned(&l),
            open: metrics.listeners.open.get_or_create_owned(&l),
            hello_timeouts: metrics.hello_timeouts.get_or_create_owned(&l),
            untrusted: metrics.untrusted.get_or_create_owned(&l),
            proxy_header_timeouts: metrics.proxy_header_timeouts.get_or_create_owned(&l),
            stacked_proxy_headers: metrics.stacked_proxy_headers.get_or_create_owned(&l),
            rejections: Throttle::default(),
        }
    }

    /// Logs a refused connection: at debug level always, at info level at
    /// most once a second per listener (with how many were held back).
    pub(crate) fn rejected(&self, peer: std::net::SocketAddr, what: &str, reason: &str) {
        tracing::debug!(%peer, listener = %self.name, reason, "{what}; closing");
        if let Some(suppressed) = self.rejections.allow() {
            tracing::info!(%peer, listener = %self.name, reason, suppressed, "refused: {what} (one line a second at most; `suppressed` counts the others, all of them are in the listener metrics)");
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn proxy_header_error(&self, reason: &'static str) -> Counter {
        self.metrics
            .proxy_header_errors
            .get_or_create_owned(&ReasonLabels {
                listener: self.name.clone(),
                reason,
            })
    }

    pub(crate) fn connect_response(&self, code: u16) -> Counter {
        self.metrics
            .connect_responses
            .get_or_create_owned(&CodeLabels {
                listener: self.name.clone(),
                code,
            })
    }

    pub(crate) fn hello_error(&self, reason: &'static str) -> Counter {
        self.metrics
            .hello_errors
            .get_or_create_owned(&ReasonLabels {
                listener: self.name.clone(),
                reason,
            })
    }

    pub(crate) fn no_route(&self, reason: &'static str) -> Counter {
        self.metrics.no_route.get_or_create_owned(&ReasonLabels {
            listener: self.name.clone(),
            reason,
        })
    }
}

/// A listener's state shared with its connections.
pub(crate) struct ListenerState {
    pub(crate) spec: ArcSwap<ListenerSpec>,
    pub(crate) handles: ListenerHandles,
    /// The gateway's access log, if one is configured (shared by every
    /// listener, swapped on reload).
    pub(crate) access_log: crate::access_log::Shared,
}

impl ListenerState {
    /// Whether connections should carry what their access log line needs.
    pub(crate) fn logging(&self) -> bool {
        self.access_log.load().is_some()
    }
}
