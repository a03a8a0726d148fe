//! Endpoint addresses as configured (`host:port`), and whether an address
//! is on a local interface.

use std::net::{IpAddr, SocketAddr};

/// What an endpoint address names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A literal address.
    Ip(IpAddr),
    /// A DNS name, resolved and re-resolved.
    Name(String),
}

/// An endpoint address as configured: `host:port`, `[v6]:port` or `ip:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The host part.
    pub host: Host,
    /// The port.
    pub port: u16,
}

impl Address {
    /// Parses `host:port`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Address, String> {
        use apiway_wire::authority::{Authority, AuthorityError};
        let authority = Authority::parse(text).map_err(|e| {
            let (host, port) = text.rsplit_once(':').unwrap_or((text, ""));
            match e {
                AuthorityError::MissingPort => {
                    format!("`{text}` has no port; write it as host:port")
                }
                AuthorityError::BadPort => format!("`{text}` has an invalid port `{port}`"),
                AuthorityError::PortZero => format!("`{text}`: port 0 cannot be dialed"),
                AuthorityError::TooLong { .. }
                | AuthorityError::EmptyHost
                | AuthorityError::BadHost
                | AuthorityError::ZoneId => {
                    format!("`{text}`: `{host}` is not a host name or IP address ({e})")
                }
            }
        })?;
        let host = match authority.host {
            apiway_wire::authority::Host::Name(name) => Host::Name(name),
            apiway_wire::authority::Host::Ipv4(a) => Host::Ip(a.into()),
            apiway_wire::authority::Host::Ipv6(a) => Host::Ip(a.into()),
        };
        Ok(Address {
            host,
            port: authority.port,
        })
    }
}

impl From<SocketAddr> for Address {
    fn from(sa: SocketAddr) -> Self {
        Address {
            host: Host::Ip(sa.ip()),
            port: sa.port(),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Ip(ip) => write!(f, "{}", SocketAddr::new(*ip, self.port)),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

/// Whether `ip` is assigned to a local interface: binding a socket to it
/// succeeds only then (unless `net.ipv4.ip_nonlocal_bind` is set, which
/// would make every address look local). Loopback addresses are local.
pub fn is_local_ip(ip: IpAddr) -> bool {
    if ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses() {
        assert_eq!(
            Address::parse("127.0.0.1:7001").unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            Address::parse("[::1]:443").unwrap().host,
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Address::parse("LocalHost:7002").unwrap(),
            Address {
                host: Host::Name("localhost".into()),
                port: 7002
            }
        );
        assert!(Address::parse("localhost").unwrap_err().contains("no port"));
        assert!(Address::parse("a b:1")
            .unwrap_err()
            .contains("not a host name"));
        assert!(Address::parse("x:0").unwrap_err().contains("port 0"));
        assert!(Address::parse("x:99999")
            .unwrap_err()
            .contains("invalid port"));
    }

    #[test]
    fn local_addresses() {
        assert!(is_local_ip("127.0.0.1".parse().unwrap()));
        assert!(!is_local_ip("192.0.2.1".parse().unwrap()));
        assert!(!is_local_ip("0.0.0.0".parse().unwrap()));
    }
}
