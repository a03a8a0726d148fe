//! What a listener shares with its connections: its spec (swapped on
//! reload) and its metric handles, looked up once.

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
