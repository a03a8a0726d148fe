//! One connection on a `kind: tls` listener, from accept to close: read the
//! PROXY header if the listener takes one, read the ClientHello (bounded,
//! under a timeout), route by SNI, dial a backend with failover, replay the
//! hello bytes, relay until both sides finish (see [`crate::connection`]).

use std::net::SocketAddr;

use apiway_wire::sni::{self, AlertDescription, ClientHello, SniError};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::forward::{self, OpenFailure, Prepared};
use crate::listener_state::ListenerState;
use crate::route::RouteTable;

/// Reads the ClientHello, routes it, connects a backend and replays the
/// hello; `None` when the connection was answered and closed instead.
pub(crate) async fn prepare(
    routes: &RouteTable,
    listener: &ListenerState,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<Prepared> {
    let handles = &listener.handles;
    let mut hello_bytes = Vec::new();
    let headers =
        crate::proxy_header::accept(listener, &mut client, peer, &mut hello_bytes, 1).await?;
    // The header is for us; the backend gets the stream from the hello on.
    hello_bytes.drain(..headers.consumed);
    let spec = listener.spec.load_full();
    let listen = spec.address;
    let read = read_client_hello(&mut client, &mut hello_bytes, spec.max_client_hello_bytes);
    let hello = match tokio::time::timeout(spec.client_hello_timeout, read).await {
        Ok(Ok(hello)) => hello,
        Ok(Err((reason, alert))) => {
            tracing::debug!(%peer, listener = %spec.name, reason, "no usable ClientHello; closing");
            handles.hello_error(reason).inc();
            if let Some(alert) = alert {
                send_alert(&mut client, alert).await;
            }
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, listener = %spec.name, "ClientHello timed out; closing");
            handles.hello_timeouts.inc();
            return None;
        }
    };
    drop(spec);

    let Some(route) = routes.route_for(hello.server_name.as_deref()) else {
        let reason = if hello.server_name.is_some() {
            "unknown_sni"
        } else {
            "no_sni"
        };
        tracing::debug!(%peer, sni = ?hello.server_name, reason, "no route; sending unrecognized_name");
        handles.no_route(reason).inc();
        send_alert(&mut client, AlertDescription::UnrecognizedName).await;
        return None;
    };
    drop(hello);

    let origin = || headers.origin(&client, peer, listen);
    match forward::open(&route, peer, origin, &hello_bytes).await {
        Ok(connected) => Some(forward::prepared(client, connected, &route)),
        Err(OpenFailure::Unavailable) => {
            send_alert(&mut client, AlertDescription::InternalError).await;
            None
        }
        Err(OpenFailure::Failed) => None,
    }
}

/// Reads until the buffer holds a whole ClientHello. The error is the metric
/// reason and, for a TLS client that sent something broken, the alert to
/// answer with (a client that does not speak TLS gets none).
async fn read_client_hello(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<ClientHello, (&'static str, Option<AlertDescription>)> {
    // Records add 5 bytes of header each; a hello cut into tiny records may
    // legally take more bytes on the wire than `max`, up to this bound.
    let wire_limit = max.saturating_mul(2).saturating_add(1024);
    loop {
        match sni::parse_client_hello(buf, max) {
            Ok(hello) => return Ok(hello),
            Err(SniError::Incomplete) => {}
            Err(e @ SniError::NotTls) => return Err(("not_tls", e.alert())),
            Err(e @ SniError::Malformed(_)) => return Err(("malformed", e.alert())),
            Err(e @ SniError::TooLarge { .. }) => return Err(("too_large", e.alert())),
        }
        if buf.len() >= wire_limit {
            return Err(("too_large", Some(AlertDescription::RecordOverflow)));
        }
        let want = if buf.is_empty() { 1024 } else { buf.len() };
        buf.reserve(want.min(wire_limit - buf.len()));
        match stream.read_buf(buf).await {
            Ok(0) => return Err(("closed", None)),
            Ok(_) => {}
            Err(_) => return Err(("io", None)),
        }
    }
}

async fn send_alert(client: &mut TcpStream, alert: AlertDescription) {
    forward::answer_and_close(client, &sni::alert_record(alert)).await;
}
