//! The v2 binary header: 16 fixed bytes, an address block whose size the
//! family/transport byte gives, then TLVs up to the declared length.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::crc32c::crc32c;
use super::{
    tlv, Addresses, Command, MalformedReason, ProxyError, ProxyHeader, RenderError, RenderOptions,
    Unsupported, Version, PP2_TYPE_CRC32C, PP2_TYPE_NOOP, V2_FIXED_LEN, V2_SIGNATURE,
};

/// The seven family/transport combinations the specification defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Unspec,
    Tcp4,
    Udp4,
    Tcp6,
    Udp6,
    UnixStream,
    UnixDatagram,
}

impl Family {
    fn from_byte(byte: u8) -> Option<Family> {
        Some(match byte {
            0x00 => Family::Unspec,
            0x11 => Family::Tcp4,
            0x12 => Family::Udp4,
            0x21 => Family::Tcp6,
            0x22 => Family::Udp6,
            0x31 => Family::UnixStream,
            0x32 => Family::UnixDatagram,
            _ => return None,
        })
    }

    /// Bytes of the address block: two addresses, then two ports for IP.
    fn address_len(self) -> usize {
        match self {
            Family::Unspec => 0,
            Family::Tcp4 | Family::Udp4 => 2 * 4 + 2 * 2,
            Family::Tcp6 | Family::Udp6 => 2 * 16 + 2 * 2,
            Family::UnixStream | Family::UnixDatagram => 2 * 108,
        }
    }

    fn unsupported(self) -> Option<Unsupported> {
        match self {
            Family::Unspec | Family::Tcp4 | Family::Tcp6 => None,
            Family::Udp4 => Some(Unsupported::Udp4),
            Family::Udp6 => Some(Unsupported::Udp6),
            Family::UnixStream => Some(Unsupported::UnixStream),
            Family::UnixDatagram => Some(Unsupported::UnixDatagram),
        }
    }
}

/// Parses a v2 header; `buf` is known to start with the signature.
///
/// Each fixed byte is judged as soon as it is present, and the length
/// against the limit before waiting for the bytes it announces.
pub(super) fn parse(
    buf: &[u8],
    options: &super::ParseOptions,
) -> Result<(ProxyHeader, usize), ProxyError> {
    let byte = |at: usize| buf.get(at).copied().ok_or(ProxyError::Incomplete);

    let version_command = byte(12)?;
    if version_command >> 4 != 2 {
        return Err(MalformedReason::V2BadVersion.into());
    }
    let command = match version_command & 0x0f {
        0 => Command::Local,
        1 => Command::Proxy,
        _ => return Err(MalformedReason::V2BadCommand.into()),
    };

    let family = Family::from_byte(byte(13)?).ok_or(MalformedReason::V2BadFamily)?;
    if command == Command::Proxy {
        if let Some(unsupported) = family.unsupported() {
            return Err(unsupported.into());
        }
    }

    let len = usize::from(u16::from_be_bytes([byte(14)?, byte(15)?]));
    if len < family.address_len() {
        return Err(MalformedReason::V2LengthTooShort.into());
    }
    if len > options.max_v2_payload {
        return Err(ProxyError::TooLong {
            limit: V2_FIXED_LEN.saturating_add(options.max_v2_payload),
        });
    }
    let total = V2_FIXED_LEN + len;
    let header = buf.get(..total).ok_or(ProxyError::Incomplete)?;
    let address_block = header
        .get(V2_FIXED_LEN..V2_FIXED_LEN + family.address_len())
        .unwrap_or_default();

    let tlvs = tlv::parse(header, V2_FIXED_LEN + family.address_len())?;
    // LOCAL: the specification says to ignore the family and addresses.
    let addresses = match command {
        Command::Local => None,
        Command::Proxy => decode_addresses(family, address_block),
    };
    Ok((
        ProxyHeader {
            version: Version::V2,
            command,
            addresses,
            tlvs,
        },
        total,
    ))
}

/// The TCP endpoints in an address block of the right size, or `None` for
/// `AF_UNSPEC` (the only other family that gets here).
fn decode_addresses(family: Family, block: &[u8]) -> Option<Addresses> {
    let (source, destination, ports) = match family {
        Family::Tcp4 => {
            let (source, rest) = block.split_first_chunk::<4>()?;
            let (destination, ports) = rest.split_first_chunk::<4>()?;
            (
                IpAddr::V4(Ipv4Addr::from(*source)),
                IpAddr::V4(Ipv4Addr::from(*destination)),
                ports,
            )
        }
        Family::Tcp6 => {
            let (source, rest) = block.split_first_chunk::<16>()?;
            let (destination, ports) = rest.split_first_chunk::<16>()?;
            (
                IpAddr::V6(Ipv6Addr::from(*source)),
                IpAddr::V6(Ipv6Addr::from(*destination)),
                ports,
            )
        }
        _ => return None,
    };
    let &[sp0, sp1, dp0, dp1] = ports.first_chunk::<4>()?;
    Some(Addresses {
        source: SocketAddr::new(source, u16::from_be_bytes([sp0, sp1])),
        destination: SocketAddr::new(destination, u16::from_be_bytes([dp0, dp1])),
    })
}

pub(super) fn render(
    header: &ProxyHeader,
    options: &RenderOptions,
) -> Result<Vec<u8>, RenderError> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(match header.command {
        Command::Local => 0x20,
        Command::Proxy => 0x21,
    });
    match (header.command, &header.addresses) {
        (Command::Local, Some(_)) => return Err(RenderError::AddressesWithLocal),
        (_, None) => out.extend_from_slice(&[0x00, 0, 0]),
        (
            Command::Proxy,
            Some(Addresses {
                source,
                destination,
            }),
        ) => match (source.ip(), destination.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&[0x11, 0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&[0x21, 0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            _ => return Err(RenderError::MixedFamilies),
        },
    }
    if let Some(addresses) = &header.addresses {
        out.extend_from_slice(&addresses.source.port().to_be_bytes());
        out.extend_from_slice(&addresses.destination.port().to_be_bytes());
    }
    // The checksum goes first, as HAProxy places it, and is filled in last.
    let checksum_at = if options.crc32c {
        tlv::push(&mut out, PP2_TYPE_CRC32C, &[0; 4])?;
        Some(out.len() - 4)
    } else {
        None
    };
    tlv::render(&header.tlvs, &mut out)?;
    if let Some(padding) = options.noop {
        tlv::push(&mut out, PP2_TYPE_NOOP, &vec![0; usize::from(padding)])?;
    }
    let len = u16::try_from(out.len() - V2_FIXED_LEN).map_err(|_| RenderError::TooLong)?;
    if let Some(slot) = out.get_mut(14..16) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
    if let Some(at) = checksum_at {
        let checksum = crc32c(&out);
        if let Some(slot) = out.get_mut(at..at + 4) {
            slot.copy_from_slice(&checksum.to_be_bytes());
        }
    }
    Ok(out)
}
