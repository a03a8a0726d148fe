//! TCP keepalive and `TCP_NODELAY` for relayed sockets.
//!
//! Kubernetes watches stay open and silent for long stretches; keepalive
//! probes find peers that vanished without a FIN or RST (a rebooted node, a
//! load balancer that dropped its state), and keep NAT and LB entries warm.

use std::io;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// When and how often to probe an idle TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Idle time before the first probe (`TCP_KEEPIDLE`).
    pub idle: Duration,
    /// Time between unanswered probes (`TCP_KEEPINTVL`).
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped (`TCP_KEEPCNT`).
    pub retries: u32,
}

impl Default for KeepaliveConfig {
    /// 30 s idle, then a probe every 10 s, dropped after 3 misses: a dead
    /// peer is noticed within a minute.
    fn default() -> Self {
        KeepaliveConfig {
            idle: Duration::from_secs(30),
            interval: Duration::from_secs(10),
            retries: 3,
        }
    }
}

/// Turns on keepalive with `cfg` and `TCP_NODELAY` on `stream`.
///
/// `TCP_NODELAY` because a relay forwards whatever arrives at once: Nagle's
/// algorithm would only add latency to small API requests.
pub fn set_keepalive(stream: &TcpStream, cfg: &KeepaliveConfig) -> io::Result<()> {
    let sock = SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(cfg.idle)
        .with_interval(cfg.interval)
        .with_retries(cfg.retries);
    sock.set_tcp_keepalive(&keepalive)?;
    sock.set_tcp_nodelay(true)
}

/// [`set_keepalive`] on each of `streams`, logging rather than returning a
/// failure: a socket that can't take options is already broken, and the
/// relay on it will report how.
pub fn apply_keepalive<'a>(
    streams: impl IntoIterator<Item = &'a TcpStream>,
    cfg: &KeepaliveConfig,
) {
    for stream in streams {
        if let Err(e) = set_keepalive(stream, cfg) {
            tracing::debug!(error = %e, "could not set keepalive");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sets_the_socket_options() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, _server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let client = client.unwrap();
        let cfg = KeepaliveConfig {
            idle: Duration::from_secs(41),
            interval: Duration::from_secs(7),
            retries: 5,
        };
        set_keepalive(&client, &cfg).unwrap();

        let sock = SockRef::from(&client);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), cfg.idle);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), cfg.interval);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), cfg.retries);
        assert!(sock.tcp_nodelay().unwrap());
    }
}
