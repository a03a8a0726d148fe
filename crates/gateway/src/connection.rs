//! The life of one connection on a gateway listener, from accept to close:
//! counters, the boxed pre-relay phase of the listener's kind (see
//! `sni_listener`, `proxy_listener`, `connect_listener`), then the relay.

use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::listener::Slot;
use tokio::net::TcpStream;

use crate::config::ListenerKind;
use crate::listener_state::ListenerState;
use crate::route::RouteTable;

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
    let Some(crate::forward::Prepared {
        relaying,
        route,
        log,
    }) = (match kind {
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
    })
    else {
        return;
    };
    drop(routes);
    let outcome = relaying.await;
    tracing::debug!(%peer, %route, ?outcome, "connection closed");
    if let (Some(pending), Some(access_log)) = (log, listener.access_log.load().as_ref()) {
        access_log.record(listener.handles.name(), peer, &route, &pending, &outcome);
    }
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
}
