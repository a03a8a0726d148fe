//! One client connection, from accept to close: reach the upstream through
//! the connector of the agent's mode (core's: direct with failover, a PROXY
//! v2 header, or a CONNECT tunnel), then relay.

use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::connector::{Connector, ConnectorError, Established, Origin};
use apiway_core::endpoint::Endpoint;
use apiway_core::forward::{self, Relaying};
use apiway_core::listener::Slot;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use apiway_core::endpoint::EndpointSet;
use arc_swap::ArcSwap;

use apiway_tunnel::client::{TunnelClient, TunnelConnector};

use crate::config::UpstreamSpec;
use crate::metrics::ListenerHandles;

/// What connections read: the upstream settings (swapped on reload) and
/// the endpoint set.
pub(crate) struct Upstream {
    spec: ArcSwap<UpstreamSpec>,
    set: Arc<EndpointSet>,
    tunnel: Option<Arc<TunnelClient>>,
}

impl Upstream {
    pub(crate) fn new(
        spec: UpstreamSpec,
        set: Arc<EndpointSet>,
        tunnel: Option<Arc<TunnelClient>>,
    ) -> Upstream {
        Upstream {
            spec: ArcSwap::from_pointee(spec),
            set,
            tunnel,
        }
    }

    pub(crate) fn tunnel(&self) -> Option<&Arc<TunnelClient>> {
        self.tunnel.as_ref()
    }

    pub(crate) fn upstream(&self) -> Arc<UpstreamSpec> {
        self.spec.load_full()
    }

    pub(crate) fn replace_spec(&self, spec: UpstreamSpec) {
        self.spec.store(Arc::new(spec));
    }

    pub(crate) fn set(&self) -> Arc<EndpointSet> {
        self.set.clone()
    }
}

/// Serves one accepted connection; `destination` is the `--target`
/// destination of a tunnel listener.
pub(crate) async fn serve(
    shared: Arc<Upstream>,
    destination: Option<Arc<str>>,
    handles: Arc<ListenerHandles>,
    client: TcpStream,
    peer: SocketAddr,
    slot: Slot,
) {
    handles.accepted.inc();
    handles.open.inc();
    let _open = OpenGuard(&handles);
    let _slot = slot;
    if let (Some(tunnel), Some(destination)) = (shared.tunnel.clone(), destination) {
        return through_tunnel(&shared, &tunnel, &destination, &handles, client, peer).await;
    }
    // Boxed: the dial and CONNECT phases hold far more than the relay, and
    // an idle connection should pay only for the relay.
    let Some((relaying, close_on_down)) = Box::pin(prepare(&shared, &handles, client, peer)).await
    else {
        return;
    };
    drop(shared);
    let Some(endpoint) = close_on_down else {
        let outcome = relaying.await;
        tracing::debug!(%peer, listener = %handles.name, ?outcome, "connection closed");
        return;
    };
    let down = endpoint.marked_down();
    tokio::pin!(down);
    // Registered before relaying, so a verdict in between is not missed.
    down.as_mut().enable();
    tokio::select! {
        outcome = relaying => {
            tracing::debug!(%peer, listener = %handles.name, ?outcome, "connection closed");
        }
        _ = down => {
            // Dropping the relay closes both sockets: the client reconnects
            // and gets an endpoint that answers.
            tracing::info!(%peer, backend = endpoint.name(), "endpoint marked down; closing its connection (--close-on-down)");
        }
    }
}

/// `tunnel`: one Proxy stream to `destination` through the connector seam,
/// then the relay.
async fn through_tunnel(
    shared: &Upstream,
    tunnel: &Arc<TunnelClient>,
    destination: &Arc<str>,
    handles: &ListenerHandles,
    client: TcpStream,
    peer: SocketAddr,
) {
    let connector = TunnelConnector {
        client: tunnel.clone(),
        destination: destination.clone(),
    };
    let set = shared.set();
    let no_origin = || Err("not needed".to_owned());
    let dial = Box::pin(connector.connect(&set, no_origin, &[]));
    let dialled = tokio::select! {
        r = dial => r,
        () = reset_by(&client) => {
            // Dropping the dial resets its stream: the server cancels its
            // dial of the destination instead of finishing it for nobody.
            tracing::debug!(%peer, listener = %handles.name, %destination, "the client reset its connection during the dial; dial cancelled");
            return;
        }
    };
    let mut stream = match dialled {
        Ok(s) => s,
        Err(e) => {
            match e {
                ConnectorError::Unavailable(_) => handles.unavailable.inc(),
                _ => handles.connect_failed.inc(),
            };
            tracing::warn!(%peer, listener = %handles.name, %destination, "closing client: {e}");
            return;
        }
    };
    let relay = shared.upstream().relay.clone();
    let metrics = tunnel.metrics();
    metrics.open.inc();
    let outcome =
        apiway_tunnel::stream::splice(client, &mut stream, &relay, metrics.observer()).await;
    metrics.open.dec();
    tracing::debug!(%peer, listener = %handles.name, connect_id = stream.connect_id(), ?outcome, "connection closed");
}

/// Resolves when the client resets its connection; pending otherwise.
/// Reads nothing: what the client sent waits for the relay. A FIN does not
/// count, since it may be a half-close that waits for the answer.
async fn reset_by(client: &TcpStream) {
    let mut byte = [0u8; 1];
    if client.peek(&mut byte).await.is_ok() {
        std::future::pending::<()>().await;
    }
}

struct OpenGuard<'a>(&'a ListenerHandles);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.dec();
    }
}

/// Dials the upstream, sends the preface and returns the relay (built here,
/// so the long-lived part of the task holds nothing else); `None` when the
/// client was closed instead (logged and counted).
async fn prepare(
    shared: &Upstream,
    handles: &ListenerHandles,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<(Relaying, Option<Arc<Endpoint>>)> {
    let upstream = shared.upstream();
    let set = shared.set();
    let origin = || {
        client
            .local_addr()
            .map(|destination| Origin {
                client: peer,
                destination,
            })
            .map_err(|e| e.to_string())
    };
    let Established { connected, pending } =
        match upstream.connector.connect(&set, origin, &[]).await {
            Ok(e) => e,
            Err(ConnectorError::Unavailable(e)) => {
                handles.unavailable.inc();
                tracing::warn!(%peer, listener = %handles.name, "closing client: {e}");
                return None;
            }
            Err(e @ ConnectorError::Refused { .. }) => {
                handles.connect_failed.inc();
                tracing::warn!(%peer, "CONNECT failed, closing the client: {e}");
                return None;
            }
            Err(e) => {
                tracing::warn!(%peer, "closing client: {e}");
                return None;
            }
        };
    // Bytes the gateway sent after its CONNECT answer already belong to
    // the tunnel.
    if !pending.is_empty() {
        if client.write_all(&pending).await.is_err() {
            return None;
        }
        connected
            .lease
            .endpoint()
            .metrics()
            .to_client
            .inc_by(pending.len() as u64);
    }
    // With --close-on-down, the endpoint whose down verdict ends the relay.
    let close_on_down = upstream
        .close_on_down
        .then(|| connected.lease.endpoint().clone());
    Some((
        forward::relay(client, connected, &upstream.relay),
        close_on_down,
    ))
}
