use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

fn name(n: &str, port: u16) -> Authority {
    Authority {
        host: Host::Name(n.into()),
        port,
    }
}

#[test]
fn parses_names_and_addresses() {
    assert_eq!(
        Authority::parse("api.example.com:443"),
        Ok(name("api.example.com", 443))
    );
    assert_eq!(
        Authority::parse("10.1.2.3:6443").unwrap().host,
        Host::Ipv4(Ipv4Addr::new(10, 1, 2, 3))
    );
    assert_eq!(
        Authority::parse("[fd00::1]:443").unwrap().host,
        Host::Ipv6("fd00::1".parse::<Ipv6Addr>().unwrap())
    );
    assert_eq!(
        Authority::parse("[::ffff:10.0.0.1]:443")
            .unwrap()
            .to_string(),
        "[::ffff:10.0.0.1]:443"
    );
    assert_eq!(
        Authority::parse("under_score-x:1"),
        Ok(name("under_score-x", 1))
    );
    assert_eq!(Authority::parse("a.b:00443").unwrap().port, 443);
    assert_eq!(Authority::parse("a.b:65535").unwrap().port, 65535);
    assert_eq!("x.y:1".parse::<Authority>(), Ok(name("x.y", 1)));
}

#[test]
fn hosts_are_normalized() {
    assert_eq!(
        Authority::parse("API.Example.COM:443"),
        Ok(name("api.example.com", 443))
    );
    // One trailing dot is the fully-qualified form of the same name.
    assert_eq!(
        Authority::parse("api.example.com.:443"),
        Ok(name("api.example.com", 443))
    );
    assert_eq!(
        Authority::parse("10.0.0.1.:443").unwrap().host,
        Host::Ipv4(Ipv4Addr::new(10, 0, 0, 1))
    );
    assert_eq!(
        Authority::parse("[FD00:0:0::1]:443").unwrap().to_string(),
        "[fd00::1]:443"
    );
}

#[test]
fn refuses_what_is_not_an_authority() {
    use AuthorityError::*;
    let long_label = format!("{}.example:443", "a".repeat(64));
    let long_name = format!("{}:443", vec!["a".repeat(63); 4].join("."));
    assert!(long_name.len() - 4 > MAX_NAME_LEN && long_name.len() <= MAX_LEN);
    let way_too_long = format!("{}:443", "a".repeat(10_000));
    for (bad, why) in [
        ("", MissingPort),
        ("a.b", MissingPort),
        ("a.b:", MissingPort),
        ("/path", MissingPort),
        ("[fd00::1]", MissingPort),
        (":443", EmptyHost),
        ("a.b:0", PortZero),
        ("a.b:00000", PortZero),
        ("a.b:65536", BadPort),
        ("a.b:443443", BadPort),
        ("a.b:4x", BadPort),
        ("a.b:+443", BadPort),
        ("a.b:-1", BadPort),
        ("user@a.b:443", BadHost),
        ("a%2eb:443", BadHost),
        ("a b:443", BadHost),
        ("a..b:443", BadHost),
        (".:443", BadHost),
        ("a.b..:443", BadHost),
        ("1.2.3:443", BadHost),
        ("010.0.0.1:443", BadHost),
        ("256.1.1.1:443", BadHost),
        ("[fd00::1]443", BadHost),
        ("[nope]:443", BadHost),
        ("[]:443", BadHost),
        ("[10.0.0.1]:443", BadHost),
        ("[fd00::1:443", BadHost),
        ("fd00::1:443", BadHost),
        ("[fe80::1%eth0]:443", ZoneId),
        ("[fe80::1%25eth0]:443", ZoneId),
        ("bücher.example:443", BadHost),
        ("\u{0430}pi.example:443", BadHost),
        (long_label.as_str(), BadHost),
        (long_name.as_str(), BadHost),
        (way_too_long.as_str(), TooLong { limit: MAX_LEN }),
    ] {
        assert_eq!(Authority::parse(bad), Err(why), "{bad:?}");
    }
    assert_eq!(
        Authority::parse_bytes(b"a\xff.b:443"),
        Err(AuthorityError::BadHost)
    );
}

#[test]
fn limits_are_exact() {
    let label = "a".repeat(MAX_LABEL_LEN);
    assert!(Authority::parse(&format!("{label}:1")).is_ok());
    // 4 labels of 61 and 3 dots: 247; one more label of 5: 253.
    let longest = format!("{}.abcde", vec!["b".repeat(61); 4].join("."));
    assert_eq!(longest.len(), MAX_NAME_LEN);
    let text = format!("{longest}.:65535");
    assert_eq!(text.len(), MAX_LEN);
    assert_eq!(Authority::parse(&text), Ok(name(&longest, 65535)));
    assert_eq!(
        Authority::parse(&format!("{longest}a:1")),
        Err(AuthorityError::BadHost)
    );
}

#[test]
fn a_default_port_fills_in_only_a_missing_one() {
    let parse = |t: &str| Authority::parse_with_default_port(t, 443);
    assert_eq!(parse("api.example.com"), Ok(name("api.example.com", 443)));
    assert_eq!(
        parse("api.example.com:6443"),
        Ok(name("api.example.com", 6443))
    );
    assert_eq!(parse("[fd00::1]").unwrap().to_string(), "[fd00::1]:443");
    assert_eq!(parse("fd00::1").unwrap().to_string(), "[fd00::1]:443");
    assert_eq!(parse("10.0.0.1").unwrap().to_string(), "10.0.0.1:443");
    assert_eq!(parse("api.example.com:"), Err(AuthorityError::MissingPort));
    assert_eq!(parse("[fd00::1]x"), Err(AuthorityError::BadHost));
    assert_eq!(parse(""), Err(AuthorityError::EmptyHost));
    assert_eq!(
        Authority::parse_with_default_port("a.b", 0),
        Err(AuthorityError::PortZero)
    );
}

#[test]
fn display_round_trips() {
    for text in [
        "api.example.com:443",
        "10.0.0.1:1",
        "[fd00::1]:65535",
        "[::]:80",
        "[::ffff:1.2.3.4]:443",
        "kubernetes.default.svc:443",
    ] {
        let parsed = Authority::parse(text).unwrap();
        assert_eq!(parsed.to_string(), text);
        assert_eq!(Authority::parse(&parsed.to_string()), Ok(parsed));
    }
}

#[test]
fn host_converts_to_and_from_ip() {
    let ip: IpAddr = "fd00::1".parse().unwrap();
    assert_eq!(Host::from(ip).ip(), Some(ip));
    assert_eq!(Host::Name("a".into()).ip(), None);
}
