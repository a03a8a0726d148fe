//! Endpoint sets: the backends of a route (gateway) or the API server
//! endpoints of an upstream (agent, client), with their health and load.
//!
//! An endpoint takes new connections when its active health check says it is
//! up and no recent connect failure has ejected it. Selection and ejection
//! live here once for every role.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::Deserialize;

use crate::health::HealthCheck;
use crate::metrics::{BackendHandles, BackendMetrics};
use crate::select::{best, Candidate};

/// How an endpoint set picks among its available endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The endpoint with the fewest active connections; ties rotate.
    #[default]
    LeastConnections,
    /// Each endpoint in turn.
    RoundRobin,
    /// The endpoint with the lowest measured latency (an EWMA of the active
    /// health check's connect + TLS + request time); endpoints not yet
    /// measured come last, ties rotate.
    LowestLatency,
    /// An endpoint whose address is on a local interface first, then the
    /// lowest measured latency: what a per-node agent wants, since an API
    /// server on the same host is both fastest and shares the node's fate.
    PreferLocalThenLatency,
}

/// Passive ejection: how long an endpoint sits out after connect failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// Time out after the first failure; doubles with each further failure.
    pub base: Duration,
    /// The longest time out.
    pub max: Duration,
}

impl Default for Ejection {
    fn default() -> Self {
        Ejection {
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// What an endpoint address names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A literal address.
    Ip(IpAddr),
    /// A DNS name, resolved and re-resolved.
    Name(String),
}

/// An endpoint address as configured: `host:port`, `[v6]:port` or `ip:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The host part.
    pub host: Host,
    /// The port.
    pub port: u16,
}

impl Address {
    /// Parses `host:port`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Address, String> {
        use apiway_wire::authority::{Authority, AuthorityError};
        let authority = Authority::parse(text).map_err(|e| {
            let (host, port) = text.rsplit_once(':').unwrap_or((text, ""));
            match e {
                AuthorityError::MissingPort => {
                    format!("`{text}` has no port; write it as host:port")
                }
                AuthorityError::BadPort => format!("`{text}` has an invalid port `{port}`"),
                AuthorityError::PortZero => format!("`{text}`: port 0 cannot be dialed"),
                AuthorityError::TooLong { .. }
                | AuthorityError::EmptyHost
                | AuthorityError::BadHost
                | AuthorityError::ZoneId => {
                    format!("`{text}`: `{host}` is not a host name or IP address ({e})")
                }
            }
        })?;
        let host = match authority.host {
            apiway_wire::authority::Host::Name(name) => Host::Name(name),
            apiway_wire::authority::Host::Ipv4(a) => Host::Ip(a.into()),
            apiway_wire::authority::Host::Ipv6(a) => Host::Ip(a.into()),
        };
        Ok(Address {
            host,
            port: authority.port,
        })
    }
}

impl From<SocketAddr> for Address {
    fn from(sa: SocketAddr) -> Self {
        Address {
            host: Host::Ip(sa.ip()),
            port: sa.port(),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Ip(ip) => write!(f, "{}", SocketAddr::new(*ip, self.port)),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

/// Whether `ip` is assigned to a local interface: binding a socket to it
/// succeeds only then (unless `net.ipv4.ip_nonlocal_bind` is set, which
/// would make every address look local). Loopback addresses are local.
pub fn is_local_ip(ip: IpAddr) -> bool {
    if ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Milliseconds since a process-wide epoch, so deadlines fit in an atomic.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    // Starting at 1 keeps 0 free to mean "not ejected".
    1 + Instant::now().duration_since(epoch).as_millis() as u64
}

/// One backend or API server endpoint.
#[derive(Debug)]
pub struct Endpoint {
    name: String,
    address: Address,
    resolved: Mutex<Arc<[SocketAddr]>>,
    active: AtomicUsize,
    /// Verdict of the active health check (true until a check says otherwise).
    up: AtomicBool,
    /// Deadline (see `now_ms`) until which passive ejection holds; 0 = none.
    ejected_until: AtomicU64,
    /// EWMA of probe latency in microseconds; 0 = not measured yet.
    latency_us: AtomicU64,
    /// Whether one of the resolved addresses is on a local interface.
    local: AtomicBool,
    /// Whether the last DNS resolution failed (so failures log once).
    dns_failed: AtomicBool,
    /// Wakes connections that asked to end when a check takes it down.
    marked_down: tokio::sync::Notify,
    streaks: Mutex<Streaks>,
    metrics: BackendHandles,
}

#[derive(Debug, Default)]
struct Streaks {
    connect_failures: u32,
    checks_ok: u32,
    checks_failed: u32,
}

impl Endpoint {
    /// Creates an endpoint; `metrics` are its handles.
    pub fn new(address: Address, metrics: BackendHandles) -> Endpoint {
        let resolved: Arc<[SocketAddr]> = match address.host {
            Host::Ip(ip) => Arc::from([SocketAddr::new(ip, address.port)]),
            Host::Name(_) => Arc::from([]),
        };
        metrics.healthy.set(1);
        let local = resolved.iter().any(|a| is_local_ip(a.ip()));
        Endpoint {
            name: address.to_string(),
            address,
            resolved: Mutex::new(resolved),
            active: AtomicUsize::new(0),
            up: AtomicBool::new(true),
            ejected_until: AtomicU64::new(0),
            latency_us: AtomicU64::new(0),
            local: AtomicBool::new(local),
            dns_failed: AtomicBool::new(false),
            marked_down: tokio::sync::Notify::new(),
            streaks: Mutex::new(Streaks::default()),
            metrics,
        }
    }

    /// The address as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parsed address.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Connections currently leased.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// The metric handles (also the relay's byte observer).
    pub fn metrics(&self) -> &BackendHandles {
        &self.metrics
    }

    /// Whether the active health check says the endpoint is up.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether passive ejection currently holds the endpoint out.
    pub fn is_ejected(&self) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    /// Takes new connections: up and not ejected.
    pub fn is_available(&self) -> bool {
        self.is_up() && !self.is_ejected()
    }

    /// The socket addresses last resolved (one for a literal address).
    pub fn resolved(&self) -> Arc<[SocketAddr]> {
        match self.resolved.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Re-resolves a DNS name; on failure the previous addresses stay.
    pub async fn resolve(&self) -> std::io::Result<Arc<[SocketAddr]>> {
        let Host::Name(name) = &self.address.host else {
            return Ok(self.resolved());
        };
        let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), self.address.port))
            .await?
            .collect();
        if found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{name} resolved to no addresses"),
            ));
        }
        let found: Arc<[SocketAddr]> = Arc::from(found);
        if let Ok(mut g) = self.resolved.lock() {
            *g = found.clone();
        }
        self.local
            .store(found.iter().any(|a| is_local_ip(a.ip())), Ordering::Relaxed);
        Ok(found)
    }

    /// Records whether a DNS resolution failed; returns true when this
    /// changes the previous outcome, so a caller can log transitions only.
    pub fn note_dns_outcome(&self, failed: bool) -> bool {
        self.dns_failed.swap(failed, Ordering::Relaxed) != failed
    }

    /// Whether one of the endpoint's addresses is on a local interface.
    pub fn is_local(&self) -> bool {
        self.local.load(Ordering::Relaxed)
    }

    /// Re-checks whether the endpoint's addresses are local (interfaces
    /// change: an agent may add the address it serves).
    pub fn refresh_locality(&self) {
        let local = self.resolved().iter().any(|a| is_local_ip(a.ip()));
        self.local.store(local, Ordering::Relaxed);
    }

    /// The measured latency (EWMA of probe times), once measured.
    pub fn latency(&self) -> Option<Duration> {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Folds one probe's duration into the latency average. The weight of
    /// a new sample (1/4) follows a change within a few probes without
    /// letting one slow probe flip the choice.
    pub fn record_latency(&self, sample: Duration) {
        let sample = (sample.as_micros() as u64).max(1);
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            ((old * 3 + sample) / 4).max(1)
        };
        self.latency_us.store(new, Ordering::Relaxed);
        self.metrics
            .latency_seconds
            .set(Duration::from_micros(new).as_secs_f64());
    }

    /// Ranking key for latency policies: lower is better; unmeasured last.
    fn latency_rank(&self) -> u64 {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => u64::MAX,
            us => us,
        }
    }

    fn streaks(&self) -> std::sync::MutexGuard<'_, Streaks> {
        match self.streaks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn publish_health(&self) {
        self.metrics.healthy.set(i64::from(self.is_available()));
    }

    /// A connect attempt failed: eject for a backoff that grows with each
    /// consecutive failure.
    pub fn record_connect_failure(&self, ejection: &Ejection) {
        self.metrics.connect_failures.inc();
        let failures = {
            let mut s = self.streaks();
            s.connect_failures = s.connect_failures.saturating_add(1);
            s.connect_failures
        };
        let factor = 1u32 << (failures.saturating_sub(1)).min(16);
        let backoff = ejection.base.saturating_mul(factor).min(ejection.max);
        self.ejected_until
            .store(now_ms() + backoff.as_millis() as u64, Ordering::Relaxed);
        self.publish_health();
        tracing::warn!(backend = %self.name, failures, backoff = ?backoff, "connect failed; backend ejected");
    }

    /// A connect attempt succeeded: forget earlier failures.
    pub fn record_connect_success(&self) {
        let had_failures = {
            let mut s = self.streaks();
            std::mem::take(&mut s.connect_failures) > 0
        };
        if had_failures {
            self.ejected_until.store(0, Ordering::Relaxed);
            self.publish_health();
        }
    }

    /// Applies an active health check result with rise/fall thresholds.
    /// Returns the new verdict when it changed.
    pub fn record_check(&self, ok: bool, check: &HealthCheck) -> Option<bool> {
        let mut changed = None;
        {
            let mut s = self.streaks();
            if ok {
                self.metrics.checks_ok.inc();
                s.checks_failed = 0;
                s.checks_ok = s.checks_ok.saturating_add(1);
                if !self.is_up() && s.checks_ok >= check.rise {
                    self.up.store(true, Ordering::Relaxed);
                    changed = Some(true);
                }
                if s.connect_failures > 0 {
                    // The probe reached it: a stale ejection only delays recovery.
                    s.connect_failures = 0;
                    self.ejected_until.store(0, Ordering::Relaxed);
                }
            } else {
                self.metrics.checks_failed.inc();
                s.checks_ok = 0;
                s.checks_failed = s.checks_failed.saturating_add(1);
                if self.is_up() && s.checks_failed >= check.fall {
                    self.up.store(false, Ordering::Relaxed);
                    changed = Some(false);
                    self.marked_down.notify_waiters();
                }
            }
        }
        self.publish_health();
        changed
    }

    /// Completes the next time an active health check takes the endpoint
    /// down. A relay that must not outlive a hung endpoint selects on it;
    /// call [`Notified::enable`](tokio::sync::futures::Notified::enable)
    /// (or poll it) before relaying so a verdict in between is not missed.
    pub fn marked_down(&self) -> tokio::sync::futures::Notified<'_> {
        self.marked_down.notified()
    }

    /// Forgets what active checks said: the endpoint counts as up again.
    pub fn forget_check_verdict(&self) {
        {
            let mut s = self.streaks();
            s.checks_ok = 0;
            s.checks_failed = 0;
        }
        self.up.store(true, Ordering::Relaxed);
        self.publish_health();
    }

    /// Leases the endpoint for one connection; the lease counts it active.
    pub fn lease(self: &Arc<Self>) -> Lease {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.metrics.active.inc();
        self.metrics.connections.inc();
        Lease {
            endpoint: self.clone(),
        }
    }
}

/// Counts a connection as active on its endpoint until dropped.
#[derive(Debug)]
pub struct Lease {
    endpoint: Arc<Endpoint>,
}

impl Lease {
    /// The leased endpoint.
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.endpoint.active.fetch_sub(1, Ordering::Relaxed);
        self.endpoint.metrics.active.dec();
    }
}

/// The desired shape of an endpoint set; applying it keeps the state of
/// endpoints whose address did not change.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointSetSpec {
    /// Endpoint addresses.
    pub endpoints: Vec<Address>,
    /// Selection policy.
    pub policy: Policy,
    /// Active health check, if any.
    pub health_check: Option<HealthCheck>,
    /// Passive ejection.
    pub ejection: Ejection,
}

impl EndpointSetSpec {
    /// The endpoints named by DNS.
    pub fn names(&self) -> impl Iterator<Item = &Address> {
        self.endpoints
            .iter()
            .filter(|a| matches!(a.host, Host::Name(_)))
    }

    /// This spec with every DNS name replaced by one endpoint per address
    /// it resolved to (`resolved`), so each A/AAAA record gets its own
    /// health, latency and ejection. A name missing from `resolved` (not
    /// resolved yet, or never) stays as itself: an endpoint that is down
    /// until it resolves. Duplicates are dropped, first one wins.
    pub fn expand(
        &self,
        resolved: &std::collections::HashMap<Address, Vec<IpAddr>>,
    ) -> EndpointSetSpec {
        let mut endpoints: Vec<Address> = Vec::with_capacity(self.endpoints.len());
        let mut push = |a: Address| {
            if !endpoints.contains(&a) {
                endpoints.push(a);
            }
        };
        for address in &self.endpoints {
            match (&address.host, resolved.get(address)) {
                (Host::Name(_), Some(ips)) if !ips.is_empty() => {
                    for ip in ips {
                        push(Address {
                            host: Host::Ip(*ip),
                            port: address.port,
                        });
                    }
                }
                _ => push(address.clone()),
            }
        }
        EndpointSetSpec {
            endpoints,
            ..self.clone()
        }
    }
}

/// The current members and settings of a set, swapped atomically.
#[derive(Debug)]
pub struct Members {
    /// Endpoints, in configuration order.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// Selection policy.
    pub policy: Policy,
    /// Active health check, if any.
    pub health_check: Option<HealthCheck>,
    /// Passive ejection.
    pub ejection: Ejection,
}

/// A named set of endpoints with health, load and selection.
pub struct EndpointSet {
    name: String,
    members: ArcSwap<Members>,
    rotation: AtomicUsize,
    metrics: BackendMetrics,
    /// Serializes `apply` so two reloads cannot interleave.
    applying: Mutex<()>,
}

impl std::fmt::Debug for EndpointSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointSet")
            .field("name", &self.name)
            .field("members", &self.members.load())
            .finish()
    }
}

impl EndpointSet {
    /// Creates a set named `name` (the route or upstream) from `spec`.
    pub fn new(name: &str, spec: &EndpointSetSpec, metrics: BackendMetrics) -> Arc<EndpointSet> {
        let set = EndpointSet {
            name: name.to_owned(),
            members: ArcSwap::from_pointee(Members {
                endpoints: Vec::new(),
                policy: spec.policy,
                health_check: None,
                ejection: spec.ejection,
            }),
            rotation: AtomicUsize::new(0),
            metrics,
            applying: Mutex::new(()),
        };
        set.apply(spec);
        Arc::new(set)
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current members.
    pub fn members(&self) -> arc_swap::Guard<Arc<Members>> {
        self.members.load()
    }

    /// The current members, as an owned handle that may be held across awaits.
    pub fn members_full(&self) -> Arc<Members> {
        self.members.load_full()
    }

    /// Applies a new spec: endpoints with an unchanged address keep their
    /// health, ejection and active counts; removed ones lose their metrics.
    pub fn apply(&self, spec: &EndpointSetSpec) {
        let _serial = self.applying.lock();
        let old = self.members.load_full();
        let mut endpoints = Vec::with_capacity(spec.endpoints.len());
        for address in &spec.endpoints {
            let kept = old.endpoints.iter().find(|e| e.address() == address);
            let endpoint = match kept {
                Some(e) => e.clone(),
                None => Arc::new(Endpoint::new(
                    address.clone(),
                    self.metrics.handles(&self.name, &address.to_string()),
                )),
            };
            if !endpoints
                .iter()
                .any(|e: &Arc<Endpoint>| Arc::ptr_eq(e, &endpoint))
            {
                endpoints.push(endpoint);
            }
        }
        if spec.health_check.is_none() {
            // Without a check nothing would ever bring back an endpoint an
            // earlier check took down.
            for e in &endpoints {
                e.forget_check_verdict();
            }
        }
        for gone in old
            .endpoints
            .iter()
            .filter(|e| !endpoints.iter().any(|n| Arc::ptr_eq(n, e)))
        {
            self.metrics.forget(&self.name, gone.name());
        }
        self.members.store(Arc::new(Members {
            endpoints,
            policy: spec.policy,
            health_check: spec.health_check.clone(),
            ejection: spec.ejection,
        }));
    }

    /// Removes every endpoint's metric series (the set is being dropped).
    pub fn forget_metrics(&self) {
        for e in &self.members.load().endpoints {
            self.metrics.forget(&self.name, e.name());
        }
    }

    /// The next endpoint to try, skipping `tried`. Available endpoints come
    /// first, chosen by the policy; when none is left, unavailable ones are
    /// tried as a last resort, since health verdicts can be stale and a
    /// client should see no error while any endpoint is up.
    pub fn pick(&self, tried: &[Arc<Endpoint>]) -> Option<Arc<Endpoint>> {
        let members = self.members.load();
        let n = members.endpoints.len();
        if n == 0 {
            return None;
        }
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % n;
        // In rotated order, so ties rotate; no allocation per pick.
        let at = |i: usize| &members.endpoints[(start + i) % n];
        let untried = |e: &Arc<Endpoint>| !tried.iter().any(|t| Arc::ptr_eq(t, e));
        let policy = members.policy;
        // core's one selection order over the available endpoints, ranked
        // by the set's policy.
        let candidates = (0..n).map(at).map(|e| Candidate {
            usable: e.is_available() && untried(e),
            in_use: false,
            local: policy == Policy::PreferLocalThenLatency && e.is_local(),
            rank: match policy {
                Policy::RoundRobin => 0,
                Policy::LeastConnections => e.active() as u64,
                Policy::LowestLatency | Policy::PreferLocalThenLatency => e.latency_rank(),
            },
        });
        if let Some(i) = best(candidates) {
            return Some(at(i).clone());
        }
        // The last resort: unavailable endpoints, since health verdicts
        // can be stale and a client should see no error while any endpoint
        // is up; checked up first, then the one whose ejection ends first.
        let fallbacks = (0..n).map(at).map(|e| Candidate {
            usable: untried(e),
            in_use: false,
            local: false,
            rank: (!e.is_up(), e.ejected_until.load(Ordering::Relaxed)),
        });
        best(fallbacks).map(|i| at(i).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(addrs: &[&str], policy: Policy) -> EndpointSetSpec {
        EndpointSetSpec {
            endpoints: addrs.iter().map(|a| Address::parse(a).unwrap()).collect(),
            policy,
            health_check: None,
            ejection: Ejection::default(),
        }
    }

    #[test]
    fn parses_addresses() {
        assert_eq!(
            Address::parse("127.0.0.1:7001").unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            Address::parse("[::1]:443").unwrap().host,
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Address::parse("LocalHost:7002").unwrap(),
            Address {
                host: Host::Name("localhost".into()),
                port: 7002
            }
        );
        assert!(Address::parse("localhost").unwrap_err().contains("no port"));
        assert!(Address::parse("a b:1")
            .unwrap_err()
            .contains("not a host name"));
        assert!(Address::parse("x:0").unwrap_err().contains("port 0"));
        assert!(Address::parse("x:99999")
            .unwrap_err()
            .contains("invalid port"));
    }

    #[test]
    fn least_connections_prefers_idle_and_rotates_ties() {
        let set = EndpointSet::new(
            "r",
            &spec(
                &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                Policy::LeastConnections,
            ),
            BackendMetrics::default(),
        );
        // Ties rotate: three picks with no load hit three endpoints.
        let mut seen = Vec::new();
        for _ in 0..3 {
            let e = set.pick(&[]).unwrap();
            if !seen.iter().any(|s: &Arc<Endpoint>| Arc::ptr_eq(s, &e)) {
                seen.push(e);
            }
        }
        assert_eq!(seen.len(), 3);
        // Load two endpoints: the third is always chosen.
        let members = set.members();
        let _a = members.endpoints[0].lease();
        let _b = members.endpoints[1].lease();
        for _ in 0..5 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:3");
        }
    }

    fn measured(set: &EndpointSet, latencies_ms: &[u64]) {
        for (e, ms) in set.members().endpoints.iter().zip(latencies_ms) {
            if *ms > 0 {
                e.record_latency(Duration::from_millis(*ms));
            }
        }
    }

    #[test]
    fn lowest_latency_picks_the_fastest_and_fails_over_in_latency_order() {
        let set = EndpointSet::new(
            "r",
            &spec(
                &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"],
                Policy::LowestLatency,
            ),
            BackendMetrics::default(),
        );
        // Unmeasured endpoints (the fourth) rank last.
        measured(&set, &[30, 10, 20, 0]);
        for _ in 0..5 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        }
        let mut tried = Vec::new();
        while let Some(e) = set.pick(&tried) {
            tried.push(e);
        }
        let order: Vec<&str> = tried.iter().map(|e| e.name()).collect();
        assert_eq!(
            order,
            ["127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:1", "127.0.0.1:4"]
        );
        // An ejected fast endpoint is skipped.
        tried[0].record_connect_failure(&Ejection::default());
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:3");
    }

    #[test]
    fn latency_is_a_moving_average() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        assert_eq!(e.latency(), None);
        e.record_latency(Duration::from_millis(40));
        assert_eq!(e.latency(), Some(Duration::from_millis(40)));
        e.record_latency(Duration::from_millis(0));
        assert_eq!(e.latency(), Some(Duration::from_millis(30)));
        assert!((e.metrics().latency_seconds.get() - 0.030).abs() < 1e-9);
    }

    #[test]
    fn prefer_local_beats_latency() {
        // 192.0.2.1 (TEST-NET-1) is never assigned here; 127.0.0.1 always is.
        let set = EndpointSet::new(
            "r",
            &spec(
                &["192.0.2.1:1", "127.0.0.1:2", "192.0.2.1:3"],
                Policy::PreferLocalThenLatency,
            ),
            BackendMetrics::default(),
        );
        let members = set.members_full();
        assert!(!members.endpoints[0].is_local());
        assert!(members.endpoints[1].is_local());
        measured(&set, &[1, 50, 5]);
        for _ in 0..5 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        }
        // Failover from the local one goes by latency.
        let local = members.endpoints[1].clone();
        assert_eq!(
            set.pick(std::slice::from_ref(&local)).unwrap().name(),
            "192.0.2.1:1"
        );
        // The same set without the preference takes the fastest.
        set.apply(&spec(
            &["192.0.2.1:1", "127.0.0.1:2", "192.0.2.1:3"],
            Policy::LowestLatency,
        ));
        assert_eq!(set.pick(&[]).unwrap().name(), "192.0.2.1:1");
    }

    #[tokio::test]
    async fn a_check_taking_the_endpoint_down_wakes_its_connections() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        let check = crate::health::HealthCheckConfig {
            kind: crate::health::CheckKind::Tcp,
            path: None,
            interval: None,
            timeout: None,
            rise: Some(1),
            fall: Some(2),
            server_name: None,
            ca_file: None,
            insecure_skip_verify: false,
        }
        .validate()
        .unwrap();
        let down = e.marked_down();
        tokio::pin!(down);
        down.as_mut().enable();
        e.record_check(false, &check);
        assert!(
            futures_poll(down.as_mut()).is_pending(),
            "one failure of fall 2"
        );
        e.record_check(false, &check);
        assert!(futures_poll(down.as_mut()).is_ready());
    }

    fn futures_poll<F: std::future::Future>(
        f: std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        f.poll(&mut std::task::Context::from_waker(waker))
    }

    #[test]
    fn local_addresses() {
        assert!(is_local_ip("127.0.0.1".parse().unwrap()));
        assert!(!is_local_ip("192.0.2.1".parse().unwrap()));
        assert!(!is_local_ip("0.0.0.0".parse().unwrap()));
    }

    #[test]
    fn expand_gives_every_record_its_own_endpoint() {
        let s = spec(
            &[
                "api.example.com:6443",
                "127.0.0.1:7",
                "down.example.com:6443",
            ],
            Policy::PreferLocalThenLatency,
        );
        assert_eq!(s.names().count(), 2);
        let mut resolved = std::collections::HashMap::new();
        resolved.insert(
            Address::parse("api.example.com:6443").unwrap(),
            vec![
                "10.0.0.1".parse().unwrap(),
                "fd00::1".parse().unwrap(),
                "127.0.0.1".parse().unwrap(),
            ],
        );
        let e = s.expand(&resolved);
        let names: Vec<String> = e.endpoints.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            names,
            [
                "10.0.0.1:6443",
                "[fd00::1]:6443",
                "127.0.0.1:6443",
                "127.0.0.1:7",
                "down.example.com:6443"
            ]
        );
        assert_eq!(e.policy, Policy::PreferLocalThenLatency);
    }

    #[test]
    fn round_robin_cycles() {
        let set = EndpointSet::new(
            "r",
            &spec(&["127.0.0.1:1", "127.0.0.1:2"], Policy::RoundRobin),
            BackendMetrics::default(),
        );
        let a = set.pick(&[]).unwrap();
        let b = set.pick(&[]).unwrap();
        let c = set.pick(&[]).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn ejected_endpoint_is_skipped_then_used_as_last_resort() {
        let set = EndpointSet::new(
            "r",
            &spec(&["127.0.0.1:1", "127.0.0.1:2"], Policy::LeastConnections),
            BackendMetrics::default(),
        );
        let members = set.members();
        let bad = members.endpoints[0].clone();
        bad.record_connect_failure(&Ejection::default());
        assert!(bad.is_ejected());
        for _ in 0..4 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        }
        let good = members.endpoints[1].clone();
        assert_eq!(
            set.pick(std::slice::from_ref(&good)).unwrap().name(),
            "127.0.0.1:1"
        );
        assert!(set.pick(&[good, bad.clone()]).is_none());
        bad.record_connect_success();
        assert!(bad.is_available());
    }

    #[test]
    fn ejection_backoff_grows_and_is_capped() {
        let e = Endpoint::new(
            Address::parse("127.0.0.1:1").unwrap(),
            BackendHandles::default(),
        );
        let ej = Ejection {
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let before = now_ms();
        e.record_connect_failure(&ej);
        let first = e.ejected_until.load(Ordering::Relaxed) - before;
        e.record_connect_failure(&ej);
        let second = e.ejected_until.load(Ordering::Relaxed) - before;
        e.record_connect_failure(&ej);
        let third = e.ejected_until.load(Ordering::Relaxed) - before;
        assert!((100..150).contains(&first), "{first}");
        assert!((200..250).contains(&second), "{second}");
        assert!((350..400).contains(&third), "{third}");
    }

    #[test]
    fn apply_keeps_state_of_unchanged_endpoints() {
        let set = EndpointSet::new(
            "r",
            &spec(&["127.0.0.1:1", "127.0.0.1:2"], Policy::LeastConnections),
            BackendMetrics::default(),
        );
        let lease = set.members().endpoints[1].lease();
        set.apply(&spec(&["127.0.0.1:2", "127.0.0.1:3"], Policy::RoundRobin));
        let members = set.members();
        assert_eq!(members.endpoints.len(), 2);
        assert!(Arc::ptr_eq(&members.endpoints[0], lease.endpoint()));
        assert_eq!(members.endpoints[0].active(), 1);
        assert_eq!(members.policy, Policy::RoundRobin);
        drop(lease);
        assert_eq!(members.endpoints[0].active(), 0);
    }
}
