//! Dialing with failover: a failed connect ejects that endpoint and the same
//! client connection moves on to the next one, so clients see no error while
//! any endpoint is up. The loop is the endpoint model's one
//! [`failover::attempt`].

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::time::Duration;

use tokio::net::TcpStream;

pub use crate::endpoint::failover::connect_endpoint;
use crate::endpoint::failover::{self, Reached};
use crate::endpoint::{EndpointSet, Lease};

/// A connection to an endpoint, counted active until dropped.
#[derive(Debug)]
pub struct Connected {
    /// The connected socket.
    pub stream: TcpStream,
    /// Counts the connection on its endpoint.
    pub lease: Lease,
    /// The address actually connected to.
    pub peer: SocketAddr,
    /// Endpoints that failed before this one.
    pub failed_attempts: u32,
}

/// No endpoint could be reached.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The set has no endpoints at all.
    #[error("`{set}` has no backends")]
    NoEndpoints {
        /// The set's name.
        set: String,
    },
    /// Every endpoint was tried and failed.
    #[error("every backend of `{set}` failed: {}", summary(.failures))]
    AllFailed {
        /// The set's name.
        set: String,
        /// Each endpoint tried, with its error.
        failures: Vec<(String, String)>,
    },
}

fn summary(failures: &[(String, String)]) -> String {
    failures
        .iter()
        .map(|(e, err)| format!("{e}: {}", failover::reason_after(e, err)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Connects to the best endpoint of `set`, failing over on error. Each
/// endpoint gets `timeout` for its connect; a failure ejects it.
pub async fn connect(set: &EndpointSet, timeout: Duration) -> Result<Connected, DialError> {
    let reached = failover::attempt(set, |endpoint| async move {
        match connect_endpoint(&endpoint, timeout).await {
            Ok((stream, peer)) => {
                endpoint.record_connect_success();
                ControlFlow::Break((stream, endpoint.lease(), peer))
            }
            Err(e) => {
                endpoint.record_connect_failure(&set.members().ejection);
                ControlFlow::Continue((endpoint.name().to_owned(), e))
            }
        }
    })
    .await;
    match reached {
        Ok(Reached {
            value: (stream, lease, peer),
            failures,
        }) => Ok(Connected {
            stream,
            lease,
            peer,
            failed_attempts: failures.len() as u32,
        }),
        Err(failures) if failures.is_empty() => Err(DialError::NoEndpoints {
            set: set.name().to_owned(),
        }),
        Err(failures) => Err(DialError::AllFailed {
            set: set.name().to_owned(),
            failures,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
    use crate::metrics::BackendMetrics;
    use std::sync::Arc;

    fn set(addrs: &[String]) -> Arc<EndpointSet> {
        EndpointSet::new(
            "r",
            &EndpointSetSpec {
                endpoints: addrs.iter().map(|a| Address::parse(a).unwrap()).collect(),
                policy: Policy::RoundRobin,
                health_check: None,
                ejection: Ejection::default(),
            },
            BackendMetrics::default(),
        )
    }

    async fn closed_port() -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        a.to_string()
    }

    #[tokio::test]
    async fn fails_over_within_one_dial_and_ejects_the_dead_backend() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_addr = live.local_addr().unwrap().to_string();
        let dead = closed_port().await;
        let set = set(&[dead.clone(), live_addr.clone()]);
        for _ in 0..4 {
            let c = connect(&set, Duration::from_secs(1)).await.unwrap();
            assert_eq!(c.lease.endpoint().name(), live_addr);
        }
        let members = set.members();
        let dead_ep = members.endpoints.iter().find(|e| e.name() == dead).unwrap();
        assert!(dead_ep.is_ejected());
        assert_eq!(
            dead_ep.metrics().connect_failures.get(),
            1,
            "ejected after one failure, then skipped"
        );
    }

    #[tokio::test]
    async fn reports_every_failure_when_all_are_down() {
        let a = closed_port().await;
        let b = closed_port().await;
        let set = set(&[a.clone(), b.clone()]);
        let err = connect(&set, Duration::from_secs(1)).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&a) && text.contains(&b), "{text}");
        // Each address said once: the connect error names it already.
        assert_eq!(text.matches(&a).count(), 1, "{text}");
        assert_eq!(text.matches(&b).count(), 1, "{text}");
        let empty = self::set(&[]);
        assert!(matches!(
            connect(&empty, Duration::from_secs(1)).await,
            Err(DialError::NoEndpoints { .. })
        ));
    }
}
