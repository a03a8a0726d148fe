//! The text forms of addresses and ports in a v1 line, read and written to
//! the specification's grammar rather than to `std`'s more lenient parsers.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest IPv4 text: `255.255.255.255`.
pub(super) const IPV4_MAX_LEN: usize = 15;
/// Longest IPv6 text accepted: eight 4-digit groups (39), or six and a
/// dotted IPv4 address (`ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`, 45).
pub(super) const IPV6_MAX_LEN: usize = 45;
/// Longest port: `65535`.
pub(super) const PORT_MAX_LEN: usize = 5;

/// A decimal number 0..=`max` of at most `max_digits` digits, with no sign
/// and no leading zero (`0` itself is fine).
fn decimal(text: &[u8], max_digits: usize, max: u32) -> Option<u32> {
    if text.is_empty() || text.len() > max_digits || (text.len() > 1 && text[0] == b'0') {
        return None;
    }
    let mut value: u32 = 0;
    for &b in text {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(b - b'0');
    }
    (value <= max).then_some(value)
}

/// A port: `0`..=`65535`, decimal, no sign, no leading zeroes.
pub(super) fn parse_port(text: &[u8]) -> Option<u16> {
    decimal(text, PORT_MAX_LEN, 65535).and_then(|v| u16::try_from(v).ok())
}

/// Whether more digits could still make `partial` a port.
pub(super) fn port_viable(partial: &[u8]) -> bool {
    partial.is_empty() || parse_port(partial).is_some()
}

/// Whether more digits and dots could still make `partial` an IPv4 address.
pub(super) fn ipv4_viable(partial: &[u8]) -> bool {
    let parts = partial.split(|&b| b == b'.').count();
    parts <= 4
        && partial.split(|&b| b == b'.').enumerate().all(|(i, part)| {
            // Only the part being typed may still be empty.
            (part.is_empty() && i + 1 == parts) || decimal(part, 3, 255).is_some()
        })
}

/// Four decimal numbers 0..=255 without leading zeroes, joined by single dots.
pub(super) fn parse_ipv4(text: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split(|&b| b == b'.');
    for octet in &mut octets {
        let value = decimal(parts.next()?, 3, 255)?;
        *octet = u8::try_from(value).ok()?;
    }
    match parts.next() {
        None => Some(Ipv4Addr::from(octets)),
        Some(_) => None,
    }
}

/// Groups of 1 to 4 hex digits separated by colons, decoding to 16 bits
/// each, the last two groups optionally written as a dotted IPv4 address.
/// Returns how many groups were written into `out`.
fn parse_groups(text: &[u8], out: &mut [u16]) -> Option<usize> {
    if text.is_empty() {
        return Some(0);
    }
    let mut count = 0;
    let mut pieces = text.split(|&b| b == b':').peekable();
    while let Some(piece) = pieces.next() {
        let last = pieces.peek().is_none();
        if last && piece.contains(&b'.') {
            let [a, b, c, d] = parse_ipv4(piece)?.octets();
            *out.get_mut(count)? = u16::from_be_bytes([a, b]);
            *out.get_mut(count + 1)? = u16::from_be_bytes([c, d]);
            return Some(count + 2);
        }
        if piece.is_empty() || piece.len() > 4 {
            return None;
        }
        let mut group: u16 = 0;
        for &b in piece {
            let digit = char::from(b).to_digit(16)?;
            group = (group << 4) | digit as u16;
        }
        *out.get_mut(count)? = group;
        count += 1;
    }
    Some(count)
}

/// An IPv6 address whose text decodes to exactly 128 bits: eight groups, or
/// fewer with one `::` standing for at least one zero group.
///
/// The specification describes groups of 4 hex digits; every real sender
/// (`inet_ntop`) drops leading zeroes and writes an IPv4-mapped address as
/// `::ffff:a.b.c.d`, so both are accepted (RFC 4291, section 2.2).
pub(super) fn parse_ipv6(text: &[u8]) -> Option<Ipv6Addr> {
    if text.len() > IPV6_MAX_LEN {
        return None;
    }
    let mut groups = [0u16; 8];
    let gap = text.windows(2).position(|w| w == b"::");
    match gap {
        None => {
            if parse_groups(text, &mut groups)? != 8 {
                return None;
            }
        }
        Some(at) => {
            let (head, tail) = (text.get(..at)?, text.get(at + 2..)?);
            // A dotted IPv4 address may only end the whole address.
            if head.contains(&b'.') {
                return None;
            }
            let mut tail_groups = [0u16; 8];
            let in_head = parse_groups(head, &mut groups)?;
            let in_tail = parse_groups(tail, &mut tail_groups)?;
            // `::` must replace at least one group (and a second `::`, or a
            // `:::`, leaves an empty piece that `parse_groups` refuses).
            if in_head + in_tail > 7 {
                return None;
            }
            let start = 8 - in_tail;
            groups
                .get_mut(start..)?
                .copy_from_slice(tail_groups.get(..in_tail)?);
        }
    }
    Some(Ipv6Addr::from(groups))
}

/// Writes `ip` as lowercase hex groups without leading zeroes, the longest
/// run of two or more zero groups (the first, on a tie) replaced by `::`
/// (RFC 5952), never with a dotted IPv4 part: the specification's form.
pub(super) fn format_ipv6(ip: &Ipv6Addr, out: &mut String) {
    let groups = ip.segments();
    let (mut best_start, mut best_len) = (0, 0);
    let mut i = 0;
    while i < 8 {
        if groups[i] == 0 {
            let start = i;
            while i < 8 && groups[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                (best_start, best_len) = (start, i - start);
            }
        } else {
            i += 1;
        }
    }
    if best_len < 2 {
        best_len = 0;
    }
    let mut i = 0;
    while i < 8 {
        if best_len > 0 && i == best_start {
            out.push_str("::");
            i += best_len;
            continue;
        }
        if i > 0 && !(best_len > 0 && i == best_start + best_len) {
            out.push(':');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "{:x}", groups[i]);
        i += 1;
    }
}
