//! The ClientHello handshake message (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2),
//! with the server_name (RFC 6066 §3) and ALPN (RFC 7301) extensions.

use super::reader::Reader;
use super::MalformedReason;

const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_ALPN: u16 = 16;
const NAME_TYPE_HOST_NAME: u8 = 0;
const RANDOM_LEN: usize = 32;
const MAX_SESSION_ID_LEN: usize = 32;
const MAX_HOST_NAME_LEN: usize = 255;

/// The fields of a ClientHello that routing needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HelloFields {
    pub server_name: Option<String>,
    pub alpn: Vec<Vec<u8>>,
    pub legacy_version: u16,
}

/// Parses a complete ClientHello handshake message, 4-byte header included
/// (the record layer has already checked the type and length).
pub(super) fn parse(message: &[u8]) -> Result<HelloFields, MalformedReason> {
    let mut msg = Reader::new(message);
    msg.take(4)?;
    let legacy_version = msg.u16()?;
    if legacy_version >> 8 != 3 {
        return Err(MalformedReason::BadLegacyVersion);
    }
    msg.take(RANDOM_LEN)?;
    if msg.block_u8()?.len() > MAX_SESSION_ID_LEN {
        return Err(MalformedReason::SessionIdTooLong);
    }
    let suites = msg.block_u16()?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(MalformedReason::BadCipherSuites);
    }
    if msg.block_u8()?.is_empty() {
        return Err(MalformedReason::NoCompressionMethods);
    }
    let mut fields = HelloFields {
        server_name: None,
        alpn: Vec::new(),
        legacy_version,
    };
    // Before TLS 1.3 a ClientHello may end here, without an extension block.
    if msg.is_empty() {
        return Ok(fields);
    }
    let mut extensions = Reader::new(msg.block_u16()?);
    msg.finish()?;

    let mut seen = Vec::new();
    while !extensions.is_empty() {
        let ext_type = extensions.u16()?;
        let data = extensions.block_u16()?;
        seen.push(ext_type);
        match ext_type {
            EXTENSION_SERVER_NAME => fields.server_name = Some(server_name(data)?),
            EXTENSION_ALPN => fields.alpn = alpn(data)?,
            _ => {}
        }
    }
    seen.sort_unstable();
    if seen.windows(2).any(|pair| pair.first() == pair.last()) {
        return Err(MalformedReason::DuplicateExtension);
    }
    Ok(fields)
}

/// The one host name in a server_name extension.
fn server_name(data: &[u8]) -> Result<String, MalformedReason> {
    let mut ext = Reader::new(data);
    let mut list = Reader::new(ext.block_u16()?);
    ext.finish()?;
    let mut name = None;
    while !list.is_empty() {
        // Only host_name is defined; an unknown type's length format is
        // unknown too, so the list cannot be walked past it.
        if list.u8()? != NAME_TYPE_HOST_NAME || name.is_some() {
            return Err(MalformedReason::BadServerNameList);
        }
        name = Some(host_name(list.block_u16()?)?);
    }
    name.ok_or(MalformedReason::BadServerNameList)
}

/// Checks a host name's length and alphabet, keeping its case.
fn host_name(bytes: &[u8]) -> Result<String, MalformedReason> {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if bytes.is_empty() || bytes.len() > MAX_HOST_NAME_LEN || !bytes.iter().all(allowed) {
        return Err(MalformedReason::InvalidServerName);
    }
    Ok(bytes.iter().copied().map(char::from).collect())
}

/// The protocol names in an ALPN extension, in order.
fn alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, MalformedReason> {
    let mut ext = Reader::new(data);
    let mut list = Reader::new(ext.block_u16()?);
    ext.finish()?;
    let mut protocols = Vec::new();
    while !list.is_empty() {
        let protocol = list.block_u8()?;
        if protocol.is_empty() {
            return Err(MalformedReason::BadAlpn);
        }
        protocols.push(protocol.to_vec());
    }
    if protocols.is_empty() {
        return Err(MalformedReason::BadAlpn);
    }
    Ok(protocols)
}
