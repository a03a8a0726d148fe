//! The running gateway: listeners, the routing table, and how a new
//! snapshot is applied without touching established connections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use apiway_core::admin::{AdminServer, Health};
use apiway_core::drain::{Drain, DrainTiming};
use apiway_core::endpoint::EndpointSet;
use apiway_core::listener::{self, Slots};
use apiway_core::metrics::BackendMetrics;
use apiway_core::relay::RelayConfig;
use apiway_core::reload::ReloadMetrics;
use apiway_core::sync::lock;
use apiway_wire::connect::Authority;
use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ListenerSpec, RouteSpec, SendProxyProtocol, Snapshot};
use crate::metrics::{CodeLabels, GatewayMetrics, ListenerLabels, ReasonLabels, RouteLabels};
use crate::router::SniRouter;

/// A route as the data path sees it.
pub(crate) struct Route {
    spec: RouteSpec,
    name: Arc<str>,
    pub(crate) set: Arc<EndpointSet>,
    pub(crate) connect_timeout: std::time::Duration,
    pub(crate) relay: RelayConfig,
    pub(crate) routed: Counter,
    pub(crate) unavailable: Counter,
    /// Drops the set's metric series once the last holder lets go.
    _set: Arc<SetGuard>,
    /// Stops the health checker once the last holder lets go.
    _checker: Option<Arc<CheckerGuard>>,
}

impl Route {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        self.name.clone()
    }

    /// The PROXY header this route sends its backends, if any.
    pub(crate) fn send_proxy_protocol(&self) -> Option<SendProxyProtocol> {
        self.spec.send_proxy_protocol
    }
}

struct CheckerGuard(CancellationToken);

impl Drop for CheckerGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

struct SetGuard(Arc<EndpointSet>);

impl Drop for SetGuard {
    fn drop(&mut self) {
        self.0.forget_metrics();
    }
}

/// The routing table, swapped whole on reload.
struct Table {
    routes: Vec<Arc<Route>>,
    router: SniRouter,
    destinations: HashMap<SocketAddr, usize>,
    authorities: HashMap<Authority, usize>,
    default_route: Option<usize>,
}

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
    fn new(name: &str, metrics: &GatewayMetrics) -> ListenerHandles {
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
}

struct RunningListener {
    address: SocketAddr,
    local_addr: SocketAddr,
    state: Arc<ListenerState>,
    slots: Arc<Slots>,
    stop: CancellationToken,
}

/// The gateway role.
pub struct Gateway {
    table: ArcSwap<Table>,
    listeners: Mutex<Vec<RunningListener>>,
    /// Serializes `apply`.
    applying: Mutex<()>,
    metrics: GatewayMetrics,
    backend_metrics: BackendMetrics,
    reload_metrics: ReloadMetrics,
    drain: Drain,
    health: Arc<Health>,
    stop: CancellationToken,
    registry: Mutex<Option<Registry>>,
    admin_addr: Mutex<Option<SocketAddr>>,
    /// The admin address as configured (may be port 0), for reload warnings.
    admin_configured: Mutex<Option<SocketAddr>>,
    drain_timing: Mutex<DrainTiming>,
}

impl Gateway {
    /// Builds the gateway and applies `snapshot`: binds every listener and
    /// starts health checks. Serve the admin endpoint with [`Gateway::serve_admin`].
    pub async fn start(snapshot: Snapshot) -> anyhow::Result<Arc<Gateway>> {
        let mut registry = Registry::with_prefix("apiway");
        let metrics = GatewayMetrics::default();
        metrics.register(&mut registry);
        let backend_metrics = BackendMetrics::default();
        backend_metrics.register(&mut registry);
        let reload_metrics = ReloadMetrics::default();
        reload_metrics.register(&mut registry);
        let gateway = Arc::new(Gateway {
            table: ArcSwap::from_pointee(Table {
                routes: Vec::new(),
                router: SniRouter::default(),
                destinations: HashMap::new(),
                authorities: HashMap::new(),
                default_route: None,
            }),
            listeners: Mutex::new(Vec::new()),
            applying: Mutex::new(()),
            metrics,
            backend_metrics,
            reload_metrics,
            drain: Drain::new(),
            health: Health::new(),
            stop: CancellationToken::new(),
            registry: Mutex::new(Some(registry)),
            admin_addr: Mutex::new(None),
            admin_configured: Mutex::new(None),
            drain_timing: Mutex::new(snapshot.drain),
        });
        gateway.apply(snapshot).map_err(|e| anyhow::anyhow!(e))?;
        gateway.health.set_live(true);
        gateway.health.set_ready(true);
        Ok(gateway)
    }

    /// Binds and serves the admin endpoint at `addr`; returns the bound address.
    pub async fn serve_admin(self: &Arc<Self>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let mut registry = lock(&self.registry)
            .take()
            .ok_or_else(|| anyhow::anyhow!("the admin endpoint is already served"))?;
        let admin_metrics = AdminServer::register_metrics(&mut registry);
        let server =
            AdminServer::bind(addr, self.health.clone(), Arc::new(registry), admin_metrics).await?;
        let bound = server.local_addr()?;
        *lock(&self.admin_addr) = Some(bound);
        *lock(&self.admin_configured) = Some(addr);
        tokio::spawn(server.serve(self.stop.clone()));
        Ok(bound)
    }

    /// The admin endpoint's address, once served.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        *lock(&self.admin_addr)
    }

    /// The health verdicts served on the admin endpoint.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Reload counters.
    pub fn reload_metrics(&self) -> &ReloadMetrics {
        &self.reload_metrics
    }

    /// The shared state of the listener named `name` (for tests).
    #[cfg(test)]
    pub(crate) fn listener_state(&self, name: &str) -> Option<Arc<ListenerState>> {
        lock(&self.listeners)
            .iter()
            .find(|l| l.state.spec.load().name == name)
            .map(|l| l.state.clone())
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
        self.table
            .load()
            .routes
            .iter()
            .find(|r| r.name() == name)
            .map(|r| r.set.clone())
    }

    /// Connections currently being served.
    pub fn open_connections(&self) -> usize {
        self.drain.active()
    }

    pub(crate) fn route_for(&self, server_name: Option<&str>) -> Option<Arc<Route>> {
        let table = self.table.load();
        let index = server_name
            .and_then(|n| table.router.lookup(n))
            .or(table.default_route)?;
        table.routes.get(index).cloned()
    }

    /// The route for an original destination (`proxy` listeners); the
    /// default route when none lists it.
    pub(crate) fn route_for_destination(&self, destination: SocketAddr) -> Option<Arc<Route>> {
        let table = self.table.load();
        let index = table
            .destinations
            .get(&config::destination_key(destination))
            .copied()
            .or(table.default_route)?;
        table.routes.get(index).cloned()
    }

    /// The route for a CONNECT authority. No default: a tunnel goes only
    /// where a route says it may.
    pub(crate) fn route_for_authority(&self, authority: &Authority) -> Option<Arc<Route>> {
        let table = self.table.load();
        let index = *table.authorities.get(authority)?;
        table.routes.get(index).cloned()
    }

    /// Parses, validates and applies a configuration file's text.
    /// Returns the reload interval the new configuration asks for.
    pub fn reload(self: &Arc<Self>, text: &str) -> Result<std::time::Duration, String> {
        let snapshot = config::parse(text)?;
        let interval = snapshot.reload_interval;
        let serving = *lock(&self.admin_configured);
        if serving.is_some() && snapshot.admin != serving {
            tracing::warn!(
                running = ?serving,
                new = ?snapshot.admin,
                "admin.address changes take effect on restart; the rest of the config is applied"
            );
        }
        self.apply(snapshot)?;
        Ok(interval)
    }

    /// Applies a validated snapshot. New listeners are bound first; if one
    /// cannot be bound nothing changes. Established connections are never
    /// touched: they keep the backend they have.
    pub fn apply(self: &Arc<Self>, snapshot: Snapshot) -> Result<(), String> {
        let _serial = lock(&self.applying);

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

        // 2. Routes: keep the endpoint sets (health, load) of routes whose
        //    name stays; rebuild only what changed.
        let old = self.table.load_full();
        let by_name: HashMap<&str, &Arc<Route>> =
            old.routes.iter().map(|r| (r.name(), r)).collect();
        let mut routes = Vec::with_capacity(snapshot.routes.len());
        for spec in snapshot.routes {
            let existing = by_name.get(spec.name.as_str()).copied();
            let route = match existing {
                Some(r) if r.spec == spec => r.clone(),
                Some(r) => {
                    r.set.apply(&spec.endpoints);
                    // A new checker reads the new settings; the old one stops
                    // when the old route is let go.
                    let checker = if r.spec.endpoints == spec.endpoints {
                        r._checker.clone()
                    } else {
                        self.spawn_checker(&r.set, &spec)
                    };
                    Arc::new(Route {
                        name: r.name.clone(),
                        set: r.set.clone(),
                        connect_timeout: spec.connect_timeout,
                        relay: spec.relay.clone(),
                        routed: r.routed.clone(),
                        unavailable: r.unavailable.clone(),
                        _set: r._set.clone(),
                        _checker: checker,
                        spec,
                    })
                }
                None => self.new_route(spec),
            };
            routes.push(route);
        }
        drop(by_name);
        self.table.store(Arc::new(Table {
            routes,
            router: snapshot.router,
            destinations: snapshot.destinations,
            authorities: snapshot.authorities,
            default_route: snapshot.default_route,
        }));
        drop(old);

        // 3. Listeners: update the kept ones, start the new ones, stop the
        //    removed ones (their connections carry on).
        let mut running = lock(&self.listeners);
        running.retain(|r| {
            let keep = snapshot.listeners.iter().find(|s| s.address == r.address);
            match keep {
                Some(spec) => {
                    r.slots.set_max(spec.max_connections);
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
        *lock(&self.drain_timing) = snapshot.drain;
        Ok(())
    }

    fn new_route(&self, spec: RouteSpec) -> Arc<Route> {
        let set = EndpointSet::new(&spec.name, &spec.endpoints, self.backend_metrics.clone());
        let checker = self.spawn_checker(&set, &spec);
        let labels = RouteLabels {
            route: spec.name.clone(),
        };
        Arc::new(Route {
            name: Arc::from(spec.name.as_str()),
            connect_timeout: spec.connect_timeout,
            relay: spec.relay.clone(),
            routed: self.metrics.routed.get_or_create_owned(&labels),
            unavailable: self.metrics.unavailable.get_or_create_owned(&labels),
            _set: Arc::new(SetGuard(set.clone())),
            _checker: checker,
            set,
            spec,
        })
    }

    fn spawn_checker(&self, set: &Arc<EndpointSet>, spec: &RouteSpec) -> Option<Arc<CheckerGuard>> {
        if !apiway_core::health::needs_checker(&spec.endpoints) {
            return None;
        }
        let stop = self.stop.child_token();
        apiway_core::health::spawn_checker(set, stop.clone());
        Some(Arc::new(CheckerGuard(stop)))
    }

    fn start_listener(
        self: &Arc<Self>,
        spec: ListenerSpec,
        socket: tokio::net::TcpListener,
    ) -> RunningListener {
        let local_addr = socket.local_addr().unwrap_or(spec.address);
        let slots = Slots::new(spec.max_connections);
        let stop = self.stop.child_token();
        let state = Arc::new(ListenerState {
            handles: ListenerHandles::new(&spec.name, &self.metrics),
            spec: ArcSwap::from_pointee(spec.clone()),
        });
        tracing::info!(listener = %spec.name, address = %local_addr, kind = ?spec.kind, "listening");
        let gateway = self.clone();
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
                    tracing::debug!(%peer, listener = %state.handles.name, "max_connections reached; closed");
                }
            },
            move |stream, peer, slot| {
                crate::connection::serve(gateway.clone(), accept_state.clone(), stream, peer, slot)
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

    /// Drains and stops: `/healthz` fails at once, listeners accept for the
    /// drain delay, then connections get the grace period. `hurry` skips
    /// the waits (a second signal).
    pub async fn shutdown(&self, hurry: impl std::future::Future<Output = ()>) {
        let timing = *lock(&self.drain_timing);
        self.drain.run(&self.health, timing, hurry).await;
        self.stop.cancel();
    }

    /// Runs the gateway from a configuration file until SIGTERM/SIGINT:
    /// hot reload on change and SIGHUP, graceful drain on exit.
    pub async fn run(config_path: PathBuf, ready_file: Option<PathBuf>) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(&config_path).map_err(|e| {
            anyhow::anyhow!("cannot read the config file {}: {e}", config_path.display())
        })?;
        let snapshot =
            config::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
        let admin = snapshot.admin;
        let reload_interval = snapshot.reload_interval;
        let names: Vec<String> = snapshot.listeners.iter().map(|l| l.name.clone()).collect();
        let gateway = Gateway::start(snapshot).await?;
        if let Some(addr) = admin {
            let bound = gateway.serve_admin(addr).await?;
            tracing::info!(address = %bound, "admin endpoint: /healthz /livez /readyz /metrics");
        }
        if let Some(path) = ready_file {
            let mut report = apiway_core::ready::ReadyReport::for_this_process();
            report.admin = gateway.admin_addr();
            report.listeners = (names.into_iter())
                .filter_map(|name| Some((name.clone(), gateway.listener_addr(&name)?)))
                .collect();
            report.write(&path)?;
        }
        let reloader = {
            let gateway = gateway.clone();
            let path = config_path.clone();
            let stop = gateway.stop.clone();
            let metrics = gateway.reload_metrics.clone();
            tokio::spawn(apiway_core::reload::watch(
                path,
                text,
                reload_interval,
                stop,
                metrics,
                move |new| gateway.reload(new),
            ))
        };
        let hurry = apiway_core::drain::first_termination().await;
        gateway.shutdown(hurry).await;
        reloader.abort();
        tracing::info!("stopped");
        Ok(())
    }
}
