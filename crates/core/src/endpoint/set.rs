//! Endpoint sets: the backends of a route (gateway) or the API server
//! endpoints of an upstream (agent), with their health and load, shared by
//! every connection of the route and swapped atomically on reload.
//!
//! An endpoint takes new connections when its active health check says it
//! is up and no recent connect failure has ejected it. Among those, the
//! set's [`Policy`] ranks them through core's one selection order
//! ([`super::select`]); when none is available, unavailable ones are tried
//! as the last resort.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};

use super::address::Address;
use super::check::HealthCheck;
use super::member::Endpoint;
use super::membership;
use super::penalty::Ejection;
use super::select::{best, Candidate, Hysteresis, Policy};
use crate::metrics::BackendMetrics;

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
        membership::names(&self.endpoints)
    }

    /// This spec with every DNS name replaced by one endpoint per address
    /// it resolved to (see [`membership::expand`]).
    pub fn expand(&self, resolved: &HashMap<Address, Vec<IpAddr>>) -> EndpointSetSpec {
        EndpointSetSpec {
            endpoints: membership::expand(&self.endpoints, resolved),
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
    /// The endpoint a latency policy chose last, kept with [`Hysteresis`].
    chosen: ArcSwapOption<Endpoint>,
    metrics: BackendMetrics,
    /// The last applied spec and the discovered endpoints; held while
    /// applying, so two changes cannot interleave.
    applying: Mutex<Sources>,
}

/// What the members are built from.
#[derive(Default)]
struct Sources {
    configured: Option<EndpointSetSpec>,
    /// Endpoints from a discovery source (the agent's
    /// `--discover-endpoints`), after the configured ones.
    discovered: Vec<Address>,
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
            chosen: ArcSwapOption::empty(),
            metrics,
            applying: Mutex::new(Sources::default()),
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
        let mut sources = crate::sync::lock(&self.applying);
        sources.configured = Some(spec.clone());
        self.rebuild(spec, &sources.discovered);
    }

    /// Sets the endpoints a discovery source lists; they join the
    /// configured ones (which stay, as the seed and last resort), with the
    /// same health checks and policy. An address listed by both is one
    /// endpoint.
    pub fn set_discovered(&self, discovered: Vec<Address>) {
        let mut sources = crate::sync::lock(&self.applying);
        sources.discovered = discovered;
        if let Some(spec) = &sources.configured {
            self.rebuild(spec, &sources.discovered);
        }
    }

    fn rebuild(&self, spec: &EndpointSetSpec, discovered: &[Address]) {
        let old = self.members.load_full();
        let mut endpoints = Vec::with_capacity(spec.endpoints.len() + discovered.len());
        for address in spec.endpoints.iter().chain(discovered) {
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
        self.pick_at(Instant::now(), tried)
    }

    /// [`pick`](Self::pick) at `now`.
    pub fn pick_at(&self, now: Instant, tried: &[Arc<Endpoint>]) -> Option<Arc<Endpoint>> {
        let members = self.members.load();
        let n = members.endpoints.len();
        if n == 0 {
            return None;
        }
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % n;
        // In rotated order, so ties rotate; no allocation per pick.
        let at = |i: usize| &members.endpoints[(start + i) % n];
        let policy = members.policy;
        // core's one selection order over the available endpoints, ranked
        // by the set's policy.
        let candidates = (0..n).map(at).map(|e| Candidate {
            usable: e.is_available_at(now) && untried(tried, e),
            in_use: false,
            local: policy == Policy::PreferLocalThenLatency && e.is_local(),
            rank: match policy {
                Policy::RoundRobin => 0,
                Policy::LeastConnections => e.active() as u64,
                Policy::LowestLatency | Policy::PreferLocalThenLatency => e.latency_rank(),
            },
        });
        if let Some(i) = best(candidates) {
            let fastest = at(i);
            if policy.by_latency() {
                return Some(self.keep_or_switch(&members, fastest, now, tried));
            }
            return Some(fastest.clone());
        }
        // The last resort: unavailable endpoints, since health verdicts
        // can be stale and a client should see no error while any endpoint
        // is up; checked up first, then the one whose ejection ends first.
        let fallbacks = (0..n).map(at).map(|e| Candidate {
            usable: untried(tried, e),
            in_use: false,
            local: false,
            rank: (!e.is_up(), e.ejection_deadline()),
        });
        best(fallbacks).map(|i| at(i).clone())
    }

    /// A latency policy's stickiness: the endpoint chosen before stays
    /// while it is available, untried and as local as `fastest`, unless
    /// `fastest` is clearly faster ([`Hysteresis`]). Locality comes first:
    /// a local endpoint available again replaces a remote one at once.
    /// Only a fresh pick (nothing tried) moves the choice; failover within
    /// one connection does not.
    fn keep_or_switch(
        &self,
        members: &Members,
        fastest: &Arc<Endpoint>,
        now: Instant,
        tried: &[Arc<Endpoint>],
    ) -> Arc<Endpoint> {
        let chosen = self.chosen.load();
        if let Some(chosen) = chosen.as_ref() {
            if Arc::ptr_eq(chosen, fastest) {
                return fastest.clone();
            }
            let keep = chosen.is_available_at(now)
                && untried(tried, chosen)
                && (members.policy != Policy::PreferLocalThenLatency
                    || chosen.is_local() == fastest.is_local())
                && members.endpoints.iter().any(|e| Arc::ptr_eq(e, chosen))
                && !Hysteresis::default().switches(chosen.latency(), fastest.latency());
            if keep {
                return chosen.clone();
            }
        }
        if tried.is_empty() {
            self.chosen.store(Some(fastest.clone()));
        }
        fastest.clone()
    }
}

fn untried(tried: &[Arc<Endpoint>], e: &Arc<Endpoint>) -> bool {
    !tried.iter().any(|t| Arc::ptr_eq(t, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(addrs: &[&str], policy: Policy) -> EndpointSetSpec {
        EndpointSetSpec {
            endpoints: addrs.iter().map(|a| Address::parse(a).unwrap()).collect(),
            policy,
            health_check: None,
            ejection: Ejection::default(),
        }
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

    /// Sets an endpoint's latency average to exactly `ms`, from `from_ms`
    /// (one sample of `4 * ms - 3 * from_ms`, see `record_latency`).
    fn move_latency(e: &Endpoint, from_ms: u64, ms: u64) {
        e.record_latency(Duration::from_millis(4 * ms - 3 * from_ms));
        assert_eq!(e.latency(), Some(Duration::from_millis(ms)));
    }

    #[test]
    fn lowest_latency_keeps_its_choice_until_another_is_clearly_faster() {
        let set = EndpointSet::new(
            "r",
            &spec(&["127.0.0.1:1", "127.0.0.1:2"], Policy::LowestLatency),
            BackendMetrics::default(),
        );
        measured(&set, &[10, 12]);
        let members = set.members_full();
        let (one, two) = (&members.endpoints[0], &members.endpoints[1]);
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:1");
        // 9 ms against 10 ms: 1 ms but only 10 % faster; the choice stays.
        move_latency(two, 12, 9);
        for _ in 0..4 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:1");
        }
        // Failover within a connection takes the faster one without moving
        // the choice.
        assert_eq!(
            set.pick(std::slice::from_ref(one)).unwrap().name(),
            "127.0.0.1:2"
        );
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:1");
        // 7.5 ms against 10 ms: 25 % and 2.5 ms faster; switch.
        two.record_latency(Duration::from_micros(3000));
        assert_eq!(two.latency(), Some(Duration::from_micros(7500)));
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        // Now the other way round: equal is no reason to go back.
        one.record_latency(Duration::ZERO);
        assert_eq!(one.latency(), two.latency());
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        // The choice is not sticky once it is unavailable.
        let now = Instant::now();
        two.record_connect_failure_at(&Ejection::default(), now);
        assert_eq!(set.pick_at(now, &[]).unwrap().name(), "127.0.0.1:1");
        assert_eq!(
            set.pick_at(now + Duration::from_secs(2), &[])
                .unwrap()
                .name(),
            "127.0.0.1:1",
            "the choice made during the ejection stays"
        );
    }

    #[test]
    fn new_connections_return_to_the_local_endpoint_once_it_is_healthy() {
        let set = EndpointSet::new(
            "r",
            &spec(
                &["192.0.2.1:1", "127.0.0.1:2"],
                Policy::PreferLocalThenLatency,
            ),
            BackendMetrics::default(),
        );
        measured(&set, &[1, 20]);
        let check = crate::endpoint::check::HealthCheck::tcp(1, 1);
        let local = set.members_full().endpoints[1].clone();
        assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        // The local API server fails its check: the remote one is chosen
        // and kept.
        assert_eq!(local.record_check(false, &check), Some(false));
        for _ in 0..3 {
            assert_eq!(set.pick(&[]).unwrap().name(), "192.0.2.1:1");
        }
        // Healthy again: the next connection goes home, although the
        // remote one is in use and much faster.
        assert_eq!(local.record_check(true, &check), Some(true));
        for _ in 0..3 {
            assert_eq!(set.pick(&[]).unwrap().name(), "127.0.0.1:2");
        }
        // The same after a passive ejection runs out.
        let now = Instant::now();
        local.record_connect_failure_at(&Ejection::default(), now);
        assert_eq!(set.pick_at(now, &[]).unwrap().name(), "192.0.2.1:1");
        let later = now + Duration::from_secs(2);
        assert_eq!(set.pick_at(later, &[]).unwrap().name(), "127.0.0.1:2");
    }
}
