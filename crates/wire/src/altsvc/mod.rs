//! Alt-Svc (RFC 7838) header values: parsing and rendering.
//!
//! An API server (or the load balancer in front of it) names the endpoints a
//! client may use instead of the origin in an `Alt-Svc` response header. The
//! client library parses the value with [`parse`] (or [`parse_lines`] when
//! the response carries several `Alt-Svc` field lines), keeps the
//! alternatives whose protocol it speaks, and computes their expiry from
//! [`Alternative::max_age`] and the time it received the response: nothing
//! here reads a clock.
//!
//! ```
//! use apiway_wire::altsvc::{parse, AltSvc};
//!
//! let value = parse(r#"h3=":443"; ma=3600, h2="10.0.0.7:6443""#).unwrap();
//! let AltSvc::Alternatives(alternatives) = &value else { unreachable!() };
//! assert_eq!(alternatives[0].protocol_id, b"h3");
//! assert_eq!(alternatives[0].host, None); // the origin's own host
//! assert_eq!(alternatives[0].max_age, 3600);
//! assert!(alternatives[1].is_h2());
//! assert_eq!(alternatives[1].host.as_deref(), Some("10.0.0.7"));
//! assert_eq!(alternatives[1].port, 6443);
//! assert_eq!(value.render(), r#"h3=":443"; ma=3600, h2="10.0.0.7:6443""#);
//!
//! assert_eq!(parse("clear").unwrap(), AltSvc::Clear);
//! ```
//!
//! # How strict the parser is
//!
//! The grammar of RFC 7838 section 3 is followed exactly, with RFC 9110's
//! list and parameter rules around it:
//!
//! - Empty list elements (`, , h2=":443",`) and empty parameters
//!   (`h2=":443";`) are accepted, as RFC 9110 sections 5.6.1.2 and 5.6.6
//!   require of recipients. A value with no element at all is an error.
//! - Any other syntax error rejects the whole value: a caller that gets an
//!   error should act as if no `Alt-Svc` header had been sent.
//! - `clear` is case-sensitive and must be the only element; `clear=":443"`
//!   is an ordinary alternative whose protocol id happens to be `clear`.
//! - Protocol ids are percent-decoded and compared as octets (`H2` is not
//!   `h2`). Lowercase hex digits and needless escapes (`h%32`) are accepted;
//!   [`AltSvc::render`] writes the one canonical form RFC 7838 asks senders
//!   to use.
//! - Parameter names are case-insensitive; values may be tokens or quoted
//!   strings, which mean the same. Unknown parameters are ignored.
//! - `ma` must be delta-seconds (one or more digits). An `ma` with any other
//!   value is ignored, as if absent, the way RFC 7838 treats unknown
//!   parameters and `persist` values other than `1`; a later valid `ma`
//!   overrides an earlier one. Values above 2^31 are clamped to
//!   [`MAX_AGE_CEILING`] (RFC 9111 section 1.2.2).
//! - `persist=1` (or `persist="1"`) sets [`Alternative::persist`]; other
//!   values are ignored (RFC 7838 section 3.1).
//! - The alt-authority must be a quoted string holding `[uri-host] ":" port`:
//!   the host is empty (the origin's host), an IPv6 literal in brackets, or
//!   an RFC 3986 reg-name (which includes IPv4 addresses); the port is
//!   1 to 65535; a missing port is an error. IPvFuture literals and IPv6
//!   zone ids are rejected.
//!
//! `tests/altsvc_curl.rs` checks these rules against curl and lists where
//! curl reads a value differently (it is more lenient in some places,
//! stricter in others); this module follows the RFCs in each case.

mod authority;
mod parse;
mod render;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Longest field value [`parse`] accepts, in bytes; for [`parse_lines`] the
/// limit applies to the lines joined with `", "`.
///
/// Real Alt-Svc values are a few hundred bytes at most.
pub const MAX_VALUE_LEN: usize = 16 * 1024;

/// Most alternatives one value (or one set of field lines) may list.
pub const MAX_ALTERNATIVES: usize = 64;

/// The `ma` (max-age) an alternative gets when the parameter is absent or
/// invalid: 24 hours (RFC 7838 section 3.1).
pub const DEFAULT_MAX_AGE: u32 = 86_400;

/// Largest `ma` the parser returns: larger values are clamped to 2^31
/// seconds, as RFC 9111 section 1.2.2 requires for delta-seconds.
pub const MAX_AGE_CEILING: u32 = 1 << 31;

/// A parsed `Alt-Svc` field value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AltSvc {
    /// `clear`: forget every alternative cached for this origin.
    Clear,
    /// The origin's alternatives, in the server's order of preference. Each
    /// value received replaces all alternatives cached for the origin.
    ///
    /// Never empty when returned by [`parse`] or [`parse_lines`].
    Alternatives(Vec<Alternative>),
}

/// One alternative service: a protocol at a host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Alternative {
    /// The ALPN protocol id, percent-decoded (`h2`, `h3`, `http/1.1`); at
    /// most 255 bytes when parsed.
    pub protocol_id: Vec<u8>,
    /// The host to connect to, or `None` for the origin's own host. An IPv6
    /// literal is held without brackets in its canonical text form (`::1`);
    /// a reg-name (DNS name or IPv4 address) exactly as sent, case and any
    /// percent-escapes included.
    pub host: Option<String>,
    /// The port to connect to, never 0 when parsed.
    pub port: u16,
    /// Freshness lifetime in seconds from when the response was received
    /// (less its `Age`); [`DEFAULT_MAX_AGE`] when the value had no valid `ma`.
    pub max_age: u32,
    /// `persist=1`: keep the alternative across network changes.
    pub persist: bool,
}

/// Why an `Alt-Svc` value was rejected.
///
/// Offsets count bytes from the start of the value; for [`parse_lines`],
/// from the start of the lines joined with `", "`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AltSvcError {
    /// The value is longer than the limit, checked before parsing.
    #[error("Alt-Svc value longer than the {limit}-byte limit")]
    TooLong {
        /// The limit, [`MAX_VALUE_LEN`].
        limit: usize,
    },
    /// The value lists more alternatives than the limit.
    #[error("Alt-Svc value lists more than {limit} alternatives")]
    TooManyAlternatives {
        /// The limit, [`MAX_ALTERNATIVES`].
        limit: usize,
    },
    /// The value has no element: it is empty, whitespace or commas only.
    #[error("Alt-Svc value is empty")]
    Empty,
    /// `clear` appears next to other elements (or twice).
    #[error("Alt-Svc `clear` must be the only element of the value")]
    ClearNotAlone,
    /// The value breaks the grammar at `offset`.
    #[error("Alt-Svc syntax error at byte {offset}: expected {expected}")]
    Syntax {
        /// Where the unexpected byte (or the end of the value) is.
        offset: usize,
        /// What the grammar allows there.
        expected: &'static str,
    },
    /// A quoted string is not closed before the end of the field line.
    #[error("Alt-Svc quoted string starting at byte {offset} is not terminated")]
    UnterminatedQuote {
        /// Where the opening `"` is.
        offset: usize,
    },
    /// A `%` in a protocol id is not followed by two hex digits.
    #[error("Alt-Svc protocol id has a bad percent-escape at byte {offset}")]
    BadPercentEscape {
        /// Where the `%` is.
        offset: usize,
    },
    /// A protocol id decodes to more than the 255 bytes ALPN allows.
    #[error("Alt-Svc protocol id starting at byte {offset} is longer than 255 bytes")]
    ProtocolIdTooLong {
        /// Where the protocol id starts.
        offset: usize,
    },
    /// An alt-authority has no `:port`, or an empty port.
    #[error("Alt-Svc alt-authority starting at byte {offset} has no port")]
    MissingPort {
        /// Where the alt-authority's opening `"` is.
        offset: usize,
    },
    /// An alt-authority's port is not a number from 1 to 65535.
    #[error("Alt-Svc alt-authority starting at byte {offset} has a port outside 1-65535")]
    InvalidPort {
        /// Where the alt-authority's opening `"` is.
        offset: usize,
    },
    /// An alt-authority's host is neither empty, a bracketed IPv6 address nor
    /// an RFC 3986 reg-name.
    #[error("Alt-Svc alt-authority starting at byte {offset} has an invalid host")]
    InvalidHost {
        /// Where the alt-authority's opening `"` is.
        offset: usize,
    },
}

/// Parses one `Alt-Svc` field value.
pub fn parse(value: &str) -> Result<AltSvc, AltSvcError> {
    parse_lines([value])
}

/// Parses the values of all `Alt-Svc` field lines of one response, in order.
///
/// The lines form one list (RFC 9110 section 5.3): the result, errors and
/// their offsets included, is that of [`parse`] on the lines joined with
/// `", "`, except that a quoted string cannot run from one line into the
/// next ([`AltSvcError::UnterminatedQuote`]). So a line may be empty as long
/// as some line has an element, and `clear` must be the only element of all
/// lines together.
pub fn parse_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<AltSvc, AltSvcError> {
    // Check the length of all lines before parsing any, as `parse` would.
    let mut bounded = Vec::new();
    let mut joined_len = 0usize;
    for line in lines {
        let start = if bounded.is_empty() {
            0
        } else {
            joined_len + 2 // the ", " a proxy would join the lines with
        };
        if start > MAX_VALUE_LEN || line.len() > MAX_VALUE_LEN - start {
            return Err(AltSvcError::TooLong {
                limit: MAX_VALUE_LEN,
            });
        }
        bounded.push((start, line));
        joined_len = start + line.len();
    }
    let mut list = parse::List::default();
    for (start, line) in bounded {
        parse::line(line, start, &mut list)?;
    }
    list.finish()
}

impl AltSvc {
    /// The field value: `clear`, or the alternatives joined with `", "`.
    ///
    /// An empty [`AltSvc::Alternatives`] renders as `clear`, which means the
    /// same to a client and, unlike an empty value, is valid.
    pub fn render(&self) -> String {
        let mut out = String::new();
        render::alt_svc(self, &mut out);
        out
    }
}

impl Alternative {
    /// An alternative with the default `ma` and no `persist`; the host is
    /// `None` for the origin's host, else a reg-name or an unbracketed IPv6
    /// address, and is not checked.
    pub fn new(protocol_id: impl Into<Vec<u8>>, host: Option<String>, port: u16) -> Self {
        Alternative {
            protocol_id: protocol_id.into(),
            host,
            port,
            max_age: DEFAULT_MAX_AGE,
            persist: false,
        }
    }

    /// Whether the protocol is HTTP/2 over TLS (protocol id exactly `h2`).
    pub fn is_h2(&self) -> bool {
        self.protocol_id == b"h2"
    }

    /// The host to connect to: [`Alternative::host`], or `origin_host` when
    /// the alternative is on the origin's host.
    pub fn host_or<'a>(&'a self, origin_host: &'a str) -> &'a str {
        self.host.as_deref().unwrap_or(origin_host)
    }

    /// [`Alternative::max_age`] as a [`Duration`]: add it to the time the
    /// response was received (minus its `Age`) to get the expiry.
    pub fn max_age_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.max_age))
    }

    /// This alternative as one element of a field value, for example
    /// `h2="api.example.com:6443"; ma=60; persist=1`.
    ///
    /// The protocol id is percent-encoded where RFC 7838 requires, with
    /// uppercase hex; `ma` is written only when it is not
    /// [`DEFAULT_MAX_AGE`]. An alternative [`parse`] could not have returned
    /// (empty protocol id, port 0, a host that is not a reg-name or IPv6
    /// address) renders to a value `parse` rejects, but still a safe one: `"`
    /// and `\` are escaped and control characters, which a quoted string
    /// cannot hold, are dropped, so the output never breaks a header line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        render::alternative(self, &mut out);
        out
    }
}

impl fmt::Display for AltSvc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl fmt::Display for Alternative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl FromStr for AltSvc {
    type Err = AltSvcError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        parse(value)
    }
}
