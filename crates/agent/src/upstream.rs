//! One client connection, from accept to close: build the preface for the
//! upstream mode, dial with failover, for `connect` read the gateway's
//! answer, then relay.

use std::net::SocketAddr;
use std::sync::Arc;

use apiway_core::endpoint::Endpoint;
use apiway_core::forward::{self, Relaying};
use apiway_core::listener::Slot;
use apiway_core::read_until::{read_until, ReadError};
use apiway_wire::connect_response::{self, ConnectResponseError};
use apiway_wire::proxy::{ProxyHeader, RenderOptions, Version};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::config::{UpstreamMode, UpstreamSpec};
use crate::metrics::ListenerHandles;

/// Serves one accepted connection.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    handles: Arc<ListenerHandles>,
    client: TcpStream,
    peer: SocketAddr,
    slot: Slot,
) {
    handles.accepted.inc();
    handles.open.inc();
    let _open = OpenGuard(&handles);
    let _slot = slot;
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
    shared: &Shared,
    handles: &ListenerHandles,
    mut client: TcpStream,
    peer: SocketAddr,
) -> Option<(Relaying, Option<Arc<Endpoint>>)> {
    let upstream = shared.upstream();
    // The address the client connected to, for the PROXY header or the
    // CONNECT target; `direct` sends nothing ahead of the client's bytes
    // and skips the system call (`getsockname`).
    let mut destination = None;
    let mut preface = Vec::new();
    if upstream.mode != UpstreamMode::Direct {
        let dst = match client.local_addr() {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "client socket has no local address; closing");
                return None;
            }
        };
        preface = match self::preface(&upstream, peer, dst) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(%peer, destination = %dst, "closing client: {e}");
                return None;
            }
        };
        destination = Some(dst);
    }
    let set = shared.set();
    let mut connected = match forward::open(&set, upstream.connect_timeout, &preface).await {
        Ok(c) => c,
        Err(e) => {
            handles.unavailable.inc();
            tracing::warn!(%peer, listener = %handles.name, "closing client: {e}");
            return None;
        }
    };
    if let Some(destination) = destination.filter(|_| upstream.mode == UpstreamMode::Connect) {
        let authority = connect_authority(&upstream, destination);
        let gateway = connected.lease.endpoint().name().to_owned();
        let answer = tokio::time::timeout(
            upstream.connect_response_timeout,
            read_connect_answer(&mut connected.stream),
        )
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {:?}",
                upstream.connect_response_timeout
            ))
        });
        match answer {
            Ok(early) => {
                // Bytes the gateway sent after its answer already belong to
                // the tunnel.
                if !early.is_empty() {
                    if client.write_all(&early).await.is_err() {
                        return None;
                    }
                    connected
                        .lease
                        .endpoint()
                        .metrics()
                        .to_client
                        .inc_by(early.len() as u64);
                }
            }
            Err(e) => {
                handles.connect_failed.inc();
                tracing::warn!(%peer, %gateway, %authority, "CONNECT failed, closing the client: {e}");
                return None;
            }
        }
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

fn connect_authority(upstream: &UpstreamSpec, destination: SocketAddr) -> String {
    upstream
        .connect_authority
        .clone()
        .unwrap_or_else(|| destination.to_string())
}

/// The bytes the upstream must see before the client's: nothing, a PROXY
/// v2 header, or a `CONNECT` request.
fn preface(
    upstream: &UpstreamSpec,
    peer: SocketAddr,
    destination: SocketAddr,
) -> Result<Vec<u8>, String> {
    match upstream.mode {
        UpstreamMode::Direct => Ok(Vec::new()),
        UpstreamMode::Proxy => {
            let mut header = ProxyHeader::tcp(Version::V2, unmap(peer), unmap(destination));
            header.tlvs.authority = upstream.authority.clone();
            header
                .render_v2(&RenderOptions::default())
                .map_err(|e| format!("cannot render the PROXY header: {e}"))
        }
        UpstreamMode::Connect => {
            let authority = connect_authority(upstream, destination);
            connect_response::request(&authority).map_err(|e| format!("CONNECT {authority}: {e}"))
        }
    }
}

/// An IPv4 client on a dual-stack socket shows as `::ffff:a.b.c.d`; the
/// header should carry the IPv4 address, as the client used it.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

/// Reads the gateway's answer to `CONNECT`; on 2xx returns the bytes that
/// followed the head, otherwise a description of what came back.
async fn read_connect_answer(stream: &mut TcpStream) -> Result<Vec<u8>, String> {
    let max = connect_response::DEFAULT_MAX_RESPONSE_LEN;
    let mut buf = Vec::with_capacity(512);
    // The caller bounds the time.
    let read = read_until(stream, &mut buf, None, max, |bytes| {
        connect_response::parse(bytes, max).into()
    });
    let (head, consumed) = read.await.map_err(|e| match e {
        ReadError::Invalid(e) => e.to_string(),
        ReadError::TooLarge { limit } => ConnectResponseError::TooLong { limit }.to_string(),
        ReadError::Closed => "the gateway closed the connection without answering".into(),
        ReadError::Io(e) => format!("reading the answer: {e}"),
        ReadError::TimedOut => "timed out reading the answer".into(),
    })?;
    if head.is_success() {
        return Ok(buf.split_off(consumed));
    }
    Err(format!(
        "the gateway answered {} {}",
        head.status, head.reason
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiway_core::endpoint::{EndpointSetSpec, Policy};
    use apiway_core::relay::RelayConfig;

    fn spec(mode: UpstreamMode) -> UpstreamSpec {
        UpstreamSpec {
            mode,
            set: EndpointSetSpec {
                endpoints: vec![],
                policy: Policy::PreferLocalThenLatency,
                health_check: None,
                ejection: Default::default(),
            },
            connect_timeout: std::time::Duration::from_secs(1),
            authority: Some("api.a.example.com".into()),
            connect_authority: None,
            connect_response_timeout: std::time::Duration::from_secs(1),
            relay: RelayConfig::default(),
            close_on_down: false,
            dns_refresh: std::time::Duration::from_secs(10),
        }
    }

    #[test]
    fn prefaces() {
        let peer: SocketAddr = "[::ffff:192.0.2.7]:40000".parse().unwrap();
        let dst: SocketAddr = "10.1.2.3:443".parse().unwrap();
        assert!(preface(&spec(UpstreamMode::Direct), peer, dst)
            .unwrap()
            .is_empty());
        let bytes = preface(&spec(UpstreamMode::Proxy), peer, dst).unwrap();
        let (h, n) = apiway_wire::proxy::parse(&bytes).unwrap();
        assert_eq!(n, bytes.len());
        let a = h.addresses.unwrap();
        assert_eq!(a.source, "192.0.2.7:40000".parse().unwrap());
        assert_eq!(a.destination, dst);
        assert_eq!(h.tlvs.authority.as_deref(), Some("api.a.example.com"));
        let c = preface(&spec(UpstreamMode::Connect), peer, dst).unwrap();
        assert_eq!(
            c,
            b"CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: 10.1.2.3:443\r\n\r\n"
        );
    }
}
