//! TLS ClientHello parsing: finds the SNI without terminating TLS.
//!
//! The gateway reads the first bytes of a connection, calls
//! [`parse_client_hello`] with everything read so far, and keeps reading while
//! the answer is [`SniError::Incomplete`]. The bytes are then relayed to the
//! chosen backend unchanged, so nothing here ever writes a handshake message;
//! the only output is a fatal alert ([`alert_record`]) for refused connections.
//!
//! ```
//! use apiway_wire::sni::{parse_client_hello, SniError, DEFAULT_MAX_HELLO_LEN};
//!
//! // An HTTP request on the TLS port is refused from its first byte.
//! assert_eq!(parse_client_hello(b"G", DEFAULT_MAX_HELLO_LEN), Err(SniError::NotTls));
//! // A record header alone is not enough to decide.
//! assert_eq!(
//!     parse_client_hello(&[0x16, 0x03, 0x01, 0x00, 0xc8], DEFAULT_MAX_HELLO_LEN),
//!     Err(SniError::Incomplete)
//! );
//! ```

mod alert;
mod hello;
mod reader;
mod record;
mod refragment;
#[cfg(test)]
mod tests;

pub use alert::{alert_record, AlertDescription};
pub use refragment::refragment;

/// Default bound on the bytes [`parse_client_hello`] will wait for.
///
/// Real ClientHellos are well under 2 KiB (post-quantum key shares push them
/// to ~1.8 KiB); 16 KiB leaves room for long ALPN lists and session tickets.
pub const DEFAULT_MAX_HELLO_LEN: usize = 16 * 1024;

/// What was learned from a complete ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The `host_name` from the server_name extension, exactly as sent (not
    /// lowercased), or `None` when the client sent no server_name extension.
    /// Only ASCII letters, digits, `-`, `.` and `_` can appear.
    pub server_name: Option<String>,
    /// The ALPN protocol names offered, in the client's order of preference;
    /// empty when the client sent no ALPN extension.
    pub alpn: Vec<Vec<u8>>,
    /// The `legacy_version` field of the ClientHello (`0x0303` for TLS 1.2
    /// and TLS 1.3 clients; TLS 1.3 is signalled by `supported_versions`).
    pub legacy_version: u16,
    /// How many TLS records the ClientHello spanned (1 for nearly all clients).
    pub records: usize,
    /// Length of the records that hold the ClientHello: bytes of the buffer
    /// from this offset on (early data, for instance) are not part of it.
    pub consumed: usize,
}

/// Why a buffer does not yield a [`ClientHello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SniError {
    /// More bytes are needed to decide; read more and call again with the
    /// whole buffer. Only returned while the buffer is shorter than `max_len`,
    /// so a caller that never buffers more than `max_len` bytes cannot loop.
    #[error("incomplete TLS ClientHello: more bytes are needed")]
    Incomplete,
    /// The first bytes are not a TLS handshake record (plain HTTP, an SSLv2
    /// hello, garbage): the connection is not TLS and no alert should be sent.
    #[error("not a TLS handshake")]
    NotTls,
    /// The bytes start like TLS but break the protocol.
    #[error("malformed TLS ClientHello: {0}")]
    Malformed(#[from] MalformedReason),
    /// The ClientHello, or the records carrying it, would exceed `limit` bytes.
    #[error("TLS ClientHello larger than the {limit}-byte limit")]
    TooLarge {
        /// The `max_len` the parser was called with.
        limit: usize,
    },
}

impl SniError {
    /// The fatal alert a TLS server would answer this error with, or `None`
    /// when no alert makes sense (more bytes are needed, or the peer does not
    /// speak TLS and would not understand one).
    pub fn alert(&self) -> Option<AlertDescription> {
        match self {
            SniError::Incomplete | SniError::NotTls => None,
            SniError::Malformed(
                MalformedReason::UnexpectedContentType | MalformedReason::NotClientHello,
            ) => Some(AlertDescription::UnexpectedMessage),
            SniError::Malformed(MalformedReason::RecordOverflow) => {
                Some(AlertDescription::RecordOverflow)
            }
            SniError::Malformed(_) => Some(AlertDescription::DecodeError),
            SniError::TooLarge { .. } => Some(AlertDescription::HandshakeFailure),
        }
    }
}

/// The protocol rule a malformed ClientHello breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedReason {
    /// A record other than a handshake record (content type 22) arrived
    /// before the ClientHello was complete.
    #[error("non-handshake record inside the ClientHello")]
    UnexpectedContentType,
    /// A continuation record does not carry a TLS record version (major 3).
    #[error("bad record version")]
    BadRecordVersion,
    /// A handshake record with no payload, which TLS forbids.
    #[error("empty handshake record")]
    EmptyRecord,
    /// A record payload longer than the 2^14 bytes TLS allows.
    #[error("record longer than 16384 bytes")]
    RecordOverflow,
    /// The first handshake message is not a ClientHello (type 1).
    #[error("first handshake message is not a ClientHello")]
    NotClientHello,
    /// The records carry handshake bytes after the end of the ClientHello.
    #[error("handshake data after the ClientHello")]
    TrailingHandshakeData,
    /// The ClientHello `legacy_version` is not a TLS version (major 3).
    #[error("bad ClientHello legacy_version")]
    BadLegacyVersion,
    /// A length field points past the end of the block that contains it.
    #[error("length field overruns its enclosing block")]
    LengthOverrun,
    /// Bytes are left over after the last field of a length-prefixed block.
    #[error("trailing bytes in a length-prefixed block")]
    TrailingBytes,
    /// The legacy session id is longer than 32 bytes.
    #[error("session id longer than 32 bytes")]
    SessionIdTooLong,
    /// The cipher suite list is empty or has an odd length.
    #[error("bad cipher suite list")]
    BadCipherSuites,
    /// The compression method list is empty.
    #[error("no compression methods")]
    NoCompressionMethods,
    /// The same extension type appears twice.
    #[error("duplicate extension")]
    DuplicateExtension,
    /// The server_name list is empty, holds an unknown name type, or holds
    /// more than one host name.
    #[error("bad server_name extension")]
    BadServerNameList,
    /// The host name is empty, longer than 255 bytes, or has a byte other
    /// than an ASCII letter, digit, `-`, `.` or `_`.
    #[error("invalid host name in server_name")]
    InvalidServerName,
    /// The ALPN list is empty or holds an empty protocol name.
    #[error("bad ALPN extension")]
    BadAlpn,
}

/// Parses the ClientHello at the start of `buf`, the bytes a client sent so far.
///
/// Accepts a ClientHello split across any number of handshake records and
/// across any TCP segmentation: calling it again with a longer buffer gives
/// either the same error or, once the ClientHello is complete, the result.
/// Never waits for more than `max_len` bytes: a ClientHello whose declared
/// length, or whose records, would exceed it is [`SniError::TooLarge`].
pub fn parse_client_hello(buf: &[u8], max_len: usize) -> Result<ClientHello, SniError> {
    let found = record::scan(buf, max_len)?;
    let message = record::handshake_message(buf, &found);
    let fields = hello::parse(&message)?;
    Ok(ClientHello {
        server_name: fields.server_name,
        alpn: fields.alpn,
        legacy_version: fields.legacy_version,
        records: found.records,
        consumed: found.consumed,
    })
}
