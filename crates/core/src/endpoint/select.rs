//! The one order in which every role picks an endpoint: the gateway and
//! the agent through [`EndpointSet::pick`](super::EndpointSet::pick),
//! the client library through
//! [`EndpointChoice::pick`](super::choice::EndpointChoice::pick). Each
//! describes its endpoints as [`Candidate`]s (what is usable, what is in
//! use, what is local, and its policy's rank) and [`best`] decides:
//!
//! 1. only usable candidates (healthy or not blocked, not yet tried by
//!    this request);
//! 2. the one in use, while it is usable: no flapping;
//! 3. otherwise one on a local interface, if the role prefers those;
//! 4. otherwise, and among local ones, the lowest rank (fewest
//!    connections, lowest latency, the origin, ...); ties go to the
//!    earliest candidate, so the caller's order (a rotation, a list)
//!    breaks them.
//!
//! What happens when nothing is usable is the role's last resort, picked
//! with [`best`] too over its own fallback candidates: the gateway and the
//! agent try unavailable endpoints (up first, then the one whose ejection
//! ends first), the client tries its origin once.
//!
//! ```
//! use apiway_core::endpoint::select::{best, Candidate};
//!
//! let c = |usable, in_use, local, rank| Candidate { usable, in_use, local, rank };
//! // The one in use wins while usable, even over a local, faster one.
//! assert_eq!(best([c(true, false, true, 1), c(true, true, false, 9)]), Some(1));
//! // Then local ones, then the lowest rank.
//! assert_eq!(best([c(true, false, false, 1), c(true, false, true, 9)]), Some(1));
//! assert_eq!(best([c(true, false, false, 5), c(false, true, true, 1), c(true, false, false, 2)]), Some(2));
//! assert_eq!(best([c(false, false, false, 1)]), None);
//! ```

use std::time::Duration;

use serde::Deserialize;

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
    /// measured come last, ties rotate. The choice is kept until another
    /// endpoint is clearly faster (see [`Hysteresis`]).
    LowestLatency,
    /// An endpoint whose address is on a local interface first, then the
    /// lowest measured latency: what a per-node agent wants, since an API
    /// server on the same host is both fastest and shares the node's fate.
    /// A local endpoint wins over the one in use as soon as it is available
    /// again: keeping a choice never overrides locality.
    PreferLocalThenLatency,
}

impl Policy {
    /// Whether the policy ranks by latency, and so keeps its choice with
    /// [`Hysteresis`].
    pub fn by_latency(self) -> bool {
        matches!(self, Policy::LowestLatency | Policy::PreferLocalThenLatency)
    }
}

/// When a latency policy leaves the endpoint it chose for a faster one:
/// only when the other is faster by both a share and an absolute margin.
/// Probe times jitter by a few percent and by tens of microseconds on a
/// LAN; without a margin, two equally good endpoints would swap on every
/// probe round and each swap costs the new connections a cold path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hysteresis {
    /// The other endpoint must be faster by at least this many percent.
    pub percent: u32,
    /// ... and by at least this much.
    pub min: Duration,
}

impl Default for Hysteresis {
    /// Faster by 20 % and by 1 ms.
    fn default() -> Self {
        Hysteresis {
            percent: 20,
            min: Duration::from_millis(1),
        }
    }
}

impl Hysteresis {
    /// Whether an endpoint measured at `other` should replace the one in
    /// use, measured at `current` (`None`: not measured yet, which loses
    /// to any measurement).
    pub fn switches(&self, current: Option<Duration>, other: Option<Duration>) -> bool {
        match (current, other) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(current), Some(other)) => {
                let gain = current.saturating_sub(other);
                gain >= self.min
                    && gain.as_nanos() * 100 >= current.as_nanos() * u128::from(self.percent)
            }
        }
    }
}

/// What the order needs to know about one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<R> {
    /// Whether it may take this attempt at all.
    pub usable: bool,
    /// Whether it is the endpoint in use (kept while usable).
    pub in_use: bool,
    /// Whether it is preferred for being on a local interface (`false`
    /// when the role does not prefer local endpoints).
    pub local: bool,
    /// The role's policy rank: lower is better.
    pub rank: R,
}

/// The index of the best usable candidate, by the [module's](self) order;
/// `None` when none is usable.
pub fn best<R: Ord>(candidates: impl IntoIterator<Item = Candidate<R>>) -> Option<usize> {
    let mut chosen: Option<(usize, (bool, bool, R))> = None;
    for (index, c) in candidates.into_iter().enumerate() {
        if !c.usable {
            continue;
        }
        // Smaller is better: in use first, then local, then rank.
        let key = (!c.in_use, !c.local, c.rank);
        if chosen.as_ref().is_none_or(|(_, best)| key < *best) {
            chosen = Some((index, key));
        }
    }
    chosen.map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(usable: bool, in_use: bool, local: bool, rank: u32) -> Candidate<u32> {
        Candidate {
            usable,
            in_use,
            local,
            rank,
        }
    }

    #[test]
    fn ties_go_to_the_earliest_candidate() {
        assert_eq!(
            best([c(true, false, false, 3), c(true, false, false, 3)]),
            Some(0)
        );
        assert_eq!(
            best([
                c(true, false, true, 3),
                c(true, false, false, 1),
                c(true, false, true, 3)
            ]),
            Some(0)
        );
    }

    #[test]
    fn hysteresis_switches_only_for_a_clear_gain() {
        let h = Hysteresis::default();
        let ms = |m: f64| Some(Duration::from_secs_f64(m / 1000.0));
        // 10 ms in use: 8.5 ms is 15 % faster, not enough; 7.9 ms is.
        assert!(!h.switches(ms(10.0), ms(8.5)));
        assert!(h.switches(ms(10.0), ms(7.9)));
        // 2 ms in use: 1.2 ms is 40 % faster but only 0.8 ms: stay.
        assert!(!h.switches(ms(2.0), ms(1.2)));
        assert!(h.switches(ms(2.0), ms(0.9)));
        // Unmeasured loses to measured, and never wins.
        assert!(h.switches(None, ms(50.0)));
        assert!(!h.switches(ms(50.0), None));
        assert!(!h.switches(None, None));
        // Slower never wins.
        assert!(!h.switches(ms(5.0), ms(9.0)));
    }

    #[test]
    fn an_unusable_endpoint_in_use_does_not_stick() {
        assert_eq!(
            best([c(false, true, true, 0), c(true, false, false, 9)]),
            Some(1)
        );
        assert_eq!(best(Vec::<Candidate<u32>>::new()), None);
    }
}
