//! The tail every proxying role shares once it knows where a connection
//! goes: dial the endpoint set with failover, send the bytes that must reach
//! the backend before the client's own (a replayed ClientHello, a PROXY
//! header), then relay until both sides finish.
//!
//! Split in two on purpose: [`open`] is the short, stateful phase; the
//! caller should `Box::pin` whatever leads up to it so that the future that
//! lives for the (often idle, hours-long) life of the connection holds only
//! what [`relay`] needs. That keeps an idle proxied connection near 1 KiB.

use std::time::Duration;

use apiway_relay::{KeepaliveConfig, RelayConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::dial::{self, Connected, DialError};
use crate::endpoint::{EndpointSet, Lease};

/// Why a connection could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No endpoint of the set could be reached.
    #[error(transparent)]
    Unavailable(#[from] DialError),
    /// The backend accepted the connection but closed or failed before the
    /// preface was written.
    #[error("backend {backend} closed before the first bytes were sent: {error}")]
    Preface {
        /// The endpoint that failed.
        backend: String,
        /// What the write said.
        error: std::io::Error,
    },
}

/// Dials `set` with failover (each endpoint gets `connect_timeout`) and
/// writes `preface` to the connected backend. The preface bytes are counted
/// in the endpoint's `to_backend` bytes, as the relay would count them.
pub async fn open(
    set: &EndpointSet,
    connect_timeout: Duration,
    preface: &[u8],
) -> Result<Connected, ForwardError> {
    let mut connected = dial::connect(set, connect_timeout).await?;
    if !preface.is_empty() {
        if let Err(error) = connected.stream.write_all(preface).await {
            return Err(ForwardError::Preface {
                backend: connected.lease.endpoint().name().to_owned(),
                error,
            });
        }
        connected
            .lease
            .endpoint()
            .metrics()
            .to_backend
            .inc_by(preface.len() as u64);
    }
    Ok(connected)
}

/// Relays between `client` and the backend of `connected` until both
/// directions finish, counting bytes on the backend's metrics. The lease is
/// held (the connection counts as active) until the relay ends.
///
/// Not an `async fn`: the returned future is the relay itself and nothing
/// more (about 200 bytes), since it lives as long as the connection.
///
/// `client` must come from a listener made by [`crate::listener::bind`]:
/// its keepalive and `TCP_NODELAY` were inherited from the listening socket
/// (Linux copies them on accept), so only the backend socket needs the
/// system calls here, unless `cfg` asks for other keepalive timings.
pub fn relay(client: TcpStream, connected: Connected, cfg: &RelayConfig) -> Relaying {
    let Connected { stream, lease, .. } = connected;
    if let Some(keepalive) = &cfg.keepalive {
        let client_too = *keepalive != KeepaliveConfig::default();
        let sockets = std::iter::once(&stream).chain(client_too.then_some(&client));
        apiway_relay::apply_keepalive(sockets, keepalive);
    }
    let cfg = RelayConfig {
        keepalive: None,
        ..cfg.clone()
    };
    // The lease is the byte observer, so the future owns it and the
    // connection counts as active exactly as long as the relay runs.
    apiway_relay::relay(client, stream, &cfg, lease)
}

/// A connection being relayed: resolves when both directions are done. It
/// holds the endpoint's lease, so the connection counts as active until
/// it resolves or is dropped (which closes both sockets).
pub type Relaying = apiway_relay::TcpRelay<Lease>;

/// Counts relayed bytes on the leased endpoint's metrics.
impl apiway_relay::Observer for Lease {
    fn on_bytes(&self, dir: apiway_relay::Direction, n: u64) {
        self.endpoint().metrics().on_bytes(dir, n)
    }

    fn on_end(&self, end: apiway_relay::RelayEnd) {
        let m = self.endpoint().metrics();
        let counter = match end {
            apiway_relay::RelayEnd::ClientError(_) => &m.resets_from_client,
            apiway_relay::RelayEnd::BackendError(_) => &m.resets_from_backend,
            apiway_relay::RelayEnd::Closed | apiway_relay::RelayEnd::IdleTimeout => return,
        };
        counter.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
    use crate::metrics::BackendMetrics;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn sends_the_preface_then_relays_both_ways() {
        let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let backend_addr = backend.local_addr().unwrap();
        let set = EndpointSet::new(
            "r",
            &EndpointSetSpec {
                endpoints: vec![Address::parse(&backend_addr.to_string()).unwrap()],
                policy: Policy::RoundRobin,
                health_check: None,
                ejection: Ejection::default(),
            },
            BackendMetrics::default(),
        );
        let server = tokio::spawn(async move {
            let (mut s, _) = backend.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(b"answer").await.unwrap();
            got
        });
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(front_addr).await.unwrap();
            c.write_all(b" and body").await.unwrap();
            c.shutdown().await.unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).await.unwrap();
            back
        });
        let (accepted, _) = front.accept().await.unwrap();
        let connected = open(&set, Duration::from_secs(1), b"preface")
            .await
            .unwrap();
        let endpoint = connected.lease.endpoint().clone();
        assert_eq!(endpoint.active(), 1);
        let relaying = relay(accepted, connected, &RelayConfig::default());
        // It lives as long as the connection, mostly idle: only the relay.
        let size = std::mem::size_of_val(&relaying);
        assert!(size <= 256, "the relaying future is {size} bytes");
        let outcome = relaying.await;
        assert_eq!(server.await.unwrap(), b"preface and body");
        assert_eq!(client.await.unwrap(), b"answer");
        assert_eq!(outcome.backend_to_client, 6);
        assert_eq!(endpoint.active(), 0, "the lease ends with the relay");
        assert_eq!(endpoint.metrics().to_backend.get(), 7 + 9);
    }
}
