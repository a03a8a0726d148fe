//! One connection on a `kind: tls` listener, from accept to close: read the
//! ClientHello (bounded, under a timeout), route by SNI, dial a backend with
//! failover, replay the hello bytes, relay until both sides finish.

use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::dial::Connected;
use apiway_core::forward::ForwardError;
use apiway_core::listener::Slot;
use apiway_core::relay::RelayConfig;
use apiway_wire::sni::{self, AlertDescription, ClientHello, SniError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::gateway::{Gateway, ListenerState};

/// Serves one accepted connection.
pub(crate) async fn serve(
    gateway: Arc<Gateway>,
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
    // Boxed: the hello, routing and dial phases need far more state than
    // the relay, and an idle connection should only pay for the relay.
    let Some((client, connected, relay_config, route_name)) =
        Box::pin(prepare(&gateway, &listener, client, peer)).await
    else {
        return;
    };
    let backend = connected.lease.endpoint().clone();
    let outcome = apiway_core::forward::relay(client, connected, &relay_config).await;
    tracing::debug!(%peer, route = %route_name, backend = backend.name(), ?outcome, "connection closed");
}

type Prepared = (TcpStream, Connected, RelayConfig, Arc<str>);

/// Reads the ClientHello, routes it, connects a backend and replays the
/// hello; `None` when the connection was answered and closed instead.
async fn prepare(
    gateway: &Gateway,
    listener: &ListenerState,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<Prepared> {
    let handles = &listener.handles;
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
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, listener = %spec.name, "ClientHello timed out; closing");
            handles.hello_timeouts.inc();
            return None;
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
        return None;
    };
    route.routed.inc();
    drop(hello);

    match apiway_core::forward::open(&route.set, route.connect_timeout, &hello_bytes).await {
        Ok(connected) => Some((client, connected, route.relay.clone(), route.name_arc())),
        Err(ForwardError::Unavailable(e)) => {
            tracing::warn!(%peer, route = route.name(), "closing client: {e}");
            route.unavailable.inc();
            send_alert(&mut client, AlertDescription::InternalError).await;
            None
        }
        Err(e) => {
            tracing::debug!(%peer, route = route.name(), "{e}");
            None
        }
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
