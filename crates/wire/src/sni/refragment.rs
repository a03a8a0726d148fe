//! Re-cutting a ClientHello into smaller records, as a client may legally do.

use super::record::{self, CONTENT_TYPE_HANDSHAKE, HEADER_LEN, MAX_FRAGMENT_LEN};
use super::SniError;

/// Re-cuts the handshake records holding the ClientHello at the start of
/// `hello` into records of at most `max_fragment` payload bytes each, with
/// the first record's version; bytes after those records are kept as they are.
///
/// `max_fragment` is clamped to `1..=16384`, the payload sizes TLS allows.
/// Fails as [`parse_client_hello`](super::parse_client_hello) does when the
/// records do not hold a complete ClientHello (the message body itself is not
/// checked). Tests and benchmarks use it to produce hellos split across records.
pub fn refragment(hello: &[u8], max_fragment: usize) -> Result<Vec<u8>, SniError> {
    let found = record::scan(hello, usize::MAX)?;
    let message = record::handshake_message(hello, &found);
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT_LEN);
    let after = hello.get(found.consumed..).unwrap_or_default();
    let records = message.len().div_ceil(max_fragment);
    let mut out = Vec::with_capacity(message.len() + records * HEADER_LEN + after.len());
    for chunk in message.chunks(max_fragment) {
        // chunk.len() <= 16384, so it always fits the two length bytes.
        let len = u16::try_from(chunk.len()).unwrap_or(u16::MAX);
        out.push(CONTENT_TYPE_HANDSHAKE);
        out.extend_from_slice(&found.version);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(after);
    Ok(out)
}
