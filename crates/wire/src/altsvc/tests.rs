//! Unit tests of the pieces; behaviour through the public API is tested in
//! `tests/altsvc_*.rs`.

use super::authority;
use super::parse::{delta_seconds, percent_decode};
use super::*;

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode(b"h2", 0), Ok(b"h2".to_vec()));
    assert_eq!(percent_decode(b"w%3Dx%3ay#z", 0), Ok(b"w=x:y#z".to_vec()));
    assert_eq!(percent_decode(b"%25%00%ff", 0), Ok(vec![0x25, 0x00, 0xff]));
    assert_eq!(
        percent_decode(b"ab%", 10),
        Err(AltSvcError::BadPercentEscape { offset: 12 })
    );
    assert_eq!(
        percent_decode(b"a%4", 0),
        Err(AltSvcError::BadPercentEscape { offset: 1 })
    );
    assert_eq!(
        percent_decode(b"%g0", 0),
        Err(AltSvcError::BadPercentEscape { offset: 0 })
    );
    assert_eq!(
        percent_decode(b"%%41", 0),
        Err(AltSvcError::BadPercentEscape { offset: 0 })
    );
    assert_eq!(percent_decode(&[b'a'; 255], 0).map(|id| id.len()), Ok(255));
    assert_eq!(
        percent_decode(&[b'a'; 256], 7),
        Err(AltSvcError::ProtocolIdTooLong { offset: 7 })
    );
    // 255 decoded bytes written as 765 encoded ones are fine.
    assert_eq!(
        percent_decode(&b"%2F".repeat(255), 0).map(|id| id.len()),
        Ok(255)
    );
}

#[test]
fn delta_seconds_values() {
    assert_eq!(delta_seconds(b"0"), Some(0));
    assert_eq!(delta_seconds(b"0003600"), Some(3600));
    assert_eq!(delta_seconds(b"2147483648"), Some(MAX_AGE_CEILING));
    assert_eq!(delta_seconds(b"2147483649"), Some(MAX_AGE_CEILING));
    assert_eq!(delta_seconds(&[b'9'; 100]), Some(MAX_AGE_CEILING));
    for bad in [&b""[..], b"-1", b"+1", b"1.5", b"1e3", b" 1", b"abc"] {
        assert_eq!(delta_seconds(bad), None, "{bad:?}");
    }
}

#[test]
fn authorities() {
    let ok = |raw: &str| authority::parse(raw.as_bytes(), 5);
    assert_eq!(ok(":443"), Ok((None, 443)));
    assert_eq!(ok(":00443"), Ok((None, 443)));
    assert_eq!(ok("a.example:1"), Ok((Some("a.example".into()), 1)));
    assert_eq!(ok("10.0.0.1:65535"), Ok((Some("10.0.0.1".into()), 65535)));
    assert_eq!(ok("[::1]:443"), Ok((Some("::1".into()), 443)));
    assert_eq!(ok("[0:0:0:0:0:0:0:1]:443"), Ok((Some("::1".into()), 443)));
    assert_eq!(
        ok("[2001:DB8::a]:8443"),
        Ok((Some("2001:db8::a".into()), 8443))
    );
    assert_eq!(
        ok("a%41_~!$&'()*+,;=:80"),
        Ok((Some("a%41_~!$&'()*+,;=".into()), 80))
    );

    let missing = Err(AltSvcError::MissingPort { offset: 5 });
    for raw in ["", "a.example", "a.example:", ":", "[::1]", "[::1]:"] {
        assert_eq!(ok(raw), missing, "{raw:?}");
    }
    let port = Err(AltSvcError::InvalidPort { offset: 5 });
    for raw in [
        ":0",
        ":65536",
        ":99999999999999999999",
        ":44 3",
        ":-1",
        ":+1",
        ":0x1",
    ] {
        assert_eq!(ok(raw), port, "{raw:?}");
    }
    let host = Err(AltSvcError::InvalidHost { offset: 5 });
    for raw in [
        "::1:443",
        "[::1:443",
        "[]:443",
        "[::1]x:443",
        "[::1%25eth0]:443",
        "[v1.x]:443",
        "[1.2.3.4]:443",
        "a b:443",
        "a/b:443",
        "a@b:443",
        "a%4:443",
        "a\"b:443",
        "é.example:443",
    ] {
        assert_eq!(ok(raw), host, "{raw:?}");
    }
}

#[test]
fn render_escapes_what_parse_never_returns() {
    let mut alt = Alternative::new(b"h2".to_vec(), Some("a\"b\\c\r\nd\te".into()), 443);
    assert_eq!(alt.render(), "h2=\"a\\\"b\\\\cd\te:443\"");
    alt.host = Some("::1".into());
    alt.protocol_id = b"%".to_vec();
    assert_eq!(alt.render(), "%25=\"[::1]:443\"");
    assert_eq!(AltSvc::Alternatives(Vec::new()).render(), "clear");
}
