//! Fatal TLS alerts, the one thing the gateway ever writes to a TLS client.

/// Alert descriptions (RFC 8446 §6) the gateway may send when it refuses a
/// ClientHello. The discriminant is the on-the-wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AlertDescription {
    /// `unexpected_message` (10): a record or message arrived out of order.
    UnexpectedMessage = 10,
    /// `record_overflow` (22): a record was longer than TLS allows.
    RecordOverflow = 22,
    /// `handshake_failure` (40): no acceptable way to go on, e.g. the hello
    /// is too large or no backend can take it.
    HandshakeFailure = 40,
    /// `access_denied` (49): the client is not allowed to reach this name.
    AccessDenied = 49,
    /// `decode_error` (50): a message could not be decoded.
    DecodeError = 50,
    /// `protocol_version` (70): the client's TLS version is not supported.
    ProtocolVersion = 70,
    /// `internal_error` (80): a failure unrelated to the peer, e.g. the
    /// chosen backend cannot be dialed.
    InternalError = 80,
    /// `unrecognized_name` (112): no route for the requested server name.
    UnrecognizedName = 112,
    /// `no_application_protocol` (120): none of the offered ALPN protocols
    /// is served.
    NoApplicationProtocol = 120,
}

impl AlertDescription {
    /// The description's one-byte code on the wire.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// The 7-byte record of a fatal alert, to send before closing a connection
/// whose ClientHello is refused.
///
/// The record version is TLS 1.2's `0x0303`, which RFC 8446 §5.1 prescribes
/// for every record but a ClientHello and which TLS 1.0–1.2 clients accept
/// before a version has been negotiated.
pub fn alert_record(desc: AlertDescription) -> [u8; 7] {
    const CONTENT_TYPE_ALERT: u8 = 21;
    const LEVEL_FATAL: u8 = 2;
    [CONTENT_TYPE_ALERT, 3, 3, 0, 2, LEVEL_FATAL, desc.code()]
}
