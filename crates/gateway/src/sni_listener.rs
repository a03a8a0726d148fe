//! One connection on a `kind: tls` listener, from accept to close: read the
//! PROXY header if the listener takes one, read the ClientHello (bounded,
//! under a timeout), route by SNI, dial a backend with failover, replay the
//! hello bytes, relay until both sides finish (see [`crate::connection`]).

use std::net::SocketAddr;

use apiway_core::read_until::{read_until, ReadError};
use apiway_wire::sni::{self, AlertDescription, ClientHello, SniError};
use tokio::net::TcpStream;
use tokio::time::Instant;

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
    let deadline = Instant::now() + spec.client_hello_timeout;
    let read = read_client_hello(
        &mut client,
        &mut hello_bytes,
        spec.max_client_hello_bytes,
        deadline,
    );
    let mut hello = match read.await {
        Ok(hello) => hello,
        Err(e) => {
            let Some((reason, alert)) = failure(&e) else {
                handles.rejected(peer, "ClientHello timed out", "timeout");
                handles.hello_timeouts.inc();
                return None;
            };
            handles.rejected(peer, "no usable ClientHello", reason);
            handles.hello_error(reason).inc();
            if let Some(alert) = alert {
                send_alert(&mut client, alert).await;
            }
            return None;
        }
    };
    let Some(route) = routes.route_for(&spec.name, hello.server_name.as_deref()) else {
        let reason = if hello.server_name.is_some() {
            "unknown_sni"
        } else {
            "no_sni"
        };
        tracing::debug!(%peer, sni = ?hello.server_name, reason, "no route; sending unrecognized_name");
        handles.rejected(peer, "no route for this server name", reason);
        handles.no_route(reason).inc();
        send_alert(&mut client, AlertDescription::UnrecognizedName).await;
        return None;
    };
    drop(spec);
    // Moved out, not copied: the access log may want it.
    let matched = std::mem::take(&mut hello.server_name);
    drop(hello);

    let origin = || headers.origin(&client, peer, listen);
    match forward::open(&route, peer, origin, &hello_bytes).await {
        Ok(connected) => Some(forward::prepared(
            client,
            connected,
            &route,
            listener,
            hello_bytes.len(),
            || matched,
        )),
        Err(OpenFailure::Unavailable) => {
            send_alert(&mut client, AlertDescription::InternalError).await;
            None
        }
        Err(OpenFailure::Failed) => None,
    }
}

/// Reads until the buffer holds a whole ClientHello of at most `max`
/// bytes, or `deadline` passes.
async fn read_client_hello(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> Result<ClientHello, ReadError<SniError>> {
    // Records add 5 bytes of header each; a hello cut into tiny records may
    // legally take more bytes on the wire than `max`, up to this bound.
    let wire_limit = max.saturating_mul(2).saturating_add(1024);
    read_until(stream, buf, Some(deadline), wire_limit, |bytes| {
        sni::parse_client_hello(bytes, max).into()
    })
    .await
}

/// The metric reason for a read that ended without a ClientHello and, for a
/// TLS client that sent something broken, the alert to answer with (a
/// client that does not speak TLS gets none); `None` for a timeout, which
/// has its own counter.
fn failure(e: &ReadError<SniError>) -> Option<(&'static str, Option<AlertDescription>)> {
    let failure = match e {
        ReadError::Invalid(e @ SniError::NotTls) => ("not_tls", e.alert()),
        ReadError::Invalid(e @ (SniError::Malformed(_) | SniError::Incomplete)) => {
            ("malformed", e.alert())
        }
        ReadError::Invalid(e @ SniError::TooLarge { .. }) => ("too_large", e.alert()),
        ReadError::TooLarge { .. } => ("too_large", Some(AlertDescription::RecordOverflow)),
        ReadError::Closed => ("closed", None),
        ReadError::Io(_) => ("io", None),
        ReadError::TimedOut => return None,
    };
    Some(failure)
}

async fn send_alert(client: &mut TcpStream, alert: AlertDescription) {
    forward::answer_and_close(client, &sni::alert_record(alert)).await;
}
