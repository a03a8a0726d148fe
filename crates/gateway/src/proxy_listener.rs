//! One connection on a `kind: proxy` listener, from accept to close: check
//! the sender is trusted (or close without reading), read its PROXY
//! header(s) under a timeout, route by the original destination, dial a
//! backend with failover, forward the bytes that followed the header, relay
//! (see [`crate::connection`]).
//!
//! A `LOCAL` header (v2; v1 `UNKNOWN` means the same) is what a sender puts
//! on its own health checks. The specification says the receiver "must
//! accept this connection as valid and must use the real connection
//! endpoints". So it is routed like any connection, with the real endpoints:
//! its destination is the gateway's own listening address. No route
//! normally lists that, so it goes to `default_route`, or is closed after
//! the header (counted as no route, reason `local`) — which a TCP health
//! check reads as "up": the gateway accepted the connection and the header.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use crate::forward::{self, Prepared};
use crate::listener_state::ListenerState;
use crate::route::RouteTable;

/// The most headers read: a load balancer's, then an agent's.
const MAX_STACKED_HEADERS: usize = 2;

/// Reads the header(s), routes by destination, connects a backend and
/// forwards what followed the headers; `None` when the connection was
/// closed instead.
pub(crate) async fn prepare(
    routes: &RouteTable,
    listener: &ListenerState,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<Prepared> {
    let handles = &listener.handles;
    let mut buf = Vec::new();
    let headers =
        crate::proxy_header::accept(listener, &mut client, peer, &mut buf, MAX_STACKED_HEADERS)
            .await?;
    let origin = headers.origin(&client, peer, listener.spec.load().address);

    let Some(route) = routes.route_for_destination(origin.destination) else {
        let reason = if headers.addresses.is_some() {
            "unknown_destination"
        } else {
            "local"
        };
        tracing::debug!(%peer, destination = %origin.destination, reason, "no route; closing");
        handles.rejected(peer, "no route for this destination", reason);
        handles.no_route(reason).inc();
        return None;
    };
    tracing::debug!(%peer, client = %origin.client, destination = %origin.destination, outer_source = ?headers.outer_source, route = route.name(), "routed by destination");
    let rest = buf.get(headers.consumed..).unwrap_or_default();
    match forward::open(&route, peer, || origin, rest).await {
        Ok(connected) => Some(forward::prepared(
            client,
            connected,
            &route,
            listener,
            rest.len(),
            || Some(origin.destination.to_string()),
        )),
        // The stream is the client's (usually TLS): no answer of ours
        // would mean anything to it, so the close is the answer.
        Err(_) => None,
    }
}
