//! The tail every listener kind shares once a route is chosen: the PROXY
//! header for the backend, dialing with failover, and the relay it hands
//! back; and how a refused client is answered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiway_core::connector::{Connector, ConnectorError, Origin};
use apiway_core::dial::Connected;
use apiway_core::forward::Relaying;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::route::Route;

/// A connection ready to relay: the relay future (which owns both sockets
/// and the backend's lease), the route's name for the log, and what its
/// access log line needs (only when there is an access log). Built at the
/// end of the boxed pre-relay phase, so that the long-lived part of the
/// connection task holds nothing else.
pub(crate) struct Prepared {
    pub(crate) relaying: Relaying,
    pub(crate) route: Arc<str>,
    pub(crate) log: Option<Box<crate::access_log::Pending>>,
}

/// The [`Prepared`] connection between `client` and the backend `route`
/// gave it, after [`open`] sent it `replayed` bytes of the client's;
/// `matched` is what routed it (the SNI, destination or authority), asked
/// for only when `listener` logs connections.
pub(crate) fn prepared(
    client: TcpStream,
    connected: Connected,
    route: &Route,
    listener: &crate::listener_state::ListenerState,
    replayed: usize,
    matched: impl FnOnce() -> Option<String>,
) -> Prepared {
    tracing::debug!(
        route = route.name(),
        backend = connected.lease.endpoint().name(),
        "relaying"
    );
    let log = listener.logging().then(|| {
        crate::access_log::Pending::new(
            matched(),
            connected.lease.endpoint().name().to_owned(),
            replayed,
        )
    });
    Prepared {
        relaying: apiway_core::forward::relay(client, connected, &route.relay),
        route: route.name_arc(),
        log,
    }
}

/// The real endpoints of an accepted socket, as a backend should learn
/// them when no trusted sender vouched for others.
pub(crate) fn origin_of(stream: &TcpStream, peer: SocketAddr, listen: SocketAddr) -> Origin {
    Origin {
        client: peer,
        destination: stream.local_addr().unwrap_or(listen),
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

/// Connects `route`'s backend through the route's connector (with the PROXY
/// header it asks for) and sends `replay` (the bytes already read from the
/// client that belong to the stream). `origin` is called only when the
/// connector needs it: learning the client's destination may cost a system
/// call (`getsockname`), which most connections need not pay.
pub(crate) async fn open(
    route: &Route,
    peer: SocketAddr,
    origin: impl FnOnce() -> Origin + Send,
    replay: &[u8],
) -> Result<Connected, OpenFailure> {
    route.routed.inc();
    let Some(set) = route.pick_set() else {
        tracing::warn!(%peer, route = route.name(), "closing client: the route has no backend to send this connection to (every backendRef has weight 0)");
        route.unavailable.inc();
        return Err(OpenFailure::Unavailable);
    };
    match route.connector.connect(set, || Ok(origin()), replay).await {
        Ok(established) => Ok(established.connected),
        Err(ConnectorError::Unavailable(e)) => {
            tracing::warn!(%peer, route = route.name(), "closing client: {e}");
            route.unavailable.inc();
            Err(OpenFailure::Unavailable)
        }
        Err(e @ ConnectorError::Preface(_)) => {
            tracing::warn!(%peer, route = route.name(), "{e}");
            Err(OpenFailure::Failed)
        }
        Err(e) => {
            tracing::debug!(%peer, route = route.name(), "{e}");
            Err(OpenFailure::Failed)
        }
    }
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
