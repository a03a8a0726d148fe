//! `apiway bootstrap wait`: blocks until every listed Service is Ready as
//! the proposal defines it: at least one `status.loadBalancer.ingress`
//! entry (IP or hostname) **and** at least one EndpointSlice endpoint whose
//! `ready` condition is true or unset. kstatus (Flux, Helm `--wait`) calls a
//! LoadBalancer Service ready once it has a cluster IP, and `kubectl wait
//! --for=jsonpath` cannot look at endpoints; this looks at both.
//!
//! Watches (kube-rs watchers with kube-rs's back-off, re-listing after a
//! `410`) follow the Services, their EndpointSlices (label
//! `kubernetes.io/service-name`) and their Warning Events (such as
//! `SyncLoadBalancerFailed`); each change is judged at once, so the wait
//! ends as soon as the last condition holds. The API server going away
//! (the bootstrap control plane restarting) is retried, not fatal.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Event as KubeEvent, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde_json::json;

/// Why a Service is not Ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Blocking {
    /// The Service does not exist (yet).
    NotFound,
    /// No `status.loadBalancer.ingress` entry.
    NoIngress,
    /// No EndpointSlice endpoint is ready.
    NoReadyEndpoints,
    /// The ingress is not the reserved address `--expect-ingress` names.
    IngressMismatch(String),
    /// `--probe`: a TLS connection and `GET /readyz` through an ingress
    /// address failed (or has not run yet).
    ProbeFailed(String),
}

impl Blocking {
    /// The condition's name, as printed.
    pub fn name(&self) -> &'static str {
        match self {
            Blocking::NotFound => "NotFound",
            Blocking::NoIngress => "NoIngress",
            Blocking::NoReadyEndpoints => "NoReadyEndpoints",
            Blocking::IngressMismatch(_) => "IngressMismatch",
            Blocking::ProbeFailed(_) => "ProbeFailed",
        }
    }
}

/// One Service's state as the wait sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceState {
    /// Whether the Service exists.
    pub exists: bool,
    /// Its ingress entries (IPs and hostnames).
    pub ingress: Vec<String>,
    /// Ready endpoints, by slice name.
    pub ready_by_slice: BTreeMap<String, usize>,
    /// Warning events (`Reason: message`), latest last, at most 5.
    pub warnings: Vec<String>,
    /// The Service's first port (what `--probe` connects to).
    pub port: u16,
    /// The last `--probe` result; `None` before the first.
    pub probed: Option<Result<(), String>>,
}

impl ServiceState {
    /// Ready endpoints over every slice.
    pub fn ready_endpoints(&self) -> usize {
        self.ready_by_slice.values().sum()
    }

    /// What blocks it, given the addresses `expect` (empty: any ingress).
    pub fn blocking(&self, expect: &[IpAddr]) -> Vec<Blocking> {
        if !self.exists {
            return vec![Blocking::NotFound];
        }
        let mut out = Vec::new();
        if self.ingress.is_empty() {
            out.push(Blocking::NoIngress);
        } else if !expect.is_empty() {
            let missing: Vec<String> = expect
                .iter()
                .filter(|ip| !self.ingress.contains(&ip.to_string()))
                .map(IpAddr::to_string)
                .collect();
            if !missing.is_empty() {
                out.push(Blocking::IngressMismatch(format!(
                    "ingress {:?} lacks the reserved {}",
                    self.ingress,
                    missing.join(", ")
                )));
            }
        }
        if self.ready_endpoints() == 0 {
            out.push(Blocking::NoReadyEndpoints);
        }
        out
    }

    /// [`blocking`](Self::blocking), and with `probe`, the probe's verdict
    /// once nothing else blocks.
    pub fn blocking_probed(&self, expect: &[IpAddr], probe: bool) -> Vec<Blocking> {
        let mut out = self.blocking(expect);
        if probe && out.is_empty() {
            match &self.probed {
                Some(Ok(())) => {}
                Some(Err(e)) => out.push(Blocking::ProbeFailed(e.clone())),
                None => out.push(Blocking::ProbeFailed("not probed yet".into())),
            }
        }
        out
    }

    /// Whether `--probe` should run now: nothing else blocks.
    fn probe_due(&self, expect: &[IpAddr]) -> bool {
        self.blocking(expect).is_empty()
    }
}

/// `--probe`: what to trust and which name to ask for.
#[derive(Clone, Debug, Default)]
pub struct ProbeConfig {
    /// CA, server name (default: the ingress hostname or IP).
    pub tls: apiway_core::tls::TlsClientOptions,
}

/// Probes every ingress address of `state` on its port: TLS and `GET
/// /readyz` answering 2xx, each within 3 s.
async fn probe(state: &mut ServiceState, config: &ProbeConfig) {
    let mut errors = Vec::new();
    for ingress in &state.ingress {
        let addrs: Vec<std::net::SocketAddr> = match ingress.parse::<IpAddr>() {
            Ok(ip) => vec![std::net::SocketAddr::new(ip, state.port)],
            Err(_) => match tokio::net::lookup_host((ingress.as_str(), state.port)).await {
                Ok(found) => found.collect(),
                Err(e) => {
                    errors.push(format!("{ingress}: {e}"));
                    continue;
                }
            },
        };
        for addr in addrs {
            let get =
                apiway_core::endpoint::checker::https_get(ingress, addr, "/readyz", &config.tls);
            match tokio::time::timeout(Duration::from_secs(3), get).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!("{addr}: no answer within 3s")),
            }
        }
    }
    state.probed = Some(if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    });
}

/// Ingress entries of a Service.
pub fn ingress_of(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|list| {
            list.iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Endpoints of a slice whose `ready` condition is true or unset.
pub fn ready_endpoints(slice: &EndpointSlice) -> usize {
    slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .count()
}

/// What the wait reports, per change: every Service with its blockers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// `namespace/name` → (state, blockers).
    pub services: BTreeMap<String, (ServiceState, Vec<Blocking>)>,
}

impl Report {
    /// Whether every Service is Ready.
    pub fn ready(&self) -> bool {
        self.services.values().all(|(_, b)| b.is_empty())
    }

    /// One line per Service.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (key, (state, blocking)) in &self.services {
            let verdict = if blocking.is_empty() {
                format!(
                    "Ready (ingress {}, {} ready endpoint(s))",
                    state.ingress.join(","),
                    state.ready_endpoints()
                )
            } else {
                blocking
                    .iter()
                    .map(|b| match b {
                        Blocking::IngressMismatch(d) => format!("IngressMismatch: {d}"),
                        Blocking::ProbeFailed(d) => format!("ProbeFailed: {d}"),
                        other => other.name().to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!("{key}: {verdict}"));
            if let Some(last) = state.warnings.last().filter(|_| !blocking.is_empty()) {
                out.push_str(&format!(" (warning event: {last})"));
            }
            out.push('\n');
        }
        out
    }

    /// One JSON object (a line) for `--output json`.
    pub fn json(&self) -> serde_json::Value {
        let services: Vec<serde_json::Value> = self
            .services
            .iter()
            .map(|(key, (state, blocking))| {
                json!({
                    "service": key,
                    "ready": blocking.is_empty(),
                    "blocking": blocking.iter().map(Blocking::name).collect::<Vec<_>>(),
                    "ingress": state.ingress,
                    "readyEndpoints": state.ready_endpoints(),
                    "warningEvents": state.warnings,
                })
            })
            .collect();
        json!({"ready": self.ready(), "services": services})
    }
}

/// How `wait` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every Service is Ready.
    Ready,
    /// The timeout came first; the last report says what was missing.
    TimedOut(Report),
}

/// A change one of the watches saw.
enum Update {
    /// A relist of the Service starts; it is gone unless the relist has it.
    ServiceInit(String),
    ServiceApply(String, Box<Service>),
    ServiceGone(String),
    ServiceInitDone(String),
    /// A relist of the slices starts: they are replaced at its end.
    SlicesInit(String),
    SliceApply(String, String, usize),
    SliceGone(String, String),
    SlicesInitDone(String),
    Warning(String, String),
    Error(String),
}

/// Waits for `services` (`namespace/name`), calling `report` at the start
/// and on every change of the verdicts.
#[allow(clippy::too_many_arguments)]
pub async fn wait(
    client: kube::Client,
    services: &[(String, String)],
    expect: &[IpAddr],
    probe_config: Option<ProbeConfig>,
    timeout: Duration,
    mut report: impl FnMut(&Report),
    mut error: impl FnMut(&str),
) -> Outcome {
    let mut streams: Vec<std::pin::Pin<Box<dyn Stream<Item = Update> + Send>>> = Vec::new();
    for (ns, name) in services {
        let key = format!("{ns}/{name}");
        let svc: Api<Service> = Api::namespaced(client.clone(), ns);
        let k = key.clone();
        streams.push(Box::pin(
            watcher::watcher(
                svc,
                watcher::Config::default().fields(&format!("metadata.name={name}")),
            )
            .default_backoff()
            .map(move |item| match item {
                Ok(Event::Apply(s) | Event::InitApply(s)) => {
                    Update::ServiceApply(k.clone(), Box::new(s))
                }
                Ok(Event::Delete(_)) => Update::ServiceGone(k.clone()),
                Ok(Event::Init) => Update::ServiceInit(k.clone()),
                Ok(Event::InitDone) => Update::ServiceInitDone(k.clone()),
                Err(e) => Update::Error(format!("{k}: {e}")),
            }),
        ));
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        let k = key.clone();
        streams.push(Box::pin(
            watcher::watcher(
                slices,
                watcher::Config::default().labels(&format!("kubernetes.io/service-name={name}")),
            )
            .default_backoff()
            .map(move |item| match item {
                Ok(Event::Apply(s) | Event::InitApply(s)) => Update::SliceApply(
                    k.clone(),
                    s.metadata.name.clone().unwrap_or_default(),
                    ready_endpoints(&s),
                ),
                Ok(Event::Delete(s)) => {
                    Update::SliceGone(k.clone(), s.metadata.name.clone().unwrap_or_default())
                }
                Ok(Event::Init) => Update::SlicesInit(k.clone()),
                Ok(Event::InitDone) => Update::SlicesInitDone(k.clone()),
                Err(e) => Update::Error(format!("{k} EndpointSlices: {e}")),
            }),
        ));
        let events: Api<KubeEvent> = Api::namespaced(client.clone(), ns);
        let k = key.clone();
        let wanted = name.clone();
        streams.push(Box::pin(
            watcher::watcher(events, watcher::Config::default())
                .default_backoff()
                .filter_map(move |item| {
                    let k = k.clone();
                    let wanted = wanted.clone();
                    async move {
                        match item {
                            Ok(Event::Apply(e) | Event::InitApply(e))
                                if e.type_.as_deref() == Some("Warning")
                                    && e.involved_object.kind.as_deref() == Some("Service")
                                    && e.involved_object.name.as_deref()
                                        == Some(wanted.as_str()) =>
                            {
                                Some(Update::Warning(
                                    k,
                                    format!(
                                        "{}: {}",
                                        e.reason.unwrap_or_default(),
                                        e.message.unwrap_or_default()
                                    ),
                                ))
                            }
                            Err(e) => Some(Update::Error(format!("{k} events: {e}"))),
                            _ => None,
                        }
                    }
                }),
        ));
    }
    let mut all = futures_util::stream::select_all(streams);
    let mut states: BTreeMap<String, ServiceState> = services
        .iter()
        .map(|(ns, name)| (format!("{ns}/{name}"), ServiceState::default()))
        .collect();
    let probing = probe_config.is_some();
    let judge = |states: &BTreeMap<String, ServiceState>| Report {
        services: states
            .iter()
            .map(|(k, s)| (k.clone(), (s.clone(), s.blocking_probed(expect, probing))))
            .collect(),
    };
    let mut reprobe = tokio::time::interval(Duration::from_secs(1));
    reprobe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = judge(&states);
    // The first report waits for the first list of every Service and its
    // slices, so it does not call an existing Service missing.
    let mut unsynced: std::collections::BTreeSet<(String, bool)> = states
        .keys()
        .flat_map(|k| [(k.clone(), false), (k.clone(), true)])
        .collect();
    let mut reported = false;
    // Relists in progress: the Services seen so far, the slices so far.
    let mut service_relist: BTreeMap<String, bool> = BTreeMap::new();
    let mut slice_relist: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        let update = tokio::select! {
            _ = &mut deadline => return Outcome::TimedOut(last),
            update = all.next() => match update {
                Some(u) => Some(u),
                None => return Outcome::TimedOut(last),
            },
            _ = reprobe.tick(), if probing => None,
        };
        let Some(update) = update else {
            // A probe that failed is tried again every second.
            if let Some(config) = &probe_config {
                for state in states.values_mut() {
                    if state.probe_due(expect) {
                        probe(state, config).await;
                    }
                }
            }
            if unsynced.is_empty() {
                let now = judge(&states);
                if now.ready() {
                    report(&now);
                    return Outcome::Ready;
                }
                if now != last {
                    report(&now);
                    last = now;
                }
            }
            continue;
        };
        match update {
            Update::ServiceInit(k) => {
                service_relist.insert(k, false);
                continue;
            }
            Update::ServiceApply(k, service) => {
                if let Some(seen) = service_relist.get_mut(&k) {
                    *seen = true;
                }
                if let Some(state) = states.get_mut(&k) {
                    state.exists = true;
                    let ingress = ingress_of(&service);
                    if ingress != state.ingress {
                        state.probed = None;
                    }
                    state.ingress = ingress;
                    state.port = service
                        .spec
                        .as_ref()
                        .and_then(|s| s.ports.as_ref())
                        .and_then(|p| p.first())
                        .and_then(|p| u16::try_from(p.port).ok())
                        .unwrap_or(6443);
                }
            }
            Update::ServiceGone(k) => {
                if let Some(state) = states.get_mut(&k) {
                    state.exists = false;
                    state.ingress.clear();
                }
            }
            Update::ServiceInitDone(k) => {
                unsynced.remove(&(k.clone(), false));
                if service_relist.remove(&k) == Some(false) {
                    if let Some(state) = states.get_mut(&k) {
                        state.exists = false;
                        state.ingress.clear();
                    }
                }
            }
            Update::SlicesInit(k) => {
                slice_relist.insert(k, BTreeMap::new());
                continue;
            }
            Update::SliceApply(k, name, ready) => match slice_relist.get_mut(&k) {
                Some(pending) => {
                    pending.insert(name, ready);
                    continue;
                }
                None => {
                    if let Some(state) = states.get_mut(&k) {
                        state.ready_by_slice.insert(name, ready);
                    }
                }
            },
            Update::SliceGone(k, name) => {
                if let Some(state) = states.get_mut(&k) {
                    state.ready_by_slice.remove(&name);
                }
            }
            Update::SlicesInitDone(k) => {
                unsynced.remove(&(k.clone(), true));
                let listed = slice_relist.remove(&k).unwrap_or_default();
                if let Some(state) = states.get_mut(&k) {
                    state.ready_by_slice = listed;
                }
            }
            Update::Warning(k, text) => {
                if let Some(state) = states.get_mut(&k) {
                    if state.warnings.last() != Some(&text) {
                        state.warnings.push(text);
                        if state.warnings.len() > 5 {
                            state.warnings.remove(0);
                        }
                    }
                }
            }
            Update::Error(e) => {
                error(&e);
                continue;
            }
        }
        if !unsynced.is_empty() {
            continue;
        }
        if let Some(config) = &probe_config {
            for state in states.values_mut() {
                if state.probe_due(expect) && state.probed.is_none() {
                    probe(state, config).await;
                }
            }
        }
        let now = judge(&states);
        if now.ready() {
            report(&now);
            return Outcome::Ready;
        }
        if now != last || !reported {
            report(&now);
            reported = true;
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_conditions() {
        let mut s = ServiceState::default();
        assert_eq!(s.blocking(&[]), [Blocking::NotFound]);
        s.exists = true;
        assert_eq!(
            s.blocking(&[]),
            [Blocking::NoIngress, Blocking::NoReadyEndpoints]
        );
        s.ingress = vec!["lb.example.elb.amazonaws.com".into()];
        assert_eq!(s.blocking(&[]), [Blocking::NoReadyEndpoints]);
        s.ready_by_slice.insert("a".into(), 1);
        assert!(s.blocking(&[]).is_empty(), "a hostname-only ingress counts");
        let reserved: IpAddr = "203.0.113.10".parse().unwrap();
        assert_eq!(s.blocking(&[reserved])[0].name(), "IngressMismatch");
        s.ingress = vec!["203.0.113.10".into(), "2001:db8::10".into()];
        assert!(s
            .blocking(&[reserved, "2001:db8::10".parse().unwrap()])
            .is_empty());
    }
}
