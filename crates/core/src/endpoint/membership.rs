//! Membership: which endpoints exist, and where each came from.
//!
//! Every role draws its members from the same sources:
//!
//! - **config**: the addresses written in a configuration or passed in by
//!   a program (the client's static alternatives); they never expire;
//! - **DNS**: a name stands for every A/AAAA record it resolves to, each
//!   its own member ([`expand`]), re-resolved as time goes by;
//! - **discovery**: the `default/kubernetes` EndpointSlices, or
//!   alternatives learned from an `Alt-Svc` header; each new list replaces
//!   the previous one of its source, and each member may carry an expiry.
//!
//! The client's origin is a member too, of last resort: it is used when
//! nothing else is left (see [`super::choice`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use super::address::{Address, Host};

/// One member as a source lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed<K> {
    /// The endpoint.
    pub key: K,
    /// Whether its address is on a local interface (see
    /// [`super::is_local_ip`]).
    pub local: bool,
    /// When it stops being listed; `None` for never (a static list).
    pub expires_at: Option<Instant>,
}

impl<K> Listed<K> {
    /// A member that does not expire.
    pub fn new(key: K, local: bool) -> Self {
        Listed {
            key,
            local,
            expires_at: None,
        }
    }

    /// The same member, expiring at `at`.
    pub fn expires(mut self, at: Instant) -> Self {
        self.expires_at = Some(at);
        self
    }

    fn fresh(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// The members of one origin from its three sources, listed in this
/// order: configured (never expire), discovered (EndpointSlices) and
/// learned (`Alt-Svc`). A member listed by several counts once, at its
/// first place.
#[derive(Clone, Debug)]
pub struct Membership<K> {
    origin: K,
    configured: Vec<Listed<K>>,
    discovered: Vec<Listed<K>>,
    learned: Vec<Listed<K>>,
}

impl<K: Clone + Eq> Membership<K> {
    /// Only the origin, the member of last resort.
    pub fn new(origin: K) -> Self {
        Membership {
            origin,
            configured: Vec::new(),
            discovered: Vec::new(),
            learned: Vec::new(),
        }
    }

    /// The origin.
    pub fn origin(&self) -> &K {
        &self.origin
    }

    /// Replaces the configured members.
    pub fn set_configured(&mut self, listed: Vec<Listed<K>>) {
        self.configured = listed;
    }

    /// Replaces every discovered member; an empty list drops them all.
    pub fn set_discovered(&mut self, listed: Vec<Listed<K>>) {
        self.discovered = listed;
    }

    /// The discovered members, as last set.
    pub fn discovered(&self) -> &[Listed<K>] {
        &self.discovered
    }

    /// Replaces every learned member (an `Alt-Svc` value replaces the
    /// whole cache for its origin, RFC 7838 section 3).
    pub fn set_learned(&mut self, listed: Vec<Listed<K>>) {
        self.learned = listed;
    }

    /// Drops discovered and learned members whose expiry is at or before
    /// `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.learned.len() + self.discovered.len();
        self.learned.retain(|l| l.fresh(now));
        self.discovered.retain(|l| l.fresh(now));
        before - self.learned.len() - self.discovered.len()
    }

    fn sources(&self) -> impl Iterator<Item = &Listed<K>> {
        self.configured
            .iter()
            .chain(self.discovered.iter())
            .chain(self.learned.iter())
    }

    /// Every listed member in listing order, duplicates removed, ignoring
    /// expiry: call [`expire`](Self::expire) first.
    pub fn listed(&self) -> Vec<&Listed<K>> {
        let mut out: Vec<&Listed<K>> = Vec::new();
        for l in self.sources() {
            if !out.iter().any(|o| o.key == l.key) {
                out.push(l);
            }
        }
        out
    }

    /// Whether a source lists `key`.
    pub fn is_listed(&self, key: &K) -> bool {
        self.sources().any(|l| &l.key == key)
    }
}

/// The addresses in `endpoints` named by DNS.
pub fn names(endpoints: &[Address]) -> impl Iterator<Item = &Address> {
    endpoints.iter().filter(|a| matches!(a.host, Host::Name(_)))
}

/// `endpoints` with every DNS name replaced by one member per address it
/// resolved to (`resolved`), so each A/AAAA record gets its own health,
/// latency and ejection. A name missing from `resolved` (not resolved yet,
/// or never) stays as itself: a member that is down until it resolves.
/// Duplicates are dropped, first one wins.
pub fn expand(endpoints: &[Address], resolved: &HashMap<Address, Vec<IpAddr>>) -> Vec<Address> {
    let mut out: Vec<Address> = Vec::with_capacity(endpoints.len());
    let mut push = |a: Address| {
        if !out.contains(&a) {
            out.push(a);
        }
    };
    for address in endpoints {
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sources_list_in_order_each_member_once_and_expire() {
        let now = Instant::now();
        let mut m = Membership::new("o:1");
        m.set_learned(vec![Listed::new("l:1", false), Listed::new("d:1", false)]);
        m.set_discovered(vec![
            Listed::new("d:1", false).expires(now + Duration::from_secs(5))
        ]);
        m.set_configured(vec![Listed::new("c:1", true)]);
        let keys: Vec<_> = m.listed().iter().map(|l| l.key).collect();
        assert_eq!(keys, ["c:1", "d:1", "l:1"]);
        assert_eq!(m.expire(now + Duration::from_secs(5)), 1);
        let keys: Vec<_> = m.listed().iter().map(|l| l.key).collect();
        assert_eq!(keys, ["c:1", "l:1", "d:1"], "still learned");
        assert!(!m.is_listed(&"o:1"), "the origin is no listed member");
        assert_eq!(m.origin(), &"o:1");
    }
}
