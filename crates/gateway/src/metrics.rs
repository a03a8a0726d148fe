//! Gateway listener and route metrics (backend metrics live in core).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `listener` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// Listener name.
    pub listener: String,
}

/// `listener` and `reason` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Listener name.
    pub listener: String,
    /// Why.
    pub reason: &'static str,
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
    /// Connections accepted.
    pub accepted: Family<ListenerLabels, Counter>,
    /// Connections closed at once because the listener was full.
    pub rejected: Family<ListenerLabels, Counter>,
    /// Connections open on the listener.
    pub open: Family<ListenerLabels, Gauge>,
    /// Connections with no route (`no_sni`, `unknown_sni`).
    pub no_route: Family<ReasonLabels, Counter>,
    /// ClientHellos that could not be read (`not_tls`, `malformed`, `too_large`, `closed`, `io`).
    pub hello_errors: Family<ReasonLabels, Counter>,
    /// Clients that did not send a whole ClientHello in time.
    pub hello_timeouts: Family<ListenerLabels, Counter>,
    /// Connections routed to a route.
    pub routed: Family<RouteLabels, Counter>,
    /// Connections whose route had no reachable backend.
    pub unavailable: Family<RouteLabels, Counter>,
}

impl GatewayMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "listener_accepted",
            "Connections accepted",
            self.accepted.clone(),
        );
        registry.register(
            "listener_rejected",
            "Connections closed at once because max_connections was reached",
            self.rejected.clone(),
        );
        registry.register(
            "listener_open_connections",
            "Open connections",
            self.open.clone(),
        );
        registry.register(
            "listener_no_route",
            "Connections with no SNI or an unknown SNI and no default route",
            self.no_route.clone(),
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
