//! `host:port` authorities (RFC 3986 §3.2 restricted to what can be
//! dialed): the one parser behind CONNECT request targets, endpoint
//! addresses in config files, `--connect-authority` and the client's
//! alternative hosts.
//!
//! ```
//! use apiway_wire::authority::{Authority, AuthorityError, Host};
//!
//! let a = Authority::parse("API.Example.com.:443").unwrap();
//! assert_eq!(a.host, Host::Name("api.example.com".into()));
//! assert_eq!(a.to_string(), "api.example.com:443");
//! assert_eq!(Authority::parse("[FD00::1]:6443").unwrap().to_string(), "[fd00::1]:6443");
//! assert_eq!(Authority::parse("api.example.com"), Err(AuthorityError::MissingPort));
//! assert_eq!(Authority::parse_with_default_port("fd00::1", 443).unwrap().port, 443);
//! ```
//!
//! Hosts are normalized so that equal authorities compare equal: a DNS
//! name is lowercased and one trailing dot (the fully-qualified form) is
//! accepted and dropped, since `api.example.com.` and `api.example.com`
//! name the same host for routing and matching; IPv6 addresses are kept
//! as addresses and always written in brackets. IPv6 zone ids
//! (`[fe80::1%eth0]`) are refused: they name an interface of one machine,
//! which a config shared across machines cannot mean.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The longest DNS name, without its trailing dot (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 253;

/// The longest label of a DNS name.
pub const MAX_LABEL_LEN: usize = 63;

/// The longest authority text accepted: a longest name with its trailing
/// dot, `:`, and five port digits. Longer input is refused before any
/// other check.
pub const MAX_LEN: usize = MAX_NAME_LEN + 1 + 1 + 5;

/// A host and a port, as in `api.example.com:443`, `10.0.0.1:6443` or
/// `[fd00::1]:443`. `Display` writes text that parses back to the same value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    /// The host.
    pub host: Host,
    /// The port, 1 to 65535.
    pub port: u16,
}

/// The host part of an [`Authority`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lowercased, without a trailing dot, labels of ASCII
    /// letters, digits, `-` and `_`, the last label not all digits.
    Name(String),
    /// An IPv4 address in dotted-decimal form.
    Ipv4(Ipv4Addr),
    /// An IPv6 address, written in brackets.
    Ipv6(Ipv6Addr),
}

impl Host {
    /// The address, for an IPv4 or IPv6 host.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Name(_) => None,
            Host::Ipv4(a) => Some(IpAddr::V4(*a)),
            Host::Ipv6(a) => Some(IpAddr::V6(*a)),
        }
    }
}

impl From<IpAddr> for Host {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(a) => Host::Ipv4(a),
            IpAddr::V6(a) => Host::Ipv6(a),
        }
    }
}

/// Why a text is not an [`Authority`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AuthorityError {
    /// The text is longer than [`MAX_LEN`] bytes, more than any host name
    /// and port can take.
    #[error("longer than {limit} bytes")]
    TooLong {
        /// [`MAX_LEN`].
        limit: usize,
    },
    /// Nothing before the `:port`.
    #[error("the host is empty")]
    EmptyHost,
    /// The host is neither a DNS name (dot-separated labels of 1 to 63
    /// ASCII letters, digits, `-` or `_`, at most 253 bytes in all, the
    /// last label not all digits), an IPv4 address, nor a bracketed IPv6
    /// address.
    #[error("the host is not a host name or IP address")]
    BadHost,
    /// A bracketed IPv6 address with a zone id (`%eth0`), which names an
    /// interface of one machine only.
    #[error("IPv6 zone ids are not supported")]
    ZoneId,
    /// There is no `:port`, or it is empty.
    #[error("there is no port")]
    MissingPort,
    /// The port is not one to five decimal digits with a value up to 65535.
    #[error("the port is not a number from 1 to 65535")]
    BadPort,
    /// The port is 0, which cannot be dialed.
    #[error("port 0 cannot be dialed")]
    PortZero,
}

impl Authority {
    /// Parses `host:port`, `[v6]:port` or `ipv4:port`.
    pub fn parse(text: &str) -> Result<Authority, AuthorityError> {
        Authority::parse_bytes(text.as_bytes())
    }

    /// [`Authority::parse`] on bytes, for callers that have not checked
    /// them for UTF-8 (non-ASCII bytes are a [`AuthorityError::BadHost`]).
    pub fn parse_bytes(raw: &[u8]) -> Result<Authority, AuthorityError> {
        parse(raw, None)
    }

    /// Like [`Authority::parse`], but a host without a port (`host`,
    /// `[v6]`, or a bare IPv6 address `fd00::1`) gets `default_port`.
    /// A present but empty port (`host:`) is still an error.
    pub fn parse_with_default_port(
        text: &str,
        default_port: u16,
    ) -> Result<Authority, AuthorityError> {
        // A bare IPv6 address holds colons that are not a port separator.
        if let Ok(v6) = text.parse::<Ipv6Addr>() {
            return Ok(Authority {
                host: Host::Ipv6(v6),
                port: nonzero(default_port)?,
            });
        }
        parse(text.as_bytes(), Some(default_port))
    }
}

impl FromStr for Authority {
    type Err = AuthorityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Authority::parse(text)
    }
}

fn parse(raw: &[u8], default_port: Option<u16>) -> Result<Authority, AuthorityError> {
    if raw.len() > MAX_LEN {
        return Err(AuthorityError::TooLong { limit: MAX_LEN });
    }
    // Whether a port is there is decided first, so `host` without one is
    // `MissingPort` whatever the host looks like.
    let (host, port) = if let Some(rest) = raw.strip_prefix(b"[") {
        let close = rest
            .iter()
            .position(|&b| b == b']')
            .ok_or(AuthorityError::BadHost)?;
        let (literal, after) = rest.split_at(close);
        let port = match after.get(1..).unwrap_or_default().split_first() {
            None => None,
            Some((b':', port)) => Some(port),
            Some(_) => return Err(AuthorityError::BadHost),
        };
        if port.is_none() && default_port.is_none() {
            return Err(AuthorityError::MissingPort);
        }
        (ipv6_literal(literal)?, port)
    } else {
        // A name or an IPv4 address holds no `:`, so the last one starts
        // the port.
        let (host, port) = match raw.iter().rposition(|&b| b == b':') {
            Some(colon) => {
                let (host, port) = raw.split_at(colon);
                (host, Some(port.get(1..).unwrap_or_default()))
            }
            None if default_port.is_none() => return Err(AuthorityError::MissingPort),
            None => (raw, None),
        };
        (host_name(host)?, port)
    };
    let port = match (port, default_port) {
        (Some(digits), _) => port_number(digits)?,
        (None, Some(port)) => nonzero(port)?,
        (None, None) => return Err(AuthorityError::MissingPort),
    };
    Ok(Authority { host, port })
}

/// The address between the brackets: IPv6 only (IPvFuture names nothing
/// we can dial).
fn ipv6_literal(literal: &[u8]) -> Result<Host, AuthorityError> {
    if literal.contains(&b'%') {
        return Err(AuthorityError::ZoneId);
    }
    std::str::from_utf8(literal)
        .ok()
        .and_then(|text| text.parse::<Ipv6Addr>().ok())
        .map(Host::Ipv6)
        .ok_or(AuthorityError::BadHost)
}

/// An IPv4 address or a DNS name (a reg-name restricted to what DNS and TLS
/// server names allow: no percent-encoding, no sub-delimiters, no user
/// info).
fn host_name(raw: &[u8]) -> Result<Host, AuthorityError> {
    if raw.is_empty() {
        return Err(AuthorityError::EmptyHost);
    }
    let text = std::str::from_utf8(raw).map_err(|_| AuthorityError::BadHost)?;
    let name = text.strip_suffix('.').unwrap_or(text);
    if let Ok(v4) = name.parse::<Ipv4Addr>() {
        return Ok(Host::Ipv4(v4));
    }
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(AuthorityError::BadHost);
    }
    let mut last_is_numeric = false;
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= MAX_LABEL_LEN
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(AuthorityError::BadHost);
        }
        last_is_numeric = label.bytes().all(|b| b.is_ascii_digit());
    }
    // `1.2.3` or `010.0.0.1` would be read as an IPv4 address by some
    // resolvers (inet_aton), so they are not names either.
    if last_is_numeric {
        return Err(AuthorityError::BadHost);
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

/// A port from 1 to 65535 in one to five decimal digits.
fn port_number(digits: &[u8]) -> Result<u16, AuthorityError> {
    if digits.is_empty() {
        return Err(AuthorityError::MissingPort);
    }
    if digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(AuthorityError::BadPort);
    }
    let value = digits
        .iter()
        .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    let port = u16::try_from(value).map_err(|_| AuthorityError::BadPort)?;
    nonzero(port)
}

fn nonzero(port: u16) -> Result<u16, AuthorityError> {
    if port == 0 {
        Err(AuthorityError::PortZero)
    } else {
        Ok(port)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ipv4(a) => write!(f, "{a}"),
            Host::Ipv6(a) => write!(f, "[{a}]"),
        }
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests;
