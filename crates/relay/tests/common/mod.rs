//! Real-socket plumbing shared by the relay's behaviour tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apiway_relay::{relay, relay_io, Direction, Observer, RelayConfig, RelayOutcome};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Sums what the relay reports, per direction.
#[derive(Default)]
pub struct Totals {
    pub to_backend: AtomicU64,
    pub to_client: AtomicU64,
    pub calls: AtomicU64,
}

impl Observer for Totals {
    fn on_bytes(&self, dir: Direction, n: u64) {
        assert!(n > 0, "observer called with an empty chunk");
        self.calls.fetch_add(1, Ordering::Relaxed);
        match dir {
            Direction::ClientToBackend => self.to_backend.fetch_add(n, Ordering::Relaxed),
            Direction::BackendToClient => self.to_client.fetch_add(n, Ordering::Relaxed),
        };
    }
}

/// Which entry point carries the connection.
#[derive(Clone, Copy, Debug)]
pub enum Via {
    /// `relay` on the two TCP sockets.
    Tcp,
    /// `relay_io` on the same sockets, as generic streams.
    Io,
}

/// A connected pair of sockets on 127.0.0.1.
pub async fn socket_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (a.unwrap(), b.unwrap().0)
}

/// One proxied connection: the user's client socket, the backend server's
/// socket, and the relay task between them.
pub struct Proxied {
    pub client: TcpStream,
    pub server: TcpStream,
    pub relay: JoinHandle<RelayOutcome>,
    pub totals: Arc<Totals>,
}

pub async fn proxied(cfg: RelayConfig, via: Via) -> Proxied {
    let (client, relay_client_side) = socket_pair().await;
    let (relay_backend_side, server) = socket_pair().await;
    let totals = Arc::new(Totals::default());
    let observer = totals.clone();
    let relay = tokio::spawn(async move {
        match via {
            Via::Tcp => relay(relay_client_side, relay_backend_side, &cfg, &*observer).await,
            Via::Io => relay_io(relay_client_side, relay_backend_side, &cfg, &*observer).await,
        }
    });
    Proxied {
        client,
        server,
        relay,
        totals,
    }
}

/// Deterministic pseudo-random bytes (xorshift), different per seed.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
