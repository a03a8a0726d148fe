//! Routes as the data path sees them, and the table that finds one for a
//! connection: by SNI, by original destination, by CONNECT authority. The
//! table is swapped whole on reload; a connection holds the route it was
//! given, so a reload never touches it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::connector::{TcpConnector, Via};
use apiway_core::endpoint::EndpointSet;
use apiway_core::metrics::BackendMetrics;
use apiway_core::relay::RelayConfig;
use apiway_wire::connect::Authority;
use apiway_wire::proxy::Version;
use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::config::{self, RouteSpec, SendProxyProtocol, Snapshot};
use crate::metrics::{GatewayMetrics, RouteLabels};
use crate::router::SniRouter;

/// A route as the data path sees it.
pub(crate) struct Route {
    spec: RouteSpec,
    name: Arc<str>,
    pub(crate) set: Arc<EndpointSet>,
    pub(crate) connector: TcpConnector,
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
}

/// How a route reaches its backends: directly, or with the PROXY header
/// it sends.
fn connector(spec: &RouteSpec) -> TcpConnector {
    let via = match spec.send_proxy_protocol {
        None => Via::Direct,
        Some(SendProxyProtocol::V1) => Via::ProxyHeader {
            version: Version::V1,
            authority: None,
        },
        Some(SendProxyProtocol::V2) => Via::ProxyHeader {
            version: Version::V2,
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
    /// The route for a server name, or the default route.
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

    /// The endpoint set of route `name`.
    pub(crate) fn endpoint_set(&self, name: &str) -> Option<Arc<EndpointSet>> {
        self.table
            .load()
            .routes
            .iter()
            .find(|r| r.name() == name)
            .map(|r| r.set.clone())
    }

    /// Replaces the table with the routes of `snapshot`. Routes whose name
    /// stays keep their endpoint set (health, load, ejections); only what
    /// changed is rebuilt.
    pub(crate) fn replace(&self, snapshot: &mut Snapshot, factory: &RouteFactory) {
        let old = self.table.load_full();
        let by_name: HashMap<&str, &Arc<Route>> =
            old.routes.iter().map(|r| (r.name(), r)).collect();
        let mut routes = Vec::with_capacity(snapshot.routes.len());
        for spec in std::mem::take(&mut snapshot.routes) {
            let route = match by_name.get(spec.name.as_str()).copied() {
                Some(r) if r.spec == spec => r.clone(),
                Some(r) => {
                    r.set.apply(&spec.endpoints);
                    // A new checker reads the new settings; the old one stops
                    // when the old route is let go.
                    let checker = if r.spec.endpoints == spec.endpoints {
                        r._checker.clone()
                    } else {
                        factory.spawn_checker(&r.set, &spec)
                    };
                    Arc::new(Route {
                        name: r.name.clone(),
                        set: r.set.clone(),
                        connector: connector(&spec),
                        relay: spec.relay.clone(),
                        routed: r.routed.clone(),
                        unavailable: r.unavailable.clone(),
                        _set: r._set.clone(),
                        _checker: checker,
                        spec,
                    })
                }
                None => factory.new_route(spec),
            };
            routes.push(route);
        }
        drop(by_name);
        self.table.store(Arc::new(Table {
            routes,
            router: std::mem::take(&mut snapshot.router),
            destinations: std::mem::take(&mut snapshot.destinations),
            authorities: std::mem::take(&mut snapshot.authorities),
            default_route: snapshot.default_route,
        }));
    }
}

impl RouteFactory {
    fn new_route(&self, spec: RouteSpec) -> Arc<Route> {
        let set = EndpointSet::new(&spec.name, &spec.endpoints, self.backend_metrics.clone());
        let checker = self.spawn_checker(&set, &spec);
        let labels = RouteLabels {
            route: spec.name.clone(),
        };
        Arc::new(Route {
            name: Arc::from(spec.name.as_str()),
            connector: connector(&spec),
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
}
