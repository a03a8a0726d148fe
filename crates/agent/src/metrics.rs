//! Listener metrics of the agent (endpoint metrics live in core).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use apiway_core::metrics::ListenerMetrics;

pub use apiway_core::metrics::ListenerLabels;

/// Families of the agent.
#[derive(Clone, Default)]
pub struct AgentMetrics {
    /// Accepted, rejected and open connections per listener (the
    /// listening address).
    pub listeners: ListenerMetrics,
    /// Connections closed because no endpoint or gateway could be reached.
    pub unavailable: Family<ListenerLabels, Counter>,
    /// `CONNECT` tunnels the gateway refused, failed to answer, or answered badly.
    pub connect_failed: Family<ListenerLabels, Counter>,
}

impl AgentMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        self.listeners.register(registry);
        registry.register(
            "listener_unavailable",
            "Connections closed because no endpoint or gateway could be reached",
            self.unavailable.clone(),
        );
        registry.register(
            "listener_connect_failed",
            "CONNECT tunnels the gateway refused or did not answer properly",
            self.connect_failed.clone(),
        );
    }
}

/// The handles of one listener, looked up once.
#[derive(Clone, Debug)]
pub(crate) struct ListenerHandles {
    pub(crate) name: String,
    pub(crate) accepted: Counter,
    pub(crate) rejected: Counter,
    pub(crate) open: Gauge,
    pub(crate) unavailable: Counter,
    pub(crate) connect_failed: Counter,
}

impl ListenerHandles {
    pub(crate) fn new(name: &str, m: &AgentMetrics) -> ListenerHandles {
        let l = ListenerLabels {
            listener: name.to_owned(),
        };
        ListenerHandles {
            name: name.to_owned(),
            accepted: m.listeners.accepted.get_or_create_owned(&l),
            rejected: m.listeners.rejected.get_or_create_owned(&l),
            open: m.listeners.open.get_or_create_owned(&l),
            unavailable: m.unavailable.get_or_create_owned(&l),
            connect_failed: m.connect_failed.get_or_create_owned(&l),
        }
    }
}
