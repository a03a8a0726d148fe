//! The gateway's configuration as typed values, before validation: what
//! every source (the file, and later Kubernetes) produces. Strings are
//! already parsed here (addresses, networks, host patterns); what needs the
//! whole picture (unique names, one route per hostname, kind rules, limits)
//! is checked by [`super::validate`].

use std::net::SocketAddr;
use std::time::Duration;

use apiway_core::cidr::Cidr;
use apiway_core::config::source::Merge;
use apiway_core::config::{AdminSection, DrainSection, Written};
use apiway_core::endpoint::{Address, Policy};
use apiway_core::health::HealthCheckConfig;
use apiway_wire::connect::Authority;

use super::{ListenerKind, ProxyProtocolMode, SendProxyProtocol};
use crate::router::HostPattern;

/// A gateway configuration, or a fragment of one from one source.
#[derive(Clone, Debug, Default)]
pub struct GatewaySpec {
    /// `admin:`.
    pub admin: AdminSection,
    /// Listening sockets.
    pub listeners: Vec<ListenerDef>,
    /// Routes.
    pub routes: Vec<RouteDef>,
    /// `reject` or a route name; `None` rejects.
    pub default_route: Option<String>,
    /// `drain:`.
    pub drain: DrainSection,
    /// How often file sources look for changes.
    pub reload_interval: Option<Duration>,
    /// Listeners may come from Kubernetes later: none yet is no error.
    pub kubernetes: bool,
    /// `access_log:`.
    pub access_log: Option<crate::access_log::AccessLogConfig>,
    /// `max_routes:`.
    pub max_routes: Option<usize>,
}

/// A listener as configured; `None` takes the default.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerDef {
    /// Unique name.
    pub name: String,
    /// Where it listens.
    pub address: SocketAddr,
    /// What it does with connections.
    pub kind: ListenerKind,
    /// Open connections allowed.
    pub max_connections: Option<usize>,
    /// What happens at `max_connections`.
    pub when_full: Option<apiway_core::listener::WhenFull>,
    /// `tls`: time for the whole ClientHello.
    pub client_hello_timeout: Option<Duration>,
    /// `tls`: largest ClientHello.
    pub max_client_hello_bytes: Option<usize>,
    /// `tls`: whether a PROXY header comes first.
    pub proxy_protocol: Option<ProxyProtocolMode>,
    /// Networks whose PROXY headers are believed.
    pub trusted_sources: Option<Vec<Cidr>>,
    /// Time for the PROXY header(s).
    pub proxy_header_timeout: Option<Duration>,
    /// `connect`: time for the request head.
    pub request_timeout: Option<Duration>,
    /// `connect`: largest request head.
    pub max_request_bytes: Option<usize>,
}

/// A route as configured; `None` takes the default.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteDef {
    /// Unique name.
    pub name: String,
    /// SNI names and wildcards.
    pub hostnames: Vec<Written<HostPattern>>,
    /// The `tls` listeners whose SNI lookups see `hostnames`; empty for
    /// every listener. A listener looks in its own routes first.
    pub listeners: Vec<String>,
    /// Original destinations (`proxy` listeners).
    pub destinations: Vec<SocketAddr>,
    /// CONNECT authorities (`connect` listeners).
    pub connect_authorities: Vec<Written<Authority>>,
    /// PROXY header sent to backends.
    pub send_proxy_protocol: Option<SendProxyProtocol>,
    /// Backends, in shares of the route's connections (a file route has
    /// one share; a Kubernetes route one per `backendRef`).
    pub groups: Vec<BackendGroupDef>,
    /// Active health check.
    pub health_check: Option<HealthCheckConfig>,
    /// Balancing policy.
    pub policy: Policy,
    /// Per-backend connect timeout.
    pub connect_timeout: Option<Duration>,
    /// Close connections idle this long.
    pub idle_timeout: Option<Duration>,
    /// First ejection after a failed connect.
    pub ejection_base: Option<Duration>,
    /// Longest ejection.
    pub ejection_max: Option<Duration>,
}

/// A share of a route's new connections and the backends that serve it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendGroupDef {
    /// How metrics and logs name the group (the route's name for a file
    /// route; `namespace/service:port` for a Kubernetes one).
    pub name: String,
    /// Relative share of new connections (0: none).
    pub weight: u32,
    /// Backends; none means the share is refused (a missing Service).
    pub backends: Vec<Address>,
}

impl Merge for GatewaySpec {
    /// Listeners and routes add up; a shared setting may come from one
    /// source only (two sources that both set it are a conflict, not an
    /// override, so nobody wonders which one won).
    fn merge(self, later: GatewaySpec) -> Result<GatewaySpec, String> {
        fn one<T: PartialEq + std::fmt::Debug>(
            what: &str,
            a: Option<T>,
            b: Option<T>,
        ) -> Result<Option<T>, String> {
            match (a, b) {
                (Some(a), Some(b)) if a != b => Err(format!(
                    "{what} is set by two configuration sources ({a:?} and {b:?}); set it in one"
                )),
                (a, b) => Ok(a.or(b)),
            }
        }
        let mut listeners = self.listeners;
        listeners.extend(later.listeners);
        let mut routes = self.routes;
        routes.extend(later.routes);
        Ok(GatewaySpec {
            admin: AdminSection {
                address: one("admin.address", self.admin.address, later.admin.address)?,
                max_connections: one(
                    "admin.max_connections",
                    self.admin.max_connections,
                    later.admin.max_connections,
                )?,
            },
            listeners,
            routes,
            default_route: one("default_route", self.default_route, later.default_route)?,
            drain: DrainSection {
                delay: one("drain.delay", self.drain.delay, later.drain.delay)?,
                grace_period: one(
                    "drain.grace_period",
                    self.drain.grace_period,
                    later.drain.grace_period,
                )?,
            },
            reload_interval: one(
                "reload_interval",
                self.reload_interval,
                later.reload_interval,
            )?,
            kubernetes: self.kubernetes || later.kubernetes,
            access_log: one("access_log", self.access_log, later.access_log)?,
            max_routes: one("max_routes", self.max_routes, later.max_routes)?,
        })
    }
}
