//! Field values from [`AltSvc`] and [`Alternative`], in the canonical form.

use std::fmt::Write;

use super::parse::is_tchar;
use super::{AltSvc, Alternative, DEFAULT_MAX_AGE};

pub(super) fn alt_svc(value: &AltSvc, out: &mut String) {
    match value {
        AltSvc::Alternatives(alternatives) if !alternatives.is_empty() => {
            for (index, alt) in alternatives.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                alternative(alt, out);
            }
        }
        AltSvc::Alternatives(_) | AltSvc::Clear => out.push_str("clear"),
    }
}

pub(super) fn alternative(alt: &Alternative, out: &mut String) {
    protocol_id(&alt.protocol_id, out);
    out.push_str("=\"");
    if let Some(host) = &alt.host {
        // Only an IPv6 address holds `:`; it needs its brackets back.
        if host.contains(':') {
            out.push('[');
            quoted_text(host, out);
            out.push(']');
        } else {
            quoted_text(host, out);
        }
    }
    // Writing to a String cannot fail.
    let _ = write!(out, ":{}\"", alt.port);
    if alt.max_age != DEFAULT_MAX_AGE {
        let _ = write!(out, "; ma={}", alt.max_age);
    }
    if alt.persist {
        out.push_str("; persist=1");
    }
}

/// RFC 7838 section 3: token characters other than `%` as they are,
/// everything else as `%XX` with uppercase hex, so each id has one spelling.
fn protocol_id(id: &[u8], out: &mut String) {
    for &byte in id {
        if is_tchar(byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// Quoted-string content: `"` and `\` escaped, control characters dropped
/// because no quoted string can carry them.
fn quoted_text(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\t' => out.push(c),
            _ if c.is_ascii_control() => {}
            _ => out.push(c),
        }
    }
}
