//! HTTP/1.1 `CONNECT` requests (RFC 9110 §9.3.6, RFC 9112 §3) and the
//! answers a tunnelling proxy sends back.
//!
//! A listener reads the first bytes of a connection, calls [`parse`] with
//! everything read so far, and keeps reading while the answer is
//! [`ConnectError::Incomplete`]. Bytes after `consumed` were sent by the
//! client after its request head (pipelined) and belong to the tunnel.
//!
//! ```
//! use apiway_wire::connect::{parse, ConnectError, Host, DEFAULT_MAX_HEAD_LEN};
//!
//! let buf = b"CONNECT API.a.example.com:443 HTTP/1.1\r\nHost: api.a.example.com:443\r\n\r\n\x16\x03";
//! let (request, consumed) = parse(buf, DEFAULT_MAX_HEAD_LEN).unwrap();
//! assert_eq!(request.authority.host, Host::Name("api.a.example.com".into()));
//! assert_eq!(request.authority.port, 443);
//! assert_eq!(&buf[consumed..], b"\x16\x03");
//!
//! assert_eq!(parse(b"CONNECT api", DEFAULT_MAX_HEAD_LEN), Err(ConnectError::Incomplete));
//! assert_eq!(parse(b"GET / HTTP/1.1\r\n", DEFAULT_MAX_HEAD_LEN), Err(ConnectError::NotConnect));
//! ```
//!
//! Decisions are made left to right as bytes arrive, so a longer buffer never
//! turns an error into a different answer, and an error is reported as soon
//! as the offending byte is seen. Lines end with CRLF only (a bare LF is
//! refused: RFC 9112 lets a recipient accept it, and refusing is the safer
//! choice for a gateway). The `Host` header is not required: the tunnel goes
//! where the request target says, and simple clients often leave it out.

#[cfg(test)]
mod tests;

use crate::authority::AuthorityError;
pub use crate::authority::{Authority, Host};

/// Default bound on the request head (request line and headers): 8 KiB, as
/// most HTTP servers use.
pub const DEFAULT_MAX_HEAD_LEN: usize = 8 * 1024;

/// A parsed `CONNECT` request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Where the client wants a tunnel to (the request target).
    pub authority: Authority,
    /// The request's HTTP version.
    pub version: HttpVersion,
    /// How many header fields the head carried (their values are not kept:
    /// nothing in them changes where the tunnel goes).
    pub header_count: usize,
}

/// The HTTP version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpVersion {
    /// `HTTP/1.0`.
    Http10,
    /// `HTTP/1.1`, and any later `HTTP/1.x` (RFC 9112 §2.3: answer with the
    /// highest minor version supported).
    Http11,
}

/// Why a buffer does not yield a [`ConnectRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The bytes so far are a valid beginning below the size limit: read more
    /// and call again with the whole buffer.
    #[error("incomplete request head: more bytes are needed")]
    Incomplete,
    /// The request breaks HTTP/1.1 syntax, or its target is not an
    /// `host:port` authority (answer 400).
    #[error("malformed CONNECT request: {0}")]
    Malformed(#[from] MalformedReason),
    /// A well-formed request with a method other than `CONNECT` (answer 405).
    #[error("the method is not CONNECT")]
    NotConnect,
    /// The head did not end within the size limit (answer 431).
    #[error("request head longer than the {limit}-byte limit")]
    TooLarge {
        /// The limit passed to [`parse`].
        limit: usize,
    },
}

impl ConnectError {
    /// The answer a proxy sends for this error; `None` for
    /// [`ConnectError::Incomplete`], which is not an answer yet.
    pub fn status(&self) -> Option<Status> {
        match self {
            ConnectError::Incomplete => None,
            ConnectError::Malformed(_) => Some(Status::BadRequest),
            ConnectError::NotConnect => Some(Status::MethodNotAllowed),
            ConnectError::TooLarge { .. } => Some(Status::RequestHeaderFieldsTooLarge),
        }
    }
}

/// The rule of HTTP/1.1 a malformed request breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MalformedReason {
    /// The method is empty or holds a character that is not a token
    /// character, or is not followed by exactly one space.
    #[error("bad method")]
    BadMethod,
    /// The request target is empty or holds a space, a control character or
    /// a non-ASCII byte.
    #[error("bad request target")]
    BadTarget,
    /// The target's host is not one [`Authority::parse`] accepts (see
    /// [`AuthorityError`]: a DNS name, an IPv4 address or a bracketed IPv6
    /// address without a zone id), or the target is too long to be one.
    #[error("bad host in the request target")]
    BadHost,
    /// The target has no `:port`; CONNECT requires one.
    #[error("the request target has no port")]
    MissingPort,
    /// The port is not a decimal number from 1 to 65535.
    #[error("bad port in the request target")]
    BadPort,
    /// The version is not `HTTP/1.x`.
    #[error("the version is not HTTP/1.x")]
    BadVersion,
    /// A CR not followed by LF, a bare LF, or the request line not ending
    /// right after the version.
    #[error("a line does not end with CRLF")]
    BadLineEnd,
    /// A header line is not `name: value` with a token name directly
    /// followed by the colon.
    #[error("bad header field name")]
    BadHeaderName,
    /// A header value holds a control character other than HTAB.
    #[error("bad header field value")]
    BadHeaderValue,
    /// A header line starts with whitespace (obsolete line folding, which
    /// RFC 9112 lets a server refuse).
    #[error("obsolete header line folding")]
    ObsoleteFold,
}

impl From<AuthorityError> for MalformedReason {
    fn from(e: AuthorityError) -> Self {
        match e {
            AuthorityError::MissingPort => MalformedReason::MissingPort,
            AuthorityError::BadPort | AuthorityError::PortZero => MalformedReason::BadPort,
            AuthorityError::TooLong { .. }
            | AuthorityError::EmptyHost
            | AuthorityError::BadHost
            | AuthorityError::ZoneId => MalformedReason::BadHost,
        }
    }
}

/// The answers a CONNECT proxy gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200: the tunnel is open; every later byte belongs to it.
    ConnectionEstablished,
    /// 400: the request could not be parsed.
    BadRequest,
    /// 403: the authority is not one the proxy tunnels to.
    Forbidden,
    /// 405: the method is not CONNECT.
    MethodNotAllowed,
    /// 408: the head did not arrive in time.
    RequestTimeout,
    /// 431: the head is too large.
    RequestHeaderFieldsTooLarge,
    /// 502: no backend for the authority could be reached.
    BadGateway,
}

impl Status {
    /// The status code.
    pub fn code(self) -> u16 {
        match self {
            Status::ConnectionEstablished => 200,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::RequestHeaderFieldsTooLarge => 431,
            Status::BadGateway => 502,
        }
    }

    /// The reason phrase.
    pub fn reason(self) -> &'static str {
        match self {
            Status::ConnectionEstablished => "Connection Established",
            Status::BadRequest => "Bad Request",
            Status::Forbidden => "Forbidden",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::RequestHeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::BadGateway => "Bad Gateway",
        }
    }

    /// The whole response head. A 200 carries no headers (RFC 9110 §9.3.6:
    /// the tunnel starts right after the empty line); an error says
    /// `Connection: close` with an empty body, and a 405 names the one
    /// method allowed.
    pub fn render(self) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.code(), self.reason()).into_bytes();
        if self != Status::ConnectionEstablished {
            if self == Status::MethodNotAllowed {
                out.extend_from_slice(b"Allow: CONNECT\r\n");
            }
            out.extend_from_slice(b"Content-Length: 0\r\nConnection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Parses the request head at the start of `buf`, the bytes received so
/// far, refusing heads longer than `max_head_len` bytes.
///
/// Returns the request and how many bytes of `buf` its head took.
pub fn parse(buf: &[u8], max_head_len: usize) -> Result<(ConnectRequest, usize), ConnectError> {
    // Only the first `max_head_len` bytes are ever looked at; running out of
    // them means the head is too large rather than incomplete.
    let window = buf.get(..max_head_len).unwrap_or(buf);
    let short = if buf.len() >= max_head_len {
        ConnectError::TooLarge {
            limit: max_head_len,
        }
    } else {
        ConnectError::Incomplete
    };
    let at = |i: usize| window.get(i).copied().ok_or(short);

    // method SP
    let mut i = 0;
    while is_token(at(i)?) {
        i += 1;
    }
    if i == 0 || at(i)? != b' ' {
        return Err(MalformedReason::BadMethod.into());
    }
    if window.get(..i) != Some(&b"CONNECT"[..]) {
        return Err(ConnectError::NotConnect);
    }
    i += 1;

    // request-target SP
    let target_start = i;
    loop {
        match at(i)? {
            b' ' => break,
            0x21..=0x7e => i += 1,
            _ => return Err(MalformedReason::BadTarget.into()),
        }
    }
    let target = window.get(target_start..i).unwrap_or_default();
    if target.is_empty() {
        return Err(MalformedReason::BadTarget.into());
    }
    let authority = Authority::parse_bytes(target).map_err(MalformedReason::from)?;
    i += 1;

    // HTTP-version CRLF
    for expected in *b"HTTP/1." {
        if at(i)? != expected {
            return Err(MalformedReason::BadVersion.into());
        }
        i += 1;
    }
    let version = match at(i)? {
        b'0' => HttpVersion::Http10,
        b'1'..=b'9' => HttpVersion::Http11,
        _ => return Err(MalformedReason::BadVersion.into()),
    };
    i += 1;
    i = line_end(window, i, short)?;

    // *( field-line CRLF ) CRLF
    let mut header_count = 0;
    loop {
        match at(i)? {
            b'\r' => {
                i = line_end(window, i, short)?;
                return Ok((
                    ConnectRequest {
                        authority,
                        version,
                        header_count,
                    },
                    i,
                ));
            }
            b' ' | b'\t' => return Err(MalformedReason::ObsoleteFold.into()),
            _ => {}
        }
        let name_start = i;
        while is_token(at(i)?) {
            i += 1;
        }
        if i == name_start || at(i)? != b':' {
            return Err(MalformedReason::BadHeaderName.into());
        }
        i += 1;
        loop {
            match at(i)? {
                b'\r' => break,
                b'\t' | b' '..=b'~' | 0x80..=0xff => i += 1,
                b'\n' => return Err(MalformedReason::BadLineEnd.into()),
                _ => return Err(MalformedReason::BadHeaderValue.into()),
            }
        }
        i = line_end(window, i, short)?;
        header_count += 1;
    }
}

/// Expects CRLF at `i`; returns the index after it.
fn line_end(window: &[u8], i: usize, short: ConnectError) -> Result<usize, ConnectError> {
    for (offset, expected) in [b'\r', b'\n'].into_iter().enumerate() {
        match window.get(i + offset) {
            None => return Err(short),
            Some(&b) if b == expected => {}
            Some(_) => return Err(MalformedReason::BadLineEnd.into()),
        }
    }
    Ok(i + 2)
}
