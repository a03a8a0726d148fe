//! ClientHellos captured from real clients (see `testdata/README.md`), parsed
//! whole, byte by byte, re-cut into small records, and with broken lengths.

use apiway_wire::sni::{
    parse_client_hello, refragment, ClientHello, MalformedReason, SniError, DEFAULT_MAX_HELLO_LEN,
};

struct Vector {
    file: &'static str,
    server_name: Option<&'static str>,
    alpn: &'static [&'static str],
    records: usize,
}

const H2_HTTP11: &[&str] = &["h2", "http/1.1"];

const VECTORS: &[Vector] = &[
    Vector {
        file: "openssl-sni.bin",
        server_name: Some("api.a.example.com"),
        alpn: &[],
        records: 1,
    },
    Vector {
        file: "openssl-nosni.bin",
        server_name: None,
        alpn: &[],
        records: 1,
    },
    Vector {
        file: "openssl-tls12.bin",
        server_name: Some("legacy.b.example.com"),
        alpn: &[],
        records: 1,
    },
    Vector {
        file: "curl.bin",
        server_name: Some("api.c.example.com"),
        alpn: H2_HTTP11,
        records: 1,
    },
    Vector {
        file: "openssl-frag512-3rec.bin",
        server_name: Some("frag.d.example.com"),
        alpn: &[
            "h2",
            "http/1.1",
            "apiway-proto-00-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-01-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-02-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-03-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-04-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-05-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-06-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-07-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-08-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-09-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-10-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-11-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-12-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-13-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-14-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-15-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-16-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-17-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-18-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "apiway-proto-19-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ],
        records: 3,
    },
    Vector {
        file: "python-ssl-mixedcase.bin",
        server_name: Some("Kubernetes.Default.SVC"),
        alpn: H2_HTTP11,
        records: 1,
    },
    Vector {
        file: "rustls.bin",
        server_name: Some("api.e.example.com"),
        alpn: H2_HTTP11,
        records: 1,
    },
];

fn load(file: &str) -> Vec<u8> {
    let path = format!("{}/testdata/sni/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn parse(buf: &[u8]) -> Result<ClientHello, SniError> {
    parse_client_hello(buf, DEFAULT_MAX_HELLO_LEN)
}

fn check(v: &Vector, got: &ClientHello) {
    assert_eq!(got.server_name.as_deref(), v.server_name, "{}", v.file);
    let alpn: Vec<&[u8]> = got.alpn.iter().map(Vec::as_slice).collect();
    let want: Vec<&[u8]> = v.alpn.iter().map(|p| p.as_bytes()).collect();
    assert_eq!(alpn, want, "{}", v.file);
}

/// Feeds `buf` one byte at a time, as a slow TCP peer would, and returns the
/// first answer that is not `Incomplete`.
fn fed_byte_by_byte(buf: &[u8]) -> Result<ClientHello, SniError> {
    for end in 0..buf.len() {
        match parse(&buf[..end]) {
            Err(SniError::Incomplete) => continue,
            decided => return decided,
        }
    }
    parse(buf)
}

/// The handshake message of a vector, without record headers.
fn message(buf: &[u8]) -> Vec<u8> {
    let one = refragment(buf, 16384).expect("vector re-cuts");
    one[5..].to_vec()
}

#[test]
fn vectors_parse_whole() {
    for v in VECTORS {
        let buf = load(v.file);
        let got = parse(&buf).unwrap_or_else(|e| panic!("{}: {e}", v.file));
        check(v, &got);
        assert_eq!(got.records, v.records, "{}", v.file);
        assert_eq!(got.consumed, buf.len(), "{}", v.file);
        assert_eq!(got.legacy_version, 0x0303, "{}", v.file);
    }
}

#[test]
fn vectors_truncated_anywhere_are_incomplete() {
    for v in VECTORS {
        let buf = load(v.file);
        for end in 0..buf.len() {
            assert_eq!(
                parse(&buf[..end]),
                Err(SniError::Incomplete),
                "{} cut at {end}",
                v.file
            );
        }
        assert_eq!(fed_byte_by_byte(&buf), parse(&buf), "{}", v.file);
    }
}

#[test]
fn vectors_parse_after_refragmenting() {
    for v in VECTORS {
        let buf = load(v.file);
        let message_len = message(&buf).len();
        for max in [100, 7, 1] {
            let cut = refragment(&buf, max).unwrap();
            let got = parse(&cut).unwrap_or_else(|e| panic!("{} cut to {max}: {e}", v.file));
            check(v, &got);
            assert_eq!(
                got.records,
                message_len.div_ceil(max),
                "{} cut to {max}",
                v.file
            );
            assert_eq!(got.consumed, cut.len());
            assert_eq!(fed_byte_by_byte(&cut), Ok(got), "{} cut to {max}", v.file);
        }
    }
}

#[test]
fn early_data_after_the_hello_is_left_alone() {
    for v in VECTORS {
        let mut buf = load(v.file);
        let end = buf.len();
        buf.extend_from_slice(&[23, 3, 3, 0, 3, 9, 9, 9]);
        let got = parse(&buf).unwrap();
        check(v, &got);
        assert_eq!(got.consumed, end);
        assert_eq!(fed_byte_by_byte(&buf), Ok(got));
    }
}

#[test]
fn plain_http_and_garbage_are_not_tls() {
    let http = load("not-tls-http-get.bin");
    assert!(http.starts_with(b"GET /healthz HTTP/1.1\r\n"));
    assert_eq!(parse(&http), Err(SniError::NotTls));
    assert_eq!(parse(&http[..1]), Err(SniError::NotTls));
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..1000 {
        let garbage: Vec<u8> = (0..64)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect();
        let decided = parse(&garbage);
        if garbage[0] != 0x16 || garbage[1] != 0x03 {
            assert_eq!(decided, Err(SniError::NotTls), "{garbage:02x?}");
        } else {
            assert!(decided.is_err(), "{garbage:02x?}");
        }
    }
}

#[test]
fn vectors_larger_than_the_limit_are_refused() {
    for v in VECTORS {
        let buf = load(v.file);
        assert!(parse_client_hello(&buf, buf.len()).is_ok());
        let limit = buf.len() - 1;
        assert_eq!(
            parse_client_hello(&buf, limit),
            Err(SniError::TooLarge { limit }),
            "{}",
            v.file
        );
        // The declared handshake length alone decides it, 9 bytes in.
        let limit = message(&buf).len() - 1;
        assert_eq!(
            parse_client_hello(&buf[..9], limit),
            Err(SniError::TooLarge { limit }),
            "{}",
            v.file
        );
    }
}

/// Offset, inside a handshake message, of the 2-byte extension block length.
fn extensions_offset(msg: &[u8]) -> usize {
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(msg[at]);
    at += 2 + usize::from(u16::from_be_bytes([msg[at], msg[at + 1]]));
    at + 1 + usize::from(msg[at])
}

fn be16(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap().to_be_bytes()
}

/// `msg` with an extra padding extension (type 21) of `len` zero bytes and
/// its lengths fixed up.
fn with_padding(msg: &[u8], len: usize) -> Vec<u8> {
    let ext_at = extensions_offset(msg);
    let mut out = msg.to_vec();
    out.extend_from_slice(&21u16.to_be_bytes());
    out.extend_from_slice(&be16(len));
    out.resize(out.len() + len, 0);
    let block = out.len() - ext_at - 2;
    out[ext_at..ext_at + 2].copy_from_slice(&be16(block));
    let body = u32::try_from(out.len() - 4).unwrap();
    out[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    out
}

fn in_records(msg: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in msg.chunks(max) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&be16(chunk.len()));
        out.extend_from_slice(chunk);
    }
    out
}

#[test]
fn oversized_hellos_are_refused_early() {
    let msg = message(&load("rustls.bin"));
    let limit = DEFAULT_MAX_HELLO_LEN;
    // Padded past 16 KiB: needs two records, refused from the handshake header.
    let big = in_records(&with_padding(&msg, 17_000), 16384);
    assert_eq!(parse(&big[..9]), Err(SniError::TooLarge { limit }));
    assert_eq!(parse(&big), Err(SniError::TooLarge { limit }));
    // Fits a bigger limit, and the padding does not hide the name.
    let got = parse_client_hello(&big, 64 * 1024).unwrap();
    assert_eq!(got.server_name.as_deref(), Some("api.e.example.com"));
    assert_eq!(got.records, 2);
    // Within the limit as a message, but its 1-byte records are not.
    let padded = with_padding(&msg, 4000);
    assert!(parse(&in_records(&padded, 16384)).is_ok());
    assert_eq!(
        parse(&in_records(&padded, 1)),
        Err(SniError::TooLarge { limit })
    );
}

fn assert_malformed(buf: &[u8], what: &str) -> MalformedReason {
    match parse(buf) {
        Err(SniError::Malformed(reason)) => reason,
        other => panic!("{what}: expected Malformed, got {other:?}"),
    }
}

/// `buf` with the big-endian u16 at `at` moved by `delta`.
fn nudged(buf: &[u8], at: usize, delta: i32) -> Vec<u8> {
    let mut b = buf.to_vec();
    let n = i32::from(u16::from_be_bytes([b[at], b[at + 1]])) + delta;
    b[at..at + 2].copy_from_slice(&u16::try_from(n).unwrap().to_be_bytes());
    b
}

#[test]
fn corrupted_lengths_are_malformed() {
    for v in VECTORS.iter().filter(|v| v.records == 1) {
        let buf = load(v.file);
        let what = |field: &str| format!("{} {field}", v.file);

        // Handshake length one short: the record carries a stray byte.
        let b = nudged(&buf, 7, -1);
        assert_eq!(
            assert_malformed(&b, &what("handshake-1")),
            MalformedReason::TrailingHandshakeData
        );

        // Session id longer than allowed.
        let sid_at = 5 + 4 + 2 + 32;
        let mut b = buf.clone();
        b[sid_at] = 33;
        assert_eq!(
            assert_malformed(&b, &what("session id")),
            MalformedReason::SessionIdTooLong
        );

        // The cipher suite and extension block lengths, off by one or two.
        let suites_at = sid_at + 1 + usize::from(buf[sid_at]);
        let ext_at = 5 + extensions_offset(&buf[5..]);
        for (at, field) in [(suites_at, "suites"), (ext_at, "extensions")] {
            for delta in [1, -1, 2, -2] {
                assert_malformed(
                    &nudged(&buf, at, delta),
                    &what(&format!("{field}{delta:+}")),
                );
            }
        }

        // The server_name extension's three lengths, and its contents.
        if let Some(name) = v.server_name {
            let at = buf
                .windows(name.len())
                .position(|w| w == name.as_bytes())
                .unwrap();
            for (len_at, field) in [(at - 2, "host"), (at - 5, "list"), (at - 7, "ext")] {
                for delta in [1, -1] {
                    let b = nudged(&buf, len_at, delta);
                    assert_malformed(&b, &what(&format!("sni {field}{delta:+}")));
                }
            }
            let mut b = buf.clone();
            b[at - 3] = 1;
            assert_eq!(
                assert_malformed(&b, &what("name type")),
                MalformedReason::BadServerNameList
            );
            let mut b = buf.clone();
            b[at] = b' ';
            assert_eq!(
                assert_malformed(&b, &what("name byte")),
                MalformedReason::InvalidServerName
            );
        }
    }
}

#[test]
fn corrupted_record_lengths() {
    for v in VECTORS {
        let buf = load(v.file);
        let mut b = buf.clone();
        b[3..5].copy_from_slice(&0x4001u16.to_be_bytes());
        assert_eq!(
            parse(&b),
            Err(SniError::Malformed(MalformedReason::RecordOverflow))
        );
        let mut b = buf.clone();
        b[3..5].copy_from_slice(&[0, 0]);
        assert_eq!(
            parse(&b),
            Err(SniError::Malformed(MalformedReason::EmptyRecord))
        );
        // One byte longer: waits for that byte, then finds it stray.
        let mut b = nudged(&buf, 3, 1);
        if v.records == 1 {
            assert_eq!(parse(&b), Err(SniError::Incomplete));
            b.push(0);
            assert_eq!(
                parse(&b),
                Err(SniError::Malformed(MalformedReason::TrailingHandshakeData))
            );
        } else {
            // The next record header is now read one byte late.
            assert_malformed(&b, v.file);
        }
    }
}
