//! Finding free ports and waiting for listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
///
/// It binds port 0, reads the port the kernel chose and closes the socket.
/// This is racy: another process may take the port before the caller binds
/// it. The kernel hands out ephemeral ports in a cycle, so a collision is
/// rare in practice; use it only for programs that cannot bind port 0 and
/// report back (HAProxy, nginx, etcd configuration files).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until a TCP connection to `addr` succeeds, retrying every 20 ms,
/// or fails after `timeout`.
pub async fn wait_for_port(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr));
        if let Ok(Ok(_stream)) = attempt.await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("nothing accepted TCP connections on {addr} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parses a listen address as written in HAProxy `bind` and nginx `listen`
/// lines: `127.0.0.1:80`, `[::1]:80`, `*:80`, `:80`, `localhost:80`, or a
/// bare port (`80`). Wildcards map to the loopback address, which is where
/// a test connects. Anything else (Unix sockets, port ranges, host names)
/// gives `None`.
pub(crate) fn parse_listen_addr(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    let (host, port) = text.rsplit_once(':')?;
    let port = port.parse::<u16>().ok()?;
    let ip = match host.trim_start_matches('[').trim_end_matches(']') {
        "" | "*" | "0.0.0.0" | "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        "::" => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other.parse().ok()?,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listen_addresses() {
        let v4 = |port| Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        assert_eq!(parse_listen_addr("127.0.0.1:8443"), v4(8443));
        assert_eq!(parse_listen_addr("*:80"), v4(80));
        assert_eq!(parse_listen_addr(":81"), v4(81));
        assert_eq!(parse_listen_addr("8080"), v4(8080));
        assert_eq!(
            parse_listen_addr("[::1]:443"),
            Some(SocketAddr::from((Ipv6Addr::LOCALHOST, 443)))
        );
        assert_eq!(parse_listen_addr("unix:/run/x.sock"), None);
        assert_eq!(parse_listen_addr("/run/x.sock"), None);
        assert_eq!(parse_listen_addr("127.0.0.1:80-90"), None);
    }

    #[tokio::test]
    async fn waits_for_a_listener_and_times_out_without_one() -> Result<()> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        wait_for_port(addr, Duration::from_secs(1)).await?;
        drop(listener);
        assert!(wait_for_port(addr, Duration::from_millis(100))
            .await
            .is_err());
        Ok(())
    }

    #[test]
    fn free_port_is_nonzero() -> Result<()> {
        assert_ne!(free_port()?, 0);
        Ok(())
    }
}
