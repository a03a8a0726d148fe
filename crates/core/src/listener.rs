//! Listening sockets with a connection limit, shared by every role.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use apiway_relay::KeepaliveConfig;

use crate::drain::Drain;

/// Binds a TCP listener with `SO_REUSEADDR`, `SO_REUSEPORT`, a deep
/// backlog, and the default keepalive and `TCP_NODELAY` for the sockets it
/// accepts; the error names the address and the likely fix.
///
/// `SO_REUSEPORT` is what makes restarts seamless: the new process binds
/// the same address while the old one drains (it keeps accepting for its
/// drain delay), and the kernel spreads new connections over both until
/// the old one closes. Only processes of the same user can share a port
/// this way. Connections the kernel queued at the old listener when it
/// closes are moved to the new one where `net.ipv4.tcp_migrate_req` is 1
/// (Linux 5.14+), and reset otherwise.
pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let inner = || -> std::io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        #[cfg(unix)]
        socket.set_reuse_port(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_nonblocking(true)?;
        // Accepted sockets inherit these (Linux copies a listening socket's
        // options), which saves every connection its own system calls.
        let keepalive = KeepaliveConfig::default();
        socket.set_tcp_keepalive(
            &socket2::TcpKeepalive::new()
                .with_time(keepalive.idle)
                .with_interval(keepalive.interval)
                .with_retries(keepalive.retries),
        )?;
        socket.set_tcp_nodelay(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        TcpListener::from_std(socket.into())
    };
    inner().map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another process listens there, without SO_REUSEPORT or as another user; pick another address or stop it)"
            }
            std::io::ErrorKind::AddrNotAvailable => " (no local interface has this address)",
            std::io::ErrorKind::PermissionDenied => {
                " (ports below 1024 need root or CAP_NET_BIND_SERVICE)"
            }
            _ => "",
        };
        anyhow::anyhow!("cannot listen on {addr}: {e}{hint}")
    })
}

/// What a listener does with a new connection when `max_connections` are
/// open. Gateway listeners and the agent queue unless told otherwise;
/// [`Slots::new`] starts in `Close` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Accept it and close it at once, counted (Envoy's behaviour): the
    /// client learns at once and may go elsewhere.
    Close,
    /// Stop accepting until a connection ends (HAProxy's `maxconn`, nginx's
    /// `worker_connections`): new connections wait in the kernel's accept
    /// queue (the listen backlog, 4096), and a client whose SYN finds that
    /// full sends it again. Nothing is refused, so a reconnect storm that
    /// meets the limit does not turn into a storm of retries.
    Queue,
}

/// Counts open connections against a maximum.
#[derive(Debug)]
pub struct Slots {
    open: AtomicUsize,
    max: AtomicUsize,
    queue: AtomicBool,
    /// Signalled when a slot frees or the maximum changes, in `Queue` mode.
    room: Notify,
}

impl Slots {
    /// Slots for at most `max` connections.
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            open: AtomicUsize::new(0),
            max: AtomicUsize::new(max),
            queue: AtomicBool::new(false),
            room: Notify::new(),
        })
    }

    /// Changes the maximum (a reload); open connections are kept.
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
        self.room.notify_one();
    }

    /// Changes what happens at the maximum (a reload).
    pub fn set_when_full(&self, when_full: WhenFull) {
        self.queue
            .store(when_full == WhenFull::Queue, Ordering::Relaxed);
        self.room.notify_one();
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Takes a slot, or `None` when the maximum is reached.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let max = self.max.load(Ordering::Relaxed);
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                slots: self.clone(),
            })
    }

    /// Whether a new connection may be accepted now: always in `Close`
    /// mode, while a slot is free in `Queue` mode.
    fn has_room(&self) -> bool {
        !self.queue.load(Ordering::Relaxed)
            || self.open.load(Ordering::Acquire) < self.max.load(Ordering::Relaxed)
    }

    /// In `Queue` mode, returns once a slot is free; at once otherwise.
    async fn room(&self) {
        // The common case, on every accept: no waiter registered.
        if self.has_room() {
            return;
        }
        loop {
            // Registered before the check, so a slot freed in between
            // still wakes it.
            let freed = self.room.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.has_room() {
                return;
            }
            freed.await;
        }
    }
}

/// One taken slot; released on drop.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.open.fetch_sub(1, Ordering::AcqRel);
        if self.slots.queue.load(Ordering::Relaxed) {
            self.slots.room.notify_one();
        }
    }
}

/// Accepts until `stop` (or the drain's stop-accepting signal) fires. Each
/// accepted connection that gets a slot runs `handle` as a drained task;
/// over the limit it is closed at once and `on_rejected` is called, or, in
/// [`WhenFull::Queue`] mode, nothing is accepted until a slot frees.
pub async fn accept_loop<H, F>(
    listener: TcpListener,
    slots: Arc<Slots>,
    drain: Drain,
    stop: CancellationToken,
    on_rejected: impl Fn(SocketAddr),
    handle: H,
) where
    H: Fn(TcpStream, SocketAddr, Slot) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    // Declared before the listener, so it is dropped after the socket is
    // closed.
    let _open = drain.listener_open();
    let listener = listener;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            _ = drain.stop_accepting().cancelled() => return,
            r = async {
                slots.room().await;
                listener.accept().await
            } => r,
        };
        match accepted {
            Ok((stream, peer)) => match slots.try_take() {
                Some(slot) => drain.spawn(handle(stream, peer, slot)),
                None => {
                    on_rejected(peer);
                    drop(stream);
                }
            },
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Whether a socket other than this process's listens on `addr`: a bind
/// without `SO_REUSEPORT` fails then. Call it once this process's own
/// listener there is closed (an agent releasing its address while its
/// successor already listens there).
pub fn listened_elsewhere(addr: SocketAddr) -> bool {
    let Ok(socket) = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
    else {
        return false;
    };
    // Connections that linger (TIME_WAIT, the drained ones) do not count.
    let _ = socket.set_reuse_address(true);
    matches!(socket.bind(&addr.into()), Err(e) if e.kind() == std::io::ErrorKind::AddrInUse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_enforce_the_maximum() {
        let slots = Slots::new(2);
        let a = slots.try_take().unwrap();
        let _b = slots.try_take().unwrap();
        assert!(slots.try_take().is_none());
        drop(a);
        assert!(slots.try_take().is_some());
        slots.set_max(0);
        assert!(slots.try_take().is_none());
    }

    #[tokio::test]
    async fn queue_mode_waits_for_a_free_slot() {
        let slots = Slots::new(1);
        let held = slots.try_take().unwrap();
        // Close mode: never waits.
        slots.room().await;
        slots.set_when_full(WhenFull::Queue);
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.room().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room while the slot is held");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a freed slot wakes the loop")
            .unwrap();
        // A raised maximum makes room too.
        let _a = slots.try_take().unwrap();
        let raised = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.room().await })
        };
        tokio::task::yield_now().await;
        slots.set_max(2);
        tokio::time::timeout(Duration::from_secs(5), raised)
            .await
            .expect("a raised maximum wakes the loop")
            .unwrap();
    }

    #[tokio::test]
    async fn a_second_process_can_bind_while_the_first_drains() {
        let first = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = first.local_addr().unwrap();
        // What a successor does (SO_REUSEPORT on both).
        let second = bind(addr).unwrap();
        drop(first);
        assert!(listened_elsewhere(addr), "the successor listens");
        // A socket without SO_REUSEPORT is still refused.
        assert!(std::net::TcpListener::bind(addr).is_err());
        drop(second);
        assert!(!listened_elsewhere(addr));
    }

    #[tokio::test]
    async fn accepted_sockets_inherit_keepalive_and_nodelay() {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let (_client, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
        let (accepted, _) = accepted.unwrap();
        let sock = socket2::SockRef::from(&accepted);
        let want = KeepaliveConfig::default();
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), want.idle);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), want.interval);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), want.retries);
        assert!(sock.tcp_nodelay().unwrap());
    }

    #[tokio::test]
    async fn bind_errors_name_the_address() {
        // A listener without SO_REUSEPORT (another program) refuses ours.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let err = bind(addr).unwrap_err().to_string();
        assert!(
            err.contains(&addr.to_string()) && err.contains("another process"),
            "{err}"
        );
    }
}
