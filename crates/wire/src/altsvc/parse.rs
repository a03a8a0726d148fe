//! The RFC 7838 grammar over one field line, with RFC 9110 tokens, quoted
//! strings and list rules.

use std::borrow::Cow;

use super::{
    authority, AltSvc, AltSvcError, Alternative, DEFAULT_MAX_AGE, MAX_AGE_CEILING, MAX_ALTERNATIVES,
};

/// ALPN protocol names are 1 to 255 bytes (RFC 7301 section 3.1).
const MAX_PROTOCOL_ID_LEN: usize = 255;

/// The elements of all field lines parsed so far.
#[derive(Debug, Default)]
pub(super) struct List {
    alternatives: Vec<Alternative>,
    clear: bool,
}

impl List {
    fn push_clear(&mut self) -> Result<(), AltSvcError> {
        if self.clear || !self.alternatives.is_empty() {
            return Err(AltSvcError::ClearNotAlone);
        }
        self.clear = true;
        Ok(())
    }

    fn push(&mut self, alternative: Alternative) -> Result<(), AltSvcError> {
        if self.clear {
            return Err(AltSvcError::ClearNotAlone);
        }
        if self.alternatives.len() >= MAX_ALTERNATIVES {
            return Err(AltSvcError::TooManyAlternatives {
                limit: MAX_ALTERNATIVES,
            });
        }
        self.alternatives.push(alternative);
        Ok(())
    }

    /// The value all lines make together.
    pub(super) fn finish(self) -> Result<AltSvc, AltSvcError> {
        if self.clear {
            Ok(AltSvc::Clear)
        } else if self.alternatives.is_empty() {
            Err(AltSvcError::Empty)
        } else {
            Ok(AltSvc::Alternatives(self.alternatives))
        }
    }
}

/// Parses one field line, `base` bytes into the joined value, into `list`.
pub(super) fn line(text: &str, base: usize, list: &mut List) -> Result<(), AltSvcError> {
    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        pos: 0,
        base,
    };
    loop {
        cursor.skip_ows();
        match cursor.peek() {
            None => return Ok(()),
            // An empty list element (RFC 9110 section 5.6.1.2).
            Some(b',') => {
                cursor.pos += 1;
                continue;
            }
            Some(_) => element(&mut cursor, list)?,
        }
        cursor.skip_ows();
        match cursor.peek() {
            None => return Ok(()),
            Some(b',') => cursor.pos += 1,
            Some(_) => return Err(cursor.syntax("`,` between list elements")),
        }
    }
}

/// `clear`, or `alternative *( OWS ";" OWS [ parameter ] )`.
fn element(cursor: &mut Cursor<'_>, list: &mut List) -> Result<(), AltSvcError> {
    let id_offset = cursor.offset();
    let id = cursor.token();
    if id.is_empty() {
        return Err(cursor.syntax("a protocol-id token or `clear`"));
    }
    if cursor.peek() != Some(b'=') {
        if id == b"clear" {
            return list.push_clear();
        }
        return Err(cursor.syntax("`=` after the protocol-id"));
    }
    cursor.pos += 1;
    let protocol_id = percent_decode(id, id_offset)?;
    if cursor.peek() != Some(b'"') {
        return Err(cursor.syntax("a quoted alt-authority"));
    }
    let authority_offset = cursor.offset();
    let raw = cursor.quoted_string()?;
    let (host, port) = authority::parse(&raw, authority_offset)?;
    let mut alternative = Alternative {
        protocol_id,
        host,
        port,
        max_age: DEFAULT_MAX_AGE,
        persist: false,
    };
    loop {
        let before = cursor.pos;
        cursor.skip_ows();
        if cursor.peek() != Some(b';') {
            cursor.pos = before;
            break;
        }
        cursor.pos += 1;
        cursor.skip_ows();
        // RFC 9110 section 5.6.6 allows an empty parameter (`;;`, a trailing `;`).
        if cursor.peek().is_some_and(is_tchar) {
            parameter(cursor, &mut alternative)?;
        }
    }
    list.push(alternative)
}

/// `token "=" ( token / quoted-string )`, applied to `alternative` when known.
fn parameter(cursor: &mut Cursor<'_>, alternative: &mut Alternative) -> Result<(), AltSvcError> {
    let name = cursor.token();
    if cursor.peek() != Some(b'=') {
        return Err(cursor.syntax("`=` after a parameter name"));
    }
    cursor.pos += 1;
    let value = if cursor.peek() == Some(b'"') {
        Cow::Owned(cursor.quoted_string()?)
    } else {
        let token = cursor.token();
        if token.is_empty() {
            return Err(cursor.syntax("a parameter value"));
        }
        Cow::Borrowed(token)
    };
    if name.eq_ignore_ascii_case(b"ma") {
        if let Some(seconds) = delta_seconds(&value) {
            alternative.max_age = seconds;
        }
    } else if name.eq_ignore_ascii_case(b"persist") && *value == *b"1" {
        alternative.persist = true;
    }
    Ok(())
}

/// `1*DIGIT`, clamped to [`MAX_AGE_CEILING`]; `None` for anything else.
pub(super) fn delta_seconds(value: &[u8]) -> Option<u32> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let seconds = value.iter().fold(0u32, |n, digit| {
        n.saturating_mul(10).saturating_add(u32::from(digit - b'0'))
    });
    Some(seconds.min(MAX_AGE_CEILING))
}

/// Decodes the `%XX` escapes of a protocol-id token found at `offset`.
pub(super) fn percent_decode(token: &[u8], offset: usize) -> Result<Vec<u8>, AltSvcError> {
    let mut decoded = Vec::with_capacity(token.len());
    let mut i = 0;
    while let Some(&byte) = token.get(i) {
        if byte == b'%' {
            let high = token.get(i + 1).and_then(hex_digit);
            let low = token.get(i + 2).and_then(hex_digit);
            let (Some(high), Some(low)) = (high, low) else {
                return Err(AltSvcError::BadPercentEscape { offset: offset + i });
            };
            decoded.push(high << 4 | low);
            i += 3;
        } else {
            decoded.push(byte);
            i += 1;
        }
    }
    if decoded.len() > MAX_PROTOCOL_ID_LEN {
        return Err(AltSvcError::ProtocolIdTooLong { offset });
    }
    Ok(decoded)
}

/// The value of an ABNF `HEXDIG`, which (like all ABNF literals) ignores case.
pub(super) fn hex_digit(byte: &u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// RFC 9110 `tchar`.
pub(super) fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// RFC 9110 `qdtext`: what a quoted string holds unescaped.
fn is_qdtext(byte: u8) -> bool {
    matches!(byte, b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff)
}

/// What may follow a `\` in a quoted string: HTAB, SP, VCHAR or obs-text.
fn is_escapable(byte: u8) -> bool {
    matches!(byte, b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff)
}

/// A position in one field line.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of the line in the joined value, for error offsets.
    base: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn offset(&self) -> usize {
        self.base + self.pos
    }

    fn syntax(&self, expected: &'static str) -> AltSvcError {
        AltSvcError::Syntax {
            offset: self.offset(),
            expected,
        }
    }

    /// Skips RFC 9110 `OWS`.
    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// Takes the longest run of `tchar`s, possibly empty.
    fn token(&mut self) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(is_tchar) {
            self.pos += 1;
        }
        self.bytes.get(start..self.pos).unwrap_or_default()
    }

    /// Takes a quoted string starting at the `"` under the cursor and returns
    /// its content with the `\` escapes removed.
    fn quoted_string(&mut self) -> Result<Vec<u8>, AltSvcError> {
        let open = self.offset();
        self.pos += 1;
        let mut content = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(AltSvcError::UnterminatedQuote { offset: open });
            };
            match byte {
                b'"' => {
                    self.pos += 1;
                    return Ok(content);
                }
                b'\\' => {
                    self.pos += 1;
                    match self.peek() {
                        None => return Err(AltSvcError::UnterminatedQuote { offset: open }),
                        Some(escaped) if is_escapable(escaped) => content.push(escaped),
                        Some(_) => return Err(self.syntax("a visible character after `\\`")),
                    }
                }
                _ if is_qdtext(byte) => content.push(byte),
                _ => return Err(self.syntax("quoted-string text or `\"`")),
            }
            self.pos += 1;
        }
    }
}
