//! One connection on a `kind: tls` listener, from accept to close: read the
//! ClientHello (bounded, under a timeout), route by SNI, dial a backend with
//! failover, replay the hello bytes, relay until both sides finish.

use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::listener::Slot;
use apiway_wire::sni::{self, AlertDescription, ClientHello, SniError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::gateway::{Gateway, ListenerState};

/// Serves one accepted connection.
pub(crate) async fn serve(
    gateway: Arc<Gateway>,
    listener: Arc<ListenerState>,
    mut client: TcpStream,
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
    let spec = listener.spec.load_full();

    let mut hello_bytes = Vec::new();
    let read = read_client_hello(&mut client, &mut hello_bytes, spec.max_client_hello_bytes);
    let hello = match tokio::time::timeout(spec.client_hello_timeout, read).await {
        Ok(Ok(hello)) => hello,
        Ok(Err((reason, alert))) => {
            tracing::debug!(%peer, listener = %spec.name, reason, "no usable ClientHello; closing");
            handles.hello_error(reason).inc();
            if let Some(alert) = alert {
                send_alert(&mut client, alert).await;
            }
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, listener = %spec.name, "ClientHello timed out; closing");
            handles.hello_timeouts.inc();
            return;
        }
    };
    drop(spec);

    let Some(route) = gateway.route_for(hello.server_name.as_deref()) else {
        let reason = if hello.server_name.is_some() {
            "unknown_sni"
        } else {
            "no_sni"
        };
        tracing::debug!(%peer, sni = ?hello.server_name, reason, "no route; sending unrecognized_name");
        handles.no_route(reason).inc();
        send_alert(&mut client, AlertDescription::UnrecognizedName).await;
        return;
    };
    route.routed.inc();
    // Idle connections must hold nothing they no longer need.
    drop(hello);

    let connected = match apiway_core::dial::connect(&route.set, route.connect_timeout).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%peer, route = route.name(), "closing client: {e}");
            route.unavailable.inc();
            send_alert(&mut client, AlertDescription::InternalError).await;
            return;
        }
    };
    let mut backend = connected.stream;
    if let Err(e) = backend.write_all(&hello_bytes).await {
        tracing::debug!(%peer, backend = %connected.peer, error = %e, "backend closed before the ClientHello was replayed");
        return;
    }
    // These bytes went around the relay; count them as it would.
    connected
        .lease
        .endpoint()
        .metrics()
        .to_backend
        .inc_by(hello_bytes.len() as u64);
    drop(hello_bytes);
    let relay_config = route.relay.clone();
    let route_name = route.name_arc();
    drop(route);

    let endpoint = connected.lease.endpoint().clone();
    let outcome =
        apiway_core::relay::relay(client, backend, &relay_config, endpoint.metrics()).await;
    drop(connected.lease);
    tracing::debug!(%peer, route = %route_name, backend = endpoint.name(), ?outcome, "connection closed");
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
    let record = sni::alert_record(alert);
    // A few bytes into a fresh socket buffer; a client that never reads
    // cannot hold us, the write completes locally.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let _ = client.write_all(&record).await;
        let _ = client.shutdown().await;
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
