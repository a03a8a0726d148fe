//! The one notion of "the bytes so far are not enough yet" that every
//! incremental parser here shares, so one read loop (in `apiway-core`)
//! can drive any of them.
//!
//! Each parser keeps its own error type with its own `Incomplete` variant
//! (its callers match on the others); [`DecodeError`] says which variant
//! that is, and [`Decoded`] sorts a parser's result into the three answers
//! a reader acts on.
//!
//! ```
//! use apiway_wire::decode::Decoded;
//! use apiway_wire::connect_response::{parse, DEFAULT_MAX_RESPONSE_LEN};
//!
//! let max = DEFAULT_MAX_RESPONSE_LEN;
//! assert!(matches!(Decoded::from(parse(b"HTTP/1.1 200", max)), Decoded::Incomplete));
//! assert!(matches!(Decoded::from(parse(b"SSH-2.0", max)), Decoded::Invalid(_)));
//! assert!(matches!(
//!     Decoded::from(parse(b"HTTP/1.1 200 OK\r\n\r\n", max)),
//!     Decoded::Complete((_, 19))
//! ));
//! ```

use crate::{connect, connect_response, proxy, sni};

/// An error type of an incremental parser: one of its values means "read
/// more and call again with the whole buffer".
pub trait DecodeError {
    /// Whether this is the parser's `Incomplete`: the bytes so far are a
    /// valid beginning below the parser's size limit.
    fn is_incomplete(&self) -> bool;
}

/// What an incremental parser made of the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T, E> {
    /// A whole value (for most parsers, with how many bytes it took).
    Complete(T),
    /// A valid beginning: read more and call again with the whole buffer.
    Incomplete,
    /// The bytes can never become a value; more bytes would not change that.
    Invalid(E),
}

impl<T, E> Decoded<T, E> {
    /// Maps a complete value, leaving the other answers alone.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decoded<U, E> {
        match self {
            Decoded::Complete(value) => Decoded::Complete(f(value)),
            Decoded::Incomplete => Decoded::Incomplete,
            Decoded::Invalid(e) => Decoded::Invalid(e),
        }
    }
}

impl<T, E: DecodeError> From<Result<T, E>> for Decoded<T, E> {
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Decoded::Complete(value),
            Err(e) if e.is_incomplete() => Decoded::Incomplete,
            Err(e) => Decoded::Invalid(e),
        }
    }
}

/// Implements [`DecodeError`] for a parser's error type by naming its
/// `Incomplete` variant.
macro_rules! decode_error {
    ($($error:ty => $incomplete:path),* $(,)?) => {$(
        impl DecodeError for $error {
            fn is_incomplete(&self) -> bool {
                matches!(self, $incomplete)
            }
        }
    )*};
}

decode_error! {
    sni::SniError => sni::SniError::Incomplete,
    proxy::ProxyError => proxy::ProxyError::Incomplete,
    connect::ConnectError => connect::ConnectError::Incomplete,
    connect_response::ConnectResponseError => connect_response::ConnectResponseError::Incomplete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parser_sorts_into_the_three_answers() {
        let sni = |b: &[u8]| Decoded::from(sni::parse_client_hello(b, 1024).map(|_| ()));
        assert_eq!(sni(&[0x16, 0x03]), Decoded::Incomplete);
        assert_eq!(sni(b"GET"), Decoded::Invalid(sni::SniError::NotTls));
        let proxy = |b: &[u8]| Decoded::from(proxy::parse(b).map(|(_, n)| n));
        assert_eq!(proxy(b"PROXY TCP4"), Decoded::Incomplete);
        assert_eq!(
            proxy(b"\x16"),
            Decoded::Invalid(proxy::ProxyError::NotProxy)
        );
        assert_eq!(
            proxy(b"PROXY UNKNOWN\r\nrest"),
            Decoded::Complete(15),
            "v1 UNKNOWN"
        );
        let connect = |b: &[u8]| Decoded::from(connect::parse(b, 64).map(|(_, n)| n));
        assert_eq!(connect(b"CONNECT a"), Decoded::Incomplete);
        assert_eq!(
            connect(b"GET / HTTP/1.1\r\n"),
            Decoded::Invalid(connect::ConnectError::NotConnect)
        );
        assert_eq!(
            connect(b"CONNECT a.b:1 HTTP/1.1\r\n\r\n"),
            Decoded::Complete(26)
        );
    }
}
