//! The connector seam: how a relayed connection reaches its upstream once
//! the role knows which endpoint set serves it.
//!
//! [`Connector`] is the interface; [`TcpConnector`] implements the three
//! ways a TCP upstream is reached today — straight to an endpoint with
//! failover ([`Via::Direct`]), with a PROXY header in front
//! ([`Via::ProxyHeader`]), through an HTTP `CONNECT` tunnel
//! ([`Via::HttpConnect`]) — for the gateway's routes and the agent's modes
//! alike. A tunnel stream is one more implementation whose `Output` is not
//! a `TcpStream`.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use apiway_wire::connect_response::{self, ConnectResponseError};
use apiway_wire::proxy::{ProxyHeader, RenderOptions, Version};
use tokio::net::TcpStream;

use crate::dial::{Connected, DialError};
use crate::endpoint::EndpointSet;
use crate::forward::{self, ForwardError};
use crate::read_until::{read_until, ReadError};

/// Where a client's connection came from and where it was going: what a
/// PROXY header or a `CONNECT` request tells the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The client.
    pub client: SocketAddr,
    /// The address the client connected to.
    pub destination: SocketAddr,
}

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// No endpoint of the set could be reached.
    #[error(transparent)]
    Unavailable(#[from] DialError),
    /// The client's origin (its destination address) could not be learned.
    #[error("cannot learn where the client connected to: {0}")]
    Origin(String),
    /// The PROXY header or CONNECT request could not be rendered.
    #[error("{0}")]
    Preface(String),
    /// The upstream accepted and then failed before the first bytes were
    /// written.
    #[error("{0}")]
    Closed(ForwardError),
    /// The upstream (a gateway) refused or did not answer the `CONNECT`.
    #[error("CONNECT {authority} through {upstream}: {reason}")]
    Refused {
        /// The endpoint that answered.
        upstream: String,
        /// The authority asked for.
        authority: String,
        /// What came back, or did not.
        reason: String,
    },
}

/// Reaches an upstream for one client connection.
pub trait Connector: Send + Sync {
    /// The connected upstream, ready to relay.
    type Output: Send;

    /// Connects to the best endpoint of `set` (failing over), sends what
    /// this connector puts in front, then `early` (bytes already read from
    /// the client that belong to the stream). `origin` is called only by a
    /// connector that puts the client's addresses in front: learning the
    /// destination may cost a system call (`getsockname`) that most
    /// connections need not pay.
    fn connect<'a>(
        &'a self,
        set: &'a EndpointSet,
        origin: impl FnOnce() -> Result<Origin, String> + Send + 'a,
        early: &'a [u8],
    ) -> impl Future<Output = Result<Self::Output, ConnectorError>> + Send + 'a;
}

/// What goes in front of the client's bytes on a TCP upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// Nothing: the upstream is the API server.
    Direct,
    /// A PROXY header of this version, with an AUTHORITY TLV (v2) when
    /// given.
    ProxyHeader {
        /// v1 or v2.
        version: Version,
        /// The AUTHORITY TLV's host name.
        authority: Option<String>,
    },
    /// An HTTP/1.1 `CONNECT` to this authority (or, without one, to the
    /// client's destination), answered within `response_timeout`.
    HttpConnect {
        /// Fixed `host:port` to ask for.
        authority: Option<String>,
        /// Time the upstream has to answer.
        response_timeout: Duration,
    },
}

/// A TCP upstream reached [`Via`] something, each endpoint given
/// `connect_timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConnector {
    /// What goes in front.
    pub via: Via,
    /// Per-endpoint connect timeout; then the next endpoint is tried.
    pub connect_timeout: Duration,
}

/// A connected TCP upstream.
#[derive(Debug)]
pub struct Established {
    /// The socket, its lease and address.
    pub connected: Connected,
    /// Bytes the upstream sent ahead (after its `CONNECT` answer) that
    /// belong to the client; write them before relaying.
    pub pending: Vec<u8>,
}

impl Connector for TcpConnector {
    type Output = Established;

    async fn connect<'a>(
        &'a self,
        set: &'a EndpointSet,
        origin: impl FnOnce() -> Result<Origin, String> + Send + 'a,
        early: &'a [u8],
    ) -> Result<Established, ConnectorError> {
        let (preface, tunnel) = match &self.via {
            Via::Direct => (Cow::Borrowed(early), None),
            Via::ProxyHeader { version, authority } => {
                let origin = origin().map_err(ConnectorError::Origin)?;
                let mut bytes = proxy_header(*version, authority.clone(), origin).map_err(|e| {
                    ConnectorError::Preface(format!("cannot render the PROXY header: {e}"))
                })?;
                bytes.extend_from_slice(early);
                (Cow::Owned(bytes), None)
            }
            Via::HttpConnect {
                authority,
                response_timeout,
            } => {
                let authority = match authority {
                    Some(a) => a.clone(),
                    None => origin()
                        .map_err(ConnectorError::Origin)?
                        .destination
                        .to_string(),
                };
                let request = connect_response::request(&authority)
                    .map_err(|e| ConnectorError::Preface(format!("CONNECT {authority}: {e}")))?;
                (Cow::Owned(request), Some((authority, *response_timeout)))
            }
        };
        let mut connected = forward::open(set, self.connect_timeout, &preface)
            .await
            .map_err(|e| match e {
                ForwardError::Unavailable(d) => ConnectorError::Unavailable(d),
                other => ConnectorError::Closed(other),
            })?;
        let mut pending = Vec::new();
        if let Some((authority, response_timeout)) = tunnel {
            let upstream = connected.lease.endpoint().name().to_owned();
            let refused = |reason: String| ConnectorError::Refused {
                upstream: upstream.clone(),
                authority: authority.clone(),
                reason,
            };
            pending =
                tokio::time::timeout(response_timeout, read_connect_answer(&mut connected.stream))
                    .await
                    .map_err(|_| refused(format!("no answer within {response_timeout:?}")))?
                    .map_err(refused)?;
            if !early.is_empty() {
                // The tunnel is open: the client's early bytes go
                // through it now.
                use tokio::io::AsyncWriteExt;
                connected
                    .stream
                    .write_all(early)
                    .await
                    .map_err(|e| refused(format!("writing into the tunnel: {e}")))?;
                connected
                    .lease
                    .endpoint()
                    .metrics()
                    .to_backend
                    .inc_by(early.len() as u64);
            }
        }
        Ok(Established { connected, pending })
    }
}

/// Renders a PROXY header for `origin`. An IPv4 client on a dual-stack
/// socket shows as `::ffff:a.b.c.d` and is written as the IPv4 address it
/// is; both addresses must be of one family in the protocol, so when they
/// still differ the IPv4 one is written IPv4-mapped.
pub fn proxy_header(
    version: Version,
    authority: Option<String>,
    origin: Origin,
) -> Result<Vec<u8>, apiway_wire::proxy::RenderError> {
    let (mut source, mut destination) = (unmap(origin.client), unmap(origin.destination));
    if source.is_ipv4() != destination.is_ipv4() {
        for addr in [&mut source, &mut destination] {
            if let SocketAddr::V4(v4) = *addr {
                *addr = SocketAddr::from((v4.ip().to_ipv6_mapped(), v4.port()));
            }
        }
    }
    let mut header = ProxyHeader::tcp(version, source, destination);
    header.tlvs.authority = authority;
    header.render(&RenderOptions::default())
}

fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

/// Reads the answer to `CONNECT`; on 2xx returns the bytes that followed
/// the head, otherwise a description of what came back. The caller bounds
/// the time.
async fn read_connect_answer(stream: &mut TcpStream) -> Result<Vec<u8>, String> {
    let max = connect_response::DEFAULT_MAX_RESPONSE_LEN;
    let mut buf = Vec::with_capacity(512);
    let read = read_until(stream, &mut buf, None, max, |bytes| {
        connect_response::parse(bytes, max).into()
    });
    let (head, consumed) = read.await.map_err(|e| match e {
        ReadError::Invalid(e) => e.to_string(),
        ReadError::TooLarge { limit } => ConnectResponseError::TooLong { limit }.to_string(),
        ReadError::Closed => "the gateway closed the connection without answering".into(),
        ReadError::Io(e) => format!("reading the answer: {e}"),
        ReadError::TimedOut => "timed out reading the answer".into(),
    })?;
    if head.is_success() {
        return Ok(buf.split_off(consumed));
    }
    Err(format!(
        "the gateway answered {} {}",
        head.status, head.reason
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_headers_keep_one_family() {
        let origin = Origin {
            client: "10.0.0.7:5000".parse().unwrap(),
            destination: "[fd00::1]:443".parse().unwrap(),
        };
        let bytes = proxy_header(Version::V1, None, origin).unwrap();
        assert_eq!(bytes, b"PROXY TCP6 ::ffff:a00:7 fd00::1 5000 443\r\n");
        let mapped = Origin {
            client: "[::ffff:192.0.2.7]:40000".parse().unwrap(),
            destination: "10.1.2.3:443".parse().unwrap(),
        };
        let bytes = proxy_header(Version::V2, Some("api.a.example.com".into()), mapped).unwrap();
        let (h, n) = apiway_wire::proxy::parse(&bytes).unwrap();
        assert_eq!(n, bytes.len());
        let a = h.addresses.unwrap();
        assert_eq!(a.source, "192.0.2.7:40000".parse().unwrap());
        assert_eq!(a.destination, mapped.destination);
        assert_eq!(h.tlvs.authority.as_deref(), Some("api.a.example.com"));
    }

    /// The client's destination (a `getsockname`) is learned only by a
    /// connector that sends it.
    #[tokio::test]
    async fn only_what_sends_the_destination_asks_for_it() {
        use crate::endpoint::{Address, EndpointSetSpec, Policy};
        use crate::metrics::BackendMetrics;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = backend.local_addr().unwrap();
        let set = EndpointSet::new(
            "r",
            &EndpointSetSpec {
                endpoints: vec![Address::from(addr)],
                policy: Policy::RoundRobin,
                health_check: None,
                ejection: Default::default(),
            },
            BackendMetrics::default(),
        );
        let asked = AtomicUsize::new(0);
        let origin = || {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(Origin {
                client: "10.0.0.7:5000".parse().unwrap(),
                destination: "10.1.2.3:443".parse().unwrap(),
            })
        };
        let c = |via| TcpConnector {
            via,
            connect_timeout: Duration::from_secs(1),
        };
        c(Via::Direct).connect(&set, origin, b"").await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 0);
        let proxy = c(Via::ProxyHeader {
            version: Version::V2,
            authority: None,
        });
        proxy.connect(&set, origin, b"").await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // A fixed CONNECT target needs no destination; the answer never
        // comes, so the connect is refused after its timeout.
        let fixed = c(Via::HttpConnect {
            authority: Some("kubernetes.default.svc:443".into()),
            response_timeout: Duration::from_millis(50),
        });
        assert!(matches!(
            fixed.connect(&set, origin, b"").await,
            Err(ConnectorError::Refused { .. })
        ));
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        drop(backend);
    }
}
