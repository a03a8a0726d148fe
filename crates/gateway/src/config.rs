//! The gateway's YAML configuration, and its validation into a [`Snapshot`].
//!
//! Parsing and validation happen before anything changes; a file that fails
//! here never replaces a running configuration.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use apiway_core::drain::DrainTiming;
use apiway_core::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
use apiway_core::health::HealthCheckConfig;
use apiway_core::relay::{RelayConfig, RelayMode};
use serde::Deserialize;

use apiway_wire::connect::Authority;

use crate::cidr::{Cidr, TrustedSources};
use crate::router::{HostPattern, SniRouter};

/// The configuration file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The admin endpoint.
    #[serde(default)]
    pub admin: Option<AdminConfig>,
    /// Listening sockets.
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
    pub drain: Option<DrainConfig>,
    /// How often the file is checked for changes (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub reload_interval: Option<Duration>,
}

/// `admin:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `ip:port` serving /healthz /livez /readyz /metrics.
    pub address: String,
}

/// `drain:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainConfig {
    /// Keep accepting this long after SIGTERM (default 5s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub delay: Option<Duration>,
    /// Then wait this long for connections to finish (default 30s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub grace_period: Option<Duration>,
}

/// What a listener does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerKind {
    /// TLS passthrough routed by SNI.
    Tls,
    /// A PROXY protocol header (v1 or v2) from a trusted sender, routed by
    /// the original destination it names.
    Proxy,
    /// HTTP/1.1 `CONNECT host:port`, routed by that authority.
    Connect,
}

/// Whether a `tls` listener reads a PROXY header before the ClientHello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocolMode {
    /// Never: the first byte belongs to the ClientHello.
    #[default]
    Off,
    /// A trusted source may send one; its first bytes tell.
    Optional,
    /// A trusted source must send one; others are closed unread.
    Required,
}

/// The PROXY header a route sends to its backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendProxyProtocol {
    /// The text line, `PROXY TCP4 ...`.
    V1,
    /// The binary header.
    V2,
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
    /// Open connections allowed; more are closed at once (default 10000).
    #[serde(default)]
    pub max_connections: Option<usize>,
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

/// A validated listener.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerSpec {
    /// Name.
    pub name: String,
    /// Address.
    pub address: SocketAddr,
    /// Kind.
    pub kind: ListenerKind,
    /// Connection limit.
    pub max_connections: usize,
    /// ClientHello timeout.
    pub client_hello_timeout: Duration,
    /// ClientHello size limit.
    pub max_client_hello_bytes: usize,
    /// Whether a PROXY header comes first (`Required` for `proxy` listeners).
    pub proxy_protocol: ProxyProtocolMode,
    /// Senders whose PROXY headers are believed.
    pub trusted_sources: TrustedSources,
    /// PROXY header timeout.
    pub proxy_header_timeout: Duration,
    /// CONNECT request head timeout.
    pub request_timeout: Duration,
    /// CONNECT request head size limit.
    pub max_request_bytes: usize,
}

/// A validated route.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSpec {
    /// Name.
    pub name: String,
    /// Backends and their health.
    pub endpoints: EndpointSetSpec,
    /// Per-backend connect timeout.
    pub connect_timeout: Duration,
    /// Relay settings.
    pub relay: RelayConfig,
    /// PROXY header sent to backends.
    pub send_proxy_protocol: Option<SendProxyProtocol>,
}

/// A validated configuration, ready to apply.
#[derive(Debug)]
pub struct Snapshot {
    /// Admin address.
    pub admin: Option<SocketAddr>,
    /// Listeners.
    pub listeners: Vec<ListenerSpec>,
    /// Routes, indexed by the router.
    pub routes: Vec<RouteSpec>,
    /// SNI to route index.
    pub router: SniRouter,
    /// Original destination to route index (`proxy` listeners).
    pub destinations: HashMap<SocketAddr, usize>,
    /// CONNECT authority to route index (`connect` listeners).
    pub authorities: HashMap<Authority, usize>,
    /// Route index for no SNI / no match; `None` rejects.
    pub default_route: Option<usize>,
    /// Shutdown timing.
    pub drain: DrainTiming,
    /// Reload poll interval.
    pub reload_interval: Duration,
}

/// Parses and validates a configuration file's text. The error is one line
/// naming the problem and where it is.
pub fn parse(text: &str) -> Result<Snapshot, String> {
    let file: ConfigFile = apiway_core::config_text::deserialize(text)?;
    validate(file)
}

/// How destinations are compared: an IPv4-mapped IPv6 address (what a
/// dual-stack sender may put in a `TCP6` header) is its IPv4 address, and
/// IPv6 flow info and scope are not part of it.
pub fn destination_key(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => SocketAddr::from((*v6.ip(), v6.port())),
        },
        v4 => v4,
    }
}

/// The validated fields that depend on a listener's kind.
struct KindFields {
    proxy_protocol: ProxyProtocolMode,
    trusted_sources: TrustedSources,
    proxy_header_timeout: Duration,
    request_timeout: Duration,
    max_request_bytes: usize,
}

/// Checks that a listener sets only the fields its kind reads (a field
/// that would be ignored is more likely a mistake than a wish).
fn kind_fields(l: &ListenerConfig, at: &str) -> Result<KindFields, String> {
    let only = |set: bool, field: &str, kinds: &str| {
        if set {
            Err(format!(
                "{at}.{field} applies to kind: {kinds} only; remove it or change the kind"
            ))
        } else {
            Ok(())
        }
    };
    let is = |k: ListenerKind| l.kind == k;
    only(
        !is(ListenerKind::Tls) && l.client_hello_timeout.is_some(),
        "client_hello_timeout",
        "tls",
    )?;
    only(
        !is(ListenerKind::Tls) && l.max_client_hello_bytes.is_some(),
        "max_client_hello_bytes",
        "tls",
    )?;
    only(
        !is(ListenerKind::Connect) && l.request_timeout.is_some(),
        "request_timeout",
        "connect",
    )?;
    only(
        !is(ListenerKind::Connect) && l.max_request_bytes.is_some(),
        "max_request_bytes",
        "connect",
    )?;
    let proxy_protocol = match (l.kind, l.proxy_protocol) {
        (ListenerKind::Tls, mode) => mode.unwrap_or_default(),
        (ListenerKind::Proxy, None) => ProxyProtocolMode::Required,
        (ListenerKind::Proxy, Some(_)) => {
            return Err(format!(
                "{at}.proxy_protocol: a proxy listener always requires the header; remove the field"
            ))
        }
        (ListenerKind::Connect, mode) => {
            only(mode.is_some(), "proxy_protocol", "tls")?;
            ProxyProtocolMode::Off
        }
    };
    let reads_headers = proxy_protocol != ProxyProtocolMode::Off;
    if !reads_headers {
        let hint = if is(ListenerKind::Tls) {
            " (set proxy_protocol: optional or required to use it)"
        } else {
            ""
        };
        if l.trusted_sources.is_some() {
            return Err(format!(
                "{at}.trusted_sources: this listener reads no PROXY header{hint}"
            ));
        }
        if l.proxy_header_timeout.is_some() {
            return Err(format!(
                "{at}.proxy_header_timeout: this listener reads no PROXY header{hint}"
            ));
        }
    }
    let mut networks = Vec::new();
    for (j, text) in l.trusted_sources.iter().flatten().enumerate() {
        networks.push(Cidr::parse(text).map_err(|e| format!("{at}.trusted_sources[{j}]: {e}"))?);
    }
    if reads_headers && networks.is_empty() {
        return Err(format!(
            "{at}.trusted_sources: list the networks of the load balancers or agents that send PROXY headers, like [\"10.0.0.0/8\"]"
        ));
    }
    let proxy_header_timeout = l.proxy_header_timeout.unwrap_or(Duration::from_secs(3));
    if proxy_header_timeout.is_zero() {
        return Err(format!("{at}.proxy_header_timeout must be more than 0"));
    }
    let request_timeout = l.request_timeout.unwrap_or(Duration::from_secs(10));
    if request_timeout.is_zero() {
        return Err(format!("{at}.request_timeout must be more than 0"));
    }
    let max_request_bytes = l
        .max_request_bytes
        .unwrap_or(apiway_wire::connect::DEFAULT_MAX_HEAD_LEN);
    if !(256..=65536).contains(&max_request_bytes) {
        return Err(format!(
            "{at}.max_request_bytes must be between 256 and 65536"
        ));
    }
    Ok(KindFields {
        proxy_protocol,
        trusted_sources: TrustedSources::new(networks),
        proxy_header_timeout,
        request_timeout,
        max_request_bytes,
    })
}

fn socket_addr(field: &str, text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("{field}: `{text}` is not an ip:port address (write 127.0.0.1:8443 or [::1]:8443)")
    })
}

/// Validates a parsed file.
pub fn validate(file: ConfigFile) -> Result<Snapshot, String> {
    let admin = file
        .admin
        .as_ref()
        .map(|a| socket_addr("admin.address", &a.address))
        .transpose()?;

    if file.listeners.is_empty() {
        return Err("listeners: at least one listener is needed".into());
    }
    let mut listeners = Vec::with_capacity(file.listeners.len());
    let mut names = HashSet::new();
    let mut addrs = HashMap::new();
    for (i, l) in file.listeners.iter().enumerate() {
        let at = format!("listeners[{i}] ({})", l.name);
        if l.name.is_empty() {
            return Err(format!("listeners[{i}]: name must not be empty"));
        }
        if !names.insert(l.name.as_str()) {
            return Err(format!("{at}: the name is used by another listener"));
        }
        let address = socket_addr(&format!("{at}.address"), &l.address)?;
        if let Some(other) = addrs.insert(address, l.name.as_str()) {
            return Err(format!(
                "{at}.address: {address} is also used by listener {other}"
            ));
        }
        let max_connections = l.max_connections.unwrap_or(10_000);
        if max_connections == 0 {
            return Err(format!("{at}.max_connections must be at least 1"));
        }
        let max_client_hello_bytes = l
            .max_client_hello_bytes
            .unwrap_or(apiway_wire::sni::DEFAULT_MAX_HELLO_LEN);
        if !(512..=1 << 20).contains(&max_client_hello_bytes) {
            return Err(format!(
                "{at}.max_client_hello_bytes must be between 512 and 1048576"
            ));
        }
        let kind_fields = kind_fields(l, &at)?;
        listeners.push(ListenerSpec {
            name: l.name.clone(),
            address,
            kind: l.kind,
            max_connections,
            client_hello_timeout: l.client_hello_timeout.unwrap_or(Duration::from_secs(10)),
            max_client_hello_bytes,
            proxy_protocol: kind_fields.proxy_protocol,
            trusted_sources: kind_fields.trusted_sources,
            proxy_header_timeout: kind_fields.proxy_header_timeout,
            request_timeout: kind_fields.request_timeout,
            max_request_bytes: kind_fields.max_request_bytes,
        });
    }

    let mut routes = Vec::with_capacity(file.routes.len());
    let mut router = SniRouter::default();
    let mut destinations: HashMap<SocketAddr, usize> = HashMap::new();
    let mut authorities: HashMap<Authority, usize> = HashMap::new();
    let mut route_index = HashMap::with_capacity(file.routes.len());
    for (i, r) in file.routes.iter().enumerate() {
        let at = format!("routes[{i}] ({})", r.name);
        if r.name.is_empty() {
            return Err(format!("routes[{i}]: name must not be empty"));
        }
        if r.name == "reject" {
            return Err(format!("{at}: `reject` is reserved for default_route"));
        }
        if route_index.insert(r.name.as_str(), i).is_some() {
            return Err(format!("{at}: the name is used by another route"));
        }
        for (j, h) in r.hostnames.iter().enumerate() {
            let pattern = HostPattern::parse(h).map_err(|e| format!("{at}.hostnames[{j}]: {e}"))?;
            if let Err(other) = router.insert(pattern, i) {
                return Err(format!(
                    "{at}.hostnames[{j}]: `{h}` is already routed to {}",
                    file.routes[other].name
                ));
            }
        }
        for (j, d) in r.destinations.iter().enumerate() {
            let field = format!("{at}.destinations[{j}]");
            let destination = destination_key(socket_addr(&field, d)?);
            if let Some(other) = destinations.insert(destination, i) {
                return Err(format!(
                    "{field}: {d} is already routed to {} (a destination may belong to one route only)",
                    file.routes[other].name
                ));
            }
        }
        for (j, a) in r.connect_authorities.iter().enumerate() {
            let field = format!("{at}.connect_authorities[{j}]");
            let authority = Authority::parse(a).map_err(|_| {
                format!("{field}: `{a}` is not host:port (write api.a.example.com:443, 10.1.2.3:443 or [fd00::1]:443)")
            })?;
            if let Some(other) = authorities.insert(authority, i) {
                return Err(format!(
                    "{field}: `{a}` is already routed to {} (an authority may belong to one route only)",
                    file.routes[other].name
                ));
            }
        }
        if r.backends.is_empty() {
            return Err(format!("{at}.backends: at least one backend is needed"));
        }
        let mut endpoints = Vec::with_capacity(r.backends.len());
        for (j, b) in r.backends.iter().enumerate() {
            let a = Address::parse(&b.address)
                .map_err(|e| format!("{at}.backends[{j}].address: {e}"))?;
            if endpoints.contains(&a) {
                return Err(format!("{at}.backends[{j}]: {} is listed twice", b.address));
            }
            endpoints.push(a);
        }
        let health_check = r
            .health_check
            .as_ref()
            .map(|h| h.validate().map_err(|e| format!("{at}.{e}")))
            .transpose()?;
        if let Some(ca) = health_check.as_ref().and_then(|h| match &h.probe {
            apiway_core::health::Probe::Https { tls, .. } => tls.ca_file.clone(),
            apiway_core::health::Probe::Tcp => None,
        }) {
            apiway_core::tls::load_certs(&ca)
                .map_err(|e| format!("{at}.health_check.ca_file: {e}"))?;
        }
        let ejection = Ejection {
            base: r.ejection_base.unwrap_or(Ejection::default().base),
            max: r.ejection_max.unwrap_or(Ejection::default().max),
        };
        if ejection.base.is_zero() || ejection.max < ejection.base {
            return Err(format!(
                "{at}: ejection_base must be > 0 and ejection_max >= ejection_base"
            ));
        }
        let connect_timeout = r.connect_timeout.unwrap_or(Duration::from_secs(2));
        if connect_timeout.is_zero() {
            return Err(format!("{at}.connect_timeout must be more than 0"));
        }
        if r.idle_timeout.is_some_and(|t| t.is_zero()) {
            return Err(format!(
                "{at}.idle_timeout must be more than 0 (leave it out for none)"
            ));
        }
        routes.push(RouteSpec {
            name: r.name.clone(),
            endpoints: EndpointSetSpec {
                endpoints,
                policy: r.policy,
                health_check,
                ejection,
            },
            connect_timeout,
            relay: RelayConfig {
                idle_timeout: r.idle_timeout,
                mode: RelayMode::Auto,
                ..RelayConfig::default()
            },
            send_proxy_protocol: r.send_proxy_protocol,
        });
    }

    let default_route = match file.default_route.as_deref() {
        None | Some("reject") => None,
        Some(name) => Some(*route_index.get(name).ok_or_else(|| {
            format!("default_route: no route is named `{name}` (use `reject` or a route's name)")
        })?),
    };

    let drain = DrainTiming {
        drain_delay: file
            .drain
            .as_ref()
            .and_then(|d| d.delay)
            .unwrap_or(DrainTiming::default().drain_delay),
        grace_period: file
            .drain
            .as_ref()
            .and_then(|d| d.grace_period)
            .unwrap_or(DrainTiming::default().grace_period),
    };
    let reload_interval = file.reload_interval.unwrap_or(Duration::from_secs(1));
    if reload_interval < Duration::from_millis(100) {
        return Err("reload_interval must be at least 100ms".into());
    }

    Ok(Snapshot {
        admin,
        listeners,
        routes,
        router,
        destinations,
        authorities,
        default_route,
        drain,
        reload_interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The YAML block of the README's gateway "Configuration" section, so
    /// the documented example is the tested one.
    fn readme_example() -> String {
        // Read at run time: the README lies outside the crate.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).expect("the workspace README");
        let section = readme
            .split_once("### Configuration")
            .expect("the README has a Configuration section")
            .1;
        let block = section
            .split_once("```yaml\n")
            .expect("with a YAML block")
            .1;
        block.split_once("```").expect("that ends").0.to_owned()
    }

    #[test]
    fn the_documented_example_parses() {
        let s = parse(&readme_example()).unwrap();
        assert_eq!(s.admin, Some("127.0.0.1:9901".parse().unwrap()));
        assert_eq!(s.listeners[0].address, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(s.listeners[0].client_hello_timeout, Duration::from_secs(10));
        assert_eq!(s.routes[0].endpoints.endpoints.len(), 2);
        let hc = s.routes[0].endpoints.health_check.as_ref().unwrap();
        assert_eq!(hc.interval, Duration::from_secs(1));
        assert_eq!(s.router.lookup("API.A.example.com."), Some(0));
        assert_eq!(s.router.lookup("x.a.internal.example.com"), Some(0));
        assert_eq!(s.default_route, None);
        assert_eq!(s.listeners[1].kind, ListenerKind::Proxy);
        assert_eq!(s.listeners[2].kind, ListenerKind::Connect);
        assert_eq!(s.destinations.len(), 1);
        assert_eq!(s.authorities.len(), 1);
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_problem() {
        let base = "listeners: [{name: l, address: 127.0.0.1:1, kind: tls}]\n";
        assert!(err("listeners: [").starts_with("invalid YAML"));
        assert!(err("listeners: []").contains("at least one listener"));
        assert!(err("listeners: [{name: l, address: nowhere, kind: tls}]")
            .contains("listeners[0] (l).address: `nowhere` is not an ip:port"));
        assert!(
            err("listeners: [{name: l, address: 127.0.0.1:1, kind: udp}]")
                .starts_with("invalid YAML")
        );
        assert!(err(&format!("{base}bogus: 1")).starts_with("invalid YAML"));
        assert!(err(&format!("{base}default_route: nope"))
            .contains("default_route: no route is named `nope`"));
        let r = |extra: &str| {
            format!("{base}routes:\n  - name: a\n    hostnames: [a.example.com]\n    backends: [{{address: 127.0.0.1:7}}]\n{extra}")
        };
        assert!(parse(&r("")).is_ok());
        assert!(err(&r(
            "  - name: b\n    hostnames: [A.example.com]\n    backends: [{address: 127.0.0.1:8}]\n"
        ))
        .contains("routes[1] (b).hostnames[0]: `A.example.com` is already routed to a"));
        assert!(
            err(&r("  - name: a\n    backends: [{address: 127.0.0.1:8}]\n"))
                .contains("routes[1] (a): the name is used by another route")
        );
        assert!(err(&r(
            "  - name: c\n    hostnames: ['a*.x']\n    backends: [{address: 127.0.0.1:8}]\n"
        ))
        .contains("routes[1] (c).hostnames[0]"));
        assert!(
            err(&r("  - name: c\n    backends: [{address: 'nohost'}]\n"))
                .contains("routes[1] (c).backends[0].address: `nohost` has no port")
        );
        assert!(err(&r("  - name: c\n    backends: []\n")).contains("at least one backend"));
        assert!(err(&r("  - name: c\n    backends: [{address: 127.0.0.1:8}]\n    health_check: {kind: https, ca_file: /nonexistent/ca.pem}\n"))
            .contains("routes[1] (c).health_check.ca_file: /nonexistent/ca.pem"));
        assert!(err(&r("  - name: c\n    backends: [{address: 127.0.0.1:8}]\n    health_check: {kind: tcp, interval: 1x}\n"))
            .contains("1x"));
    }

    const IN_CLUSTER: &str = r#"
listeners:
  - name: in-cluster
    address: 127.0.0.1:8444
    kind: proxy
    trusted_sources: ["127.0.0.0/8", "10.0.0.0/8"]
routes:
  - name: cluster-a
    hostnames: ["api.a.example.com"]
    destinations: ["10.1.2.3:443"]
    backends: [{ address: 127.0.0.1:7001 }]
"#;

    #[test]
    fn the_in_cluster_example_parses() {
        let s = parse(IN_CLUSTER).unwrap();
        let l = &s.listeners[0];
        assert_eq!(l.kind, ListenerKind::Proxy);
        assert_eq!(l.proxy_protocol, ProxyProtocolMode::Required);
        assert_eq!(l.proxy_header_timeout, Duration::from_secs(3));
        assert!(l.trusted_sources.contains("10.9.8.7".parse().unwrap()));
        assert!(!l.trusted_sources.contains("192.168.0.1".parse().unwrap()));
        assert_eq!(
            s.destinations.get(&"10.1.2.3:443".parse().unwrap()),
            Some(&0)
        );
        assert_eq!(
            s.destinations
                .get(&destination_key("[::ffff:10.1.2.3]:443".parse().unwrap())),
            Some(&0)
        );
    }

    #[test]
    fn new_kinds_check_their_fields() {
        let one = |listener: &str, route: &str| {
            parse(&format!(
                "listeners: [{listener}]\nroutes:\n  - name: a\n    backends: [{{address: 127.0.0.1:7}}]\n{route}"
            ))
        };
        let proxy = "{name: p, address: 127.0.0.1:1, kind: proxy, trusted_sources: [10.0.0.0/8]}";
        assert!(one(proxy, "").is_ok());
        assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy}", "")
            .unwrap_err()
            .contains("listeners[0] (p).trusted_sources: list the networks"));
        assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy, trusted_sources: [10.0.0.1/8]}", "")
            .unwrap_err()
            .contains("listeners[0] (p).trusted_sources[0]: `10.0.0.1/8` has host bits set (write 10.0.0.0/8)"));
        assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy, proxy_protocol: required, trusted_sources: [10.0.0.0/8]}", "")
            .unwrap_err()
            .contains("always requires the header"));
        assert!(one("{name: p, address: 127.0.0.1:1, kind: proxy, client_hello_timeout: 1s, trusted_sources: [10.0.0.0/8]}", "")
            .unwrap_err()
            .contains("client_hello_timeout applies to kind: tls only"));
        assert!(one(
            "{name: t, address: 127.0.0.1:1, kind: tls, trusted_sources: [10.0.0.0/8]}",
            ""
        )
        .unwrap_err()
        .contains("set proxy_protocol: optional or required"));
        let s = one("{name: t, address: 127.0.0.1:1, kind: tls, proxy_protocol: optional, trusted_sources: [10.0.0.0/8], proxy_header_timeout: 500ms}", "").unwrap();
        assert_eq!(s.listeners[0].proxy_protocol, ProxyProtocolMode::Optional);
        assert_eq!(
            s.listeners[0].proxy_header_timeout,
            Duration::from_millis(500)
        );
        let s = one(
            "{name: c, address: 127.0.0.1:1, kind: connect, request_timeout: 2s}",
            "    connect_authorities: [API.A.example.com:443]\n    send_proxy_protocol: v2\n",
        )
        .unwrap();
        assert_eq!(s.listeners[0].max_request_bytes, 8192);
        assert_eq!(s.routes[0].send_proxy_protocol, Some(SendProxyProtocol::V2));
        assert_eq!(
            s.authorities
                .get(&Authority::parse("api.a.example.com:443").unwrap()),
            Some(&0)
        );
        assert!(one(
            "{name: c, address: 127.0.0.1:1, kind: connect, trusted_sources: [10.0.0.0/8]}",
            ""
        )
        .unwrap_err()
        .contains("reads no PROXY header"));
        assert!(one(
            "{name: c, address: 127.0.0.1:1, kind: connect, max_request_bytes: 10}",
            ""
        )
        .unwrap_err()
        .contains("max_request_bytes must be between 256 and 65536"));
        assert!(one(proxy, "    connect_authorities: [api.a.example.com]\n")
            .unwrap_err()
            .contains(
                "routes[0] (a).connect_authorities[0]: `api.a.example.com` is not host:port"
            ));
        assert!(one(proxy, "    destinations: [10.1.2.3]\n")
            .unwrap_err()
            .contains("routes[0] (a).destinations[0]: `10.1.2.3` is not an ip:port"));
        assert!(one(proxy, "    send_proxy_protocol: v3\n")
            .unwrap_err()
            .starts_with("invalid YAML"));
        let two = |field: &str, a: &str, b: &str| {
            parse(&format!(
                "listeners: [{proxy}]\nroutes:\n  - name: a\n    {field}: [{a}]\n    backends: [{{address: 127.0.0.1:7}}]\n  - name: b\n    {field}: [{b}]\n    backends: [{{address: 127.0.0.1:8}}]\n"
            ))
        };
        assert!(two("destinations", "10.1.2.3:443", "10.1.2.3:443")
            .unwrap_err()
            .contains("routes[1] (b).destinations[0]: 10.1.2.3:443 is already routed to a"));
        assert!(
            two("connect_authorities", "x.example:443", "X.Example.:443")
                .unwrap_err()
                .contains(
                    "routes[1] (b).connect_authorities[0]: `X.Example.:443` is already routed to a"
                )
        );
        assert!(two("destinations", "10.1.2.3:443", "10.1.2.3:6443").is_ok());
    }
}
