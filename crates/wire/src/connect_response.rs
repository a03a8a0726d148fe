//! HTTP/1.1 `CONNECT` as a client speaks it: the request line to send
//! and the proxy's response head to parse (RFC 9110 §9.3.6, RFC 9112).
//!
//! The agent opens a tunnel through a gateway with `CONNECT host:port`,
//! reads the response head, and relays on 2xx. Everything after the head's
//! blank line already belongs to the tunnel, so [`parse`] returns how many
//! bytes the head took.
//!
//! ```
//! use apiway_wire::connect_response::{parse, request, ConnectResponseError};
//!
//! assert_eq!(request("10.1.2.3:443").unwrap(),
//!     b"CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: 10.1.2.3:443\r\n\r\n");
//! assert_eq!(parse(b"HTTP/1.1 200 Conn", 8192), Err(ConnectResponseError::Incomplete));
//! let (head, consumed) = parse(b"HTTP/1.1 200 OK\r\n\r\n\x16\x03", 8192).unwrap();
//! assert!(head.is_success());
//! assert_eq!(consumed, 19);
//! ```

use crate::authority::{Authority, AuthorityError};

/// Default for the `max` argument of [`parse`]: far more than any proxy's
/// answer to `CONNECT` needs.
pub const DEFAULT_MAX_RESPONSE_LEN: usize = 8192;

/// The status line of a proxy's answer (headers are checked, not kept:
/// nothing in them changes what a client does with a tunnel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectResponse {
    /// The status code, 100 to 999.
    pub status: u16,
    /// The reason phrase, possibly empty (only visible US-ASCII, spaces and tabs kept).
    pub reason: String,
}

impl ConnectResponse {
    /// A 2xx answer: the tunnel is open.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why a buffer does not yield a [`ConnectResponse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectResponseError {
    /// The bytes so far are a valid beginning: read more and call again with
    /// the whole buffer. Only returned while the buffer is below the limit.
    #[error("incomplete CONNECT response")]
    Incomplete,
    /// No complete head within the limit.
    #[error("CONNECT response head longer than {limit} bytes")]
    TooLong {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// Not an HTTP/1.x response head.
    #[error("malformed CONNECT response: {0}")]
    Malformed(&'static str),
    /// An informational (1xx) answer, which a proxy must not send to CONNECT
    /// before its final answer is one we do not wait through.
    #[error("CONNECT answered with an informational status {0}")]
    Informational(u16),
}

/// Why a `CONNECT` request cannot be rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The authority is not `host:port` (a name, an IPv4 address or a
    /// bracketed IPv6 address, and a port).
    #[error("`CONNECT` needs host:port, with a port: {0}")]
    BadAuthority(#[from] AuthorityError),
}

/// Renders `CONNECT authority HTTP/1.1` with the matching `Host` header.
/// `authority` must be `host:port` as [`Authority::parse`] reads it, so
/// that nothing a user writes can inject another header; it is sent in
/// its normalized form (a name lowercased, without a trailing dot).
pub fn request(authority: &str) -> Result<Vec<u8>, RequestError> {
    Ok(request_to(&Authority::parse(authority)?))
}

/// Renders `CONNECT authority HTTP/1.1` with the matching `Host` header.
pub fn request_to(authority: &Authority) -> Vec<u8> {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes()
}

/// Parses a response head from the start of `buf`: the status line, header
/// lines, and the blank line. Returns the status and the number of bytes
/// the head took; bytes after that belong to the tunnel. `max` bounds the
/// head's length. Lines may end in CRLF or a bare LF (RFC 9112 §2.2).
pub fn parse(buf: &[u8], max: usize) -> Result<(ConnectResponse, usize), ConnectResponseError> {
    use ConnectResponseError::*;
    // Fail a non-HTTP answer from its first bytes rather than at the limit.
    const PREFIX: &[u8] = b"HTTP/1.";
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return Err(Malformed("does not start with HTTP/1."));
    }
    let window = &buf[..buf.len().min(max)];
    let Some(end) = head_end(window) else {
        // Whatever arrived must still be a possible head; checked before
        // the limit so that more bytes never turn an error into another.
        check_lines(window, false)?;
        if buf.len() >= max {
            return Err(TooLong { limit: max });
        }
        return Err(Incomplete);
    };
    let head = &window[..end];
    let status = check_lines(head, true)?.ok_or(Malformed("no status line"))?;
    if status.status < 200 {
        return Err(Informational(status.status));
    }
    Ok((status, end))
}

/// The offset just past the blank line ending the head, if present.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' {
            let line = &buf[line_start..i];
            if line.is_empty() || line == b"\r" {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

/// Checks every complete line; with `complete` false the text after the
/// last LF is a partial line, checked as far as it goes when it is the
/// status line. Returns the status line once it is complete.
fn check_lines(
    head: &[u8],
    complete: bool,
) -> Result<Option<ConnectResponse>, ConnectResponseError> {
    use ConnectResponseError::Malformed;
    let mut pieces: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
    // The text after the last LF: empty for a complete head.
    let partial = pieces.pop().unwrap_or_default();
    let mut status = None;
    for (i, raw) in pieces.iter().enumerate() {
        if i == 0 {
            check_status_prefix(raw)?;
        }
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.contains(&b'\r') {
            return Err(Malformed("bare CR in the head"));
        }
        if i == 0 {
            status = Some(status_line(line)?);
        } else if line.is_empty() {
            break;
        } else {
            header_line(line)?;
        }
    }
    if !complete && pieces.is_empty() {
        check_status_prefix(partial)?;
    }
    Ok(status)
}

/// Checks a status line, whole or partial, as far as it goes, in byte
/// order (the version, then bare CRs), so a longer buffer never reports a
/// different error for the same bytes.
fn check_status_prefix(raw: &[u8]) -> Result<(), ConnectResponseError> {
    use ConnectResponseError::Malformed;
    let version = &raw[..raw.len().min(8)];
    let expected = b"HTTP/1.";
    let k = version.len().min(expected.len());
    if version[..k] != expected[..k] {
        return Err(Malformed("does not start with HTTP/1."));
    }
    if version.len() == 8 && !matches!(version[7], b'0' | b'1') {
        return Err(Malformed("not HTTP/1.0 or HTTP/1.1"));
    }
    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
    if line.contains(&b'\r') {
        return Err(Malformed("bare CR in the head"));
    }
    Ok(())
}

fn status_line(line: &[u8]) -> Result<ConnectResponse, ConnectResponseError> {
    use ConnectResponseError::Malformed;
    let rest = match line.get(..9) {
        Some(b"HTTP/1.1 ") | Some(b"HTTP/1.0 ") => &line[9..],
        _ => return Err(Malformed("status line is not `HTTP/1.x CODE REASON`")),
    };
    let code = rest.get(..3).ok_or(Malformed("no status code"))?;
    if !code.iter().all(u8::is_ascii_digit) || code[0] == b'0' {
        return Err(Malformed("status code is not three digits"));
    }
    let status = code
        .iter()
        .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    let reason = match rest.get(3..) {
        None | Some(b"") => "",
        Some(r) => {
            let r = r
                .strip_prefix(b" ")
                .ok_or(Malformed("no space after the status code"))?;
            if !r.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b)) {
                return Err(Malformed("reason phrase has control characters"));
            }
            // Checked ASCII just above.
            std::str::from_utf8(r).map_err(|_| Malformed("reason phrase is not text"))?
        }
    };
    Ok(ConnectResponse {
        status,
        reason: reason.to_owned(),
    })
}

fn header_line(line: &[u8]) -> Result<(), ConnectResponseError> {
    use ConnectResponseError::Malformed;
    if line[0] == b' ' || line[0] == b'\t' {
        return Err(Malformed("folded header line"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(Malformed("header line without a colon"))?;
    let name = &line[..colon];
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if name.is_empty() || !name.iter().all(token) {
        return Err(Malformed("bad header name"));
    }
    if line[colon + 1..]
        .iter()
        .any(|&b| b != b'\t' && (b < b' ' || b == 0x7f))
    {
        return Err(Malformed("header value has control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConnectResponseError::*;

    const MAX: usize = DEFAULT_MAX_RESPONSE_LEN;

    #[test]
    fn parses_success_and_failure_answers() {
        let (r, n) = parse(b"HTTP/1.1 200 Connection established\r\n\r\n", MAX).unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), n),
            (200, "Connection established", 39)
        );
        let buf = b"HTTP/1.0 403 Forbidden\r\nContent-Length: 9\r\nX-A:b\r\n\r\nforbidden";
        let (r, n) = parse(buf, MAX).unwrap();
        assert_eq!(r.status, 403);
        assert!(!r.is_success());
        assert_eq!(&buf[n..], b"forbidden");
        let (r, n) = parse(b"HTTP/1.1 200\n\nrest", MAX).unwrap();
        assert_eq!((r.status, r.reason.as_str(), n), (200, "", 14));
    }

    #[test]
    fn every_prefix_is_incomplete_then_the_same_answer() {
        let buf = b"HTTP/1.1 502 Bad Gateway\r\nServer: x\r\n\r\n";
        for end in 0..buf.len() {
            assert_eq!(parse(&buf[..end], MAX), Err(Incomplete), "{end}");
        }
        assert_eq!(parse(buf, MAX).unwrap().0.status, 502);
    }

    #[test]
    fn rejects_what_is_not_a_response_head() {
        assert_eq!(
            parse(b"SSH-2.0-OpenSSH", MAX),
            Err(Malformed("does not start with HTTP/1."))
        );
        assert_eq!(
            parse(b"\x15\x03\x03", MAX),
            Err(Malformed("does not start with HTTP/1."))
        );
        assert!(matches!(
            parse(b"HTTP/1.2 200 OK\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 20x OK\r\n\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200OK\r\n\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\n folded\r\n\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\rX\r\n\r\n", MAX),
            Err(Malformed(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\nBad Name: x\r\n", MAX),
            Err(Malformed(_))
        ));
        assert_eq!(
            parse(b"HTTP/1.1 100 Continue\r\n\r\n", MAX),
            Err(Informational(100))
        );
    }

    #[test]
    fn more_bytes_never_change_an_error() {
        // Found by the fuzzer: errors used to be named differently before
        // and after the line ended.
        for buf in [
            b"HTTP/1. es C1 502 Bad Gateway\nServer: haproxy\n\n".as_slice(),
            b"HTTP/1.*1 200 Connection; es Connece\r\x1a\r\n",
        ] {
            let whole = parse(buf, MAX);
            assert!(matches!(whole, Err(Malformed(_))));
            for end in 8..buf.len() {
                assert_eq!(parse(&buf[..end], MAX), whole, "{end}");
            }
        }
        // A malformed line inside the limit is reported, not TooLong.
        let buf = b"HTTP/1.1 200 OK\r\nno colon here\r\nX: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy";
        assert_eq!(parse(buf, 40), parse(&buf[..34], 40));
    }

    #[test]
    fn enforces_the_limit() {
        let mut buf = b"HTTP/1.1 200 OK\r\n".to_vec();
        buf.extend(std::iter::repeat_n(b"X-Pad: 0123456789\r\n".as_slice(), 10).flatten());
        assert_eq!(parse(&buf, 64), Err(TooLong { limit: 64 }));
        assert_eq!(parse(&buf[..40], 64), Err(Incomplete));
        buf.extend_from_slice(b"\r\n");
        assert!(parse(&buf, MAX).is_ok());
        assert_eq!(parse(&buf, 64), Err(TooLong { limit: 64 }));
    }

    #[test]
    fn renders_requests_and_refuses_injection() {
        assert_eq!(
            request("[fd00::1]:6443").unwrap(),
            b"CONNECT [fd00::1]:6443 HTTP/1.1\r\nHost: [fd00::1]:6443\r\n\r\n"
        );
        assert!(request("kubernetes.default.svc:443").is_ok());
        assert_eq!(
            request("API.example.:443").unwrap(),
            b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n"
        );
        for bad in [
            "noport",
            "a:",
            "a b:1",
            "a:1\r\nX: y",
            ":443",
            "a:123456",
            "[]:1",
        ] {
            assert!(
                matches!(request(bad), Err(RequestError::BadAuthority(_))),
                "{bad}"
            );
        }
    }
}
