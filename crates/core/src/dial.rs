//! Dialing with failover: a failed connect ejects that endpoint and the same
//! client connection moves on to the next one, so clients see no error while
//! any endpoint is up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::endpoint::{Endpoint, EndpointSet, Lease};

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
        .map(|(e, err)| format!("{e}: {err}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Connects to the best endpoint of `set`, failing over on error. Each
/// endpoint gets `timeout` for its connect.
pub async fn connect(set: &EndpointSet, timeout: Duration) -> Result<Connected, DialError> {
    let mut tried: Vec<Arc<Endpoint>> = Vec::new();
    let mut failures = Vec::new();
    while let Some(endpoint) = set.pick(&tried) {
        match connect_endpoint(&endpoint, timeout).await {
            Ok((stream, peer)) => {
                endpoint.record_connect_success();
                return Ok(Connected {
                    stream,
                    lease: endpoint.lease(),
                    peer,
                    failed_attempts: tried.len() as u32,
                });
            }
            Err(e) => {
                endpoint.record_connect_failure(&set.members().ejection);
                failures.push((endpoint.name().to_owned(), e));
                tried.push(endpoint);
            }
        }
    }
    if tried.is_empty() {
        return Err(DialError::NoEndpoints {
            set: set.name().to_owned(),
        });
    }
    Err(DialError::AllFailed {
        set: set.name().to_owned(),
        failures,
    })
}

/// Connects to one endpoint, trying each of its resolved addresses.
pub async fn connect_endpoint(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let mut addrs = endpoint.resolved();
    if addrs.is_empty() {
        // Bounded: an unresolvable name must not hold a client for the
        // resolver's own, much longer, retry schedule.
        addrs = tokio::time::timeout(crate::health::DNS_TIMEOUT, endpoint.resolve())
            .await
            .map_err(|_| {
                format!(
                    "cannot resolve: no answer within {:?}",
                    crate::health::DNS_TIMEOUT
                )
            })?
            .map_err(|e| format!("cannot resolve: {e}"))?;
    }
    let mut last = String::from("no address");
    for &addr in addrs.iter() {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, addr)),
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer within {timeout:?}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
    use crate::metrics::BackendMetrics;

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
        let empty = self::set(&[]);
        assert!(matches!(
            connect(&empty, Duration::from_secs(1)).await,
            Err(DialError::NoEndpoints { .. })
        ));
    }
}
