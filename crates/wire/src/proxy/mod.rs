//! PROXY protocol headers, versions 1 and 2: detection, parsing, rendering.
//!
//! Follows the HAProxy specification (`proxy-protocol.txt`, 2020/03/05). A
//! listener that expects PROXY headers calls [`detect`] on the first bytes to
//! drop other traffic early, then [`parse`] with everything read so far,
//! reading more while the answer is [`ProxyError::Incomplete`]. The bytes after
//! `consumed` belong to the proxied stream, and may begin with a second PROXY
//! header when proxies are chained (a load balancer's header, then an agent's):
//! call [`parse`] again on them if the listener expects that.
//!
//! ```
//! use apiway_wire::proxy::{detect, parse, Command, ProxyError, Version};
//!
//! // TLS, HTTP and SSH are refused from their first byte.
//! assert_eq!(detect(b"\x16"), Err(ProxyError::NotProxy));
//! assert_eq!(detect(b"PRO"), Err(ProxyError::Incomplete));
//!
//! let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
//! let (header, consumed) = parse(buf).unwrap();
//! assert_eq!(header.version, Version::V1);
//! assert_eq!(header.command, Command::Proxy);
//! let addresses = header.addresses.unwrap();
//! assert_eq!(addresses.destination, "192.168.0.11:443".parse().unwrap());
//! assert_eq!(&buf[consumed..], b"GET / HTTP/1.1\r\n");
//! ```
//!
//! Only TCP over IPv4 and IPv6 is carried as addresses, because only TCP is
//! routed: a v2 `PROXY` header for UDP or `AF_UNIX` is
//! [`ProxyError::Unsupported`] (the specification lets a receiver fall back to
//! "unspecified" for those and then reject the connection), while a `LOCAL`
//! header of any valid family is accepted and its address block ignored, as
//! the specification requires.

mod crc32c;
mod text;
mod tlv;
mod v1;
mod v2;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

pub use crc32c::crc32c;
pub use tlv::{SslInfo, Tlvs};

/// The longest v1 header line, CRLF included (the specification's worst case,
/// `PROXY UNKNOWN` with two full IPv6 addresses and ports).
pub const V1_MAX_LEN: usize = 107;

/// The 12 bytes every v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The fixed part of a v2 header: signature, version and command, family and
/// transport, and the 2-byte length of what follows.
pub const V2_FIXED_LEN: usize = 16;

/// Default for [`ParseOptions::max_v2_payload`]: room for the addresses and
/// every TLV a real proxy sends, far below the 65535 the length field allows.
pub const DEFAULT_MAX_V2_PAYLOAD: usize = 4096;

/// The longest `PP2_TYPE_UNIQUE_ID` value the specification allows.
pub const MAX_UNIQUE_ID_LEN: usize = 128;

/// `PP2_TYPE_ALPN`: the application protocol negotiated with the client.
pub const PP2_TYPE_ALPN: u8 = 0x01;
/// `PP2_TYPE_AUTHORITY`: the host name the client asked for (its TLS SNI).
pub const PP2_TYPE_AUTHORITY: u8 = 0x02;
/// `PP2_TYPE_CRC32C`: checksum of the whole header.
pub const PP2_TYPE_CRC32C: u8 = 0x03;
/// `PP2_TYPE_NOOP`: padding, ignored.
pub const PP2_TYPE_NOOP: u8 = 0x04;
/// `PP2_TYPE_UNIQUE_ID`: an opaque connection id of up to 128 bytes.
pub const PP2_TYPE_UNIQUE_ID: u8 = 0x05;
/// `PP2_TYPE_SSL`: TLS details of the client connection, with sub-TLVs.
pub const PP2_TYPE_SSL: u8 = 0x20;
/// `PP2_SUBTYPE_SSL_VERSION`: TLS version name, inside `PP2_TYPE_SSL`.
pub const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
/// `PP2_SUBTYPE_SSL_CN`: client certificate Common Name, inside `PP2_TYPE_SSL`.
pub const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
/// `PP2_SUBTYPE_SSL_CIPHER`: cipher name, inside `PP2_TYPE_SSL`.
pub const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
/// `PP2_SUBTYPE_SSL_SIG_ALG`: certificate signature algorithm, inside `PP2_TYPE_SSL`.
pub const PP2_SUBTYPE_SSL_SIG_ALG: u8 = 0x24;
/// `PP2_SUBTYPE_SSL_KEY_ALG`: certificate key algorithm, inside `PP2_TYPE_SSL`.
pub const PP2_SUBTYPE_SSL_KEY_ALG: u8 = 0x25;
/// `PP2_TYPE_NETNS`: name of the network namespace the connection came from.
pub const PP2_TYPE_NETNS: u8 = 0x30;

/// Which of the two header formats a connection starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The human-readable line, `PROXY TCP4 ...\r\n`.
    V1,
    /// The binary format starting with [`V2_SIGNATURE`].
    V2,
}

/// Whether the header describes a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// v2 `LOCAL`: the proxy opened the connection itself (a health check);
    /// the receiver uses the real connection endpoints.
    Local,
    /// v2 `PROXY`, and every v1 header: the connection is relayed on behalf
    /// of a client, described by [`ProxyHeader::addresses`] when known.
    Proxy,
}

/// The endpoints of the client's original TCP connection.
///
/// Both addresses have the same family. IPv6 flow info and scope id are not
/// carried by the protocol: parsed values have them zero, and rendering
/// ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Addresses {
    /// The client's address and port.
    pub source: SocketAddr,
    /// The address and port the client connected to: where the gateway routes.
    pub destination: SocketAddr,
}

/// A parsed PROXY header, or one to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The format the header was parsed from. Rendering does not look at it:
    /// [`ProxyHeader::render_v1`] and [`ProxyHeader::render_v2`] choose.
    pub version: Version,
    /// `LOCAL` or `PROXY`.
    pub command: Command,
    /// The original TCP endpoints; `None` for `LOCAL`, for v2 `AF_UNSPEC`
    /// and for v1 `UNKNOWN`, where the receiver uses the real connection's
    /// endpoints (or refuses the connection, if it needs them).
    pub addresses: Option<Addresses>,
    /// The v2 TLVs; always empty for v1.
    pub tlvs: Tlvs,
}

impl ProxyHeader {
    /// A `PROXY` header for a relayed TCP connection, with no TLVs.
    pub fn tcp(version: Version, source: SocketAddr, destination: SocketAddr) -> Self {
        ProxyHeader {
            version,
            command: Command::Proxy,
            addresses: Some(Addresses {
                source,
                destination,
            }),
            tlvs: Tlvs::default(),
        }
    }

    /// A v2 `LOCAL` header (v1 has no `LOCAL`), as sent with health checks.
    pub fn local() -> Self {
        ProxyHeader {
            version: Version::V2,
            command: Command::Local,
            addresses: None,
            tlvs: Tlvs::default(),
        }
    }

    /// Renders the header in the format of [`ProxyHeader::version`].
    pub fn render(&self, options: &RenderOptions) -> Result<Vec<u8>, RenderError> {
        match self.version {
            Version::V1 => self.render_v1(),
            Version::V2 => self.render_v2(options),
        }
    }

    /// Renders a v1 line: `TCP4`/`TCP6` with addresses, `UNKNOWN` without.
    ///
    /// IPv6 addresses are written as hex groups with the longest run of zero
    /// groups compressed, never with an embedded dotted IPv4 address. Fails
    /// for a `LOCAL` header and for one that carries TLVs (`crc32c_verified`
    /// is ignored), which v1 cannot express.
    pub fn render_v1(&self) -> Result<Vec<u8>, RenderError> {
        v1::render(self)
    }

    /// Renders a v2 header, adding a checksum or padding when `options` ask.
    ///
    /// TLVs are written in a fixed order (CRC32C first, then ALPN, authority,
    /// unique id, SSL, netns, the unknown ones in their order, NOOP padding
    /// last), so rendering a parsed header may not reproduce its bytes, but
    /// parsing the result gives the same value. Fails when a TLV value would
    /// not parse back (see [`RenderError`]) or the header exceeds 65535 bytes
    /// after the fixed part.
    pub fn render_v2(&self, options: &RenderOptions) -> Result<Vec<u8>, RenderError> {
        v2::render(self, options)
    }
}

/// Limits for [`parse_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// The largest v2 length field accepted (bytes after the 16-byte fixed
    /// part). A larger one is [`ProxyError::TooLong`] as soon as the length
    /// field arrives, before waiting for the bytes it announces. The field
    /// itself cannot exceed 65535.
    pub max_v2_payload: usize,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_v2_payload: DEFAULT_MAX_V2_PAYLOAD,
        }
    }
}

/// Choices for [`ProxyHeader::render_v2`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Add a `PP2_TYPE_CRC32C` TLV holding the checksum of the header, so the
    /// receiver can detect corruption. [`Tlvs::crc32c_verified`] is not
    /// consulted: a parsed header re-rendered with `crc32c: true` parses back
    /// with `crc32c_verified` set.
    pub crc32c: bool,
    /// Append a `PP2_TYPE_NOOP` TLV with this many zero bytes of value
    /// (padding, which receivers skip).
    pub noop: Option<u16>,
}

/// Why a buffer does not yield a [`ProxyHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The bytes so far are a valid beginning: read more and call again with
    /// the whole buffer. Only returned below the size limit (107 bytes for v1,
    /// 16 + [`ParseOptions::max_v2_payload`] for v2), so a caller that never
    /// buffers more than that cannot wait forever.
    #[error("incomplete PROXY header: more bytes are needed")]
    Incomplete,
    /// The bytes start with neither `PROXY` nor the v2 signature: the peer
    /// does not speak the PROXY protocol, and the connection must be dropped.
    #[error("not a PROXY protocol header")]
    NotProxy,
    /// The header starts like a PROXY header but breaks the specification.
    #[error("malformed PROXY header: {0}")]
    Malformed(#[from] MalformedReason),
    /// A v1 line without CRLF in its first 107 bytes, or a v2 length field
    /// above the configured maximum.
    #[error("PROXY header longer than the {limit}-byte limit")]
    TooLong {
        /// The most bytes the whole header (v2: fixed part included) may take.
        limit: usize,
    },
    /// A v2 header's `PP2_TYPE_CRC32C` does not match the checksum of the
    /// header: it was corrupted on the way, and the specification requires
    /// the connection to be treated as invalid.
    #[error(
        "PROXY v2 checksum mismatch: header says {received:#010x}, bytes give {computed:#010x}"
    )]
    BadChecksum {
        /// The value in the TLV.
        received: u32,
        /// The CRC32C of the header with the TLV's value zeroed.
        computed: u32,
    },
    /// A v2 `PROXY` header announces UDP or `AF_UNIX`, which this crate does
    /// not carry (only TCP is routed). Decided from the family byte, before
    /// the rest of the header is read.
    #[error("unsupported PROXY v2 transport: {0}")]
    Unsupported(#[from] Unsupported),
}

/// The transports a v2 `PROXY` header may announce that are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Unsupported {
    /// UDP over IPv4 (family/transport byte `0x12`).
    #[error("UDP over IPv4")]
    Udp4,
    /// UDP over IPv6 (`0x22`).
    #[error("UDP over IPv6")]
    Udp6,
    /// A Unix stream socket (`0x31`).
    #[error("AF_UNIX stream")]
    UnixStream,
    /// A Unix datagram socket (`0x32`).
    #[error("AF_UNIX datagram")]
    UnixDatagram,
}

/// The rule of the specification a malformed header breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MalformedReason {
    /// v1: the protocol after `PROXY ` is not `TCP4`, `TCP6` or `UNKNOWN`.
    #[error("v1 protocol is not TCP4, TCP6 or UNKNOWN")]
    V1BadProtocol,
    /// v1: a field is not followed by exactly one space.
    #[error("v1 fields must be separated by exactly one space")]
    V1BadSeparator,
    /// v1: a `TCP4` address is not four decimal numbers 0..=255 without
    /// leading zeroes, joined by dots.
    #[error("v1 bad IPv4 address")]
    V1BadIpv4,
    /// v1: a `TCP6` address is not an IPv6 address of exactly 128 bits
    /// (hex groups of 1 to 4 digits, at most one `::`, optionally ending in
    /// a dotted IPv4 address as `inet_ntop` writes `::ffff:a.b.c.d`).
    #[error("v1 bad IPv6 address")]
    V1BadIpv6,
    /// v1: a port is not a decimal number 0..=65535 without sign or leading
    /// zeroes.
    #[error("v1 bad port")]
    V1BadPort,
    /// v1: the destination port is not followed by CRLF, or the line holds a
    /// CR or LF that is not part of its final CRLF.
    #[error("v1 line does not end with CRLF right after its last field")]
    V1BadLineEnd,
    /// v2: the version nibble of the 13th byte is not 2.
    #[error("v2 version is not 2")]
    V2BadVersion,
    /// v2: the command nibble is neither `LOCAL` (0) nor `PROXY` (1).
    #[error("v2 command is neither LOCAL nor PROXY")]
    V2BadCommand,
    /// v2: the family/transport byte is not one of the seven combinations
    /// the specification defines (`0x00`, `0x11`, `0x12`, `0x21`, `0x22`,
    /// `0x31`, `0x32`).
    #[error("v2 address family and transport are not a defined combination")]
    V2BadFamily,
    /// v2: the length field is shorter than the address block its family
    /// requires.
    #[error("v2 length shorter than the address block")]
    V2LengthTooShort,
    /// v2: a TLV (or SSL sub-TLV) header or value runs past the end of the
    /// block that contains it.
    #[error("TLV overruns the header")]
    TlvOverrun,
    /// v2: a TLV type that may appear once (ALPN, authority, CRC32C, unique
    /// id, SSL, netns, or an SSL sub-TLV with a defined meaning) appears twice.
    #[error("TLV type {tlv_type:#04x} appears twice")]
    DuplicateTlv {
        /// The repeated type.
        tlv_type: u8,
    },
    /// v2: the `PP2_TYPE_CRC32C` value is not exactly 4 bytes.
    #[error("CRC32C TLV is not 4 bytes")]
    BadCrc32cLength,
    /// v2: the `PP2_TYPE_AUTHORITY` value is not a host name: UTF-8, 1 to 255
    /// bytes, dot-separated labels of 1 to 63 bytes made of letters, digits,
    /// `-`, `_` or non-ASCII characters (no control characters or spaces).
    #[error("authority TLV is not a UTF-8 host name")]
    BadAuthority,
    /// v2: the `PP2_TYPE_UNIQUE_ID` value is longer than 128 bytes.
    #[error("unique id TLV longer than 128 bytes")]
    UniqueIdTooLong,
    /// v2: the `PP2_TYPE_SSL` value is shorter than its 5-byte fixed part.
    #[error("SSL TLV shorter than 5 bytes")]
    SslTooShort,
    /// v2: an SSL sub-TLV that holds a string is not US-ASCII (version,
    /// cipher, algorithms) or not UTF-8 (common name).
    #[error("SSL sub-TLV string has bad encoding")]
    SslBadString,
    /// v2: the `PP2_TYPE_NETNS` value is not US-ASCII.
    #[error("netns TLV is not US-ASCII")]
    BadNetns,
}

/// Why a [`ProxyHeader`] cannot be rendered in the requested format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// v1 has no `LOCAL` command; a `PROXY` header without addresses renders
    /// as `UNKNOWN`.
    #[error("PROXY v1 has no LOCAL command")]
    LocalInV1,
    /// v1 cannot carry TLVs, and the header has some.
    #[error("PROXY v1 cannot carry TLVs")]
    TlvsInV1,
    /// A `LOCAL` header carries no addresses, so there is nothing to render
    /// them from.
    #[error("a LOCAL header has no addresses")]
    AddressesWithLocal,
    /// The source and destination are of different IP families.
    #[error("source and destination addresses are of different families")]
    MixedFamilies,
    /// The v2 header would need a length field above 65535.
    #[error("PROXY v2 header too long to encode")]
    TooLong,
    /// A TLV value breaks a rule the parser enforces, so it would not parse
    /// back (an invalid authority, a unique id over 128 bytes, ...).
    #[error("TLV would not parse back: {0}")]
    InvalidTlv(MalformedReason),
    /// [`Tlvs::unknown`] or [`SslInfo::unknown`] holds a type that has its own
    /// field (or is CRC32C or NOOP), which would parse back differently.
    #[error("TLV type {tlv_type:#04x} has its own field and cannot be rendered as unknown")]
    KnownTypeAsUnknown {
        /// The offending type.
        tlv_type: u8,
    },
}

/// Decides from the first bytes of a connection which header it starts with.
///
/// Answers [`ProxyError::NotProxy`] as soon as a byte differs from both
/// `PROXY` and the v2 signature (for most protocols, the first byte), and
/// [`ProxyError::Incomplete`] while the bytes are a prefix of one of them.
/// Recognizing the start of a header says nothing about the rest: call
/// [`parse`] next.
pub fn detect(buf: &[u8]) -> Result<Version, ProxyError> {
    for (signature, version) in [(&b"PROXY"[..], Version::V1), (&V2_SIGNATURE, Version::V2)] {
        let seen = buf.len().min(signature.len());
        if buf.get(..seen) == signature.get(..seen) && seen > 0 {
            return if seen == signature.len() {
                Ok(version)
            } else {
                Err(ProxyError::Incomplete)
            };
        }
    }
    if buf.is_empty() {
        Err(ProxyError::Incomplete)
    } else {
        Err(ProxyError::NotProxy)
    }
}

/// Parses the header at the start of `buf` with the default [`ParseOptions`].
///
/// Returns the header and how many bytes of `buf` it took.
pub fn parse(buf: &[u8]) -> Result<(ProxyHeader, usize), ProxyError> {
    parse_with(buf, &ParseOptions::default())
}

/// Parses the header at the start of `buf`, the bytes received so far.
///
/// Returns the header and how many bytes of `buf` it took; the rest is the
/// proxied stream. Errors are decided left to right as bytes arrive, so a
/// longer buffer never turns an error into a different answer, and
/// malformed input is refused as soon as the offending byte is seen (for v1,
/// often before the CRLF; for v2, the fixed part is checked before waiting
/// for the rest).
pub fn parse_with(buf: &[u8], options: &ParseOptions) -> Result<(ProxyHeader, usize), ProxyError> {
    match detect(buf)? {
        Version::V1 => v1::parse(buf),
        Version::V2 => v2::parse(buf, options),
    }
}
