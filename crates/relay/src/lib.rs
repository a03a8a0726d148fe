//! The byte relay every apiway role uses between a client and a backend.
//!
//! [`relay`] joins two TCP sockets, [`relay_io`] any two async byte streams
//! (TLS, tunnels). Both run the same per-direction state machine:
//!
//! - **Half-close**: when one side ends its writes, the other side's write
//!   half is shut down and the opposite direction keeps flowing until it ends
//!   too. An error on either side (a reset) ends the relay; [`relay`] then
//!   resets the other TCP socket too (SO_LINGER 0), so a client never takes
//!   a backend's reset for a complete answer, nor a backend a client's.
//! - **Nothing held while idle**: a direction waits for readiness first and
//!   only then borrows a buffer (or, for TCP, a splice pipe) from a bounded
//!   process-wide [`pool`], returning it as soon as the data is drained. An
//!   idle connection costs its two sockets and a small future, nothing more.
//! - **splice(2)** moves TCP bytes socket → pipe → socket inside the kernel
//!   (Linux); a userspace copy is always available ([`RelayMode`]).
//! - **Idle timeout** (optional) and **keepalive** on both sockets.
#![warn(missing_docs)]

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

mod copy;
mod duplex;
mod half;
mod keepalive;
pub mod pool;
#[cfg(target_os = "linux")]
mod splice;

pub use keepalive::{apply_keepalive, set_keepalive, KeepaliveConfig};

/// The way bytes travel between the two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the backend (requests).
    ClientToBackend,
    /// From the backend to the client (responses, watch events).
    BackendToClient,
}

/// Watches bytes as they move, e.g. to bump Prometheus counters.
pub trait Observer: Send + Sync {
    /// Called for every chunk written to the destination, `n > 0` bytes.
    fn on_bytes(&self, dir: Direction, n: u64);

    /// Called once when a [`relay`] between two TCP sockets ends.
    fn on_end(&self, _end: RelayEnd) {}
}

/// Observes nothing.
impl Observer for () {
    fn on_bytes(&self, _dir: Direction, _n: u64) {}
}

impl<T: Observer + ?Sized> Observer for &T {
    fn on_bytes(&self, dir: Direction, n: u64) {
        (**self).on_bytes(dir, n)
    }

    fn on_end(&self, end: RelayEnd) {
        (**self).on_end(end)
    }
}

impl<T: Observer + ?Sized> Observer for std::sync::Arc<T> {
    fn on_bytes(&self, dir: Direction, n: u64) {
        (**self).on_bytes(dir, n)
    }
}

/// How [`relay`] moves bytes between two TCP sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelayMode {
    /// On Linux, a userspace copy for small exchanges and splice once a
    /// direction carries bulk data (a read filled the whole buffer), like
    /// HAProxy's `splice-auto`; userspace copy elsewhere. On loopback,
    /// splice used about half the relay CPU per GiB of the copy (0.34–0.47 s
    /// against 0.68–1.0 s) at equal or better throughput, and holds no
    /// process memory while bytes flow (`examples/throughput.rs`); for small
    /// chunks the copy needs one system call less per chunk.
    #[default]
    Auto,
    /// splice(2) through a pooled pipe; a chunk is copied in user space when
    /// no pipe is to be had (see [`pool::set_pipe_limit`]). Linux only;
    /// elsewhere the same as `Userspace`.
    Splice,
    /// Read into a pooled buffer and write it out.
    Userspace,
}

/// Settings for one relayed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// Ends the relay when no byte moved either way for this long.
    pub idle_timeout: Option<Duration>,
    /// splice or userspace copy, for [`relay`] ([`relay_io`] always copies).
    pub mode: RelayMode,
    /// Size of the userspace copy buffer, clamped to 4 KiB ..= 16 MiB.
    pub buffer_size: usize,
    /// Applied (with `TCP_NODELAY`) to both sockets by [`relay`].
    pub keepalive: Option<KeepaliveConfig>,
}

/// The default copy buffer: 64 KiB.
pub const DEFAULT_BUFFER_SIZE: usize = 64 * 1024;

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            idle_timeout: None,
            mode: RelayMode::Auto,
            buffer_size: DEFAULT_BUFFER_SIZE,
            keepalive: Some(KeepaliveConfig::default()),
        }
    }
}

impl RelayConfig {
    fn clamped_buffer_size(&self) -> u32 {
        // Fits in u32 after the clamp.
        self.buffer_size.clamp(4 * 1024, 16 * 1024 * 1024) as u32
    }
}

/// What happened on a finished relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayOutcome {
    /// Bytes written to the backend.
    pub client_to_backend: u64,
    /// Bytes written to the client.
    pub backend_to_client: u64,
    /// Why the relay ended.
    pub end: RelayEnd,
}

/// Why a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both directions finished cleanly: each side ended its writes, and
    /// that end was passed on to the other.
    Closed,
    /// No byte moved either way for the configured idle timeout.
    IdleTimeout,
    /// Reading from or writing to the client failed (e.g. it reset).
    ClientError(io::ErrorKind),
    /// Reading from or writing to the backend failed (e.g. it reset).
    BackendError(io::ErrorKind),
}

/// Relays between two TCP sockets until both directions are done.
///
/// Use it like an `async fn`: `relay(client, backend, &cfg, &observer).await`.
/// Dropping the future closes both sockets (used when a shutdown grace period
/// expires). Keepalive and `TCP_NODELAY` are set on both sockets first when
/// `cfg.keepalive` is set; `cfg` is read here, not kept. The future owns
/// `observer` (a reference, an `Arc`, or a guard that must live as long as
/// the connection) and drops it when it ends.
pub fn relay<O: Observer + Unpin>(
    client: TcpStream,
    backend: TcpStream,
    cfg: &RelayConfig,
    observer: O,
) -> TcpRelay<O> {
    if let Some(keepalive) = &cfg.keepalive {
        apply_keepalive([&client, &backend], keepalive);
    }
    let buffer_size = cfg.clamped_buffer_size();
    #[cfg(target_os = "linux")]
    let transfer = splice::Tcp {
        splice: matches!(cfg.mode, RelayMode::Auto | RelayMode::Splice),
        bulk_only: cfg.mode == RelayMode::Auto,
        buffer_size,
    };
    #[cfg(not(target_os = "linux"))]
    let transfer = copy::Userspace { buffer_size };
    TcpRelay(duplex::Duplex::new(
        client,
        backend,
        transfer,
        cfg.idle_timeout,
        observer,
    ))
}

#[cfg(target_os = "linux")]
type TcpTransfer = splice::Tcp;
#[cfg(not(target_os = "linux"))]
type TcpTransfer = copy::Userspace;

/// The future [`relay`] returns, named so that callers can store it (e.g.
/// build it in a short-lived setup phase and hand it to the long-lived
/// part of a connection task).
pub struct TcpRelay<O>(duplex::Duplex<TcpStream, TcpStream, TcpTransfer, O>);

impl<O: Observer + Unpin> Future for TcpRelay<O> {
    type Output = RelayOutcome;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<RelayOutcome> {
        let this = self.get_mut();
        let outcome = std::task::ready!(std::pin::Pin::new(&mut this.0).poll(cx));
        let (client, backend, observer) = this.0.parts();
        // The error of one side becomes a reset of the other when the
        // sockets are dropped.
        let other = match outcome.end {
            RelayEnd::ClientError(_) => Some(backend),
            RelayEnd::BackendError(_) => Some(client),
            RelayEnd::Closed | RelayEnd::IdleTimeout => None,
        };
        if let Some(socket) = other {
            if let Err(e) = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO)) {
                tracing::debug!(error = %e, "could not set SO_LINGER 0 to pass a reset on");
            }
        }
        observer.on_end(outcome.end);
        std::task::Poll::Ready(outcome)
    }
}

impl<O> std::fmt::Debug for TcpRelay<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpRelay").finish_non_exhaustive()
    }
}

/// Relays between any two byte streams until both directions are done,
/// copying in user space with buffers taken only while data flows.
///
/// Same semantics as [`relay`] (half-close, errors, idle timeout, drop
/// closes both); `cfg.mode` and `cfg.keepalive` don't apply.
pub fn relay_io<A, B, O>(
    client: A,
    backend: B,
    cfg: &RelayConfig,
    observer: O,
) -> impl Future<Output = RelayOutcome>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
    O: Observer + Unpin,
{
    let transfer = copy::Userspace {
        buffer_size: cfg.clamped_buffer_size(),
    };
    duplex::Duplex::new(client, backend, transfer, cfg.idle_timeout, observer)
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[tokio::test]
    async fn relay_future_is_small() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (c, d) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let cfg = RelayConfig::default();
        let fut = relay(a.unwrap(), b.unwrap().0, &cfg, &());
        let size = std::mem::size_of_val(&fut);
        let io = relay_io(c.unwrap(), d.unwrap().0, &cfg, &());
        let io_size = std::mem::size_of_val(&io);
        eprintln!("relay future: {size} bytes, relay_io over TCP: {io_size} bytes");
        // Two 40-byte streams, two directions, the observer, the timer.
        assert!(size <= 256, "relay future is {size} bytes");
        assert!(io_size <= 256, "relay_io future is {io_size} bytes");
    }
}
