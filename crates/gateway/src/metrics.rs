//! Gateway listener and route metrics (backend metrics live in core).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use apiway_core::metrics::ListenerMetrics;

pub use apiway_core::metrics::ListenerLabels;

/// `listener` and `reason` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Listener name.
    pub listener: String,
    /// Why.
    pub reason: &'static str,
}

/// `listener` and `code` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// Listener name.
    pub listener: String,
    /// HTTP status code.
    pub code: u16,
}

/// `route` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Route name.
    pub route: String,
}

/// Families of the gateway.
#[derive(Clone, Default)]
pub struct GatewayMetrics {
    /// Accepted, rejected and open connections per listener.
    pub listeners: ListenerMetrics,
    /// Connections with no route (`no_sni`, `unknown_sni`,
    /// `unknown_destination`, `local`, `unknown_authority`).
    pub no_route: Family<ReasonLabels, Counter>,
    /// Connections from outside `trusted_sources` closed without reading
    /// a PROXY header.
    pub untrusted: Family<ListenerLabels, Counter>,
    /// PROXY headers that could not be read (`not_proxy`, `malformed`,
    /// `too_long`, `bad_checksum`, `unsupported`, `closed`, `io`).
    pub proxy_header_errors: Family<ReasonLabels, Counter>,
    /// Trusted sources that did not send their PROXY header in time.
    pub proxy_header_timeouts: Family<ListenerLabels, Counter>,
    /// Connections that carried two stacked PROXY headers.
    pub stacked_proxy_headers: Family<ListenerLabels, Counter>,
    /// Answers to CONNECT requests, by status code.
    pub connect_responses: Family<CodeLabels, Counter>,
    /// ClientHellos that could not be read (`not_tls`, `malformed`, `too_large`, `closed`, `io`).
    pub hello_errors: Family<ReasonLabels, Counter>,
    /// Clients that did not send a whole ClientHello in time.
    pub hello_timeouts: Family<ListenerLabels, Counter>,
    /// Connections routed to a route.
    pub routed: Family<RouteLabels, Counter>,
    /// Connections whose route had no reachable backend.
    pub unavailable: Family<RouteLabels, Counter>,
    /// Access log lines dropped because the writer fell behind.
    pub access_log_dropped: Counter,
}

impl GatewayMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        self.listeners.register(registry);
        registry.register(
            "access_log_dropped",
            "Access log lines dropped because the writer fell behind",
            self.access_log_dropped.clone(),
        );
        registry.register(
            "listener_no_route",
            "Connections that matched no route and were not taken by a default route, by reason",
            self.no_route.clone(),
        );
        registry.register(
            "listener_untrusted_sources",
            "Connections from outside trusted_sources closed without reading a PROXY header",
            self.untrusted.clone(),
        );
        registry.register(
            "listener_proxy_header_errors",
            "PROXY headers that could not be read, by reason",
            self.proxy_header_errors.clone(),
        );
        registry.register(
            "listener_proxy_header_timeouts",
            "Trusted sources that did not send their PROXY header in time",
            self.proxy_header_timeouts.clone(),
        );
        registry.register(
            "listener_stacked_proxy_headers",
            "Connections that carried two stacked PROXY headers (a load balancer's and an agent's)",
            self.stacked_proxy_headers.clone(),
        );
        registry.register(
            "listener_connect_responses",
            "Answers to CONNECT requests, by status code",
            self.connect_responses.clone(),
        );
        registry.register(
            "listener_client_hello_errors",
            "ClientHellos that could not be read, by reason",
            self.hello_errors.clone(),
        );
        registry.register(
            "listener_client_hello_timeouts",
            "Clients that did not send a whole ClientHello in time",
            self.hello_timeouts.clone(),
        );
        registry.register(
            "route_connections",
            "Connections routed",
            self.routed.clone(),
        );
        registry.register(
            "route_unavailable",
            "Connections closed because no backend of the route could be reached",
            self.unavailable.clone(),
        );
    }
}
