//! Validation of a typed [`GatewaySpec`] into a [`Snapshot`]: the same code
//! for every source.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use apiway_core::config::Common;
use apiway_core::endpoint::{Ejection, EndpointSetSpec};
use apiway_core::health::CheckDefaults;
use apiway_core::relay::{RelayConfig, RelayMode};
use apiway_wire::connect::Authority;

use super::spec::{GatewaySpec, ListenerDef};
use super::{
    destination_key, BackendGroupSpec, ListenerKind, ListenerSpec, ProxyProtocolMode, RouteSpec,
    Snapshot,
};
use crate::cidr::TrustedSources;
use crate::router::SniRouter;

/// Routes accepted at most unless `max_routes` says.
pub const DEFAULT_MAX_ROUTES: usize = 100_000;

/// Validates a spec: what needs the whole configuration (unique names, one
/// route per hostname, destination and authority, the rules of each
/// listener kind, limits) and the defaults.
pub fn validate(spec: GatewaySpec) -> Result<Snapshot, String> {
    // Before anything is built for them: a flood of routes (a runaway
    // generator, or TLSRoutes from many namespaces) is refused whole.
    let max_routes = spec.max_routes.unwrap_or(DEFAULT_MAX_ROUTES);
    if spec.routes.len() > max_routes {
        return Err(format!(
            "too many routes: {}, more than max_routes ({max_routes}); raise max_routes if they are meant to be",
            spec.routes.len()
        ));
    }
    let common = Common::validate(
        &spec.admin,
        "admin.address",
        &spec.drain,
        spec.reload_interval,
    )?;

    if spec.listeners.is_empty() && !spec.kubernetes {
        return Err("listeners: at least one listener is needed".into());
    }
    let mut listeners = Vec::with_capacity(spec.listeners.len());
    let mut names = HashSet::new();
    let mut addrs = HashMap::new();
    for (i, l) in spec.listeners.iter().enumerate() {
        let at = format!("listeners[{i}] ({})", l.name);
        if l.name.is_empty() {
            return Err(format!("listeners[{i}]: name must not be empty"));
        }
        if !names.insert(l.name.as_str()) {
            return Err(format!("{at}: the name is used by another listener"));
        }
        let address = l.address;
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
            when_full: l
                .when_full
                .unwrap_or(apiway_core::listener::WhenFull::Queue),
            client_hello_timeout: l.client_hello_timeout.unwrap_or(Duration::from_secs(10)),
            max_client_hello_bytes,
            proxy_protocol: kind_fields.proxy_protocol,
            trusted_sources: kind_fields.trusted_sources,
            proxy_header_timeout: kind_fields.proxy_header_timeout,
            request_timeout: kind_fields.request_timeout,
            max_request_bytes: kind_fields.max_request_bytes,
        });
    }

    let mut routes = Vec::with_capacity(spec.routes.len());
    let mut router = SniRouter::default();
    let mut listener_routers: HashMap<String, SniRouter> = HashMap::new();
    let mut destinations: HashMap<SocketAddr, usize> = HashMap::new();
    let mut authorities: HashMap<Authority, usize> = HashMap::new();
    let mut route_index = HashMap::with_capacity(spec.routes.len());
    for (i, r) in spec.routes.iter().enumerate() {
        // Only an error needs the field's path.
        let at = || format!("routes[{i}] ({})", r.name);
        if r.name.is_empty() {
            return Err(format!("routes[{i}]: name must not be empty"));
        }
        if r.name == "reject" {
            return Err(format!("{}: `reject` is reserved for default_route", at()));
        }
        if route_index.insert(r.name.as_str(), i).is_some() {
            return Err(format!("{}: the name is used by another route", at()));
        }
        for (j, name) in r.listeners.iter().enumerate() {
            match listeners.iter().find(|l| &l.name == name) {
                Some(l) if l.kind == ListenerKind::Tls => {}
                Some(_) => {
                    return Err(format!(
                        "{}.listeners[{j}]: listener {name} is not a tls listener (hostnames route tls listeners only)",
                        at()
                    ))
                }
                None => {
                    return Err(format!(
                        "{}.listeners[{j}]: no listener is named {name}",
                        at()
                    ))
                }
            }
        }
        for (j, h) in r.hostnames.iter().enumerate() {
            let insert = |router: &mut SniRouter| {
                router.insert(h.value.clone(), i).map_err(|other| {
                    format!(
                        "{}.hostnames[{j}]: `{h}` is already routed to {}",
                        at(),
                        spec.routes[other].name
                    )
                })
            };
            if r.listeners.is_empty() {
                insert(&mut router)?;
            }
            for name in &r.listeners {
                insert(listener_routers.entry(name.clone()).or_default())?;
            }
        }
        for (j, d) in r.destinations.iter().enumerate() {
            let destination = destination_key(*d);
            if let Some(other) = destinations.insert(destination, i) {
                return Err(format!(
                    "{}.destinations[{j}]: {d} is already routed to {} (a destination may belong to one route only)",
                    at(),
                    spec.routes[other].name
                ));
            }
        }
        for (j, a) in r.connect_authorities.iter().enumerate() {
            if let Some(other) = authorities.insert(a.value.clone(), i) {
                return Err(format!(
                    "{}.connect_authorities[{j}]: `{a}` is already routed to {} (an authority may belong to one route only)",
                    at(),
                    spec.routes[other].name
                ));
            }
        }
        let mut groups = Vec::with_capacity(r.groups.len());
        for g in &r.groups {
            let mut endpoints = Vec::with_capacity(g.backends.len());
            for (j, a) in g.backends.iter().enumerate() {
                if endpoints.contains(a) {
                    return Err(format!("{}.backends[{j}]: {a} is listed twice", at()));
                }
                endpoints.push(a.clone());
            }
            groups.push((g, endpoints));
        }
        let health_check = r
            .health_check
            .as_ref()
            .map(|h| {
                h.validate_with(&CheckDefaults::GATEWAY)
                    .map_err(|e| format!("{}.{e}", at()))
            })
            .transpose()?
            .flatten()
            .map(|mut h| {
                // Checks carry the header the route's connections carry
                // (HAProxy's `check-send-proxy`), unless they say otherwise.
                let sent = r.send_proxy_protocol.map(super::SendProxyProtocol::version);
                h.send_proxy = h.send_proxy.for_route(sent);
                h
            });
        let ejection = Ejection {
            base: r.ejection_base.unwrap_or(Ejection::default().base),
            max: r.ejection_max.unwrap_or(Ejection::default().max),
        };
        if ejection.base.is_zero() || ejection.max < ejection.base {
            return Err(format!(
                "{}: ejection_base must be > 0 and ejection_max >= ejection_base",
                at()
            ));
        }
        let connect_timeout = r.connect_timeout.unwrap_or(Duration::from_secs(2));
        if connect_timeout.is_zero() {
            return Err(format!("{}.connect_timeout must be more than 0", at()));
        }
        if r.idle_timeout.is_some_and(|t| t.is_zero()) {
            return Err(format!(
                "{}.idle_timeout must be more than 0 (leave it out for none)",
                at()
            ));
        }
        routes.push(RouteSpec {
            name: r.name.clone(),
            groups: groups
                .into_iter()
                .map(|(g, endpoints)| BackendGroupSpec {
                    name: g.name.clone(),
                    weight: g.weight,
                    endpoints: EndpointSetSpec {
                        endpoints,
                        policy: r.policy,
                        health_check: health_check.clone(),
                        ejection,
                    },
                })
                .collect(),
            connect_timeout,
            relay: RelayConfig {
                idle_timeout: r.idle_timeout,
                mode: RelayMode::Auto,
                ..RelayConfig::default()
            },
            send_proxy_protocol: r.send_proxy_protocol,
        });
    }

    let default_route = match spec.default_route.as_deref() {
        None | Some("reject") => None,
        Some(name) => Some(*route_index.get(name).ok_or_else(|| {
            format!("default_route: no route is named `{name}` (use `reject` or a route's name)")
        })?),
    };
    let access_log = spec.access_log.clone();
    if access_log
        .as_ref()
        .is_some_and(|a| a.path.as_os_str().is_empty())
    {
        return Err("access_log.path: a file, or - for standard output".into());
    }

    Ok(Snapshot {
        common,
        listeners,
        routes,
        router,
        listener_routers,
        destinations,
        authorities,
        default_route,
        access_log,
    })
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
fn kind_fields(l: &ListenerDef, at: &str) -> Result<KindFields, String> {
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
    let networks = l.trusted_sources.clone().unwrap_or_default();
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
