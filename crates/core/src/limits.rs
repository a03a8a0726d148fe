//! Process resource limits a proxy needs: the open-file limit.
//!
//! Each relayed connection holds two descriptors (client and upstream), so
//! the default soft `RLIMIT_NOFILE` of 1,024 caps a role near 500
//! connections whatever `max_connections` says. The runtime raises the soft
//! limit to the hard one at start and warns, in one line, when the
//! configured connection limits need more than that.

use rustix::process::{getrlimit, setrlimit, Resource};

/// Descriptors a relayed connection holds (client and upstream).
pub const FDS_PER_CONNECTION: u64 = 2;

/// Raises the soft open-file limit to the hard limit; returns the soft
/// limit now in force (`u64::MAX` for unlimited).
pub fn raise_nofile() -> u64 {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "could not raise RLIMIT_NOFILE");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The one-line warning when `connections` relayed connections need more
/// descriptors than `limit` (some are kept for listeners, the admin
/// endpoint and logs); `None` when they fit.
pub fn shortfall(connections: u64, limit: u64) -> Option<String> {
    let reserve = 64;
    let needed = connections
        .saturating_mul(FDS_PER_CONNECTION)
        .saturating_add(reserve);
    (needed > limit).then(|| {
        format!(
            "the configured connection limits allow {connections} connections, which need about {needed} open files, but RLIMIT_NOFILE is {limit}: raise it (ulimit -n, LimitNOFILE= in systemd) or lower max_connections"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortfall_counts_two_per_connection() {
        assert!(shortfall(10_000, 20_000).is_some());
        assert!(shortfall(9_000, 20_000).is_none());
        assert!(shortfall(u64::MAX, u64::MAX).is_none());
        let line = shortfall(10_000, 1_024).unwrap();
        assert!(line.contains("1024") && !line.contains('\n'));
    }
}
