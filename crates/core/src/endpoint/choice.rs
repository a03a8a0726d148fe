//! Choosing among an origin's alternative endpoints: the policy of the
//! OpenShift "resilient control-plane networking" proposal, without I/O and
//! without a clock (every call that needs the time takes `now`), so it is
//! tested deterministically and shared by every role that fails over
//! between the endpoints of one API server.
//!
//! Built from the endpoint model's pieces: [`Membership`] (static,
//! discovered and learned alternatives, with expiry; the origin as the
//! last resort), [`Blocks`] (fixed and permanent blocks) and core's one
//! selection order ([`super::select`]).
//!
//! The order, for each attempt of a request (with the origin ranked first
//! among the others):
//!
//! 0. a local endpoint that was in use until it failed, once its block has
//!    run out: stickiness never keeps the client away from its local API
//!    server;
//! 1. the endpoint in use, while it is listed and not blocked (no flapping);
//! 2. otherwise a listed alternative whose address is on a local interface;
//! 3. otherwise the origin, if the origin itself is listed;
//! 4. otherwise the next listed alternative that is not blocked;
//! 5. when every listed alternative is blocked or was tried by this request,
//!    the origin, once, blocked or not: a client never does worse than a
//!    plain one would.
//!
//! A network error blocks an endpoint for [`ChoicePolicy::block_period`]; a
//! certificate error blocks it for good. Alternatives carry an expiry and
//! drop out of the list when it passes until a source lists them again.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use apiway_core::endpoint::choice::{ChoicePolicy, EndpointChoice, Failure, Listed};
//!
//! let now = Instant::now();
//! let mut choice = EndpointChoice::new("lb:6443", ChoicePolicy::default());
//! assert_eq!(choice.pick(now, &[]), Some("lb:6443")); // plain client
//! choice.set_learned(vec![
//!     Listed::new("10.0.0.1:6443", false).expires(now + Duration::from_secs(70)),
//!     Listed::new("10.0.0.2:6443", false).expires(now + Duration::from_secs(70)),
//! ]);
//! assert_eq!(choice.pick(now, &[]), Some("10.0.0.1:6443"));
//! choice.record_failure(&"10.0.0.1:6443", Failure::Network, now);
//! assert_eq!(choice.pick(now, &[]), Some("10.0.0.2:6443"));
//! ```

use std::hash::Hash;
use std::time::{Duration, Instant};

pub use super::membership::Listed;
use super::membership::Membership;
use super::penalty::Blocks;
pub use super::penalty::{Block, Failure};
use super::select::{best, Candidate};

/// Settings of an [`EndpointChoice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChoicePolicy {
    /// How long a network error keeps an endpoint out (default 20 s).
    pub block_period: Duration,
}

impl Default for ChoicePolicy {
    fn default() -> Self {
        ChoicePolicy {
            block_period: Duration::from_secs(20),
        }
    }
}

/// The endpoints of one origin and the choice among them: see the
/// [module docs](self) for the order.
///
/// `K` names an endpoint (an address, a `host:port` string); the origin is
/// one of them. Alternatives come from three sources, listed in this
/// order: a static list (never expires), discovered ones (the
/// `default/kubernetes` EndpointSlices; each new list replaces them all)
/// and learned ones (an `Alt-Svc` header; each new value replaces all
/// learned alternatives). An endpoint listed by several counts once, at
/// its first place.
#[derive(Clone, Debug)]
pub struct EndpointChoice<K> {
    policy: ChoicePolicy,
    members: Membership<K>,
    blocks: Blocks<K>,
    in_use: Option<K>,
    /// A local endpoint that was in use until it failed: preferred again
    /// once its block runs out.
    home: Option<K>,
}

impl<K: Clone + Eq + Hash> EndpointChoice<K> {
    /// A choice with no alternatives: every pick is the origin.
    pub fn new(origin: K, policy: ChoicePolicy) -> Self {
        EndpointChoice {
            policy,
            members: Membership::new(origin),
            blocks: Blocks::new(policy.block_period),
            in_use: None,
            home: None,
        }
    }

    /// The origin.
    pub fn origin(&self) -> &K {
        self.members.origin()
    }

    /// The settings.
    pub fn policy(&self) -> ChoicePolicy {
        self.policy
    }

    /// Replaces the static alternatives (they never expire).
    pub fn set_static(&mut self, listed: Vec<Listed<K>>) {
        self.members.set_configured(listed);
    }

    /// Replaces every discovered alternative (from the EndpointSlices of
    /// the API server's Service); an empty list drops them all.
    pub fn set_discovered(&mut self, listed: Vec<Listed<K>>) {
        self.members.set_discovered(listed);
    }

    /// The discovered alternatives, as last set.
    pub fn discovered(&self) -> &[Listed<K>] {
        self.members.discovered()
    }

    /// Replaces every learned alternative (an `Alt-Svc` value replaces the
    /// whole cache for its origin, RFC 7838 section 3); an empty list is
    /// `clear`.
    pub fn set_learned(&mut self, listed: Vec<Listed<K>>) {
        self.members.set_learned(listed);
    }

    /// Drops discovered and learned alternatives whose expiry is at or
    /// before `now`, and blocks that have run out. Returns how many
    /// alternatives expired.
    pub fn expire(&mut self, now: Instant) -> usize {
        self.blocks.expire(now);
        self.members.expire(now)
    }

    /// Every listed alternative (static first, then discovered, then
    /// learned, duplicates removed), ignoring expiry: call
    /// [`expire`](Self::expire) first.
    pub fn alternatives(&self) -> Vec<&Listed<K>> {
        self.members.listed()
    }

    /// Whether `key` is listed as an alternative.
    pub fn is_listed(&self, key: &K) -> bool {
        self.members.is_listed(key)
    }

    /// Whether `key` is blocked at `now`.
    pub fn is_blocked(&self, key: &K, now: Instant) -> bool {
        self.blocks.is_blocked(key, now)
    }

    /// The block on `key`, if any is in force at `now`.
    pub fn block(&self, key: &K, now: Instant) -> Option<Block> {
        self.blocks.get(key, now)
    }

    /// The endpoint in use: the last one that answered, if it is still
    /// listed (or is the origin).
    pub fn in_use(&self) -> Option<&K> {
        self.in_use.as_ref()
    }

    /// The endpoint for the next attempt of a request that already tried
    /// `tried`; `None` when the origin was tried too.
    pub fn pick(&self, now: Instant, tried: &[K]) -> Option<K> {
        let alternatives = self.alternatives();
        let usable = |key: &K| !tried.contains(key) && !self.is_blocked(key, now);
        // core's one selection order: the one in use, then local ones,
        // then the origin (rank 0) before the others, in list order; a
        // local endpoint left after a failure counts as in use again
        // once usable, so stickiness never overrides locality.
        let home_back = self
            .home
            .as_ref()
            .filter(|home| usable(home) && self.is_listed(home));
        let sticky = home_back.or(self.in_use.as_ref());
        let candidates = alternatives.iter().map(|l| Candidate {
            usable: usable(&l.key),
            in_use: sticky == Some(&l.key),
            local: l.local,
            rank: &l.key != self.origin(),
        });
        if let Some(index) = best(candidates) {
            return Some(alternatives[index].key.clone());
        }
        // The last resort: the origin, once, blocked or not.
        let origin = self.origin();
        (!tried.contains(origin)).then(|| origin.clone())
    }

    /// `key` answered: it becomes the endpoint in use, and any block on it
    /// ends (the origin may be used while blocked, as the last resort).
    pub fn record_success(&mut self, key: &K) {
        self.blocks.lift(key);
        if self.home.as_ref() == Some(key) {
            self.home = None;
        }
        self.in_use = Some(key.clone());
    }

    /// An attempt on `key` failed at `now`: block it, and stop using it.
    pub fn record_failure(&mut self, key: &K, failure: Failure, now: Instant) -> Block {
        let block = self.blocks.record(key, failure, now);
        if self.in_use.as_ref() == Some(key) {
            self.in_use = None;
            let local = self.alternatives().iter().any(|l| &l.key == key && l.local);
            if local && block != Block::Forever {
                self.home = Some(key.clone());
            }
        }
        if block == Block::Forever && self.home.as_ref() == Some(key) {
            self.home = None;
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "lb:6443";

    fn choice() -> EndpointChoice<&'static str> {
        EndpointChoice::new(ORIGIN, ChoicePolicy::default())
    }

    fn alt(key: &'static str) -> Listed<&'static str> {
        Listed::new(key, false)
    }

    #[test]
    fn no_alternatives_always_picks_the_origin_even_after_failures() {
        let now = Instant::now();
        let mut c = choice();
        assert_eq!(c.pick(now, &[]), Some(ORIGIN));
        c.record_failure(&ORIGIN, Failure::Network, now);
        assert_eq!(
            c.pick(now, &[]),
            Some(ORIGIN),
            "the origin is the last resort"
        );
        c.record_failure(&ORIGIN, Failure::Certificate, now);
        assert_eq!(c.pick(now, &[]), Some(ORIGIN));
        assert_eq!(c.pick(now, &[ORIGIN]), None, "one attempt per request");
    }

    #[test]
    fn sticks_to_the_endpoint_in_use_over_a_local_one() {
        let now = Instant::now();
        let mut c = choice();
        c.set_static(vec![alt("a:1"), alt("b:1")]);
        assert_eq!(c.pick(now, &[]), Some("a:1"));
        c.record_success(&"b:1");
        // A local alternative appears: the one in use stays.
        c.set_learned(vec![Listed::new("l:1", true)]);
        assert_eq!(c.pick(now, &[]), Some("b:1"));
        assert_eq!(c.in_use(), Some(&"b:1"));
    }

    #[test]
    fn prefers_local_then_origin_then_list_order() {
        let now = Instant::now();
        let mut c = choice();
        c.set_learned(vec![alt("a:1"), alt(ORIGIN), Listed::new("l:1", true)]);
        assert_eq!(c.pick(now, &[]), Some("l:1"));
        assert_eq!(c.pick(now, &["l:1"]), Some(ORIGIN));
        assert_eq!(c.pick(now, &["l:1", ORIGIN]), Some("a:1"));
        // Every alternative tried, the origin too (it was listed): done.
        assert_eq!(c.pick(now, &["l:1", ORIGIN, "a:1"]), None);
    }

    #[test]
    fn a_network_error_blocks_for_the_block_period() {
        let now = Instant::now();
        let mut c = choice();
        c.set_static(vec![alt("a:1"), alt("b:1")]);
        c.record_success(&"a:1");
        let block = c.record_failure(&"a:1", Failure::Network, now);
        assert_eq!(block, Block::Until(now + Duration::from_secs(20)));
        assert_eq!(c.in_use(), None);
        assert_eq!(c.pick(now, &[]), Some("b:1"));
        let later = now + Duration::from_secs(19);
        assert_eq!(c.pick(later, &[]), Some("b:1"));
        // b fails too: everything blocked, fall back to the origin.
        c.record_failure(&"b:1", Failure::Network, later);
        assert_eq!(c.pick(later, &[]), Some(ORIGIN));
        // After the period a is usable again (b still blocked).
        let after = now + Duration::from_secs(20);
        assert!(!c.is_blocked(&"a:1", after));
        assert_eq!(c.pick(after, &[]), Some("a:1"));
        assert_eq!(c.expire(after), 0);
    }

    #[test]
    fn a_certificate_error_blocks_for_good() {
        let now = Instant::now();
        let mut c = choice();
        c.set_static(vec![alt("bad:1"), alt("b:1")]);
        c.record_failure(&"bad:1", Failure::Certificate, now);
        let much_later = now + Duration::from_secs(86_400);
        c.expire(much_later);
        assert_eq!(c.block(&"bad:1", much_later), Some(Block::Forever));
        assert_eq!(c.pick(much_later, &[]), Some("b:1"));
        // Neither a later network error nor a success lifts it.
        c.record_failure(&"bad:1", Failure::Network, much_later);
        c.record_success(&"bad:1");
        assert!(c.is_blocked(&"bad:1", much_later + Duration::from_secs(60)));
    }

    #[test]
    fn learned_alternatives_expire_and_are_relisted() {
        let now = Instant::now();
        let mut c = choice();
        c.set_learned(vec![alt("a:1").expires(now + Duration::from_secs(5))]);
        c.set_static(vec![alt("s:1")]);
        assert_eq!(c.pick(now, &[]), Some("s:1"), "static first in list order");
        c.record_success(&"a:1");
        assert_eq!(c.pick(now, &[]), Some("a:1"));
        assert_eq!(c.expire(now + Duration::from_secs(4)), 0);
        assert_eq!(c.expire(now + Duration::from_secs(5)), 1);
        assert!(!c.is_listed(&"a:1"));
        assert_eq!(
            c.pick(now + Duration::from_secs(5), &[]),
            Some("s:1"),
            "an expired endpoint is no longer sticky"
        );
        c.set_learned(vec![alt("a:1")]);
        assert_eq!(c.pick(now, &[]), Some("a:1"), "relisted, and still in use");
    }

    #[test]
    fn returns_to_the_local_endpoint_once_its_block_ends() {
        let now = Instant::now();
        let mut c = choice();
        c.set_static(vec![Listed::new("l:1", true), alt("b:1")]);
        assert_eq!(c.pick(now, &[]), Some("l:1"));
        c.record_success(&"l:1");
        // The local API server restarts: the client moves and sticks.
        c.record_failure(&"l:1", Failure::Network, now);
        assert_eq!(c.pick(now, &[]), Some("b:1"));
        c.record_success(&"b:1");
        let soon = now + Duration::from_secs(10);
        assert_eq!(c.pick(soon, &[]), Some("b:1"));
        // Its block over, new connections go home although b:1 is in use.
        let after = now + Duration::from_secs(20);
        c.expire(after);
        assert_eq!(c.pick(after, &[]), Some("l:1"));
        assert_eq!(c.pick(after, &["l:1"]), Some("b:1"), "then the one in use");
        c.record_success(&"l:1");
        assert_eq!(c.in_use(), Some(&"l:1"));
        // A certificate error is no way home.
        c.record_failure(&"l:1", Failure::Certificate, after);
        c.record_success(&"b:1");
        assert_eq!(c.pick(after + Duration::from_secs(60), &[]), Some("b:1"));
    }

    #[test]
    fn the_origin_in_use_as_a_fallback_does_not_stick() {
        let now = Instant::now();
        let mut c = choice();
        c.set_static(vec![alt("a:1")]);
        c.record_failure(&"a:1", Failure::Network, now);
        assert_eq!(c.pick(now, &[]), Some(ORIGIN));
        c.record_success(&ORIGIN);
        let after = now + Duration::from_secs(21);
        assert_eq!(c.pick(after, &[]), Some("a:1"));
    }

    #[test]
    fn duplicates_across_sources_count_once() {
        let mut c = choice();
        c.set_static(vec![alt("a:1")]);
        c.set_learned(vec![alt("a:1"), alt("b:1")]);
        let keys: Vec<_> = c.alternatives().iter().map(|l| l.key).collect();
        assert_eq!(keys, ["a:1", "b:1"]);
        c.set_learned(Vec::new());
        assert_eq!(c.alternatives().len(), 1, "clear keeps the static list");
    }

    #[test]
    fn discovered_sit_between_static_and_learned_and_expire() {
        let now = Instant::now();
        let mut c = choice();
        c.set_learned(vec![alt("l:1"), alt("d:2")]);
        c.set_discovered(vec![
            alt("d:1"),
            alt("s:1"),
            alt("d:2").expires(now + Duration::from_secs(5)),
        ]);
        c.set_static(vec![alt("s:1")]);
        let keys: Vec<_> = c.alternatives().iter().map(|l| l.key).collect();
        assert_eq!(
            keys,
            ["s:1", "d:1", "d:2", "l:1"],
            "each once, at its first place"
        );
        assert_eq!(c.pick(now, &["s:1"]), Some("d:1"));
        assert!(c.is_listed(&"d:1"));

        // The discovered d:2 expires; the learned d:2 still lists it.
        assert_eq!(c.expire(now + Duration::from_secs(5)), 1);
        let keys: Vec<_> = c.alternatives().iter().map(|l| l.key).collect();
        assert_eq!(keys, ["s:1", "d:1", "l:1", "d:2"]);

        c.set_discovered(Vec::new());
        assert!(!c.is_listed(&"d:1"), "an empty list drops them");
        let keys: Vec<_> = c.alternatives().iter().map(|l| l.key).collect();
        assert_eq!(keys, ["s:1", "l:1", "d:2"]);
    }
}
