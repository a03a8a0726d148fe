//! Penalties: what keeps a failed endpoint out of the choice, and for how
//! long. Three kinds, chosen by the role as policy:
//!
//! - **backoff ejection** (gateway, agent): each consecutive connect
//!   failure doubles the time out, from [`Ejection::base`] up to
//!   [`Ejection::max`]; a success or a passing check ends it;
//! - **fixed block** (client): a network failure keeps the endpoint out for
//!   one block period;
//! - **permanent block** (client): a certificate error keeps it out for
//!   good, since waiting does not make a wrong certificate right.
//!
//! No clock here: every call that needs the time takes `now`.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

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

impl Ejection {
    /// The time out after `failures` consecutive failures (at least one).
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32 << (failures.saturating_sub(1)).min(16);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Why an attempt on an endpoint failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Connect, TLS transport, HTTP/2 or readiness failure: the endpoint is
    /// blocked for the block period.
    Network,
    /// The endpoint's certificate did not verify: blocked for good, since
    /// waiting does not make a wrong certificate right.
    Certificate,
}

/// How long an endpoint stays out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Until this instant.
    Until(Instant),
    /// For good (a certificate error).
    Forever,
}

/// Fixed and permanent blocks on endpoints named by `K`.
#[derive(Clone, Debug)]
pub struct Blocks<K> {
    period: Duration,
    blocked: HashMap<K, Block>,
}

impl<K: Clone + Eq + Hash> Blocks<K> {
    /// No blocks yet; a network failure blocks for `period`.
    pub fn new(period: Duration) -> Self {
        Blocks {
            period,
            blocked: HashMap::new(),
        }
    }

    /// The block on `key`, if one is in force at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<Block> {
        match self.blocked.get(key) {
            Some(Block::Until(t)) if *t <= now => None,
            other => other.copied(),
        }
    }

    /// Whether `key` is blocked at `now`.
    pub fn is_blocked(&self, key: &K, now: Instant) -> bool {
        self.get(key, now).is_some()
    }

    /// Blocks `key` for `failure` at `now`; a permanent block stays.
    /// Returns the block in force.
    pub fn record(&mut self, key: &K, failure: Failure, now: Instant) -> Block {
        let block = match failure {
            Failure::Network => Block::Until(now + self.period),
            Failure::Certificate => Block::Forever,
        };
        let entry = self.blocked.entry(key.clone()).or_insert(block);
        if *entry != Block::Forever {
            *entry = block;
        }
        *entry
    }

    /// `key` answered: a fixed block ends, a permanent one stays.
    pub fn lift(&mut self, key: &K) {
        if self.blocked.get(key) != Some(&Block::Forever) {
            self.blocked.remove(key);
        }
    }

    /// Forgets fixed blocks that ran out by `now`, so the map stays small.
    pub fn expire(&mut self, now: Instant) {
        self.blocked
            .retain(|_, b| matches!(b, Block::Until(t) if *t > now) || *b == Block::Forever);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let ej = Ejection {
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let ms = |n| ej.backoff(n).as_millis();
        assert_eq!((ms(1), ms(2), ms(3), ms(40)), (100, 200, 350, 350));
    }

    #[test]
    fn fixed_blocks_end_and_permanent_ones_do_not() {
        let now = Instant::now();
        let mut b = Blocks::new(Duration::from_secs(20));
        assert_eq!(
            b.record(&"a", Failure::Network, now),
            Block::Until(now + Duration::from_secs(20))
        );
        assert!(b.is_blocked(&"a", now + Duration::from_secs(19)));
        assert!(!b.is_blocked(&"a", now + Duration::from_secs(20)));
        assert_eq!(b.record(&"c", Failure::Certificate, now), Block::Forever);
        assert_eq!(b.record(&"c", Failure::Network, now), Block::Forever);
        b.lift(&"c");
        b.expire(now + Duration::from_secs(86_400));
        assert_eq!(b.get(&"c", now), Some(Block::Forever));
        assert!(!b.blocked.contains_key(&"a"), "expired blocks are dropped");
    }
}
