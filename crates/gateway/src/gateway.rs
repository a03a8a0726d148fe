//! The gateway role: its listeners and routing table, and how a snapshot is
//! applied without touching established connections. The lifecycle (admin,
//! reload, drain, signals) is core's role runtime.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use apiway_core::config::Common;
use apiway_core::drain::Drain;
use apiway_core::endpoint::EndpointSet;
use apiway_core::listener::{self, Slots};
use apiway_core::metrics::BackendMetrics;
use apiway_core::runtime::{Role, RoleContext};
use apiway_core::sync::lock;
use arc_swap::ArcSwap;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::{self, GatewaySpec, ListenerSpec, Snapshot};
use crate::listener_state::{ListenerHandles, ListenerState};
use crate::metrics::GatewayMetrics;
use crate::route::{RouteFactory, RouteTable};

struct RunningListener {
    address: SocketAddr,
    local_addr: SocketAddr,
    state: Arc<ListenerState>,
    slots: Arc<Slots>,
    stop: CancellationToken,
}

/// The gateway role.
pub struct Gateway {
    routes: Arc<RouteTable>,
    factory: RouteFactory,
    listeners: Mutex<Vec<RunningListener>>,
    drain: Drain,
    stop: CancellationToken,
    access_log: crate::access_log::Shared,
}

impl Role for Gateway {
    const NAME: &'static str = "gateway";
    type Spec = GatewaySpec;
    type Snapshot = Snapshot;

    fn validate(spec: GatewaySpec) -> Result<Snapshot, String> {
        config::validate(spec)
    }

    fn max_connections(snapshot: &Snapshot) -> Option<u64> {
        Some(
            snapshot
                .listeners
                .iter()
                .map(|l| l.max_connections as u64)
                .sum(),
        )
    }

    fn common(snapshot: &Snapshot) -> Common {
        snapshot.common
    }

    fn start(
        snapshot: Snapshot,
        context: &RoleContext,
        registry: &mut Registry,
    ) -> anyhow::Result<Arc<Gateway>> {
        let metrics = GatewayMetrics::default();
        metrics.register(registry);
        let backend_metrics = BackendMetrics::default();
        backend_metrics.register(registry);
        let gateway = Arc::new(Gateway {
            routes: Arc::new(RouteTable::default()),
            factory: RouteFactory {
                metrics,
                backend_metrics,
                stop: context.stop.child_token(),
            },
            listeners: Mutex::new(Vec::new()),
            drain: context.drain.clone(),
            stop: context.stop.clone(),
            access_log: Default::default(),
        });
        if let Err(e) = gateway.apply_snapshot(snapshot) {
            gateway.stop.cancel();
            return Err(anyhow::anyhow!(e));
        }
        context.health.set_ready(true);
        Ok(gateway)
    }

    fn apply(self: &Arc<Self>, snapshot: Snapshot) -> Result<(), String> {
        self.apply_snapshot(snapshot)
    }

    fn listeners(&self) -> Vec<(String, SocketAddr)> {
        lock(&self.listeners)
            .iter()
            .map(|l| (l.state.spec.load().name.clone(), l.local_addr))
            .collect()
    }
}

impl Gateway {
    /// The shared state of the listener named `name` (for tests).
    #[cfg(test)]
    pub(crate) fn listener_state(&self, name: &str) -> Option<Arc<ListenerState>> {
        lock(&self.listeners)
            .iter()
            .find(|l| l.state.spec.load().name == name)
            .map(|l| l.state.clone())
    }

    /// The routing table (for tests).
    #[cfg(test)]
    pub(crate) fn routes(&self) -> Arc<RouteTable> {
        self.routes.clone()
    }

    /// The bound address of the listener named `name`.
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        lock(&self.listeners)
            .iter()
            .find(|l| l.state.spec.load().name == name)
            .map(|l| l.local_addr)
    }

    /// Endpoint set of route `name` (for status displays and tests).
    pub fn endpoint_set(&self, name: &str) -> Option<Arc<EndpointSet>> {
        self.routes.endpoint_set(name)
    }

    /// Connections currently being served.
    pub fn open_connections(&self) -> usize {
        self.drain.active()
    }

    /// Applies a validated snapshot. New listeners are bound first; if one
    /// cannot be bound nothing changes. Established connections are never
    /// touched: they keep the backend they have.
    fn apply_snapshot(self: &Arc<Self>, mut snapshot: Snapshot) -> Result<(), String> {
        // 1. Bind what is new, before changing anything.
        let mut fresh = Vec::new();
        {
            let running = lock(&self.listeners);
            for spec in &snapshot.listeners {
                if !running.iter().any(|r| r.address == spec.address) {
                    let socket = listener::bind(spec.address)
                        .map_err(|e| format!("listener {}: {e}", spec.name))?;
                    fresh.push((spec.clone(), socket));
                }
            }
        }

        // The access log, if its section changed: opened before anything
        // changes, so a file that cannot be opened rejects the reload.
        let current = self.access_log.load();
        let log_changed = current.as_ref().map(|l| l.config()) != snapshot.access_log.as_ref();
        let new_log = if log_changed {
            match &snapshot.access_log {
                Some(config) => Some(Arc::new(crate::access_log::AccessLog::open(
                    config,
                    self.factory.metrics.access_log_dropped.clone(),
                )?)),
                None => None,
            }
        } else {
            None
        };
        drop(current);

        // 2. Routes.
        self.routes.replace(&mut snapshot, &self.factory);

        // 3. Listeners: update the kept ones, start the new ones, stop the
        //    removed ones (their connections carry on).
        let mut running = lock(&self.listeners);
        running.retain(|r| {
            let keep = snapshot.listeners.iter().find(|s| s.address == r.address);
            match keep {
                Some(spec) => {
                    r.slots.set_max(spec.max_connections);
                    r.slots.set_when_full(spec.when_full);
                    r.state.spec.store(Arc::new(spec.clone()));
                    true
                }
                None => {
                    tracing::info!(address = %r.address, "listener removed; open connections continue");
                    r.stop.cancel();
                    false
                }
            }
        });
        for (spec, socket) in fresh {
            running.push(self.start_listener(spec, socket));
        }
        if log_changed {
            match &new_log {
                Some(l) => {
                    tracing::info!(path = %l.config().path.display(), format = ?l.config().format, "access log on")
                }
                None => tracing::info!("access log off"),
            }
            // The old writer writes what it has queued, then ends.
            self.access_log.store(new_log);
        }
        Ok(())
    }

    fn start_listener(
        &self,
        spec: ListenerSpec,
        socket: tokio::net::TcpListener,
    ) -> RunningListener {
        let local_addr = socket.local_addr().unwrap_or(spec.address);
        let slots = Slots::new(spec.max_connections);
        slots.set_when_full(spec.when_full);
        let stop = self.stop.child_token();
        let state = Arc::new(ListenerState {
            handles: ListenerHandles::new(&spec.name, &self.factory.metrics),
            spec: ArcSwap::from_pointee(spec.clone()),
            access_log: self.access_log.clone(),
        });
        tracing::info!(listener = %spec.name, address = %local_addr, kind = ?spec.kind, "listening");
        let routes = self.routes.clone();
        let accept_state = state.clone();
        tokio::spawn(listener::accept_loop(
            socket,
            slots.clone(),
            self.drain.clone(),
            stop.clone(),
            {
                let state = state.clone();
                move |peer| {
                    state.handles.rejected.inc();
                    tracing::debug!(%peer, listener = %state.handles.name(), "max_connections reached; closed");
                }
            },
            move |stream, peer, slot| {
                crate::connection::serve(routes.clone(), accept_state.clone(), stream, peer, slot)
            },
        ));
        RunningListener {
            address: spec.address,
            local_addr,
            state,
            slots,
            stop,
        }
    }
}
