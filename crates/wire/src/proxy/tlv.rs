//! The TLVs after a v2 address block: split, checksum verified, values
//! checked and typed; and written back.

use super::crc32c::Crc32c;
use super::{
    MalformedReason, ProxyError, RenderError, MAX_UNIQUE_ID_LEN, PP2_SUBTYPE_SSL_CIPHER,
    PP2_SUBTYPE_SSL_CN, PP2_SUBTYPE_SSL_KEY_ALG, PP2_SUBTYPE_SSL_SIG_ALG, PP2_SUBTYPE_SSL_VERSION,
    PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, PP2_TYPE_CRC32C, PP2_TYPE_NETNS, PP2_TYPE_NOOP,
    PP2_TYPE_SSL, PP2_TYPE_UNIQUE_ID,
};

/// The TLVs of a v2 header, one field per type the specification defines.
///
/// `PP2_TYPE_NOOP` is padding and leaves no trace. Each defined type may
/// appear once; a repeat is [`MalformedReason::DuplicateTlv`], so two readers
/// of the same header cannot disagree on, say, the authority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tlvs {
    /// `PP2_TYPE_ALPN`: the application protocol, as raw bytes (usually the
    /// ALPN name the client negotiated, such as `h2`).
    pub alpn: Option<Vec<u8>>,
    /// `PP2_TYPE_AUTHORITY`: the host name the client asked for, usually its
    /// TLS SNI, exactly as sent (not lowercased).
    pub authority: Option<String>,
    /// The header carried a `PP2_TYPE_CRC32C` TLV and it matched. (A
    /// mismatch is [`ProxyError::BadChecksum`], never a header.)
    pub crc32c_verified: bool,
    /// `PP2_TYPE_UNIQUE_ID`: an opaque id of at most 128 bytes.
    pub unique_id: Option<Vec<u8>>,
    /// `PP2_TYPE_SSL`: how the client connected to the proxy over TLS.
    pub ssl: Option<SslInfo>,
    /// `PP2_TYPE_NETNS`: the network namespace name (US-ASCII).
    pub netns: Option<String>,
    /// Every other type, in header order, with its raw value: reserved,
    /// custom (`0xE0..=0xEF`, such as AWS's `0xEA`), experimental and future
    /// types. A type may repeat here.
    pub unknown: Vec<(u8, Vec<u8>)>,
}

impl Tlvs {
    /// Whether any TLV value is present (`crc32c_verified` aside).
    pub fn has_values(&self) -> bool {
        self.alpn.is_some()
            || self.authority.is_some()
            || self.unique_id.is_some()
            || self.ssl.is_some()
            || self.netns.is_some()
            || !self.unknown.is_empty()
    }
}

/// The value of a `PP2_TYPE_SSL` TLV: a flags byte, the certificate
/// verification result, and sub-TLVs, parsed into fields.
///
/// String sub-TLVs are checked: the version, cipher and algorithms must be
/// US-ASCII and the common name UTF-8, as the specification says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslInfo {
    /// Bit field of [`SslInfo::CLIENT_SSL`], [`SslInfo::CLIENT_CERT_CONN`]
    /// and [`SslInfo::CLIENT_CERT_SESS`] (other bits kept as sent).
    pub client: u8,
    /// Zero when the client presented a certificate and it verified;
    /// non-zero otherwise.
    pub verify: u32,
    /// `PP2_SUBTYPE_SSL_VERSION`: the TLS version name, such as `TLSv1.3`.
    pub version: Option<String>,
    /// `PP2_SUBTYPE_SSL_CN`: the Common Name of the client certificate.
    pub common_name: Option<String>,
    /// `PP2_SUBTYPE_SSL_CIPHER`: the cipher name, such as
    /// `TLS_AES_256_GCM_SHA384`.
    pub cipher: Option<String>,
    /// `PP2_SUBTYPE_SSL_SIG_ALG`: the signature algorithm of the proxy's
    /// certificate, such as `SHA256`.
    pub sig_alg: Option<String>,
    /// `PP2_SUBTYPE_SSL_KEY_ALG`: the key algorithm of the proxy's
    /// certificate, such as `RSA2048`.
    pub key_alg: Option<String>,
    /// Sub-TLVs of other types, in order, with their raw values.
    pub unknown: Vec<(u8, Vec<u8>)>,
}

impl SslInfo {
    /// `PP2_CLIENT_SSL`: the client connected over TLS.
    pub const CLIENT_SSL: u8 = 0x01;
    /// `PP2_CLIENT_CERT_CONN`: the client sent a certificate on this connection.
    pub const CLIENT_CERT_CONN: u8 = 0x02;
    /// `PP2_CLIENT_CERT_SESS`: the client sent a certificate at least once in
    /// this TLS session.
    pub const CLIENT_CERT_SESS: u8 = 0x04;

    /// Whether the client connected over TLS.
    pub fn client_ssl(&self) -> bool {
        self.client & Self::CLIENT_SSL != 0
    }

    /// Whether the client presented a certificate (on this connection or in
    /// its session) and the proxy verified it.
    pub fn client_cert_verified(&self) -> bool {
        self.client & (Self::CLIENT_CERT_CONN | Self::CLIENT_CERT_SESS) != 0 && self.verify == 0
    }

    fn parse(value: &[u8]) -> Result<Self, MalformedReason> {
        let (fixed, rest) = value
            .split_first_chunk::<5>()
            .ok_or(MalformedReason::SslTooShort)?;
        let [client, verify @ ..] = *fixed;
        let mut ssl = SslInfo {
            client,
            verify: u32::from_be_bytes(verify),
            ..SslInfo::default()
        };
        for Entry { kind, value, .. } in split(rest)? {
            match kind {
                PP2_SUBTYPE_SSL_VERSION => set(&mut ssl.version, kind, ascii(value)?)?,
                PP2_SUBTYPE_SSL_CN => {
                    let cn =
                        std::str::from_utf8(value).map_err(|_| MalformedReason::SslBadString)?;
                    set(&mut ssl.common_name, kind, cn.to_owned())?;
                }
                PP2_SUBTYPE_SSL_CIPHER => set(&mut ssl.cipher, kind, ascii(value)?)?,
                PP2_SUBTYPE_SSL_SIG_ALG => set(&mut ssl.sig_alg, kind, ascii(value)?)?,
                PP2_SUBTYPE_SSL_KEY_ALG => set(&mut ssl.key_alg, kind, ascii(value)?)?,
                _ => ssl.unknown.push((kind, value.to_vec())),
            }
        }
        Ok(ssl)
    }

    fn render(&self) -> Result<Vec<u8>, RenderError> {
        let mut out = vec![self.client];
        out.extend_from_slice(&self.verify.to_be_bytes());
        let ascii_fields = [
            (PP2_SUBTYPE_SSL_VERSION, &self.version),
            (PP2_SUBTYPE_SSL_CIPHER, &self.cipher),
            (PP2_SUBTYPE_SSL_SIG_ALG, &self.sig_alg),
            (PP2_SUBTYPE_SSL_KEY_ALG, &self.key_alg),
        ];
        for (kind, field) in ascii_fields {
            if let Some(text) = field {
                if !text.is_ascii() {
                    return Err(RenderError::InvalidTlv(MalformedReason::SslBadString));
                }
                push(&mut out, kind, text.as_bytes())?;
            }
        }
        if let Some(cn) = &self.common_name {
            push(&mut out, PP2_SUBTYPE_SSL_CN, cn.as_bytes())?;
        }
        for (kind, value) in &self.unknown {
            if (PP2_SUBTYPE_SSL_VERSION..=PP2_SUBTYPE_SSL_KEY_ALG).contains(kind) {
                return Err(RenderError::KnownTypeAsUnknown { tlv_type: *kind });
            }
            push(&mut out, *kind, value)?;
        }
        Ok(out)
    }
}

/// One TLV of a block.
struct Entry<'a> {
    kind: u8,
    /// Where the value starts in the block.
    offset: usize,
    value: &'a [u8],
}

/// Splits a block of TLVs, which must fill it exactly.
fn split(block: &[u8]) -> Result<Vec<Entry<'_>>, MalformedReason> {
    let mut entries = Vec::new();
    let mut pos = 0;
    while pos < block.len() {
        let rest = block.get(pos..).unwrap_or_default();
        let (&[kind, hi, lo], _) = rest
            .split_first_chunk::<3>()
            .ok_or(MalformedReason::TlvOverrun)?;
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        let value = rest.get(3..3 + len).ok_or(MalformedReason::TlvOverrun)?;
        entries.push(Entry {
            kind,
            offset: pos + 3,
            value,
        });
        pos += 3 + len;
    }
    Ok(entries)
}

fn set<T>(slot: &mut Option<T>, kind: u8, value: T) -> Result<(), MalformedReason> {
    if slot.is_some() {
        return Err(MalformedReason::DuplicateTlv { tlv_type: kind });
    }
    *slot = Some(value);
    Ok(())
}

fn ascii(value: &[u8]) -> Result<String, MalformedReason> {
    match std::str::from_utf8(value) {
        Ok(text) if text.is_ascii() => Ok(text.to_owned()),
        _ => Err(MalformedReason::SslBadString),
    }
}

/// A host name as `PP2_TYPE_AUTHORITY` carries it: 1 to 255 bytes of
/// dot-separated labels of 1 to 63 bytes; ASCII letters, digits, `-` and
/// `_`, and any non-ASCII character that is not a control or a space (for
/// internationalized names in UTF-8). No trailing dot, no port, no spaces.
pub(super) fn is_host_name(name: &str) -> bool {
    (1..=255).contains(&name.len())
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || c == '-'
                        || c == '_'
                        || (!c.is_ascii() && !c.is_control() && !c.is_whitespace())
                })
        })
}

/// Parses the TLVs of the v2 `header` (fixed part included) that start at
/// `start`. A CRC32C TLV is verified before any value is interpreted, so a
/// corrupted header reports [`ProxyError::BadChecksum`] rather than whatever
/// the corruption broke.
pub(super) fn parse(header: &[u8], start: usize) -> Result<Tlvs, ProxyError> {
    let block = header.get(start..).unwrap_or_default();
    let entries = split(block)?;

    let mut checksum = None;
    for &Entry {
        kind,
        offset,
        value,
    } in &entries
    {
        if kind == PP2_TYPE_CRC32C {
            let received: [u8; 4] = value
                .try_into()
                .map_err(|_| MalformedReason::BadCrc32cLength)?;
            set(
                &mut checksum,
                kind,
                (start + offset, u32::from_be_bytes(received)),
            )?;
        }
    }
    if let Some((at, received)) = checksum {
        let computed = Crc32c::new()
            .update(header.get(..at).unwrap_or_default())
            .update(&[0; 4])
            .update(header.get(at + 4..).unwrap_or_default())
            .finish();
        if computed != received {
            return Err(ProxyError::BadChecksum { received, computed });
        }
    }

    let mut tlvs = Tlvs {
        crc32c_verified: checksum.is_some(),
        ..Tlvs::default()
    };
    for Entry { kind, value, .. } in entries {
        match kind {
            PP2_TYPE_ALPN => set(&mut tlvs.alpn, kind, value.to_vec())?,
            PP2_TYPE_AUTHORITY => {
                let name = std::str::from_utf8(value)
                    .ok()
                    .filter(|name| is_host_name(name))
                    .ok_or(MalformedReason::BadAuthority)?;
                set(&mut tlvs.authority, kind, name.to_owned())?;
            }
            PP2_TYPE_CRC32C | PP2_TYPE_NOOP => {}
            PP2_TYPE_UNIQUE_ID => {
                if value.len() > MAX_UNIQUE_ID_LEN {
                    return Err(MalformedReason::UniqueIdTooLong.into());
                }
                set(&mut tlvs.unique_id, kind, value.to_vec())?;
            }
            PP2_TYPE_SSL => set(&mut tlvs.ssl, kind, SslInfo::parse(value)?)?,
            PP2_TYPE_NETNS => {
                let name = ascii(value).map_err(|_| MalformedReason::BadNetns)?;
                set(&mut tlvs.netns, kind, name)?;
            }
            _ => tlvs.unknown.push((kind, value.to_vec())),
        }
    }
    Ok(tlvs)
}

/// Appends one TLV.
pub(super) fn push(out: &mut Vec<u8>, kind: u8, value: &[u8]) -> Result<(), RenderError> {
    let len = u16::try_from(value.len()).map_err(|_| RenderError::TooLong)?;
    out.push(kind);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
}

/// Appends the TLVs holding values (not CRC32C or NOOP, which the caller
/// places), checking each would parse back to the same value.
pub(super) fn render(tlvs: &Tlvs, out: &mut Vec<u8>) -> Result<(), RenderError> {
    if let Some(alpn) = &tlvs.alpn {
        push(out, PP2_TYPE_ALPN, alpn)?;
    }
    if let Some(authority) = &tlvs.authority {
        if !is_host_name(authority) {
            return Err(RenderError::InvalidTlv(MalformedReason::BadAuthority));
        }
        push(out, PP2_TYPE_AUTHORITY, authority.as_bytes())?;
    }
    if let Some(id) = &tlvs.unique_id {
        if id.len() > MAX_UNIQUE_ID_LEN {
            return Err(RenderError::InvalidTlv(MalformedReason::UniqueIdTooLong));
        }
        push(out, PP2_TYPE_UNIQUE_ID, id)?;
    }
    if let Some(ssl) = &tlvs.ssl {
        push(out, PP2_TYPE_SSL, &ssl.render()?)?;
    }
    if let Some(netns) = &tlvs.netns {
        if !netns.is_ascii() {
            return Err(RenderError::InvalidTlv(MalformedReason::BadNetns));
        }
        push(out, PP2_TYPE_NETNS, netns.as_bytes())?;
    }
    for (kind, value) in &tlvs.unknown {
        if matches!(
            *kind,
            PP2_TYPE_ALPN
                | PP2_TYPE_AUTHORITY
                | PP2_TYPE_CRC32C
                | PP2_TYPE_NOOP
                | PP2_TYPE_UNIQUE_ID
                | PP2_TYPE_SSL
                | PP2_TYPE_NETNS
        ) {
            return Err(RenderError::KnownTypeAsUnknown { tlv_type: *kind });
        }
        push(out, *kind, value)?;
    }
    Ok(())
}
