//! Finding free ports and waiting for listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Returns a TCP port that was free a moment ago on every address.
///
/// It picks from 20000-31999, below the kernel's ephemeral range
/// (32768-60999 by default): the source ports of the many connections
/// parallel tests make come from that range, so they can never take the
/// port between this call and the caller's bind, which a port the kernel
/// handed out for `bind(0)` could not promise. The start is random per
/// call and the port is checked by binding it on 0.0.0.0, so two callers
/// rarely get the same one. Use it only for programs that cannot bind
/// port 0 and report back (HAProxy, nginx, etcd configuration files).
pub fn free_port() -> Result<u16> {
    const FIRST: u64 = 20_000;
    const COUNT: u64 = 12_000;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seed = u64::from(std::process::id()).wrapping_mul(2_654_435_761) ^ u64::from(nanos);
    for i in 0..COUNT {
        // 7919 is prime and does not divide COUNT: every port once.
        let port = FIRST + (seed.wrapping_add(i * 7919)) % COUNT;
        let port = u16::try_from(port).context("port out of range")?;
        if TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok() {
            return Ok(port);
        }
    }
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
    // `*:80` and `:80` mean every IPv4 address, as `0.0.0.0:80` does.
    let text = text.strip_prefix('*').unwrap_or(text);
    let text = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    // The one authority parser.
    let address = apiway_core::endpoint::Address::parse(&text).ok()?;
    let ip = match address.host {
        apiway_core::endpoint::Host::Ip(ip) if ip.is_unspecified() && ip.is_ipv4() => {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
        apiway_core::endpoint::Host::Ip(ip) if ip.is_unspecified() => {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        }
        apiway_core::endpoint::Host::Ip(ip) => ip,
        // A host name: only `localhost` is one a test can connect to.
        apiway_core::endpoint::Host::Name(name) if name == "localhost" => {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
        apiway_core::endpoint::Host::Name(_) => return None,
    };
    Some(SocketAddr::new(ip, address.port))
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
        assert_eq!(parse_listen_addr("LocalHost:82"), v4(82));
        assert_eq!(parse_listen_addr("0.0.0.0:83"), v4(83));
        assert_eq!(
            parse_listen_addr("[::]:84"),
            Some(SocketAddr::from((Ipv6Addr::LOCALHOST, 84)))
        );
        assert_eq!(parse_listen_addr("api.example.com:443"), None);
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
    fn free_ports_are_below_the_ephemeral_range_and_bindable() -> Result<()> {
        let ports: Vec<u16> = (0..20).map(|_| free_port()).collect::<Result<_>>()?;
        for port in &ports {
            assert!((20_000..32_000).contains(port), "{port}");
            // Free on the loopback addresses the tests listen on.
            drop(TcpListener::bind((Ipv4Addr::LOCALHOST, *port))?);
            drop(TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), *port))?);
        }
        Ok(())
    }
}
