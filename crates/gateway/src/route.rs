//! Routes as the data path sees them, and the table that finds one for a
//! connection: by SNI, by original destination, by CONNECT authority. The
//! table is swapped whole on reload; a connection holds the route it was
//! given, so a reload never touches it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::connector::{TcpConnector, Via};
use apiway_core::endpoint::EndpointSet;
use apiway_core::metrics::BackendMetrics;
use apiway_core::relay::RelayConfig;
use apiway_wire::connect::Authority;
use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::config::{self, BackendGroupSpec, RouteSpec, Snapshot};
use crate::metrics::{GatewayMetrics, RouteLabels};
use crate::router::SniRouter;

/// A route as the data path sees it.
pub(crate) struct Route {
    spec: RouteSpec,
    name: Arc<str>,
    /// Shares of new connections; most routes have one.
    pub(crate) shares: Vec<Arc<Share>>,
    total_weight: u64,
    pub(crate) connector: TcpConnector,
    pub(crate) relay: RelayConfig,
    pub(crate) routed: Counter,
    pub(crate) unavailable: Counter,
}

/// One share of a route: its weight and endpoint set.
pub(crate) struct Share {
    spec: BackendGroupSpec,
    pub(crate) set: Arc<EndpointSet>,
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

    /// The endpoint set a new connection goes to: one share, drawn by
    /// weight; `None` when every weight is 0 (the route refuses).
    pub(crate) fn pick_set(&self) -> Option<&Arc<EndpointSet>> {
        if let [only] = self.shares.as_slice() {
            return (only.spec.weight > 0).then_some(&only.set);
        }
        if self.total_weight == 0 {
            return None;
        }
        let mut draw = fastrand::u64(..self.total_weight);
        for share in &self.shares {
            let weight = u64::from(share.spec.weight);
            if draw < weight {
                return Some(&share.set);
            }
            draw -= weight;
        }
        None
    }

    /// The first share's set (what a file route has).
    pub(crate) fn first_set(&self) -> Option<&Arc<EndpointSet>> {
        self.shares.first().map(|s| &s.set)
    }
}

/// How a route reaches its backends: directly, or with the PROXY header
/// it sends.
fn connector(spec: &RouteSpec) -> TcpConnector {
    let via = match spec.send_proxy_protocol {
        None => Via::Direct,
        Some(p) => Via::ProxyHeader {
            version: p.version(),
            authority: None,
        },
    };
    TcpConnector {
        via,
        connect_timeout: spec.connect_timeout,
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

/// The routing table as of one snapshot.
#[derive(Default)]
struct Table {
    routes: Vec<Arc<Route>>,
    router: SniRouter,
    listener_routers: HashMap<String, SniRouter>,
    destinations: HashMap<SocketAddr, usize>,
    authorities: HashMap<Authority, usize>,
    default_route: Option<usize>,
}

/// What a route needs to be built: metric families and the stop signal
/// of health checkers.
pub(crate) struct RouteFactory {
    pub(crate) metrics: GatewayMetrics,
    pub(crate) backend_metrics: BackendMetrics,
    pub(crate) stop: CancellationToken,
}

/// The routing table every listener reads; swapped whole on reload.
#[derive(Default)]
pub(crate) struct RouteTable {
    table: ArcSwap<Table>,
}

impl RouteTable {
    /// The route for a server name on listener `listener`: the listener's
    /// own routes first, then those of every listener, then the default
    /// route.
    pub(crate) fn route_for(
        &self,
        listener: &str,
        server_name: Option<&str>,
    ) -> Option<Arc<Route>> {
        let table = self.table.load();
        let index = server_name
            .and_then(|n| {
                table
                    .listener_routers
                    .get(listener)
                    .and_then(|r| r.lookup(n))
                    .or_else(|| table.router.lookup(n))
            })
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

    /// The endpoint set of route `name`.
    pub(crate) fn endpoint_set(&self, name: &str) -> Option<Arc<EndpointSet>> {
        self.table
            .load()
            .routes
            .iter()
            .find(|r| r.name() == name)
            .and_then(|r| r.first_set().cloned())
    }

    /// Replaces the table with the routes of `snapshot`. Shares whose
    /// route and name stay keep their endpoint set (health, load,
    /// ejections); only what changed is rebuilt.
    pub(crate) fn replace(&self, snapshot: &mut Snapshot, factory: &RouteFactory) {
        let old = self.table.load_full();
        let by_name: HashMap<&str, &Arc<Route>> =
            old.routes.iter().map(|r| (r.name(), r)).collect();
        let mut routes = Vec::with_capacity(snapshot.routes.len());
        for spec in std::mem::take(&mut snapshot.routes) {
            let route = match by_name.get(spec.name.as_str()).copied() {
                Some(r) if r.spec == spec => r.clone(),
                Some(r) => {
                    let shares = spec
                        .groups
                        .iter()
                        .map(|g| match r.shares.iter().find(|s| s.spec.name == g.name) {
                            Some(s) if s.spec == *g => s.clone(),
                            Some(s) => {
                                s.set.apply(&g.endpoints);
                                // A new checker reads the new settings; the old
                                // one stops when the old share is let go.
                                let checker = if s.spec.endpoints == g.endpoints {
                                    s._checker.clone()
                                } else {
                                    factory.spawn_checker(&s.set, g)
                                };
                                Arc::new(Share {
                                    spec: g.clone(),
                                    set: s.set.clone(),
                                    _set: s._set.clone(),
                                    _checker: checker,
                                })
                            }
                            None => factory.new_share(g),
                        })
                        .collect();
                    Arc::new(Route {
                        name: r.name.clone(),
                        total_weight: total_weight(&spec),
                        shares,
                        connector: connector(&spec),
                        relay: spec.relay.clone(),
                        routed: r.routed.clone(),
                        unavailable: r.unavailable.clone(),
                        spec,
                    })
                }
                None => factory.new_route(spec),
            };
            routes.push(route);
        }
        // A route that is gone takes its series with it: a controller that
        // renames routes must not grow /metrics (and memory) for ever.
        let kept: HashSet<&str> = routes.iter().map(|r| r.name()).collect();
        for gone in old.routes.iter().filter(|r| !kept.contains(r.name())) {
            factory.forget_route(gone.name());
        }
        drop(kept);
        drop(by_name);
        self.table.store(Arc::new(Table {
            routes,
            router: std::mem::take(&mut snapshot.router),
            listener_routers: std::mem::take(&mut snapshot.listener_routers),
            destinations: std::mem::take(&mut snapshot.destinations),
            authorities: std::mem::take(&mut snapshot.authorities),
            default_route: snapshot.default_route,
        }));
    }
}

fn total_weight(spec: &RouteSpec) -> u64 {
    spec.groups.iter().map(|g| u64::from(g.weight)).sum()
}

impl RouteFactory {
    /// Drops route `name`'s series (connections still open on it count on,
    /// unexported).
    fn forget_route(&self, name: &str) {
        let labels = RouteLabels {
            route: name.to_owned(),
        };
        self.metrics.routed.remove(&labels);
        self.metrics.unavailable.remove(&labels);
    }

    fn new_route(&self, spec: RouteSpec) -> Arc<Route> {
        let labels = RouteLabels {
            route: spec.name.clone(),
        };
        Arc::new(Route {
            name: Arc::from(spec.name.as_str()),
            shares: spec.groups.iter().map(|g| self.new_share(g)).collect(),
            total_weight: total_weight(&spec),
            connector: connector(&spec),
            relay: spec.relay.clone(),
            routed: self.metrics.routed.get_or_create_owned(&labels),
            unavailable: self.metrics.unavailable.get_or_create_owned(&labels),
            spec,
        })
    }

    fn new_share(&self, group: &BackendGroupSpec) -> Arc<Share> {
        let set = EndpointSet::new(&group.name, &group.endpoints, self.backend_metrics.clone());
        Arc::new(Share {
            spec: group.clone(),
            _checker: self.spawn_checker(&set, group),
            _set: Arc::new(SetGuard(set.clone())),
            set,
        })
    }

    fn spawn_checker(
        &self,
        set: &Arc<EndpointSet>,
        group: &BackendGroupSpec,
    ) -> Option<Arc<CheckerGuard>> {
        if !apiway_core::health::needs_checker(&group.endpoints) {
            return None;
        }
        let stop = self.stop.child_token();
        apiway_core::health::spawn_checker(set, stop.clone());
        Some(Arc::new(CheckerGuard(stop)))
    }
}
