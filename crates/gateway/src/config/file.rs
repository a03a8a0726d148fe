//! The configuration file as written (YAML, or JSON when it starts with
//! `{`), and its decoding into the typed [`GatewaySpec`]: every string is
//! parsed here, with the field's path in the error.

use std::time::Duration;

use apiway_core::cidr::Cidr;
use apiway_core::config::sections::socket_addr;
use apiway_core::config::{AdminSection, DrainSection, Written};
use apiway_core::endpoint::{Address, Policy};
use apiway_core::health::HealthCheckConfig;
use apiway_wire::connect::Authority;
use serde::Deserialize;

use super::spec::{BackendGroupDef, GatewaySpec, ListenerDef, RouteDef};
use super::{ListenerKind, ProxyProtocolMode, SendProxyProtocol};
use crate::router::HostPattern;

/// The configuration file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The admin endpoint.
    #[serde(default)]
    pub admin: AdminSection,
    /// Listening sockets (may be left out when listeners come from a
    /// Kubernetes Gateway).
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// Routes to backends.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Where connections with no SNI or no matching route go: `reject`
    /// (TLS `unrecognized_name` alert and close, the default) or a route name.
    #[serde(default)]
    pub default_route: Option<String>,
    /// Graceful shutdown timing.
    #[serde(default)]
    pub drain: DrainSection,
    /// How often the file is checked for changes (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub reload_interval: Option<Duration>,
    /// One line per connection when it ends (default: none).
    #[serde(default)]
    pub access_log: Option<crate::access_log::AccessLogConfig>,
    /// The most routes accepted from every source together (the file and
    /// Kubernetes) [default: 100000]; a change with more is refused whole.
    #[serde(default)]
    pub max_routes: Option<usize>,
}

/// `listeners[]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Unique name (metrics label).
    pub name: String,
    /// `ip:port` to listen on.
    pub address: String,
    /// `tls`, `proxy` or `connect`.
    pub kind: ListenerKind,
    /// Open connections allowed; what happens to more is `when_full`
    /// (default 10000).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// At `max_connections`: `queue` new connections in the kernel until a
    /// slot frees (default), or `close` them at once.
    #[serde(default)]
    pub when_full: Option<apiway_core::listener::WhenFull>,
    /// Time a client has to send its whole ClientHello (default 10s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub client_hello_timeout: Option<Duration>,
    /// Largest ClientHello accepted, in bytes (default 16384).
    #[serde(default)]
    pub max_client_hello_bytes: Option<usize>,
    /// `tls` only: `off` (default), `optional` or `required`.
    #[serde(default)]
    pub proxy_protocol: Option<ProxyProtocolMode>,
    /// Networks whose PROXY headers are believed (`proxy` listeners, and
    /// `tls` ones with `proxy_protocol`).
    #[serde(default)]
    pub trusted_sources: Option<Vec<String>>,
    /// Time a trusted source has to send its PROXY header(s) (default 3s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub proxy_header_timeout: Option<Duration>,
    /// `connect` only: time a client has to send its request head (default 10s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub request_timeout: Option<Duration>,
    /// `connect` only: largest request head accepted, in bytes (default 8192).
    #[serde(default)]
    pub max_request_bytes: Option<usize>,
}

/// `routes[]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Unique name (metrics label, `default_route` target).
    pub name: String,
    /// Exact names and `*.suffix` wildcards matched against the SNI.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The `tls` listeners (by name) whose connections these hostnames
    /// route; every listener when left out.
    #[serde(default)]
    pub listeners: Vec<String>,
    /// Original destinations (`ip:port`) matched on `proxy` listeners.
    #[serde(default)]
    pub destinations: Vec<String>,
    /// `host:port` authorities matched on `connect` listeners.
    #[serde(default)]
    pub connect_authorities: Vec<String>,
    /// Send a PROXY header (`v1` or `v2`) to the backend first (default: none).
    #[serde(default)]
    pub send_proxy_protocol: Option<SendProxyProtocol>,
    /// Backends (API servers).
    pub backends: Vec<BackendConfig>,
    /// Active health check.
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
    /// `least_connections` (default) or `round_robin`.
    #[serde(default)]
    pub policy: Policy,
    /// Time a backend connect may take before the next backend is tried (default 2s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub connect_timeout: Option<Duration>,
    /// Close connections with no traffic either way for this long (default: never).
    #[serde(default, with = "apiway_core::duration::option")]
    pub idle_timeout: Option<Duration>,
    /// First ejection after a failed connect; doubles per failure (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub ejection_base: Option<Duration>,
    /// Longest ejection (default 30s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub ejection_max: Option<Duration>,
}

/// `routes[].backends[]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `host:port`; DNS names are re-resolved.
    pub address: String,
}

/// Reads a file's text into a typed spec (no validation across fields yet).
pub fn decode(text: &str) -> Result<GatewaySpec, String> {
    let file: ConfigFile = apiway_core::config_text::deserialize(text)?;
    file.into_spec()
}

impl ConfigFile {
    /// Parses every string of the file; the error names the field.
    pub fn into_spec(self) -> Result<GatewaySpec, String> {
        let mut listeners = Vec::with_capacity(self.listeners.len());
        for (i, l) in self.listeners.into_iter().enumerate() {
            let at = format!("listeners[{i}] ({})", l.name);
            let address = socket_addr(&format!("{at}.address"), &l.address)?;
            let trusted_sources = match l.trusted_sources {
                None => None,
                Some(list) => Some(
                    list.iter()
                        .enumerate()
                        .map(|(j, text)| {
                            Cidr::parse(text).map_err(|e| format!("{at}.trusted_sources[{j}]: {e}"))
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            listeners.push(ListenerDef {
                name: l.name,
                address,
                kind: l.kind,
                max_connections: l.max_connections,
                when_full: l.when_full,
                client_hello_timeout: l.client_hello_timeout,
                max_client_hello_bytes: l.max_client_hello_bytes,
                proxy_protocol: l.proxy_protocol,
                trusted_sources,
                proxy_header_timeout: l.proxy_header_timeout,
                request_timeout: l.request_timeout,
                max_request_bytes: l.max_request_bytes,
            });
        }
        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.into_iter().enumerate() {
            // Only an error needs the field's path.
            let at = || format!("routes[{i}] ({})", r.name);
            let hostnames = r
                .hostnames
                .into_iter()
                .enumerate()
                .map(|(j, h)| match HostPattern::parse(&h) {
                    Ok(p) => Ok(Written::new(p, h)),
                    Err(e) => Err(format!("{}.hostnames[{j}]: {e}", at())),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let destinations = r
                .destinations
                .iter()
                .enumerate()
                .map(|(j, d)| socket_addr(&format!("{}.destinations[{j}]", at()), d))
                .collect::<Result<Vec<_>, _>>()?;
            let connect_authorities = r
                .connect_authorities
                .iter()
                .enumerate()
                .map(|(j, a)| {
                    Authority::parse(a).map(|v| Written::new(v, a.as_str())).map_err(|_| {
                        format!("{}.connect_authorities[{j}]: `{a}` is not host:port (write api.a.example.com:443, 10.1.2.3:443 or [fd00::1]:443)", at())
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if r.backends.is_empty() {
                return Err(format!("{}.backends: at least one backend is needed", at()));
            }
            let backends = r
                .backends
                .iter()
                .enumerate()
                .map(|(j, b)| {
                    Address::parse(&b.address)
                        .map_err(|e| format!("{}.backends[{j}].address: {e}", at()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            routes.push(RouteDef {
                groups: vec![BackendGroupDef {
                    name: r.name.clone(),
                    weight: 1,
                    backends,
                }],
                name: r.name,
                hostnames,
                listeners: r.listeners,
                destinations,
                connect_authorities,
                send_proxy_protocol: r.send_proxy_protocol,
                health_check: r.health_check,
                policy: r.policy,
                connect_timeout: r.connect_timeout,
                idle_timeout: r.idle_timeout,
                ejection_base: r.ejection_base,
                ejection_max: r.ejection_max,
            });
        }
        Ok(GatewaySpec {
            admin: self.admin,
            listeners,
            routes,
            default_route: self.default_route,
            drain: self.drain,
            reload_interval: self.reload_interval,
            access_log: self.access_log,
            max_routes: self.max_routes,
            kubernetes: false,
        })
    }
}
