//! Alt-Svc values from RFC 7838 and the field, good and bad, through the
//! public API.

use apiway_wire::altsvc::{
    parse, parse_lines, AltSvc, AltSvcError, Alternative, DEFAULT_MAX_AGE, MAX_AGE_CEILING,
    MAX_ALTERNATIVES, MAX_VALUE_LEN,
};

fn alternatives(value: &str) -> Vec<Alternative> {
    match parse(value) {
        Ok(AltSvc::Alternatives(list)) => list,
        other => panic!("{value:?} parsed to {other:?}"),
    }
}

fn one(value: &str) -> Alternative {
    let mut list = alternatives(value);
    assert_eq!(list.len(), 1, "{value:?}");
    list.remove(0)
}

fn alt(id: &[u8], host: Option<&str>, port: u16) -> Alternative {
    Alternative::new(id.to_vec(), host.map(String::from), port)
}

#[test]
fn rfc7838_examples() {
    // Section 3: same host, another port.
    assert_eq!(one(r#"h2=":8000""#), alt(b"h2", None, 8000));
    // Section 3: another host.
    assert_eq!(
        one(r#"h2="new.example.org:80""#),
        alt(b"h2", Some("new.example.org"), 80)
    );
    // Section 3: the ALPN id "w=x:y#z" percent-encoded (`#` is a tchar).
    let weird = one(r#"w%3Dx%3Ay#z="[::1]:443""#);
    assert_eq!(weird.protocol_id, b"w=x:y#z");
    assert_eq!(weird.host.as_deref(), Some("::1"));
    assert_eq!(weird.render(), r#"w%3Dx%3Ay#z="[::1]:443""#);
    // Section 3.1: max-age and persist.
    let list = alternatives(r#"h3-29=":443"; ma=3600, h2=":443""#);
    assert_eq!(
        list,
        vec![
            Alternative {
                max_age: 3600,
                ..alt(b"h3-29", None, 443)
            },
            alt(b"h2", None, 443),
        ]
    );
    assert!(!list[0].is_h2() && list[1].is_h2());
    let persistent = one(r#"h2=":443"; ma=2592000; persist=1"#);
    assert_eq!((persistent.max_age, persistent.persist), (2_592_000, true));
    // Section 3: clear.
    assert_eq!(parse("clear"), Ok(AltSvc::Clear));
    assert_eq!(parse(" \tclear\t "), Ok(AltSvc::Clear));
    // A protocol id `clear` is an ordinary alternative.
    assert_eq!(one(r#"clear=":443""#).protocol_id, b"clear");
}

#[test]
fn values_seen_in_the_field() {
    let google = alternatives(r#"h3=":443"; ma=2592000,h3-29=":443"; ma=2592000"#);
    assert_eq!(google.len(), 2);
    assert!(google
        .iter()
        .all(|a| a.max_age == 2_592_000 && a.port == 443));
    let cloudflare = one(r#"h3=":443"; ma=86400"#);
    assert_eq!(cloudflare.max_age, DEFAULT_MAX_AGE);
    assert_eq!(
        one(r#"h2="10.0.0.7:6443""#),
        alt(b"h2", Some("10.0.0.7"), 6443)
    );
    assert_eq!(
        one(r#"http%2F1.1="Kubernetes.Default.svc:443""#),
        alt(b"http/1.1", Some("Kubernetes.Default.svc"), 443)
    );
}

#[test]
fn whitespace_empty_elements_and_empty_parameters() {
    let expected = vec![
        Alternative {
            max_age: 5,
            ..alt(b"h2", None, 443)
        },
        alt(b"h3", None, 444),
    ];
    for value in [
        r#"h2=":443"; ma=5, h3=":444""#,
        r#"h2=":443";ma=5,h3=":444""#,
        "\t h2=\":443\" \t; \tma=5 \t,\t h3=\":444\" \t",
        r#", ,h2=":443"; ma=5,,, ,h3=":444","#,
        r#"h2=":443";; ma=5 ;, h3=":444";"#,
        r#"h2=":443"; ma="5", h3=":444"; ma=x"#,
    ] {
        assert_eq!(
            parse(value),
            Ok(AltSvc::Alternatives(expected.clone())),
            "{value:?}"
        );
    }
    assert_eq!(parse("clear ,, "), Ok(AltSvc::Clear));
}

#[test]
fn quoted_strings() {
    // quoted-pair: any visible character may be escaped, and means itself.
    assert_eq!(
        one(r#"h2="ex\ample.com\:44\3""#),
        alt(b"h2", Some("example.com"), 443)
    );
    // Commas and semicolons inside quotes do not split the value.
    let list = alternatives(r#"h2=":443"; note="a, b; c=\"d\"", h3=":1""#);
    assert_eq!(list, vec![alt(b"h2", None, 443), alt(b"h3", None, 1)]);
    // obs-text (non-ASCII) is allowed in quoted strings, if not in hosts.
    assert_eq!(one("h2=\":443\"; x=\"caf\u{e9}\""), alt(b"h2", None, 443));
    assert_eq!(
        parse("h2=\"caf\u{e9}:443\""),
        Err(AltSvcError::InvalidHost { offset: 3 })
    );
    // Sub-delims are legal in a reg-name and survive a round trip.
    let odd = one(r#"h2="a,b;c=d:443""#);
    assert_eq!(odd.host.as_deref(), Some("a,b;c=d"));
    assert_eq!(parse(&odd.render()), Ok(AltSvc::Alternatives(vec![odd])));
}

#[test]
fn parameters() {
    let check = |value: &str, max_age: u32, persist: bool| {
        let alt = one(value);
        assert_eq!((alt.max_age, alt.persist), (max_age, persist), "{value:?}");
    };
    check(r#"h2=":443""#, DEFAULT_MAX_AGE, false);
    check(r#"h2=":443"; ma=0"#, 0, false);
    check(r#"h2=":443"; MA=60; Persist=1"#, 60, true);
    check(r#"h2=":443"; ma=60; ma=120"#, 120, false);
    // An invalid ma is ignored, as if absent: RFC 7838 ignores unknown
    // parameters and bad persist values, and gives no rule for bad ma.
    check(r#"h2=":443"; ma=60; ma=soon"#, 60, false);
    for bad in ["-1", "+5", "1.5", "\"\"", "\" 5\"", "1e3", "0x10"] {
        check(&format!(r#"h2=":443"; ma={bad}"#), DEFAULT_MAX_AGE, false);
    }
    check(r#"h2=":443"; ma=2147483648"#, MAX_AGE_CEILING, false);
    check(
        r#"h2=":443"; ma=99999999999999999999999"#,
        MAX_AGE_CEILING,
        false,
    );
    check(r#"h2=":443"; persist="1""#, DEFAULT_MAX_AGE, true);
    check(r#"h2=":443"; persist=1; persist=0"#, DEFAULT_MAX_AGE, true);
    for other in ["0", "01", "true", "yes", "\"\""] {
        check(
            &format!(r#"h2=":443"; persist={other}"#),
            DEFAULT_MAX_AGE,
            false,
        );
    }
    check(r#"h2=":443"; foo=bar; x="y"; ma=9"#, 9, false);
}

#[test]
fn protocol_ids_are_octets() {
    // Decoded, then compared as octets: lowercase hex and needless escapes
    // are accepted, case is not folded.
    assert!(one(r#"h%32=":443""#).is_h2());
    assert_eq!(one(r#"a%2fb=":443""#).protocol_id, b"a/b");
    assert!(!one(r#"H2=":443""#).is_h2());
    assert_eq!(one(r#"%00%FF%25=":443""#).protocol_id, [0, 0xff, b'%']);
    // Rendering writes the canonical spelling.
    let value = parse(r#"h%32=":443", a%2fb=":1", %25=":2""#).unwrap();
    assert_eq!(value.render(), r#"h2=":443", a%2Fb=":1", %25=":2""#);
}

fn syntax(offset: usize, expected: &'static str) -> AltSvcError {
    AltSvcError::Syntax { offset, expected }
}

#[test]
fn bad_values() {
    use AltSvcError::*;
    let cases: &[(&str, AltSvcError)] = &[
        ("", Empty),
        (" \t ", Empty),
        (",, ,", Empty),
        (r#"h2=":443"#, UnterminatedQuote { offset: 3 }),
        (r#"h2=":443\"#, UnterminatedQuote { offset: 3 }),
        (r#"h2=":443", h3="x"#, UnterminatedQuote { offset: 14 }),
        (r#"h2="example.com""#, MissingPort { offset: 3 }),
        (r#"h2="example.com:""#, MissingPort { offset: 3 }),
        (r#"h2="""#, MissingPort { offset: 3 }),
        (r#"h2=":65536""#, InvalidPort { offset: 3 }),
        (r#"h2=":0""#, InvalidPort { offset: 3 }),
        (r#"h2=":http""#, InvalidPort { offset: 3 }),
        (r#"h2="a b:443""#, InvalidHost { offset: 3 }),
        (r#"h2="::1:443""#, InvalidHost { offset: 3 }),
        (r#"h2="[fe80::1%25eth0]:443""#, InvalidHost { offset: 3 }),
        (r#"h%3=":443""#, BadPercentEscape { offset: 1 }),
        (r#"h2%=":443""#, BadPercentEscape { offset: 2 }),
        (r#"h2%zz=":443""#, BadPercentEscape { offset: 2 }),
        (r#"clear, h2=":443""#, ClearNotAlone),
        (r#"h2=":443", clear"#, ClearNotAlone),
        ("clear, clear", ClearNotAlone),
        (
            r#"h2=":443"; ma=1 clear"#,
            syntax(16, "`,` between list elements"),
        ),
        ("clear; ma=1", syntax(5, "`,` between list elements")),
        ("CLEAR", syntax(5, "`=` after the protocol-id")),
        ("h2", syntax(2, "`=` after the protocol-id")),
        ("h2 =\":443\"", syntax(2, "`=` after the protocol-id")),
        ("h2= \":443\"", syntax(3, "a quoted alt-authority")),
        ("h2=:443", syntax(3, "a quoted alt-authority")),
        ("=\":443\"", syntax(0, "a protocol-id token or `clear`")),
        (
            "\"h2\"=\":443\"",
            syntax(0, "a protocol-id token or `clear`"),
        ),
        (
            r#"h2=":443" h3=":443""#,
            syntax(10, "`,` between list elements"),
        ),
        (r#"h2=":443"; ma"#, syntax(13, "`=` after a parameter name")),
        (r#"h2=":443"; ma="#, syntax(14, "a parameter value")),
        (r#"h2=":443"; ma= 5"#, syntax(14, "a parameter value")),
        ("h2=\":4\u{1}43\"", syntax(6, "quoted-string text or `\"`")),
        (
            "h2=\":443\\\u{7f}\"",
            syntax(9, "a visible character after `\\`"),
        ),
        ("h2=\":443\"\r\n", syntax(9, "`,` between list elements")),
        ("GET / HTTP/1.1", syntax(3, "`=` after the protocol-id")),
        (
            "\u{feff}h2=\":443\"",
            syntax(0, "a protocol-id token or `clear`"),
        ),
    ];
    for (value, error) in cases {
        assert_eq!(parse(value).as_ref(), Err(error), "{value:?}");
        // Every error reads as one line that names the header.
        let message = error.to_string();
        assert!(
            message.contains("Alt-Svc") && !message.contains('\n'),
            "{message}"
        );
    }
    let long_id = format!(r#"{}=":443""#, "a".repeat(256));
    assert_eq!(parse(&long_id), Err(ProtocolIdTooLong { offset: 0 }));
}

#[test]
fn limits() {
    let at_limit = format!(r#"h2=":443"; x="{}""#, "y".repeat(MAX_VALUE_LEN - 15));
    assert_eq!(at_limit.len(), MAX_VALUE_LEN);
    assert!(parse(&at_limit).is_ok());
    let over = format!("{at_limit} ");
    assert_eq!(
        parse(&over),
        Err(AltSvcError::TooLong {
            limit: MAX_VALUE_LEN
        })
    );

    let many = |n: usize| vec![r#"h2=":443""#; n].join(", ");
    assert!(parse(&many(MAX_ALTERNATIVES)).is_ok());
    assert_eq!(
        parse(&many(MAX_ALTERNATIVES + 1)),
        Err(AltSvcError::TooManyAlternatives {
            limit: MAX_ALTERNATIVES
        })
    );
    // Spread over lines, the limits hold for the lines together.
    let lines = vec![r#"h2=":443""#; MAX_ALTERNATIVES + 1];
    assert_eq!(
        parse_lines(lines.iter().copied()),
        Err(AltSvcError::TooManyAlternatives {
            limit: MAX_ALTERNATIVES
        })
    );
    // An endless supply of empty lines still ends, at the length limit.
    assert_eq!(
        parse_lines(std::iter::repeat("")),
        Err(AltSvcError::TooLong {
            limit: MAX_VALUE_LEN
        })
    );
    assert_eq!(
        parse_lines(std::iter::once(r#"h2=":1""#).chain(std::iter::repeat(" "))),
        Err(AltSvcError::TooLong {
            limit: MAX_VALUE_LEN
        })
    );
}

#[test]
fn several_field_lines() {
    let lines = [
        r#"h3=":443"; ma=60"#,
        "",
        r#"h2="a.example:6443", h2="b.example:6443""#,
        " , ",
    ];
    let value = parse_lines(lines).unwrap();
    let AltSvc::Alternatives(list) = &value else {
        panic!("{value:?}")
    };
    assert_eq!(list.len(), 3);
    assert_eq!(
        (list[0].protocol_id.as_slice(), list[0].max_age),
        (&b"h3"[..], 60)
    );
    assert_eq!(list[2].host.as_deref(), Some("b.example"));
    // The same as one value joined with ", ".
    assert_eq!(parse(&lines.join(", ")), Ok(value.clone()));
    assert_eq!(parse_lines([value.render().as_str()]), Ok(value));

    assert_eq!(parse_lines(["clear", ""]), Ok(AltSvc::Clear));
    assert_eq!(parse_lines(["", " ", ","]), Err(AltSvcError::Empty));
    assert_eq!(parse_lines([]), Err(AltSvcError::Empty));
    assert_eq!(
        parse_lines(["clear", r#"h2=":443""#]),
        Err(AltSvcError::ClearNotAlone)
    );
    assert_eq!(
        parse_lines([r#"h2=":443""#, "clear"]),
        Err(AltSvcError::ClearNotAlone)
    );
    // Offsets count from the start of the joined lines.
    assert_eq!(
        parse_lines([r#"h2=":443""#, r#"h3=":0""#]),
        Err(AltSvcError::InvalidPort { offset: 14 })
    );
    // A quoted string does not continue on the next line.
    assert_eq!(
        parse_lines([r#"h2="a"#, r#"b:443""#]),
        Err(AltSvcError::UnterminatedQuote { offset: 3 })
    );
}

#[test]
fn display_from_str_and_helpers() {
    let value: AltSvc = r#"h2="[2001:db8::1]:6443"; ma=30; persist=1"#.parse().unwrap();
    assert_eq!(
        value.to_string(),
        r#"h2="[2001:db8::1]:6443"; ma=30; persist=1"#
    );
    let AltSvc::Alternatives(list) = value else {
        panic!()
    };
    let first = &list[0];
    assert_eq!(first.to_string(), first.render());
    assert_eq!(first.host_or("origin.example"), "2001:db8::1");
    assert_eq!(first.max_age_duration(), std::time::Duration::from_secs(30));
    assert_eq!(
        one(r#"h2=":1""#).host_or("origin.example"),
        "origin.example"
    );
    assert_eq!(AltSvc::Clear.to_string(), "clear");
}
