//! What every listener kind shares: the life of one connection (counters,
//! the boxed pre-relay phase of its kind, the relay) and the tail once a
//! route is chosen (PROXY header for the backend, dial with failover).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiway_core::dial::Connected;
use apiway_core::forward::{ForwardError, Relaying};
use apiway_core::listener::Slot;
use apiway_wire::proxy::{ProxyHeader, RenderOptions, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::{ListenerKind, SendProxyProtocol};
use crate::listener_state::ListenerState;
use crate::route::{Route, RouteTable};

/// A connection ready to relay: the relay future (which owns both sockets
/// and the backend's lease) and the route's name for the log. Built at the
/// end of the boxed pre-relay phase, so that the long-lived part of the
/// connection task holds nothing else.
pub(crate) type Prepared = (Relaying, Arc<str>);

/// The [`Prepared`] connection between `client` and the backend `route`
/// gave it.
pub(crate) fn prepared(client: TcpStream, connected: Connected, route: &Route) -> Prepared {
    tracing::debug!(
        route = route.name(),
        backend = connected.lease.endpoint().name(),
        "relaying"
    );
    (
        apiway_core::forward::relay(client, connected, &route.relay),
        route.name_arc(),
    )
}

/// Serves one accepted connection, with the behaviour of the listener's
/// kind at the moment it was accepted (a reload may change the kind of a
/// kept socket; connections already accepted keep theirs).
pub(crate) async fn serve(
    routes: Arc<RouteTable>,
    listener: Arc<ListenerState>,
    client: TcpStream,
    peer: SocketAddr,
    slot: Slot,
) {
    let handles = &listener.handles;
    handles.accepted.inc();
    handles.open.inc();
    let _open = scopeguard(|| {
        handles.open.dec();
    });
    let _slot = slot;
    // Boxed: reading the first bytes, routing and dialing need far more
    // state than the relay, and an idle connection should only pay for
    // the relay.
    let kind = listener.spec.load().kind;
    // One `let-else` over the `match`: the intermediate value is a
    // temporary, so the task does not keep a second copy of the relay
    // future's bytes for the life of the connection.
    let Some((relaying, route_name)) = (match kind {
        ListenerKind::Tls => {
            Box::pin(crate::sni_listener::prepare(
                &routes, &listener, client, peer,
            ))
            .await
        }
        ListenerKind::Proxy => {
            Box::pin(crate::proxy_listener::prepare(
                &routes, &listener, client, peer,
            ))
            .await
        }
        ListenerKind::Connect => {
            Box::pin(crate::connect_listener::prepare(
                &routes, &listener, client, peer,
            ))
            .await
        }
    }) else {
        return;
    };
    drop(routes);
    let outcome = relaying.await;
    tracing::debug!(%peer, route = %route_name, ?outcome, "connection closed");
}

/// The endpoints of the client's connection as a backend should learn them
/// from a PROXY header: the client as far out as trusted senders vouched
/// for it, and the address it connected to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The client.
    pub(crate) client: SocketAddr,
    /// Where the client connected to.
    pub(crate) destination: SocketAddr,
}

impl Origin {
    /// The real endpoints of an accepted socket.
    pub(crate) fn of(stream: &TcpStream, peer: SocketAddr, listen: SocketAddr) -> Origin {
        Origin {
            client: peer,
            destination: stream.local_addr().unwrap_or(listen),
        }
    }
}

/// Why [`open`] gave no backend connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenFailure {
    /// No backend of the route could be reached (counted on the route).
    Unavailable,
    /// A backend accepted and then failed, or the header could not be
    /// rendered.
    Failed,
}

/// Counts the connection on `route`, dials it with failover and sends the
/// preface: the PROXY header the route asks for, then `replay` (the bytes
/// already read from the client that belong to the stream). `origin` is
/// called only for a route that sends a PROXY header: learning the
/// client's destination may cost a system call (`getsockname`), which
/// most connections need not pay.
pub(crate) async fn open(
    route: &Route,
    peer: SocketAddr,
    origin: impl FnOnce() -> Origin,
    replay: &[u8],
) -> Result<Connected, OpenFailure> {
    route.routed.inc();
    let preface = match route.send_proxy_protocol() {
        None => std::borrow::Cow::Borrowed(replay),
        Some(version) => match proxy_header(version, origin()) {
            Ok(mut header) => {
                header.extend_from_slice(replay);
                std::borrow::Cow::Owned(header)
            }
            Err(e) => {
                tracing::warn!(%peer, route = route.name(), "cannot render the PROXY header: {e}");
                return Err(OpenFailure::Failed);
            }
        },
    };
    match apiway_core::forward::open(&route.set, route.connect_timeout, &preface).await {
        Ok(connected) => Ok(connected),
        Err(ForwardError::Unavailable(e)) => {
            tracing::warn!(%peer, route = route.name(), "closing client: {e}");
            route.unavailable.inc();
            Err(OpenFailure::Unavailable)
        }
        Err(e) => {
            tracing::debug!(%peer, route = route.name(), "{e}");
            Err(OpenFailure::Failed)
        }
    }
}

/// Renders the header a route sends. Both addresses must be of one family
/// in the protocol; when they are not (an IPv4 client reached a gateway
/// listening on IPv6), the IPv4 one is written IPv4-mapped.
fn proxy_header(
    version: SendProxyProtocol,
    origin: Origin,
) -> Result<Vec<u8>, apiway_wire::proxy::RenderError> {
    let (mut source, mut destination) = (origin.client, origin.destination);
    if source.is_ipv4() != destination.is_ipv4() {
        for addr in [&mut source, &mut destination] {
            if let SocketAddr::V4(v4) = *addr {
                *addr = SocketAddr::from((v4.ip().to_ipv6_mapped(), v4.port()));
            }
        }
    }
    let version = match version {
        SendProxyProtocol::V1 => Version::V1,
        SendProxyProtocol::V2 => Version::V2,
    };
    ProxyHeader::tcp(version, source, destination).render(&RenderOptions::default())
}

/// Sends a short answer (a TLS alert, an HTTP status) and closes our side.
/// A few bytes into a fresh socket buffer: a client that never reads
/// cannot hold us, the write completes locally.
pub(crate) async fn answer_and_close(client: &mut TcpStream, answer: &[u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = client.write_all(answer).await;
        let _ = client.shutdown().await;
    })
    .await;
}

/// After [`answer_and_close`]: reads and drops what the client still sends,
/// for at most a second, so that closing a socket with unread bytes (which
/// makes the kernel send a reset) does not destroy the answer before the
/// client has read it.
pub(crate) async fn linger(client: &mut TcpStream) {
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut left = 64 * 1024usize;
        while left > 0 {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection task lives as long as the connection, mostly idle:
    /// it must hold the relay and little else (the pre-relay phases are
    /// boxed and freed).
    #[tokio::test]
    async fn the_connection_task_is_small() {
        let config = "listeners:\n  - { name: l, address: 127.0.0.1:0, kind: tls }\n";
        let snapshot = crate::config::parse(config).unwrap();
        let running = apiway_core::runtime::Running::<crate::Gateway>::start(snapshot)
            .await
            .unwrap();
        let gateway = running.role();
        let listener = gateway.listener_state("l").unwrap();
        let addr = gateway.listener_addr("l").unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let peer = client.local_addr().unwrap();
        let slot = apiway_core::listener::Slots::new(1).try_take().unwrap();
        let task = serve(gateway.routes(), listener, client, peer, slot);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 512, "the connection future is {size} bytes");
    }

    #[test]
    fn mixed_families_are_sent_ipv4_mapped() {
        let origin = Origin {
            client: "10.0.0.7:5000".parse().unwrap(),
            destination: "[fd00::1]:443".parse().unwrap(),
        };
        let bytes = proxy_header(SendProxyProtocol::V1, origin).unwrap();
        assert_eq!(bytes, b"PROXY TCP6 ::ffff:a00:7 fd00::1 5000 443\r\n");
        let same = Origin {
            client: "10.0.0.7:5000".parse().unwrap(),
            destination: "10.1.2.3:443".parse().unwrap(),
        };
        let (parsed, _) =
            apiway_wire::proxy::parse(&proxy_header(SendProxyProtocol::V2, same).unwrap()).unwrap();
        let addresses = parsed.addresses.unwrap();
        assert_eq!(addresses.source, same.client);
        assert_eq!(addresses.destination, same.destination);
    }
}
