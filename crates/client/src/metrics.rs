//! What the client counts, in Prometheus form: failures by endpoint and
//! reason, requests that moved to another endpoint, blocks, the endpoint
//! in use, and EndpointSlice discovery (failures, endpoints listed).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of an endpoint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// The origin the client was made for (`host:port`).
    pub origin: String,
    /// The endpoint (`host:port`).
    pub endpoint: String,
}

/// Labels of a failed attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The origin.
    pub origin: String,
    /// The endpoint.
    pub endpoint: String,
    /// `connect`, `tls`, `certificate`, `no_h2`, `http2`, `not_ready`,
    /// `timeout` (before the request was sent), `request` (while sending
    /// it or waiting for the answer), `body` (the response body broke
    /// off, seen by `Client::fetch`); on the HTTP/1.1 path of
    /// `kube_connector`, also `silent` (the connection was dropped before
    /// the server sent a byte), `unanswered` (dropped while a request
    /// waited for its answer) and `read` (reading from it failed).
    pub reason: &'static str,
}

/// Labels of an origin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OriginLabels {
    /// The origin the client was made for (`host:port`).
    pub origin: String,
}

/// Labels of a failed EndpointSlice discovery request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiscoveryFailureLabels {
    /// The origin.
    pub origin: String,
    /// `list` or `watch`.
    pub stage: &'static str,
}

/// Labels of a failover.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailoverLabels {
    /// The origin.
    pub origin: String,
    /// The endpoint that answered.
    pub endpoint: String,
    /// How the attempt before it failed: a `reason` of
    /// `client_endpoint_failures_total`.
    pub reason: &'static str,
}

/// Labels of a block.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BlockLabels {
    /// The origin.
    pub origin: String,
    /// The endpoint.
    pub endpoint: String,
    /// `period` (a network error) or `permanent` (a certificate error).
    pub block: &'static str,
}

/// Metric families of a [`Client`](crate::Client); clients for different
/// origins may share one (the `origin` label tells them apart). Register
/// them with [`ClientMetrics::register`].
#[derive(Clone, Debug, Default)]
pub struct ClientMetrics {
    /// Failed attempts, by endpoint and reason.
    pub failures: Family<FailureLabels, Counter>,
    /// Requests answered by an endpoint after a failed attempt elsewhere,
    /// by how that attempt failed.
    pub failovers: Family<FailoverLabels, Counter>,
    /// Times an endpoint was blocked, by kind of block.
    pub blocks: Family<BlockLabels, Counter>,
    /// 1 for the endpoint in use, 0 for the others that were.
    pub in_use: Family<EndpointLabels, Gauge>,
    /// Until when the endpoint is blocked, in Unix seconds: `+Inf` for
    /// good, 0 once a success lifted the block. Blocked right now is
    /// `client_endpoint_blocked_until_seconds > time()`; a timestamp
    /// needs no update when the block runs out.
    pub blocked_until: Family<EndpointLabels, Gauge<f64, AtomicU64>>,
    /// Failed EndpointSlice lists and watches.
    pub discovery_failures: Family<DiscoveryFailureLabels, Counter>,
    /// Endpoints discovery lists now.
    pub discovered: Family<OriginLabels, Gauge>,
}

impl ClientMetrics {
    /// Registers the families under `registry` (prefix them with
    /// `Registry::sub_registry_with_prefix` if you like).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "client_endpoint_failures",
            "Failed attempts on an API server endpoint, by reason",
            self.failures.clone(),
        );
        registry.register(
            "client_failovers",
            "Requests answered by this endpoint after an attempt elsewhere failed, by how it failed",
            self.failovers.clone(),
        );
        registry.register(
            "client_endpoint_blocks",
            "Times an endpoint was blocked: for the block period or for good",
            self.blocks.clone(),
        );
        registry.register(
            "client_endpoint_in_use",
            "1 for the endpoint in use",
            self.in_use.clone(),
        );
        registry.register(
            "client_endpoint_blocked_until_seconds",
            "Unix time until which the endpoint is blocked (+Inf: for good, 0: lifted)",
            self.blocked_until.clone(),
        );
        registry.register(
            "client_discovery_failures",
            "Failed lists and watches of the API server's EndpointSlices",
            self.discovery_failures.clone(),
        );
        registry.register(
            "client_discovered_endpoints",
            "API server endpoints listed by EndpointSlice discovery",
            self.discovered.clone(),
        );
    }
}
