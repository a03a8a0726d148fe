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

use apiway_core::read_until::{read_until, ReadError};
use apiway_wire::connect::{self, Status};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::forward::{self, Prepared};
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
    let max = spec.max_request_bytes;
    let deadline = Instant::now() + spec.request_timeout;
    let read = read_until(&mut client, &mut buf, Some(deadline), max, |bytes| {
        connect::parse(bytes, max).into()
    });
    let read = read.await;
    let listen = spec.address;
    drop(spec);
    let (request, consumed) = match read {
        Ok(request) => request,
        Err(ReadError::Invalid(e)) => {
            tracing::debug!(%peer, error = %e, "bad CONNECT request");
            handles.rejected(peer, "bad CONNECT request", "malformed");
            if let Some(status) = e.status() {
                refuse(listener, &mut client, status).await;
            }
            return None;
        }
        // The parser answers TooLarge itself once `max` bytes are here;
        // the reader's limit is the same one.
        Err(ReadError::TooLarge { .. }) => {
            let status = Status::RequestHeaderFieldsTooLarge;
            refuse(listener, &mut client, status).await;
            return None;
        }
        Err(ReadError::TimedOut) => {
            handles.rejected(peer, "CONNECT request timed out", "timeout");
            refuse(listener, &mut client, Status::RequestTimeout).await;
            return None;
        }
        // The client closed or the socket failed: nobody to answer.
        Err(ReadError::Closed | ReadError::Io(_)) => return None,
    };

    let Some(route) = routes.route_for_authority(&request.authority) else {
        tracing::debug!(%peer, authority = %request.authority, "no route lists this authority; 403");
        handles.rejected(peer, "no route lists this authority", "unknown_authority");
        handles.no_route("unknown_authority").inc();
        refuse(listener, &mut client, Status::Forbidden).await;
        return None;
    };
    tracing::debug!(%peer, authority = %request.authority, route = route.name(), "tunnel");
    let rest = buf.get(consumed..).unwrap_or_default();
    let origin = || forward::origin_of(&client, peer, listen);
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
    let authority = &request.authority;
    Some(forward::prepared(
        client,
        connected,
        &route,
        listener,
        rest.len(),
        || Some(authority.to_string()),
    ))
}

/// Answers with an error status, counts it, and closes.
async fn refuse(listener: &ListenerState, client: &mut TcpStream, status: Status) {
    listener.handles.connect_response(status.code()).inc();
    forward::answer_and_close(client, &status.render()).await;
    forward::linger(client).await;
}
