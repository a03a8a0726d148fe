//! The `[ uri-host ] ":" port` inside an alt-authority's quotes.

use std::net::Ipv6Addr;

use super::parse::hex_digit;
use super::AltSvcError;

/// Splits the unquoted alt-authority found at `offset` into host and port.
pub(super) fn parse(raw: &[u8], offset: usize) -> Result<(Option<String>, u16), AltSvcError> {
    let invalid_host = AltSvcError::InvalidHost { offset };
    let (host, port) = if let Some(literal_and_rest) = raw.strip_prefix(b"[") {
        let close = literal_and_rest
            .iter()
            .position(|&b| b == b']')
            .ok_or(invalid_host.clone())?;
        let (literal, rest) = literal_and_rest.split_at(close);
        let port = match rest.get(1..).unwrap_or_default().split_first() {
            None => return Err(AltSvcError::MissingPort { offset }),
            Some((b':', port)) => port,
            Some(_) => return Err(invalid_host),
        };
        // Only IPv6: IPvFuture literals and zone ids name nothing we can dial.
        let address = std::str::from_utf8(literal)
            .ok()
            .and_then(|text| text.parse::<Ipv6Addr>().ok())
            .ok_or(invalid_host)?;
        (Some(address.to_string()), port)
    } else {
        // A reg-name holds no `:`, so the last one starts the port.
        let colon = raw
            .iter()
            .rposition(|&b| b == b':')
            .ok_or(AltSvcError::MissingPort { offset })?;
        let (host, port) = raw.split_at(colon);
        if !is_reg_name(host) {
            return Err(invalid_host);
        }
        let host = match host {
            [] => None,
            // A reg-name is ASCII, so this never fails.
            _ => Some(String::from_utf8(host.to_vec()).map_err(|_| invalid_host)?),
        };
        (host, port.get(1..).unwrap_or_default())
    };
    Ok((host, port_number(port, offset)?))
}

/// RFC 3986 `reg-name`: `*( unreserved / pct-encoded / sub-delims )`.
fn is_reg_name(host: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&byte) = host.get(i) {
        if byte == b'%' {
            let escape = (
                host.get(i + 1).and_then(hex_digit),
                host.get(i + 2).and_then(hex_digit),
            );
            if !matches!(escape, (Some(_), Some(_))) {
                return false;
            }
            i += 3;
        } else if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&byte) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// A port from 1 to 65535, in decimal with any number of leading zeros.
fn port_number(digits: &[u8], offset: usize) -> Result<u16, AltSvcError> {
    if digits.is_empty() {
        return Err(AltSvcError::MissingPort { offset });
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(AltSvcError::InvalidPort { offset });
    }
    let value = digits.iter().fold(0u32, |n, digit| {
        n.saturating_mul(10).saturating_add(u32::from(digit - b'0'))
    });
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(AltSvcError::InvalidPort { offset }),
    }
}
