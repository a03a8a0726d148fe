//! The TLS record layer, just enough to find and reassemble the first
//! handshake message (RFC 8446 §5.1).

use std::borrow::Cow;

use super::{MalformedReason, SniError};

/// Content type, version (2 bytes), payload length (2 bytes).
pub(super) const HEADER_LEN: usize = 5;
/// Largest payload a TLS plaintext record may carry.
pub(super) const MAX_FRAGMENT_LEN: usize = 1 << 14;
/// Record content type of handshake messages.
pub(super) const CONTENT_TYPE_HANDSHAKE: u8 = 22;
/// Every TLS record version (SSL 3.0 up to TLS 1.3's legacy 0x0303) has major 3.
const VERSION_MAJOR: u8 = 3;
/// Handshake type, then a 24-bit body length.
const HANDSHAKE_HEADER_LEN: usize = 4;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;

/// Where the records carrying the first handshake message lie in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HelloRecords {
    /// How many records carry the message.
    pub records: usize,
    /// Offset just past the last of those records.
    pub consumed: usize,
    /// Length of the handshake message, its 4-byte header included.
    pub message_len: usize,
    /// Record-layer version of the first record.
    pub version: [u8; 2],
}

/// Finds the complete records holding the ClientHello at the start of `buf`.
///
/// Checks are made in buffer order, as soon as the bytes they need are
/// present, so a prefix of a buffer gives either `Incomplete` or the same
/// answer as the whole buffer.
pub(super) fn scan(buf: &[u8], max_len: usize) -> Result<HelloRecords, SniError> {
    let too_large = SniError::TooLarge { limit: max_len };
    let mut pos = 0usize;
    let mut records = 0usize;
    let mut version = [0u8; 2];
    // Handshake bytes in the records already walked; the handshake header
    // itself may be split across records, so it is collected byte by byte.
    let mut collected = 0usize;
    let mut header = [0u8; HANDSHAKE_HEADER_LEN];
    let mut header_len = 0usize;
    let mut message_len: Option<usize> = None;

    loop {
        // Even the smallest next record (one payload byte) would not fit: stop
        // before asking for bytes the caller must not buffer.
        if pos.saturating_add(HEADER_LEN + 1) > max_len {
            return Err(too_large);
        }
        let first = records == 0;
        let rest = buf.get(pos..).unwrap_or_default();
        if let Some(&content_type) = rest.first() {
            if content_type != CONTENT_TYPE_HANDSHAKE {
                return Err(if first {
                    SniError::NotTls
                } else {
                    MalformedReason::UnexpectedContentType.into()
                });
            }
        }
        if let Some(&major) = rest.get(1) {
            if major != VERSION_MAJOR {
                return Err(if first {
                    SniError::NotTls
                } else {
                    MalformedReason::BadRecordVersion.into()
                });
            }
        }
        let Some(&[_, major, minor, len_hi, len_lo]) = rest.first_chunk::<HEADER_LEN>() else {
            return Err(SniError::Incomplete);
        };
        let len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
        if len == 0 {
            return Err(MalformedReason::EmptyRecord.into());
        }
        if len > MAX_FRAGMENT_LEN {
            return Err(MalformedReason::RecordOverflow.into());
        }
        let record_end = pos.saturating_add(HEADER_LEN + len);
        if record_end > max_len {
            return Err(too_large);
        }
        if first {
            version = [major, minor];
        }
        records += 1;

        let available = rest.get(HEADER_LEN..).unwrap_or_default();
        let fragment = available.get(..len).unwrap_or(available);
        for &byte in fragment {
            let Some(slot) = header.get_mut(header_len) else {
                break;
            };
            *slot = byte;
            header_len += 1;
        }
        if message_len.is_none() && header_len == HANDSHAKE_HEADER_LEN {
            let [msg_type, len0, len1, len2] = header;
            if msg_type != HANDSHAKE_CLIENT_HELLO {
                return Err(MalformedReason::NotClientHello.into());
            }
            let body_len = u32::from_be_bytes([0, len0, len1, len2]);
            let total = usize::try_from(body_len)
                .unwrap_or(usize::MAX)
                .saturating_add(HANDSHAKE_HEADER_LEN);
            if total > max_len {
                return Err(too_large);
            }
            message_len = Some(total);
        }

        if fragment.len() < len {
            return Err(SniError::Incomplete);
        }
        collected += len;
        if let Some(total) = message_len {
            if collected > total {
                return Err(MalformedReason::TrailingHandshakeData.into());
            }
            if collected == total {
                return Ok(HelloRecords {
                    records,
                    consumed: record_end,
                    message_len: total,
                    version,
                });
            }
        }
        pos = record_end;
    }
}

/// The handshake message described by `found`, header included: borrowed
/// when it sits in one record, reassembled when it spans several.
pub(super) fn handshake_message<'a>(buf: &'a [u8], found: &HelloRecords) -> Cow<'a, [u8]> {
    let mut payloads = payloads(buf.get(..found.consumed).unwrap_or(buf));
    if found.records == 1 {
        let payload = payloads.next().unwrap_or_default();
        return Cow::Borrowed(payload);
    }
    let mut message = Vec::with_capacity(found.message_len);
    for payload in payloads {
        message.extend_from_slice(payload);
    }
    Cow::Owned(message)
}

/// The payloads of the complete records in `buf`, which [`scan`] has checked.
fn payloads(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let &[_, _, _, len_hi, len_lo] = rest.first_chunk::<HEADER_LEN>()?;
        let len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
        let (payload, tail) = rest.get(HEADER_LEN..)?.split_at_checked(len)?;
        rest = tail;
        Some(payload)
    })
}
