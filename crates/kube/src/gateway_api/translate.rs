//! From the Gateway API objects of a cluster to the gateway's typed spec
//! and the status every object should show. Pure: no I/O, no clock (the
//! caller passes the time conditions carry), so every rule is unit-tested.
//!
//! Rules, after the Gateway API specification:
//! - A Gateway is served when its GatewayClass names [`Settings::controller`].
//! - A listener is served when its protocol is `TLS` with `tls.mode:
//!   Passthrough`. Listeners on one port share one socket; two of them with
//!   the same hostname conflict and neither is served.
//! - A TLSRoute attaches through a `parentRef` naming the Gateway (and the
//!   listener by `sectionName` or `port` if given), when the listener's
//!   `allowedRoutes` admit its namespace and kind, and the route's hostnames
//!   intersect the listener's. Between two routes that claim the same
//!   hostname on a port, the older one (creation time, then
//!   `namespace/name`) keeps it.
//! - Each `backendRef` is a share of the route's connections, by `weight`
//!   (default 1, 0 takes none): the ready endpoints of the Service's
//!   EndpointSlices (serving and terminating ones only when none is ready),
//!   at the endpoint port the Service port maps to. A share that cannot be
//!   resolved (not a Service, another namespace without a ReferenceGrant, a
//!   missing Service or port) has no backends: its connections are refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use apiway_core::config::Written;
use apiway_core::endpoint::Address;
use apiway_gateway::config::{
    BackendGroupDef, GatewaySpec as Spec, ListenerDef, ListenerKind, RouteDef,
};
use apiway_gateway::router::HostPattern;
use apiway_wire::connect::Authority;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::ResourceExt;

use super::types::*;

/// Annotation on a TLSRoute: original destinations (`ip:port`, comma
/// separated) its `proxy` listeners route to it, e.g. the cluster's
/// `kubernetes` Service ClusterIP.
pub const DESTINATIONS_ANNOTATION: &str = "apiway.dev/destinations";
/// Annotation on a TLSRoute: `host:port` authorities its `connect`
/// listeners route to it.
pub const CONNECT_AUTHORITIES_ANNOTATION: &str = "apiway.dev/connect-authorities";
/// Annotation on a TLSRoute: the active health check of its backends, as
/// the JSON of a file route's `health_check`.
pub const HEALTH_CHECK_ANNOTATION: &str = "apiway.dev/health-check";

/// What the gateway serves.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The GatewayClass `controllerName` apiway answers to.
    pub controller: String,
    /// The Gateway's namespace.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
    /// The address listeners bind.
    pub listen_address: IpAddr,
}

/// The default `controllerName`.
pub const CONTROLLER: &str = "apiway.dev/gateway";

/// The objects a translation reads (what the watches hold).
#[derive(Clone, Debug, Default)]
pub struct World {
    /// GatewayClasses.
    pub classes: Vec<Arc<GatewayClass>>,
    /// Gateways.
    pub gateways: Vec<Arc<Gateway>>,
    /// TLSRoutes.
    pub routes: Vec<Arc<TlsRoute>>,
    /// Services.
    pub services: Vec<Arc<Service>>,
    /// EndpointSlices.
    pub slices: Vec<Arc<EndpointSlice>>,
    /// ReferenceGrants.
    pub grants: Vec<Arc<ReferenceGrant>>,
    /// Namespaces (for `allowedRoutes` selectors).
    pub namespaces: Vec<Arc<Namespace>>,
}

/// The status one object should show.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusOf<S> {
    /// Namespace (empty for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The status.
    pub status: S,
}

/// A translation: the spec fragment and the statuses.
#[derive(Clone, Debug, Default)]
pub struct Translation {
    /// Listeners and routes for the gateway.
    pub spec: Spec,
    /// The GatewayClass's status, when the Gateway's class is ours.
    pub class: Option<StatusOf<ConditionsStatus>>,
    /// The Gateway's status, when it is ours.
    pub gateway: Option<StatusOf<GatewayStatus>>,
    /// For each TLSRoute with a parentRef to the Gateway: the parent
    /// entries this controller owns.
    pub routes: Vec<StatusOf<Vec<RouteParentStatus>>>,
    /// Why nothing is served, when nothing is.
    pub idle_reason: Option<String>,
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// A Gateway listener after its own checks.
struct ListenerView<'a> {
    def: &'a Listener,
    /// `None` when served; else the Accepted=False reason and message.
    refused: Option<(&'static str, String)>,
    /// Whether TLSRoute may attach (`allowedRoutes.kinds`).
    kinds_ok: bool,
    conflicted: bool,
    hostname: Option<HostPattern>,
    attached: i32,
}

impl ListenerView<'_> {
    fn serves(&self) -> bool {
        self.refused.is_none() && !self.conflicted && self.kinds_ok
    }
}

fn tls_route_kind() -> RouteGroupKind {
    RouteGroupKind {
        group: Some(GROUP.to_owned()),
        kind: "TLSRoute".to_owned(),
    }
}

fn is_tls_route_kind(k: &RouteGroupKind) -> bool {
    k.kind == "TLSRoute" && k.group.as_deref().is_none_or(|g| g == GROUP)
}

/// Whether `pattern` (a listener hostname) matches `name`.
fn pattern_matches(pattern: &HostPattern, name: &str) -> bool {
    match pattern {
        HostPattern::Exact(e) => e == name,
        HostPattern::Wildcard(suffix) => name
            .strip_suffix(suffix.as_str())
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        HostPattern::Any => true,
    }
}

fn render(pattern: &HostPattern) -> String {
    match pattern {
        HostPattern::Exact(e) => e.clone(),
        HostPattern::Wildcard(s) => format!("*.{s}"),
        HostPattern::Any => "*".to_owned(),
    }
}

/// The hostnames a route serves on a listener: the intersection of the
/// two, each the more specific of a matching pair; `*` when neither names
/// any.
pub fn intersect(listener: Option<&HostPattern>, route: &[HostPattern]) -> Vec<HostPattern> {
    let mut out: Vec<HostPattern> = Vec::new();
    let mut push = |p: HostPattern| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    match listener {
        None | Some(HostPattern::Any) => {
            if route.is_empty() {
                push(HostPattern::Any);
            }
            for r in route {
                push(r.clone());
            }
        }
        Some(l) if route.is_empty() => push(l.clone()),
        Some(l) => {
            for r in route {
                match (l, r) {
                    (_, HostPattern::Any) => push(l.clone()),
                    (_, HostPattern::Exact(name)) => {
                        if pattern_matches(l, name) {
                            push(r.clone());
                        }
                    }
                    (HostPattern::Exact(name), HostPattern::Wildcard(_)) => {
                        if pattern_matches(r, name) {
                            push(l.clone());
                        }
                    }
                    (HostPattern::Wildcard(ls), HostPattern::Wildcard(rs)) => {
                        if rs == ls || pattern_matches(l, rs) {
                            push(r.clone());
                        } else if pattern_matches(r, ls) {
                            push(l.clone());
                        }
                    }
                    (HostPattern::Any, _) => unreachable!("handled above"),
                }
            }
        }
    }
    out
}

/// Whether `labels` satisfy `selector` (matchLabels and matchExpressions).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(want) = &selector.match_labels {
        if want.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let has = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

struct Indexes<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    grants: HashMap<&'a str, Vec<&'a ReferenceGrant>>,
    namespaces: HashMap<&'a str, &'a Namespace>,
}

impl<'a> Indexes<'a> {
    fn new(world: &'a World) -> Indexes<'a> {
        let ns = |m: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.namespace.as_deref().unwrap_or("default")
        };
        let name = |m: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.name.as_deref().unwrap_or("")
        };
        let mut slices: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for s in &world.slices {
            if let Some(svc) = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
            {
                slices
                    .entry((ns(&s.metadata), svc.as_str()))
                    .or_default()
                    .push(s);
            }
        }
        let mut grants: HashMap<&str, Vec<&ReferenceGrant>> = HashMap::new();
        for g in &world.grants {
            grants.entry(ns(&g.metadata)).or_default().push(g);
        }
        Indexes {
            services: world
                .services
                .iter()
                .map(|s| ((ns(&s.metadata), name(&s.metadata)), s.as_ref()))
                .collect(),
            slices,
            grants,
            namespaces: world
                .namespaces
                .iter()
                .map(|n| (name(&n.metadata), n.as_ref()))
                .collect(),
        }
    }

    fn granted(&self, route_ns: &str, to_ns: &str, service: &str) -> bool {
        self.grants.get(to_ns).is_some_and(|grants| {
            grants.iter().any(|g| {
                g.spec
                    .from
                    .iter()
                    .any(|f| f.group == GROUP && f.kind == "TLSRoute" && f.namespace == route_ns)
                    && g.spec.to.iter().any(|t| {
                        t.group.is_empty()
                            && t.kind == "Service"
                            && t.name.as_deref().is_none_or(|n| n == service)
                    })
            })
        })
    }
}

/// Why a backendRef gives no backends (ResolvedRefs=False reasons).
#[derive(Clone, Debug, PartialEq)]
enum Unresolved {
    InvalidKind(String),
    RefNotPermitted(String),
    BackendNotFound(String),
}

impl Unresolved {
    fn reason(&self) -> &'static str {
        match self {
            Unresolved::InvalidKind(_) => "InvalidKind",
            Unresolved::RefNotPermitted(_) => "RefNotPermitted",
            Unresolved::BackendNotFound(_) => "BackendNotFound",
        }
    }

    fn message(&self) -> &str {
        match self {
            Unresolved::InvalidKind(m)
            | Unresolved::RefNotPermitted(m)
            | Unresolved::BackendNotFound(m) => m,
        }
    }
}

/// The endpoints of `namespace/service` at Service port `port`: ready ones,
/// or serving and terminating ones when none is ready.
fn backends(
    ix: &Indexes<'_>,
    namespace: &str,
    service: &str,
    port: i32,
) -> Result<Vec<Address>, Unresolved> {
    let Some(svc) = ix.services.get(&(namespace, service)) else {
        return Err(Unresolved::BackendNotFound(format!(
            "Service {namespace}/{service} not found"
        )));
    };
    let Some(svc_port) = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == port))
    else {
        return Err(Unresolved::BackendNotFound(format!(
            "Service {namespace}/{service} has no port {port}"
        )));
    };
    let port_name = svc_port.name.as_deref().unwrap_or("");
    let mut ready = Vec::new();
    let mut terminating = Vec::new();
    for slice in ix.slices.get(&(namespace, service)).into_iter().flatten() {
        if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
            continue;
        }
        let Some(number) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
        else {
            continue;
        };
        let Ok(number) = u16::try_from(number) else {
            continue;
        };
        for e in &slice.endpoints {
            let c = e.conditions.clone().unwrap_or_default();
            // Unset conditions count as true (the API's advice), except
            // terminating.
            let is_ready = c.ready.unwrap_or(true);
            let serving = c.serving.unwrap_or(is_ready);
            let is_terminating = c.terminating.unwrap_or(false);
            for a in &e.addresses {
                let Ok(ip) = a.parse::<IpAddr>() else {
                    continue;
                };
                let addr = Address::from(SocketAddr::new(ip, number));
                if is_ready && !is_terminating {
                    ready.push(addr);
                } else if serving && is_terminating {
                    terminating.push(addr);
                }
            }
        }
    }
    let mut chosen = if ready.is_empty() { terminating } else { ready };
    chosen.sort_by_key(|a| a.to_string());
    chosen.dedup();
    Ok(chosen)
}

fn list_annotation<T>(
    route: &TlsRoute,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
    example: &str,
) -> Result<Vec<T>, String> {
    let Some(text) = route.annotations().get(key) else {
        return Ok(Vec::new());
    };
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            parse(item)
                .ok_or_else(|| format!("annotation {key}: `{item}` is not valid (write {example})"))
        })
        .collect()
}

/// What one route adds, decided before its parents are walked.
struct RouteExtras {
    destinations: Vec<SocketAddr>,
    authorities: Vec<Written<Authority>>,
    health_check: Option<apiway_core::health::HealthCheckConfig>,
}

fn route_extras(route: &TlsRoute) -> Result<RouteExtras, String> {
    let destinations = list_annotation(
        route,
        DESTINATIONS_ANNOTATION,
        |s| s.parse::<SocketAddr>().ok(),
        "10.96.0.1:443 or [fd00::1]:443",
    )?;
    let authorities = list_annotation(
        route,
        CONNECT_AUTHORITIES_ANNOTATION,
        |s| Authority::parse(s).ok().map(|a| Written::new(a, s)),
        "kubernetes.default.svc:443",
    )?;
    let health_check = match route.annotations().get(HEALTH_CHECK_ANNOTATION) {
        None => None,
        Some(text) => {
            let at = |e: String| format!("annotation {HEALTH_CHECK_ANNOTATION}: {e}");
            let check: apiway_core::health::HealthCheckConfig =
                serde_json::from_str(text).map_err(|e| at(e.to_string()))?;
            // A file on the gateway's disk is not the route author's to name
            // (and a client key or token there is the gateway's secret).
            for (field, set) in [
                ("ca_file", check.ca_file.is_some()),
                ("client_cert", check.client_cert.is_some()),
                ("client_key", check.client_key.is_some()),
                ("bearer_token_file", check.bearer_token_file.is_some()),
            ] {
                if set {
                    return Err(at(format!("{field} cannot be set from Kubernetes")));
                }
            }
            // Checked here, so that one route's bad check is that route's
            // problem, not a configuration the runtime refuses whole.
            check
                .validate_with(&apiway_core::health::CheckDefaults::GATEWAY)
                .map_err(at)?;
            Some(check)
        }
    };
    Ok(RouteExtras {
        destinations,
        authorities,
        health_check,
    })
}

/// A route's order of precedence: older first, then `namespace/name`.
fn precedence(route: &TlsRoute) -> (Option<Time>, String, String) {
    (
        route.metadata.creation_timestamp.clone(),
        route.namespace().unwrap_or_default(),
        route.name_any(),
    )
}

/// The apiway listener name of a Gateway port.
pub fn listener_name(settings: &Settings, port: u16) -> String {
    format!("gateway/{}/{}:{port}", settings.namespace, settings.name)
}

/// The apiway route name of a TLSRoute (on one port when it spans several).
pub fn route_name(namespace: &str, name: &str, port: Option<u16>) -> String {
    match port {
        None => format!("tlsroute/{namespace}/{name}"),
        Some(p) => format!("tlsroute/{namespace}/{name}@{p}"),
    }
}

/// Translates `world` for the Gateway of `settings`; `now` stamps new
/// conditions.
pub fn translate(world: &World, settings: &Settings, now: &Time) -> Translation {
    let mut out = Translation::default();
    let Some(gateway) = world.gateways.iter().find(|g| {
        g.metadata.namespace.as_deref() == Some(settings.namespace.as_str())
            && g.metadata.name.as_deref() == Some(settings.name.as_str())
    }) else {
        out.idle_reason = Some(format!(
            "Gateway {}/{} not found",
            settings.namespace, settings.name
        ));
        return out;
    };
    let Some(class) = world
        .classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(gateway.spec.gateway_class_name.as_str()))
    else {
        out.idle_reason = Some(format!(
            "GatewayClass {} of Gateway {}/{} not found",
            gateway.spec.gateway_class_name, settings.namespace, settings.name
        ));
        return out;
    };
    if class.spec.controller_name != settings.controller {
        out.idle_reason = Some(format!(
            "GatewayClass {} names controller {}, not {}",
            gateway.spec.gateway_class_name, class.spec.controller_name, settings.controller
        ));
        return out;
    }
    out.class = Some(StatusOf {
        namespace: String::new(),
        name: class.name_any(),
        status: ConditionsStatus {
            conditions: vec![condition(
                "Accepted",
                true,
                "Accepted",
                "served by apiway",
                class.metadata.generation,
                now,
            )],
        },
    });
    let ix = Indexes::new(world);
    let generation = gateway.metadata.generation;

    // Listeners, by their own rules.
    let mut views: Vec<ListenerView<'_>> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| {
            let mode = l
                .tls
                .as_ref()
                .and_then(|t| t.mode.as_deref())
                .unwrap_or("Terminate");
            let hostname = l.hostname.as_deref().map(HostPattern::parse);
            let refused = if l.protocol != "TLS" {
                Some((
                    "UnsupportedProtocol",
                    format!(
                        "apiway serves protocol TLS (passthrough) only, not {}",
                        l.protocol
                    ),
                ))
            } else if mode != "Passthrough" {
                Some((
                    "UnsupportedValue",
                    format!("apiway passes TLS through; set tls.mode: Passthrough (not {mode})"),
                ))
            } else if !(1..=65535).contains(&l.port) {
                Some((
                    "UnsupportedValue",
                    format!("port {} is out of range", l.port),
                ))
            } else if let Some(Err(e)) = &hostname {
                Some(("UnsupportedValue", format!("hostname {e}")))
            } else {
                None
            };
            let kinds_ok = l
                .allowed_routes
                .as_ref()
                .and_then(|a| a.kinds.as_ref())
                .is_none_or(|kinds| kinds.iter().any(is_tls_route_kind));
            ListenerView {
                def: l,
                refused,
                kinds_ok,
                conflicted: false,
                hostname: hostname.and_then(Result::ok),
                attached: 0,
            }
        })
        .collect();
    // Same port, same hostname: a conflict.
    for i in 0..views.len() {
        for j in 0..views.len() {
            if i != j
                && views[i].refused.is_none()
                && views[j].refused.is_none()
                && views[i].def.port == views[j].def.port
                && views[i].hostname == views[j].hostname
            {
                views[i].conflicted = true;
            }
        }
    }

    // Routes, oldest first.
    let mut routes: Vec<&Arc<TlsRoute>> = world.routes.iter().collect();
    routes.sort_by_cached_key(|r| precedence(r));
    // Per port: pattern → route that has it.
    let mut claimed: HashMap<u16, HashMap<HostPattern, String>> = HashMap::new();
    // Original destinations and CONNECT authorities → route that has them.
    let mut claimed_destinations: HashMap<SocketAddr, String> = HashMap::new();
    let mut claimed_authorities: HashMap<Authority, String> = HashMap::new();
    let mut seen_routes: HashSet<(String, String)> = HashSet::new();
    for route in routes {
        let route_ns = route.namespace().unwrap_or_default();
        let route_name_k = route.name_any();
        if !seen_routes.insert((route_ns.clone(), route_name_k.clone())) {
            continue;
        }
        let ours: Vec<(usize, &ParentReference)> = route
            .spec
            .parent_refs
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.group.as_deref().unwrap_or(GROUP) == GROUP
                    && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                    && p.namespace.as_deref().unwrap_or(&route_ns) == settings.namespace
                    && p.name == settings.name
            })
            .collect();
        if ours.is_empty() {
            continue;
        }
        let route_generation = route.metadata.generation;
        let cond = |t: &str, ok: bool, reason: &str, msg: String| {
            condition(t, ok, reason, msg, route_generation, now)
        };

        // Backends: the same for every parent.
        let mut groups = Vec::new();
        let mut problems: Vec<Unresolved> = Vec::new();
        for rule in &route.spec.rules {
            for b in &rule.backend_refs {
                let ns = b.namespace.clone().unwrap_or_else(|| route_ns.clone());
                let port = b.port.unwrap_or(0);
                let name = format!("{ns}/{}:{port}", b.name);
                let weight = u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
                let resolved = if !b.group.as_deref().unwrap_or("").is_empty()
                    || b.kind.as_deref().unwrap_or("Service") != "Service"
                {
                    Err(Unresolved::InvalidKind(format!(
                        "backendRef {}: only core Services are supported, not {}/{}",
                        b.name,
                        b.group.as_deref().unwrap_or(""),
                        b.kind.as_deref().unwrap_or("Service")
                    )))
                } else if b.port.is_none() {
                    Err(Unresolved::BackendNotFound(format!(
                        "backendRef {}: port is required for a Service",
                        b.name
                    )))
                } else if ns != route_ns && !ix.granted(&route_ns, &ns, &b.name) {
                    Err(Unresolved::RefNotPermitted(format!(
                        "backendRef {ns}/{}: no ReferenceGrant in {ns} lets TLSRoutes of {route_ns} refer to it",
                        b.name
                    )))
                } else {
                    backends(&ix, &ns, &b.name, port)
                };
                let backends = match resolved {
                    Ok(list) => list,
                    Err(e) => {
                        problems.push(e);
                        Vec::new()
                    }
                };
                groups.push(BackendGroupDef {
                    name,
                    weight,
                    backends,
                });
            }
        }
        let resolved_refs = match problems.first() {
            None => cond(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "all backendRefs resolved".into(),
            ),
            Some(first) => cond(
                "ResolvedRefs",
                false,
                first.reason(),
                problems
                    .iter()
                    .map(Unresolved::message)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        };
        let extras = route_extras(route);
        let route_hosts: Result<Vec<HostPattern>, String> = route
            .spec
            .hostnames
            .iter()
            .map(|h| HostPattern::parse(h))
            .collect();

        // Parents.
        let mut parents = Vec::new();
        // Port → hostnames this route serves there.
        let mut served: BTreeMap<u16, Vec<HostPattern>> = BTreeMap::new();
        let mut lost: Vec<String> = Vec::new();
        for (_, parent) in &ours {
            let accepted = match (&extras, &route_hosts) {
                (Err(e), _) | (_, Err(e)) => cond("Accepted", false, "UnsupportedValue", e.clone()),
                (Ok(_), Ok(route_hosts)) => {
                    let candidates: Vec<usize> = (0..views.len())
                        .filter(|&i| {
                            let l = views[i].def;
                            parent.section_name.as_deref().is_none_or(|s| s == l.name)
                                && parent.port.is_none_or(|p| p == l.port)
                        })
                        .collect();
                    if candidates.is_empty() {
                        cond(
                            "Accepted",
                            false,
                            "NoMatchingParent",
                            format!(
                                "Gateway {}/{} has no listener{}{}",
                                settings.namespace,
                                settings.name,
                                parent
                                    .section_name
                                    .as_deref()
                                    .map(|s| format!(" named {s}"))
                                    .unwrap_or_default(),
                                parent
                                    .port
                                    .map(|p| format!(" on port {p}"))
                                    .unwrap_or_default()
                            ),
                        )
                    } else {
                        let allowed: Vec<usize> = candidates
                            .iter()
                            .copied()
                            .filter(|&i| {
                                views[i].serves()
                                    && namespace_allowed(
                                        &ix,
                                        views[i].def,
                                        &gateway_ns(gateway),
                                        &route_ns,
                                    )
                            })
                            .collect();
                        if allowed.is_empty() {
                            cond(
                                "Accepted",
                                false,
                                "NotAllowedByListeners",
                                format!(
                                    "no listener of Gateway {}/{} that this parentRef names takes TLSRoutes from namespace {route_ns}",
                                    settings.namespace, settings.name
                                ),
                            )
                        } else {
                            let mut any = false;
                            for i in allowed {
                                let hosts = intersect(views[i].hostname.as_ref(), route_hosts);
                                if hosts.is_empty() {
                                    continue;
                                }
                                any = true;
                                views[i].attached += 1;
                                let port = views[i].def.port as u16;
                                let port_claims = claimed.entry(port).or_default();
                                for h in hosts {
                                    match port_claims.get(&h) {
                                        Some(owner)
                                            if *owner != route_key(&route_ns, &route_name_k) =>
                                        {
                                            lost.push(format!(
                                                "{} on port {port} belongs to the older TLSRoute {owner}",
                                                render(&h)
                                            ));
                                        }
                                        Some(_) => {}
                                        None => {
                                            port_claims.insert(
                                                h.clone(),
                                                route_key(&route_ns, &route_name_k),
                                            );
                                            served.entry(port).or_default().push(h);
                                        }
                                    }
                                }
                            }
                            if any {
                                let mut message = "attached".to_owned();
                                if !lost.is_empty() {
                                    message = format!("attached; not served: {}", lost.join("; "));
                                }
                                cond("Accepted", true, "Accepted", message)
                            } else {
                                cond(
                                    "Accepted",
                                    false,
                                    "NoMatchingListenerHostname",
                                    "no hostname of the route matches a hostname of the listeners it may attach to".into(),
                                )
                            }
                        }
                    }
                }
            };
            parents.push(RouteParentStatus {
                parent_ref: (*parent).clone(),
                controller_name: settings.controller.clone(),
                conditions: vec![accepted, resolved_refs.clone()],
            });
        }
        out.routes.push(StatusOf {
            namespace: route_ns.clone(),
            name: route_name_k.clone(),
            status: parents,
        });

        // The gateway routes.
        let Ok(mut extras) = extras else { continue };
        if !served.is_empty() {
            let me = route_key(&route_ns, &route_name_k);
            extras.destinations.retain(|d| {
                let key = apiway_gateway::config::destination_key(*d);
                match claimed_destinations.get(&key) {
                    Some(owner) if *owner != me => {
                        lost.push(format!(
                            "destination {d} belongs to the older TLSRoute {owner}"
                        ));
                        false
                    }
                    Some(_) => false,
                    None => {
                        claimed_destinations.insert(key, me.clone());
                        true
                    }
                }
            });
            extras
                .authorities
                .retain(|a| match claimed_authorities.get(&a.value) {
                    Some(owner) if *owner != me => {
                        lost.push(format!(
                            "authority {a} belongs to the older TLSRoute {owner}"
                        ));
                        false
                    }
                    Some(_) => false,
                    None => {
                        claimed_authorities.insert(a.value.clone(), me.clone());
                        true
                    }
                });
            if !lost.is_empty() {
                if let Some(parents) = out.routes.last_mut() {
                    for p in &mut parents.status {
                        if let Some(c) = p
                            .conditions
                            .iter_mut()
                            .find(|c| c.type_ == "Accepted" && c.status == "True")
                        {
                            c.message = format!("attached; not served: {}", lost.join("; "));
                        }
                    }
                }
            }
        }
        let several = served.len() > 1;
        let mut first = true;
        for (port, hosts) in served {
            let mut hosts_seen = HashSet::new();
            out.spec.routes.push(RouteDef {
                name: route_name(&route_ns, &route_name_k, several.then_some(port)),
                hostnames: hosts
                    .into_iter()
                    .filter(|h| hosts_seen.insert(h.clone()))
                    .map(|h| {
                        let text = render(&h);
                        Written::new(h, text)
                    })
                    .collect(),
                listeners: vec![listener_name(settings, port)],
                destinations: if first {
                    extras.destinations.clone()
                } else {
                    Vec::new()
                },
                connect_authorities: if first {
                    extras.authorities.clone()
                } else {
                    Vec::new()
                },
                send_proxy_protocol: None,
                groups: groups.clone(),
                health_check: extras.health_check.clone(),
                policy: Default::default(),
                connect_timeout: None,
                idle_timeout: None,
                ejection_base: None,
                ejection_max: None,
            });
            first = false;
        }
    }

    // Listeners: one socket per port that has a served listener.
    let mut ports: Vec<u16> = views
        .iter()
        .filter(|v| v.serves())
        .map(|v| v.def.port as u16)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    for port in &ports {
        out.spec.listeners.push(ListenerDef {
            name: listener_name(settings, *port),
            address: SocketAddr::new(settings.listen_address, *port),
            kind: ListenerKind::Tls,
            max_connections: None,
            when_full: None,
            client_hello_timeout: None,
            max_client_hello_bytes: None,
            proxy_protocol: None,
            trusted_sources: None,
            proxy_header_timeout: None,
            request_timeout: None,
            max_request_bytes: None,
        });
    }

    // Gateway status.
    let valid = views.iter().filter(|v| v.serves()).count();
    let listeners = views
        .iter()
        .map(|v| {
            let c = |t: &str, ok: bool, reason: &str, msg: String| {
                condition(t, ok, reason, msg, generation, now)
            };
            let mut conditions = Vec::new();
            match &v.refused {
                None => conditions.push(c("Accepted", true, "Accepted", "accepted".into())),
                Some((reason, msg)) => conditions.push(c("Accepted", false, reason, msg.clone())),
            }
            conditions.push(if v.conflicted {
                c(
                    "Conflicted",
                    true,
                    "HostnameConflict",
                    "another listener on this port has the same hostname".into(),
                )
            } else {
                c("Conflicted", false, "NoConflicts", "no conflicts".into())
            });
            conditions.push(if v.kinds_ok {
                c("ResolvedRefs", true, "ResolvedRefs", "resolved".into())
            } else {
                c(
                    "ResolvedRefs",
                    false,
                    "InvalidRouteKinds",
                    "apiway serves TLSRoute only; allowedRoutes.kinds does not list it".into(),
                )
            });
            conditions.push(if v.serves() {
                c(
                    "Programmed",
                    true,
                    "Programmed",
                    format!("listening on port {}", v.def.port),
                )
            } else {
                c(
                    "Programmed",
                    false,
                    "Invalid",
                    "not served (see the other conditions)".into(),
                )
            });
            ListenerStatus {
                name: v.def.name.clone(),
                supported_kinds: if v.kinds_ok && v.def.protocol == "TLS" {
                    vec![tls_route_kind()]
                } else {
                    Vec::new()
                },
                attached_routes: v.attached,
                conditions,
            }
        })
        .collect();
    let gc = |t: &str, ok: bool, reason: &str, msg: String| {
        condition(t, ok, reason, msg, generation, now)
    };
    let accepted = if valid == views.len() {
        gc("Accepted", true, "Accepted", "accepted".into())
    } else {
        gc(
            "Accepted",
            valid > 0,
            "ListenersNotValid",
            format!(
                "{} of {} listeners cannot be served",
                views.len() - valid,
                views.len()
            ),
        )
    };
    let programmed = if valid > 0 {
        gc(
            "Programmed",
            true,
            "Programmed",
            format!("listening on ports {ports:?}"),
        )
    } else {
        gc(
            "Programmed",
            false,
            "Invalid",
            "no listener can be served".into(),
        )
    };
    out.gateway = Some(StatusOf {
        namespace: settings.namespace.clone(),
        name: settings.name.clone(),
        status: GatewayStatus {
            conditions: vec![accepted, programmed],
            listeners,
        },
    });
    out
}

fn route_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

fn gateway_ns(gateway: &Gateway) -> String {
    gateway.namespace().unwrap_or_default()
}

fn namespace_allowed(
    ix: &Indexes<'_>,
    listener: &Listener,
    gateway_ns: &str,
    route_ns: &str,
) -> bool {
    let namespaces = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match namespaces.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "All" => true,
        "Same" => gateway_ns == route_ns,
        "Selector" => {
            let Some(selector) = namespaces.and_then(|n| n.selector.as_ref()) else {
                return false;
            };
            let labels = ix
                .namespaces
                .get(route_ns)
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            selector_matches(selector, &labels)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn p(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    fn texts(list: &[HostPattern]) -> Vec<String> {
        list.iter().map(render).collect()
    }

    #[test]
    fn hostnames_intersect_per_the_gateway_api() {
        assert_eq!(texts(&intersect(None, &[])), ["*"]);
        assert_eq!(texts(&intersect(None, &[p("a.x")])), ["a.x"]);
        assert_eq!(texts(&intersect(Some(&p("*.x")), &[])), ["*.x"]);
        // Exact route name within a wildcard listener.
        assert_eq!(
            texts(&intersect(Some(&p("*.x")), &[p("a.x"), p("a.y"), p("x")])),
            ["a.x"]
        );
        // A route wildcard matching an exact listener name: the listener's.
        assert_eq!(texts(&intersect(Some(&p("a.x")), &[p("*.x")])), ["a.x"]);
        // Two wildcards: the more specific one.
        assert_eq!(texts(&intersect(Some(&p("*.x")), &[p("*.a.x")])), ["*.a.x"]);
        assert_eq!(texts(&intersect(Some(&p("*.a.x")), &[p("*.x")])), ["*.a.x"]);
        assert!(intersect(Some(&p("*.x")), &[p("*.y")]).is_empty());
        assert!(intersect(Some(&p("a.x")), &[p("b.x")]).is_empty());
    }

    #[test]
    fn label_selectors() {
        let labels: BTreeMap<String, String> =
            [("team".to_owned(), "a".to_owned())].into_iter().collect();
        let mut s = LabelSelector {
            match_labels: Some(labels.clone()),
            ..LabelSelector::default()
        };
        assert!(selector_matches(&s, &labels));
        assert!(!selector_matches(&s, &BTreeMap::new()));
        s.match_labels = None;
        s.match_expressions = Some(vec![LabelSelectorRequirement {
            key: "team".into(),
            operator: "NotIn".into(),
            values: Some(vec!["a".into()]),
        }]);
        assert!(!selector_matches(&s, &labels));
        assert!(selector_matches(&s, &BTreeMap::new()));
    }

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            generation: Some(1),
            ..ObjectMeta::default()
        }
    }

    fn world() -> World {
        let listener = |name: &str, port: i32, hostname: Option<&str>| Listener {
            name: name.into(),
            hostname: hostname.map(Into::into),
            port,
            protocol: "TLS".into(),
            tls: Some(ListenerTls {
                mode: Some("Passthrough".into()),
            }),
            allowed_routes: None,
        };
        World {
            classes: vec![Arc::new(GatewayClass {
                metadata: ObjectMeta {
                    name: Some("apiway".into()),
                    ..ObjectMeta::default()
                },
                spec: GatewayClassSpec {
                    controller_name: CONTROLLER.into(),
                },
                status: None,
            })],
            gateways: vec![Arc::new(Gateway {
                metadata: meta("seed", "api"),
                spec: GatewaySpec {
                    gateway_class_name: "apiway".into(),
                    listeners: vec![
                        listener("a", 443, Some("*.a")),
                        listener("b", 443, Some("*.b")),
                        listener("dup1", 8443, None),
                        listener("dup2", 8443, None),
                    ],
                },
                status: None,
            })],
            services: vec![Arc::new(Service {
                metadata: meta("seed", "svc"),
                spec: Some(ServiceSpec {
                    ports: Some(vec![ServicePort {
                        name: Some("https".into()),
                        port: 443,
                        ..ServicePort::default()
                    }]),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            })],
            slices: vec![Arc::new(EndpointSlice {
                metadata: ObjectMeta {
                    labels: Some(
                        [("kubernetes.io/service-name".to_owned(), "svc".to_owned())]
                            .into_iter()
                            .collect(),
                    ),
                    ..meta("seed", "svc-1")
                },
                address_type: "IPv6".into(),
                endpoints: vec![
                    Endpoint {
                        addresses: vec!["fd00::1".into()],
                        ..Endpoint::default()
                    },
                    Endpoint {
                        addresses: vec!["fd00::2".into()],
                        conditions: Some(EndpointConditions {
                            ready: Some(false),
                            serving: Some(true),
                            terminating: Some(true),
                        }),
                        ..Endpoint::default()
                    },
                ],
                ports: Some(vec![EndpointPort {
                    name: Some("https".into()),
                    port: Some(6443),
                    ..EndpointPort::default()
                }]),
            })],
            ..World::default()
        }
    }

    fn tls_route(name: &str, hostnames: &[&str], created: i64) -> Arc<TlsRoute> {
        let mut metadata = meta("seed", name);
        metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        Arc::new(TlsRoute {
            metadata,
            spec: TlsRouteSpec {
                parent_refs: vec![ParentReference {
                    name: "api".into(),
                    ..ParentReference::default()
                }],
                hostnames: hostnames.iter().map(|h| (*h).to_owned()).collect(),
                rules: vec![TlsRouteRule {
                    backend_refs: vec![BackendRef {
                        name: "svc".into(),
                        port: Some(443),
                        ..BackendRef::default()
                    }],
                }],
            },
            status: None,
        })
    }

    fn settings() -> Settings {
        Settings {
            controller: CONTROLLER.into(),
            namespace: "seed".into(),
            name: "api".into(),
            listen_address: IpAddr::from([127, 0, 0, 1]),
        }
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn listeners_share_ports_and_conflicts_are_not_served() {
        let t = translate(&world(), &settings(), &now());
        let names: Vec<_> = t.spec.listeners.iter().map(|l| l.name.clone()).collect();
        assert_eq!(names, ["gateway/seed/api:443"]);
        let gw = t.gateway.unwrap().status;
        let conflicted = |i: usize| {
            gw.listeners[i]
                .conditions
                .iter()
                .any(|c| c.type_ == "Conflicted" && c.status == "True")
        };
        assert!(!conflicted(0) && !conflicted(1) && conflicted(2) && conflicted(3));
        assert_eq!(gw.conditions[0].reason, "ListenersNotValid");
        assert_eq!(gw.conditions[0].status, "True");
    }

    #[test]
    fn routes_attach_by_hostname_and_the_older_route_keeps_a_name() {
        let mut w = world();
        w.routes = vec![
            tls_route("young", &["x.a", "y.a"], 2_000),
            tls_route("old", &["x.a"], 1_000),
            tls_route("stray", &["z.c"], 1_500),
        ];
        let t = translate(&w, &settings(), &now());
        let route = |name: &str| {
            t.spec
                .routes
                .iter()
                .find(|r| r.name.ends_with(name))
                .unwrap()
        };
        assert_eq!(
            texts(
                &route("/old")
                    .hostnames
                    .iter()
                    .map(|h| h.value.clone())
                    .collect::<Vec<_>>()
            ),
            ["x.a"]
        );
        assert_eq!(
            texts(
                &route("/young")
                    .hostnames
                    .iter()
                    .map(|h| h.value.clone())
                    .collect::<Vec<_>>()
            ),
            ["y.a"]
        );
        assert!(t.spec.routes.iter().all(|r| !r.name.ends_with("/stray")));
        let status = |name: &str| {
            t.routes.iter().find(|r| r.name == name).unwrap().status[0].conditions[0].clone()
        };
        assert_eq!(status("stray").reason, "NoMatchingListenerHostname");
        assert!(status("young").message.contains("older TLSRoute seed/old"));
        // Ready endpoints only (IPv6), at the endpoint port.
        let backends = &route("/old").groups[0].backends;
        assert_eq!(backends.len(), 1);
        assert_eq!(backends[0].to_string(), "[fd00::1]:6443");
    }

    #[test]
    fn annotations_are_claimed_oldest_first_and_a_bad_one_stays_with_its_route() {
        let annotated = |name: &str, host: &str, created: i64, pairs: &[(&str, &str)]| {
            let mut route = (*tls_route(name, &[host], created)).clone();
            route.metadata.annotations = Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            Arc::new(route)
        };
        let mut w = world();
        w.routes = vec![
            annotated(
                "young",
                "y.a",
                2_000,
                &[
                    (DESTINATIONS_ANNOTATION, "10.96.0.1:443, 10.96.0.2:443"),
                    (CONNECT_AUTHORITIES_ANNOTATION, "api.y:443"),
                ],
            ),
            annotated(
                "old",
                "x.a",
                1_000,
                &[(DESTINATIONS_ANNOTATION, "10.96.0.1:443")],
            ),
            annotated(
                "checked",
                "z.a",
                1_500,
                &[(
                    HEALTH_CHECK_ANNOTATION,
                    r#"{"kind": "https", "ca_file": "/etc/shadow"}"#,
                )],
            ),
            annotated(
                "keyed",
                "k.a",
                1_600,
                &[(
                    HEALTH_CHECK_ANNOTATION,
                    r#"{"kind": "https", "bearer_token_file": "/var/run/secrets/token"}"#,
                )],
            ),
        ];
        let t = translate(&w, &settings(), &now());
        let route = |name: &str| t.spec.routes.iter().find(|r| r.name.ends_with(name));
        let dests = |name: &str| {
            route(name)
                .unwrap()
                .destinations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(dests("/old"), ["10.96.0.1:443"]);
        assert_eq!(dests("/young"), ["10.96.0.2:443"]);
        assert_eq!(route("/young").unwrap().connect_authorities.len(), 1);
        // The bad health check keeps its route out and says why.
        assert!(route("/checked").is_none());
        let status = |name: &str| {
            t.routes.iter().find(|r| r.name == name).unwrap().status[0]
                .conditions
                .clone()
        };
        let young = status("young");
        assert!(young[0]
            .message
            .contains("10.96.0.1:443 belongs to the older TLSRoute seed/old"));
        let checked = status("checked");
        assert!(checked
            .iter()
            .any(|c| c.reason == "UnsupportedValue" && c.message.contains("ca_file")));
        assert!(route("/keyed").is_none());
        assert!(status("keyed")
            .iter()
            .any(|c| c.reason == "UnsupportedValue" && c.message.contains("bearer_token_file")));
        // What reaches the runtime validates whole.
        let spec = apiway_gateway::config::GatewaySpec {
            listeners: t.spec.listeners,
            routes: t.spec.routes,
            kubernetes: true,
            ..Default::default()
        };
        apiway_gateway::config::validate(spec).unwrap();
    }

    #[test]
    fn another_controllers_class_is_left_alone() {
        let mut w = world();
        let mut class = (*w.classes[0]).clone();
        class.spec.controller_name = "example.com/other".into();
        w.classes = vec![Arc::new(class)];
        w.routes = vec![tls_route("r", &["x.a"], 1)];
        let t = translate(&w, &settings(), &now());
        assert!(t.gateway.is_none() && t.class.is_none() && t.routes.is_empty());
        assert!(t.spec.listeners.is_empty() && t.spec.routes.is_empty());
        assert!(t.idle_reason.unwrap().contains("example.com/other"));
    }
}
