//! The one order in which every role picks an endpoint: the gateway and
//! the agent through [`EndpointSet::pick`](crate::endpoint::EndpointSet::pick),
//! the client library through
//! [`EndpointChoice::pick`](crate::choice::EndpointChoice::pick). Each
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
//! use apiway_core::select::{best, Candidate};
//!
//! let c = |usable, in_use, local, rank| Candidate { usable, in_use, local, rank };
//! // The one in use wins while usable, even over a local, faster one.
//! assert_eq!(best([c(true, false, true, 1), c(true, true, false, 9)]), Some(1));
//! // Then local ones, then the lowest rank.
//! assert_eq!(best([c(true, false, false, 1), c(true, false, true, 9)]), Some(1));
//! assert_eq!(best([c(true, false, false, 5), c(false, true, true, 1), c(true, false, false, 2)]), Some(2));
//! assert_eq!(best([c(false, false, false, 1)]), None);
//! ```

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
    fn an_unusable_endpoint_in_use_does_not_stick() {
        assert_eq!(
            best([c(false, true, true, 0), c(true, false, false, 9)]),
            Some(1)
        );
        assert_eq!(best(Vec::<Candidate<u32>>::new()), None);
    }
}
