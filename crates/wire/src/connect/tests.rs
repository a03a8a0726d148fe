use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

const MAX: usize = DEFAULT_MAX_HEAD_LEN;

/// What curl 7.88 sends for `curl -p -x http://proxy https://api.a.example.com:6443/`.
const CURL: &[u8] = b"CONNECT api.a.example.com:6443 HTTP/1.1\r\nHost: api.a.example.com:6443\r\nUser-Agent: curl/7.88.1\r\nProxy-Connection: Keep-Alive\r\n\r\n";

fn malformed(buf: &[u8]) -> MalformedReason {
    match parse(buf, MAX) {
        Err(ConnectError::Malformed(r)) => r,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

#[test]
fn parses_what_curl_sends() {
    let (req, consumed) = parse(CURL, MAX).unwrap();
    assert_eq!(consumed, CURL.len());
    assert_eq!(
        req.authority,
        Authority {
            host: Host::Name("api.a.example.com".into()),
            port: 6443
        }
    );
    assert_eq!(req.version, HttpVersion::Http11);
    assert_eq!(req.header_count, 3);
}

#[test]
fn every_prefix_is_incomplete_and_pipelined_bytes_are_left() {
    for end in 0..CURL.len() {
        assert_eq!(
            parse(&CURL[..end], MAX),
            Err(ConnectError::Incomplete),
            "{end}"
        );
    }
    let mut buf = CURL.to_vec();
    buf.extend_from_slice(b"\x16\x03\x01rest");
    let (_, consumed) = parse(&buf, MAX).unwrap();
    assert_eq!(&buf[consumed..], b"\x16\x03\x01rest");
}

#[test]
fn authorities_normalize() {
    let req = |t: &str| {
        parse(format!("CONNECT {t} HTTP/1.0\r\n\r\n").as_bytes(), MAX).map(|(r, _)| r.authority)
    };
    assert_eq!(
        req("API.A.Example.COM.:443").unwrap(),
        Authority::parse("api.a.example.com:443").unwrap()
    );
    assert_eq!(
        req("10.1.2.3:6443").unwrap().host,
        Host::Ipv4(Ipv4Addr::new(10, 1, 2, 3))
    );
    assert_eq!(
        req("[FD00::1]:443").unwrap().host,
        Host::Ipv6("fd00::1".parse::<Ipv6Addr>().unwrap())
    );
    assert_eq!(req("[fd00::1]:443").unwrap().to_string(), "[fd00::1]:443");
    assert_eq!(req("a.b:00443").unwrap().port, 443);
    for (bad, why) in [
        ("a.b", MalformedReason::MissingPort),
        ("a.b:", MalformedReason::MissingPort),
        ("a.b:0", MalformedReason::BadPort),
        ("a.b:65536", MalformedReason::BadPort),
        ("a.b:443443", MalformedReason::BadPort),
        ("a.b:4x", MalformedReason::BadPort),
        ("user@a.b:443", MalformedReason::BadHost),
        ("a%2eb:443", MalformedReason::BadHost),
        (":443", MalformedReason::BadHost),
        ("a..b:443", MalformedReason::BadHost),
        ("[fd00::1]443", MalformedReason::BadHost),
        ("[fd00::1]", MalformedReason::MissingPort),
        ("[nope]:443", MalformedReason::BadHost),
        ("fd00::1:443", MalformedReason::BadHost),
        ("/path", MalformedReason::MissingPort),
    ] {
        assert_eq!(req(bad), Err(ConnectError::Malformed(why)), "{bad}");
    }
    let long = format!("{}.example:443", "a".repeat(64));
    assert_eq!(
        req(&long),
        Err(ConnectError::Malformed(MalformedReason::BadHost))
    );
}

#[test]
fn other_methods_are_refused_as_soon_as_the_method_ends() {
    assert_eq!(parse(b"GET ", MAX), Err(ConnectError::NotConnect));
    assert_eq!(
        parse(b"connect a:1 HTTP/1.1\r\n\r\n", MAX),
        Err(ConnectError::NotConnect)
    );
    assert_eq!(parse(b"CONNECTX a:1", MAX), Err(ConnectError::NotConnect));
    assert_eq!(parse(b"CONNECT", MAX), Err(ConnectError::Incomplete));
}

#[test]
fn syntax_errors_are_named() {
    assert_eq!(malformed(b"\x16\x03\x01"), MalformedReason::BadMethod);
    assert_eq!(malformed(b" CONNECT"), MalformedReason::BadMethod);
    assert_eq!(malformed(b"CONNECT\ta:1"), MalformedReason::BadMethod);
    assert_eq!(malformed(b"CONNECT  a:1"), MalformedReason::BadTarget);
    assert_eq!(malformed(b"CONNECT a:1\r\n"), MalformedReason::BadTarget);
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/2.0\r\n"),
        MalformedReason::BadVersion
    );
    assert_eq!(
        malformed(b"CONNECT a:1 http/1.1\r\n"),
        MalformedReason::BadVersion
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\n"),
        MalformedReason::BadLineEnd
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1 \r\n"),
        MalformedReason::BadLineEnd
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nHost : a\r\n"),
        MalformedReason::BadHeaderName
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nno colon\r\n"),
        MalformedReason::BadHeaderName
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\n: v\r\n"),
        MalformedReason::BadHeaderName
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nA: b\x00\r\n"),
        MalformedReason::BadHeaderValue
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nA: b\nC: d\r\n"),
        MalformedReason::BadLineEnd
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nA: b\r\n c\r\n"),
        MalformedReason::ObsoleteFold
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\n\rX"),
        MalformedReason::BadLineEnd
    );
    // Tabs and obs-text are allowed in values.
    assert!(parse(b"CONNECT a:1 HTTP/1.1\r\nA:\tb \xff\r\n\r\n", MAX).is_ok());
}

#[test]
fn the_limit_applies_before_the_head_ends() {
    let mut big = b"CONNECT a:1 HTTP/1.1\r\nX: ".to_vec();
    big.resize(100, b'x');
    assert_eq!(parse(&big, 100), Err(ConnectError::TooLarge { limit: 100 }));
    assert_eq!(parse(&big[..99], 100), Err(ConnectError::Incomplete));
    // A head ending exactly at the limit is fine.
    let exact = b"CONNECT a:1 HTTP/1.1\r\n\r\n";
    assert!(parse(exact, exact.len()).is_ok());
    assert_eq!(
        parse(exact, exact.len() - 1),
        Err(ConnectError::TooLarge {
            limit: exact.len() - 1
        })
    );
    // An error inside the limit is reported as itself.
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n", 4),
        Err(ConnectError::NotConnect)
    );
}

#[test]
fn answers_render() {
    assert_eq!(
        Status::ConnectionEstablished.render(),
        b"HTTP/1.1 200 Connection Established\r\n\r\n"
    );
    assert_eq!(
        Status::Forbidden.render(),
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let not_allowed = String::from_utf8(Status::MethodNotAllowed.render()).unwrap();
    assert!(
        not_allowed.contains("\r\nAllow: CONNECT\r\n"),
        "{not_allowed}"
    );
    assert_eq!(
        ConnectError::NotConnect.status(),
        Some(Status::MethodNotAllowed)
    );
    assert_eq!(
        ConnectError::TooLarge { limit: 1 }
            .status()
            .map(Status::code),
        Some(431)
    );
    assert_eq!(ConnectError::Incomplete.status(), None);
}

/// The fuzz target's properties (`fuzz/fuzz_targets/connect.rs`), checked
/// here on every one-byte substitution, deletion and insertion of the
/// captured vectors, so they hold without a fuzzing run.
fn check_properties(data: &[u8], limit: usize) {
    let whole = parse(data, limit);
    match &whole {
        Err(ConnectError::Incomplete) => assert!(data.len() < limit),
        Err(ConnectError::TooLarge { limit: reported }) => {
            assert_eq!(*reported, limit);
            assert!(data.len() >= limit);
        }
        Err(e) => assert!(e.status().is_some()),
        Ok((request, consumed)) => {
            assert!(*consumed <= data.len() && *consumed <= limit);
            let text = request.authority.to_string();
            assert_eq!(Authority::parse(&text).as_ref(), Ok(&request.authority));
            assert_eq!(
                parse(&data[..*consumed], limit),
                Ok((request.clone(), *consumed))
            );
        }
    }
    for end in [data.len() / 2, data.len().saturating_sub(1), 8] {
        if end < data.len() {
            let part = parse(&data[..end], limit);
            assert!(
                part == Err(ConnectError::Incomplete) || part == whole,
                "{:?}: {part:?} vs {whole:?}",
                String::from_utf8_lossy(data)
            );
        }
    }
}

#[test]
fn one_byte_mutations_of_the_vectors_keep_the_answers_consistent() {
    const INTERESTING: [u8; 14] = [
        0, b'\t', b'\r', b'\n', b' ', b':', b'[', b']', b'.', b'0', b'A', b'%', 0x7f, 0xff,
    ];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/connect");
    let mut seeds = vec![CURL.to_vec()];
    for entry in std::fs::read_dir(dir).unwrap() {
        seeds.push(std::fs::read(entry.unwrap().path()).unwrap());
    }
    for seed in &seeds {
        for at in 0..seed.len() {
            let mut deleted = seed.clone();
            deleted.remove(at);
            for limit in [64, MAX] {
                check_properties(&deleted, limit);
            }
            for byte in INTERESTING {
                let mut replaced = seed.clone();
                replaced[at] = byte;
                let mut inserted = seed.clone();
                inserted.insert(at, byte);
                for limit in [64, MAX] {
                    check_properties(&replaced, limit);
                    check_properties(&inserted, limit);
                }
            }
        }
    }
}
