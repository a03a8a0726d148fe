//! One connection on a `kind: connect` listener, from accept to close: read
//! the `CONNECT host:port` request head (bounded, under a timeout), route by
//! that authority, dial a backend with failover, forward any bytes the
//! client sent after the head, answer 200 and relay (see
//! [`crate::connection`]).
//!
//! Answers, each followed by a close except the 200: 400 for a malformed
//! request, 405 for another method, 431 for a head over
//! `max_request_bytes`, 408 when the head is not complete within
//! `request_timeout`, 403 for an authority no route lists (there is no
//! default route for tunnels), 502 when no backend could be reached. A
//! client that closes before its head is complete gets nothing.

use std::net::SocketAddr;
use std::time::Duration;

use apiway_wire::connect::{self, ConnectError, ConnectRequest, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::forward::{self, Origin, Prepared};
use crate::listener_state::ListenerState;
use crate::route::RouteTable;

/// Reads the request, routes it, connects a backend, forwards pipelined
/// bytes and answers 200; `None` when the connection was answered with an
/// error and closed instead.
pub(crate) async fn prepare(
    routes: &RouteTable,
    listener: &ListenerState,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<Prepared> {
    let handles = &listener.handles;
    let spec = listener.spec.load_full();
    let mut buf = Vec::new();
    let read = read_request(&mut client, &mut buf, spec.max_request_bytes);
    let read = tokio::time::timeout(spec.request_timeout, read).await;
    let listen = spec.address;
    drop(spec);
    let (request, consumed) = match read {
        Ok(Ok(request)) => request,
        Ok(Err(Some(status))) => {
            refuse(listener, &mut client, status).await;
            return None;
        }
        Ok(Err(None)) => return None,
        Err(_) => {
            tracing::debug!(%peer, listener = handles.name(), "CONNECT request timed out");
            refuse(listener, &mut client, Status::RequestTimeout).await;
            return None;
        }
    };

    let Some(route) = routes.route_for_authority(&request.authority) else {
        tracing::debug!(%peer, authority = %request.authority, "no route lists this authority; 403");
        handles.no_route("unknown_authority").inc();
        refuse(listener, &mut client, Status::Forbidden).await;
        return None;
    };
    tracing::debug!(%peer, authority = %request.authority, route = route.name(), "tunnel");
    let rest = buf.get(consumed..).unwrap_or_default();
    let origin = || Origin::of(&client, peer, listen);
    let connected = match forward::open(&route, peer, origin, rest).await {
        Ok(connected) => connected,
        Err(_) => {
            refuse(listener, &mut client, Status::BadGateway).await;
            return None;
        }
    };
    let established = Status::ConnectionEstablished;
    // The answer fits a fresh socket buffer; the bound only guards against
    // a socket that is already broken.
    let written = tokio::time::timeout(
        Duration::from_secs(1),
        client.write_all(&established.render()),
    )
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return None;
    }
    handles.connect_response(established.code()).inc();
    Some(forward::prepared(client, connected, &route))
}

/// Answers with an error status, counts it, and closes.
async fn refuse(listener: &ListenerState, client: &mut TcpStream, status: Status) {
    listener.handles.connect_response(status.code()).inc();
    forward::answer_and_close(client, &status.render()).await;
    forward::linger(client).await;
}

/// Reads until the buffer holds a whole request head. The error is the
/// answer to give, or `None` when the client closed or the socket failed.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<(ConnectRequest, usize), Option<Status>> {
    loop {
        match connect::parse(buf, max) {
            Ok(request) => return Ok(request),
            Err(ConnectError::Incomplete) => {}
            Err(e) => {
                tracing::debug!(error = %e, "bad CONNECT request");
                return Err(e.status());
            }
        }
        // The parser answers TooLarge once `max` bytes are here, so reading
        // stops near the limit.
        buf.reserve(max.saturating_sub(buf.len()).clamp(1, 4096));
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(None),
            Ok(_) => {}
        }
    }
}
