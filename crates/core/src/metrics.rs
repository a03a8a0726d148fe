//! Metric families shared by every role, and the registry they live in.
//!
//! Families are registered once at start-up; per-endpoint handles are looked
//! up once when an endpoint is created and kept, so the data path only bumps
//! atomics.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `listener` label: the listener's name (gateway) or address (agent).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// The listener.
    pub listener: String,
}

/// The families every role's listeners have.
#[derive(Clone, Default, Debug)]
pub struct ListenerMetrics {
    /// Connections accepted.
    pub accepted: Family<ListenerLabels, Counter>,
    /// Connections closed at once because `max_connections` was reached.
    pub rejected: Family<ListenerLabels, Counter>,
    /// Connections open now.
    pub open: Family<ListenerLabels, Gauge>,
}

impl ListenerMetrics {
    /// Registers the families (`listener_accepted`, `listener_rejected`,
    /// `listener_open_connections`).
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
    }
}

/// Labels of a backend of a route (gateway) or an endpoint of an upstream (agent).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    /// The route or upstream the backend belongs to.
    pub route: String,
    /// The backend as configured (`host:port`).
    pub backend: String,
}

/// Labels of a byte counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    /// The route or upstream.
    pub route: String,
    /// The backend as configured.
    pub backend: String,
    /// `to_backend` or `to_client`.
    pub direction: &'static str,
}

/// Labels of a reset counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResetLabels {
    /// The route or upstream.
    pub route: String,
    /// The backend as configured.
    pub backend: String,
    /// The side whose error (a reset) ended the connection: `client` or
    /// `backend`. The other side was reset in turn.
    pub from: &'static str,
}

/// Metric families describing backends.
#[derive(Clone, Default)]
pub struct BackendMetrics {
    /// Connections currently relayed to the backend.
    pub active: Family<BackendLabels, Gauge>,
    /// Connections ever relayed to the backend.
    pub connections: Family<BackendLabels, Counter>,
    /// Failed connection attempts (refused, timed out, unreachable).
    pub connect_failures: Family<BackendLabels, Counter>,
    /// 1 when the backend takes new connections, 0 when it is down or ejected.
    pub healthy: Family<BackendLabels, Gauge>,
    /// Bytes relayed, by direction.
    pub bytes: Family<BytesLabels, Counter>,
    /// Active health checks, by result.
    pub health_checks: Family<HealthCheckLabels, Counter>,
    /// Measured latency (EWMA of health probe times), in seconds.
    pub latency_seconds: Family<BackendLabels, Gauge<f64, AtomicU64>>,
    /// Relayed connections ended by a reset (or another error) on one side,
    /// passed on to the other as a reset.
    pub resets: Family<ResetLabels, Counter>,
}

/// Labels of a health check result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthCheckLabels {
    /// The route or upstream.
    pub route: String,
    /// The backend as configured.
    pub backend: String,
    /// `ok` or `failed`.
    pub result: &'static str,
}

impl BackendMetrics {
    /// Registers the families under `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "backend_active_connections",
            "Connections currently relayed to the backend",
            self.active.clone(),
        );
        registry.register(
            "backend_connections",
            "Connections relayed to the backend",
            self.connections.clone(),
        );
        registry.register(
            "backend_connect_failures",
            "Failed connection attempts to the backend",
            self.connect_failures.clone(),
        );
        registry.register(
            "backend_healthy",
            "1 when the backend takes new connections, 0 when down or ejected",
            self.healthy.clone(),
        );
        registry.register(
            "backend_bytes",
            "Bytes relayed between clients and the backend",
            self.bytes.clone(),
        );
        registry.register(
            "backend_health_checks",
            "Active health checks of the backend, by result",
            self.health_checks.clone(),
        );
        registry.register(
            "backend_latency_seconds",
            "Measured latency of the backend: moving average of health probe times (connect, TLS, request)",
            self.latency_seconds.clone(),
        );
        registry.register(
            "backend_resets",
            "Relayed connections ended by a reset (or another error) on one side, passed on to the other side as a reset",
            self.resets.clone(),
        );
    }

    /// The handles of one backend, looked up once.
    pub fn handles(&self, route: &str, backend: &str) -> BackendHandles {
        let labels = BackendLabels {
            route: route.to_owned(),
            backend: backend.to_owned(),
        };
        let bytes = |direction| BytesLabels {
            route: route.to_owned(),
            backend: backend.to_owned(),
            direction,
        };
        let check = |result| HealthCheckLabels {
            route: route.to_owned(),
            backend: backend.to_owned(),
            result,
        };
        let reset = |from| ResetLabels {
            route: route.to_owned(),
            backend: backend.to_owned(),
            from,
        };
        BackendHandles {
            active: self.active.get_or_create_owned(&labels),
            connections: self.connections.get_or_create_owned(&labels),
            connect_failures: self.connect_failures.get_or_create_owned(&labels),
            healthy: self.healthy.get_or_create_owned(&labels),
            to_backend: self.bytes.get_or_create_owned(&bytes("to_backend")),
            to_client: self.bytes.get_or_create_owned(&bytes("to_client")),
            checks_ok: self.health_checks.get_or_create_owned(&check("ok")),
            checks_failed: self.health_checks.get_or_create_owned(&check("failed")),
            latency_seconds: self.latency_seconds.get_or_create_owned(&labels),
            resets_from_client: self.resets.get_or_create_owned(&reset("client")),
            resets_from_backend: self.resets.get_or_create_owned(&reset("backend")),
        }
    }

    /// Drops the series of a backend that no longer exists.
    pub fn forget(&self, route: &str, backend: &str) {
        let labels = BackendLabels {
            route: route.to_owned(),
            backend: backend.to_owned(),
        };
        self.active.remove(&labels);
        self.connections.remove(&labels);
        self.connect_failures.remove(&labels);
        self.healthy.remove(&labels);
        self.latency_seconds.remove(&labels);
        for direction in ["to_backend", "to_client"] {
            self.bytes.remove(&BytesLabels {
                route: route.to_owned(),
                backend: backend.to_owned(),
                direction,
            });
        }
        for result in ["ok", "failed"] {
            self.health_checks.remove(&HealthCheckLabels {
                route: route.to_owned(),
                backend: backend.to_owned(),
                result,
            });
        }
        for from in ["client", "backend"] {
            self.resets.remove(&ResetLabels {
                route: route.to_owned(),
                backend: backend.to_owned(),
                from,
            });
        }
    }
}

/// The metric handles of one backend.
#[derive(Clone, Default, Debug)]
pub struct BackendHandles {
    /// See [`BackendMetrics::active`].
    pub active: Gauge,
    /// See [`BackendMetrics::connections`].
    pub connections: Counter,
    /// See [`BackendMetrics::connect_failures`].
    pub connect_failures: Counter,
    /// See [`BackendMetrics::healthy`].
    pub healthy: Gauge,
    /// Bytes from clients to the backend.
    pub to_backend: Counter<u64, AtomicU64>,
    /// Bytes from the backend to clients.
    pub to_client: Counter<u64, AtomicU64>,
    /// Health checks that passed.
    pub checks_ok: Counter,
    /// Health checks that failed.
    pub checks_failed: Counter,
    /// See [`BackendMetrics::latency_seconds`].
    pub latency_seconds: Gauge<f64, AtomicU64>,
    /// Connections the client's reset ended (the backend was reset).
    pub resets_from_client: Counter,
    /// Connections the backend's reset ended (the client was reset).
    pub resets_from_backend: Counter,
}

impl apiway_relay::Observer for BackendHandles {
    fn on_bytes(&self, dir: apiway_relay::Direction, n: u64) {
        match dir {
            apiway_relay::Direction::ClientToBackend => self.to_backend.inc_by(n),
            apiway_relay::Direction::BackendToClient => self.to_client.inc_by(n),
        };
    }
}

/// Renders the registry in the Prometheus/OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoding error would be a bug in
    // a metric's label encoder, and a partial page is better than none.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!(error = %e, "encoding metrics failed");
    }
    out
}
