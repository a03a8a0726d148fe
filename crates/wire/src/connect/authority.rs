//! The `host:port` a CONNECT request targets (RFC 9112 §3.2.3,
//! authority-form), normalized so equal authorities compare equal.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::MalformedReason;

/// A host and a port, as in `api.example.com:443`, `10.0.0.1:6443` or
/// `[fd00::1]:443`.
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
    /// A DNS name, lowercased, without a trailing dot.
    Name(String),
    /// An IPv4 address in dotted-decimal form.
    Ipv4(Ipv4Addr),
    /// An IPv6 address, written in brackets.
    Ipv6(Ipv6Addr),
}

impl Authority {
    /// Parses `host:port`; the host is lowercased and one trailing dot
    /// dropped, so `API.Example.com.:443` equals `api.example.com:443`.
    pub fn parse(text: &str) -> Result<Authority, MalformedReason> {
        Authority::parse_bytes(text.as_bytes())
    }

    /// [`Authority::parse`] on bytes.
    pub fn parse_bytes(raw: &[u8]) -> Result<Authority, MalformedReason> {
        let (host, port) = if let Some(rest) = raw.strip_prefix(b"[") {
            let close = rest
                .iter()
                .position(|&b| b == b']')
                .ok_or(MalformedReason::BadHost)?;
            let (literal, after) = rest.split_at(close);
            let port = match after.get(1..).unwrap_or_default().split_first() {
                None => return Err(MalformedReason::MissingPort),
                Some((b':', port)) => port,
                Some(_) => return Err(MalformedReason::BadHost),
            };
            let address = std::str::from_utf8(literal)
                .ok()
                .and_then(|t| t.parse::<Ipv6Addr>().ok())
                .ok_or(MalformedReason::BadHost)?;
            (Host::Ipv6(address), port)
        } else {
            let colon = raw
                .iter()
                .rposition(|&b| b == b':')
                .ok_or(MalformedReason::MissingPort)?;
            let (host, port) = raw.split_at(colon);
            (host_name(host)?, port.get(1..).unwrap_or_default())
        };
        Ok(Authority {
            host,
            port: port_number(port)?,
        })
    }
}

/// An IPv4 address or a DNS name (a reg-name restricted to what DNS and
/// TLS server names allow: no percent-encoding, no sub-delimiters).
fn host_name(raw: &[u8]) -> Result<Host, MalformedReason> {
    let text = std::str::from_utf8(raw).map_err(|_| MalformedReason::BadHost)?;
    if let Ok(v4) = text.parse::<Ipv4Addr>() {
        return Ok(Host::Ipv4(v4));
    }
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() || name.len() > 253 {
        return Err(MalformedReason::BadHost);
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(MalformedReason::BadHost);
        }
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

/// A port from 1 to 65535 in at most five decimal digits.
fn port_number(digits: &[u8]) -> Result<u16, MalformedReason> {
    if digits.is_empty() {
        return Err(MalformedReason::MissingPort);
    }
    if digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(MalformedReason::BadPort);
    }
    let value = digits
        .iter()
        .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(MalformedReason::BadPort),
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Name(name) => write!(f, "{name}:{}", self.port),
            Host::Ipv4(a) => write!(f, "{a}:{}", self.port),
            Host::Ipv6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}
