//! The v1 line: `PROXY TCP4|TCP6 src dst sport dport\r\n` or
//! `PROXY UNKNOWN[ anything]\r\n`, at most 107 bytes.
//!
//! Read left to right, one field at a time, so a bad byte is refused as soon
//! as it arrives instead of after the CRLF.

use std::net::{IpAddr, SocketAddr};

use super::text::{self, IPV4_MAX_LEN, IPV6_MAX_LEN, PORT_MAX_LEN};
use super::{
    Addresses, Command, MalformedReason, ProxyError, ProxyHeader, RenderError, Tlvs, Version,
    V1_MAX_LEN,
};

/// A read position in the line. Reading at or past [`V1_MAX_LEN`] is
/// `TooLong`; reading past the end of the buffer is `Incomplete`.
struct Line<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Line<'_> {
    fn peek(&self) -> Result<u8, ProxyError> {
        if self.pos >= V1_MAX_LEN {
            return Err(ProxyError::TooLong { limit: V1_MAX_LEN });
        }
        self.buf
            .get(self.pos)
            .copied()
            .ok_or(ProxyError::Incomplete)
    }

    fn next(&mut self) -> Result<u8, ProxyError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    fn expect(&mut self, literal: &[u8], reason: MalformedReason) -> Result<(), ProxyError> {
        for &want in literal {
            if self.next()? != want {
                return Err(reason.into());
            }
        }
        Ok(())
    }

    /// The bytes from here up to the first one that is not `allowed`, which
    /// is left unread. More than `max_len` of them is `reason`, and so is a
    /// token cut short by the end of the buffer that `viable` says no byte
    /// could complete: garbage is refused without waiting for the rest.
    fn token(
        &mut self,
        allowed: fn(u8) -> bool,
        max_len: usize,
        viable: fn(&[u8]) -> bool,
        reason: MalformedReason,
    ) -> Result<&[u8], ProxyError> {
        let start = self.pos;
        loop {
            match self.peek() {
                Ok(b) if allowed(b) => {
                    if self.pos - start == max_len {
                        return Err(reason.into());
                    }
                    self.pos += 1;
                }
                Ok(_) => break,
                Err(ProxyError::Incomplete) => {
                    let partial = self.buf.get(start..).unwrap_or_default();
                    return Err(if viable(partial) {
                        ProxyError::Incomplete
                    } else {
                        reason.into()
                    });
                }
                Err(e) => return Err(e),
            }
        }
        self.buf.get(start..self.pos).ok_or(ProxyError::Incomplete)
    }

    /// After a field: a printable byte right after it means the field itself
    /// is bad (`1.2.3.4/8`, `0x10`); a space, CR or other control byte is
    /// left for the separator check.
    fn end_field(&self, reason: MalformedReason) -> Result<(), ProxyError> {
        if self.peek()?.is_ascii_graphic() {
            return Err(reason.into());
        }
        Ok(())
    }

    fn space(&mut self) -> Result<(), ProxyError> {
        self.expect(b" ", MalformedReason::V1BadSeparator)
    }

    fn crlf(&mut self) -> Result<(), ProxyError> {
        self.expect(b"\r\n", MalformedReason::V1BadLineEnd)
    }

    fn address(&mut self, ipv6: bool) -> Result<IpAddr, ProxyError> {
        if ipv6 {
            let reason = MalformedReason::V1BadIpv6;
            let ip = text::parse_ipv6(self.token(is_ipv6_byte, IPV6_MAX_LEN, |_| true, reason)?);
            let ip = ip.ok_or(reason)?;
            self.end_field(reason)?;
            Ok(IpAddr::V6(ip))
        } else {
            let reason = MalformedReason::V1BadIpv4;
            let ip = text::parse_ipv4(self.token(
                is_ipv4_byte,
                IPV4_MAX_LEN,
                text::ipv4_viable,
                reason,
            )?);
            let ip = ip.ok_or(reason)?;
            self.end_field(reason)?;
            Ok(IpAddr::V4(ip))
        }
    }

    fn port(&mut self) -> Result<u16, ProxyError> {
        let reason = MalformedReason::V1BadPort;
        let port =
            text::parse_port(self.token(is_digit, PORT_MAX_LEN, text::port_viable, reason)?);
        let port = port.ok_or(reason)?;
        self.end_field(reason)?;
        Ok(port)
    }
}

fn is_digit(b: u8) -> bool {
    b.is_ascii_digit()
}

fn is_ipv4_byte(b: u8) -> bool {
    b.is_ascii_digit() || b == b'.'
}

fn is_ipv6_byte(b: u8) -> bool {
    b.is_ascii_hexdigit() || b == b':' || b == b'.'
}

/// Parses a v1 line; `buf` is known to start with `PROXY`.
pub(super) fn parse(buf: &[u8]) -> Result<(ProxyHeader, usize), ProxyError> {
    let mut line = Line { buf, pos: 0 };
    line.expect(b"PROXY", MalformedReason::V1BadProtocol)?;
    line.space()?;
    let ipv6 = match line.next()? {
        b'T' => {
            line.expect(b"CP", MalformedReason::V1BadProtocol)?;
            match line.next()? {
                b'4' => false,
                b'6' => true,
                _ => return Err(MalformedReason::V1BadProtocol.into()),
            }
        }
        b'U' => {
            line.expect(b"NKNOWN", MalformedReason::V1BadProtocol)?;
            unknown_rest(&mut line)?;
            return Ok((header(None), line.pos));
        }
        _ => return Err(MalformedReason::V1BadProtocol.into()),
    };
    line.space()?;
    let source = line.address(ipv6)?;
    line.space()?;
    let destination = line.address(ipv6)?;
    line.space()?;
    let source_port = line.port()?;
    line.space()?;
    let destination_port = line.port()?;
    line.crlf()?;
    let addresses = Addresses {
        source: SocketAddr::new(source, source_port),
        destination: SocketAddr::new(destination, destination_port),
    };
    Ok((header(Some(addresses)), line.pos))
}

/// After `UNKNOWN`: CRLF, or one space and anything up to the CRLF, which
/// the receiver must ignore. A lone CR or LF in there is refused: a lenient
/// reader would end the line at it and disagree about where the stream
/// starts.
fn unknown_rest(line: &mut Line<'_>) -> Result<(), ProxyError> {
    match line.next()? {
        b'\r' => return line.expect(b"\n", MalformedReason::V1BadLineEnd),
        b' ' => {}
        b'\n' => return Err(MalformedReason::V1BadLineEnd.into()),
        _ => return Err(MalformedReason::V1BadProtocol.into()),
    }
    loop {
        match line.next()? {
            b'\r' => return line.expect(b"\n", MalformedReason::V1BadLineEnd),
            b'\n' => return Err(MalformedReason::V1BadLineEnd.into()),
            _ => {}
        }
    }
}

fn header(addresses: Option<Addresses>) -> ProxyHeader {
    ProxyHeader {
        version: Version::V1,
        command: Command::Proxy,
        addresses,
        tlvs: Tlvs::default(),
    }
}

pub(super) fn render(header: &ProxyHeader) -> Result<Vec<u8>, RenderError> {
    if header.command == Command::Local {
        return Err(RenderError::LocalInV1);
    }
    if header.tlvs.has_values() {
        return Err(RenderError::TlvsInV1);
    }
    let mut line = String::with_capacity(V1_MAX_LEN);
    match header.addresses {
        None => line.push_str("PROXY UNKNOWN"),
        Some(Addresses {
            source,
            destination,
        }) => {
            match (source.ip(), destination.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    line.push_str(&format!("PROXY TCP4 {s} {d}"));
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    line.push_str("PROXY TCP6 ");
                    text::format_ipv6(&s, &mut line);
                    line.push(' ');
                    text::format_ipv6(&d, &mut line);
                }
                _ => return Err(RenderError::MixedFamilies),
            }
            line.push_str(&format!(" {} {}", source.port(), destination.port()));
        }
    }
    line.push_str("\r\n");
    Ok(line.into_bytes())
}
