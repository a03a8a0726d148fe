//! Failover: the one loop that tries endpoints until one works, for every
//! role. The gateway and the agent dial an [`EndpointSet`]
//! ([`crate::dial::connect`]); the client sends a request, or dials for
//! kube's HTTP/1.1 stack, over its [`EndpointChoice`](super::choice::EndpointChoice).
//!
//! [`attempt`] asks a [`Pool`] for the best endpoint not yet tried,
//! hands it to the caller's attempt, and moves on while the attempt says
//! so. Recording the outcome (ejecting, blocking, marking in use) is the
//! attempt's business, since only the caller knows what a failure means.
//! Plus the TCP dial every role uses: [`connect_endpoint`] and
//! [`connect_address`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::address::{Address, Host};
use super::check::DNS_TIMEOUT;
use super::member::Endpoint;
use super::set::EndpointSet;

/// Where failover takes its endpoints from.
pub trait Pool {
    /// What names one endpoint.
    type Endpoint: Clone;

    /// The best endpoint at `now` that is not in `tried`; `None` when
    /// nothing is left to try (the pool applies its own last resort).
    fn next(&self, now: Instant, tried: &[Self::Endpoint]) -> Option<Self::Endpoint>;
}

impl Pool for EndpointSet {
    type Endpoint = Arc<Endpoint>;

    fn next(&self, now: Instant, tried: &[Arc<Endpoint>]) -> Option<Arc<Endpoint>> {
        self.pick_at(now, tried)
    }
}

/// The attempt that ended the failover, and the failures before it.
#[derive(Debug)]
pub struct Reached<T, E> {
    /// What the last attempt returned.
    pub value: T,
    /// Each earlier attempt's failure, in order.
    pub failures: Vec<E>,
}

/// Tries endpoints of `pool`, best first, until `try_one` breaks
/// ([`ControlFlow::Break`]: done, with a value that may itself be an
/// error the caller must not retry) or nothing is left; each
/// [`ControlFlow::Continue`] is one failure, and the next endpoint is
/// tried. `Err` holds every failure, and is empty when the pool had no
/// endpoint at all. The pool is asked at the time of each attempt, so a
/// penalty that ran out during a long failover counts.
pub async fn attempt<P, T, E, F, Fut>(pool: &P, mut try_one: F) -> Result<Reached<T, E>, Vec<E>>
where
    P: Pool + ?Sized,
    F: FnMut(P::Endpoint) -> Fut,
    Fut: Future<Output = ControlFlow<T, E>>,
{
    let mut tried: Vec<P::Endpoint> = Vec::new();
    let mut failures = Vec::new();
    while let Some(endpoint) = pool.next(Instant::now(), &tried) {
        tried.push(endpoint.clone());
        match try_one(endpoint).await {
            ControlFlow::Break(value) => return Ok(Reached { value, failures }),
            ControlFlow::Continue(failure) => failures.push(failure),
        }
    }
    Err(failures)
}

/// Connects to one endpoint of a set, trying each of its resolved
/// addresses; a name not resolved yet is resolved now.
pub async fn connect_endpoint(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let mut addrs = endpoint.resolved();
    if addrs.is_empty() {
        addrs = bounded_dns(endpoint.resolve()).await?;
    }
    connect_any(&addrs, timeout).await
}

/// Connects to `address`, resolving a name afresh (bounded by
/// [`DNS_TIMEOUT`]) and trying each address it names.
pub async fn connect_address(
    address: &Address,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let addrs: Vec<SocketAddr> = match &address.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, address.port)],
        Host::Name(name) => {
            let found: Vec<SocketAddr> =
                bounded_dns(tokio::net::lookup_host((name.as_str(), address.port)))
                    .await?
                    .collect();
            if found.is_empty() {
                return Err(format!("cannot resolve: {name} resolved to no addresses"));
            }
            found
        }
    };
    connect_any(&addrs, timeout).await
}

/// `reason` without a leading `endpoint: `: a connect error names the
/// address it tried, which for an IP endpoint is the endpoint itself, so a
/// line that starts with the endpoint says it once.
pub fn reason_after<'a>(endpoint: &str, reason: &'a str) -> &'a str {
    reason
        .strip_prefix(endpoint)
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(reason)
}

/// A resolution bounded by [`DNS_TIMEOUT`]: an unresolvable name must not
/// hold a client for the resolver's own, much longer, retry schedule.
async fn bounded_dns<T>(lookup: impl Future<Output = io::Result<T>>) -> Result<T, String> {
    tokio::time::timeout(DNS_TIMEOUT, lookup)
        .await
        .map_err(|_| format!("cannot resolve: no answer within {DNS_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot resolve: {e}"))
}

/// Connects to the first of `addrs` that answers within `timeout`.
async fn connect_any(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let mut last = String::from("no address");
    for &addr in addrs {
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
    use std::sync::Mutex;

    /// A pool over a fixed list: the first untried one.
    struct List(Vec<&'static str>);

    impl Pool for List {
        type Endpoint = &'static str;
        fn next(&self, _now: Instant, tried: &[&'static str]) -> Option<&'static str> {
            self.0.iter().find(|e| !tried.contains(e)).copied()
        }
    }

    #[tokio::test]
    async fn tries_in_order_until_one_breaks_and_keeps_the_failures() {
        let seen = Mutex::new(Vec::new());
        let reached = attempt(&List(vec!["a", "b", "c"]), |e| {
            seen.lock().unwrap().push(e);
            async move {
                if e == "b" {
                    ControlFlow::Break(e)
                } else {
                    ControlFlow::Continue(format!("{e} failed"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(reached.value, "b");
        assert_eq!(reached.failures, ["a failed"]);
        assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
    }

    #[tokio::test]
    async fn every_failure_when_none_works_and_none_when_empty() {
        let all = attempt(&List(vec!["a", "b"]), |e| async move {
            ControlFlow::<(), _>::Continue(e)
        })
        .await
        .unwrap_err();
        assert_eq!(all, ["a", "b"]);
        let none = attempt(&List(Vec::new()), |e| async move {
            ControlFlow::<(), _>::Continue(e)
        })
        .await
        .unwrap_err();
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn connects_by_address_and_names_a_dead_one() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = Address::from(live.local_addr().unwrap());
        let (_, peer) = connect_address(&live, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(Address::from(peer), live);
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let err = connect_address(&Address::from(dead_addr), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(err.contains(&dead_addr.to_string()), "{err}");
    }
}
