//! Unit tests on hand-built ClientHellos, one protocol rule at a time.
//! Captured hellos from real clients are exercised in `tests/sni_*.rs`.

use super::*;

const SNI: u16 = 0;
const ALPN: u16 = 16;

fn u16be(n: usize) -> [u8; 2] {
    u16::try_from(n)
        .expect("test lengths fit u16")
        .to_be_bytes()
}

fn sni_ext(name: &[u8]) -> (u16, Vec<u8>) {
    let mut entry = vec![0];
    entry.extend_from_slice(&u16be(name.len()));
    entry.extend_from_slice(name);
    (SNI, list_u16(&entry))
}

fn alpn_ext(protocols: &[&[u8]]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for p in protocols {
        list.push(u8::try_from(p.len()).expect("short protocol"));
        list.extend_from_slice(p);
    }
    (ALPN, list_u16(&list))
}

fn list_u16(items: &[u8]) -> Vec<u8> {
    let mut out = u16be(items.len()).to_vec();
    out.extend_from_slice(items);
    out
}

fn extension_block(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (ty, data) in exts {
        block.extend_from_slice(&ty.to_be_bytes());
        block.extend_from_slice(&u16be(data.len()));
        block.extend_from_slice(data);
    }
    list_u16(&block)
}

/// A ClientHello body: version, random, session id, suites, compression,
/// then `tail` (normally the extension block).
fn body_with(version: u16, session_id: &[u8], suites: &[u8], comp: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend_from_slice(&[0xab; 32]);
    b.push(u8::try_from(session_id.len()).expect("short"));
    b.extend_from_slice(session_id);
    b.extend_from_slice(&u16be(suites.len()));
    b.extend_from_slice(suites);
    b.push(u8::try_from(comp.len()).expect("short"));
    b.extend_from_slice(comp);
    b.extend_from_slice(tail);
    b
}

fn body(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    body_with(
        0x0303,
        &[7; 32],
        &[0x13, 0x01, 0xc0, 0x2f],
        &[0],
        &extension_block(exts),
    )
}

fn handshake(msg_type: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).expect("short").to_be_bytes();
    let mut m = vec![msg_type, len[1], len[2], len[3]];
    m.extend_from_slice(body);
    m
}

/// `message` in TLS 1.0-versioned handshake records of at most `max` bytes.
fn records(message: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in message.chunks(max) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&u16be(chunk.len()));
        out.extend_from_slice(chunk);
    }
    out
}

fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    records(&handshake(1, &body(exts)), 16384)
}

fn parse(buf: &[u8]) -> Result<ClientHello, SniError> {
    parse_client_hello(buf, DEFAULT_MAX_HELLO_LEN)
}

fn malformed(reason: MalformedReason) -> Result<ClientHello, SniError> {
    Err(SniError::Malformed(reason))
}

/// Every prefix must be Incomplete or agree with the whole buffer.
fn assert_prefixes_agree(buf: &[u8], max_len: usize) {
    let whole = parse_client_hello(buf, max_len);
    for end in 0..buf.len() {
        let part = parse_client_hello(&buf[..end], max_len);
        assert!(
            part == Err(SniError::Incomplete) || part == whole,
            "prefix {end}: {part:?} vs whole {whole:?}"
        );
        if part == Err(SniError::Incomplete) {
            assert!(
                end < max_len,
                "Incomplete at {end} bytes with max_len {max_len}"
            );
        }
    }
}

#[test]
fn sni_and_alpn_are_extracted() {
    let buf = hello(&[
        (0x000a, vec![0, 2, 0, 0x1d]),
        sni_ext(b"API.a.example.com"),
        alpn_ext(&[b"h2", b"http/1.1"]),
    ]);
    let got = parse(&buf).unwrap();
    assert_eq!(got.server_name.as_deref(), Some("API.a.example.com"));
    assert_eq!(got.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(got.legacy_version, 0x0303);
    assert_eq!(got.records, 1);
    assert_eq!(got.consumed, buf.len());
    assert_prefixes_agree(&buf, DEFAULT_MAX_HELLO_LEN);
}

#[test]
fn hello_without_extensions_has_no_name() {
    let bare = body_with(0x0301, &[], &[0, 0x2f], &[0], &[]);
    let got = parse(&records(&handshake(1, &bare), 16384)).unwrap();
    assert_eq!(got.server_name, None);
    assert!(got.alpn.is_empty());
    assert_eq!(got.legacy_version, 0x0301);
    let got = parse(&hello(&[])).unwrap();
    assert_eq!(got.server_name, None);
}

#[test]
fn not_tls_is_decided_from_the_first_bytes() {
    assert_eq!(parse(b""), Err(SniError::Incomplete));
    assert_eq!(parse(b"G"), Err(SniError::NotTls));
    assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Err(SniError::NotTls));
    assert_eq!(parse(b"PRI * HTTP/2.0\r\n"), Err(SniError::NotTls));
    // SSLv2-compatible hello: two-byte header with the high bit set.
    assert_eq!(
        parse(&[0x80, 0x2e, 0x01, 0x03, 0x01]),
        Err(SniError::NotTls)
    );
    assert_eq!(parse(&[0x16]), Err(SniError::Incomplete));
    assert_eq!(parse(&[0x16, 0x02]), Err(SniError::NotTls));
    assert_eq!(parse(&[0x16, 0x03]), Err(SniError::Incomplete));
    // An alert or application data record first: TLS perhaps, but no hello.
    assert_eq!(
        parse(&[0x15, 0x03, 0x03, 0x00, 0x02, 2, 40]),
        Err(SniError::NotTls)
    );
}

#[test]
fn first_message_must_be_a_client_hello() {
    let buf = records(&handshake(2, &body(&[])), 16384);
    assert_eq!(parse(&buf[..9]), malformed(MalformedReason::NotClientHello));
    assert_prefixes_agree(&buf, DEFAULT_MAX_HELLO_LEN);
}

#[test]
fn record_layer_rules() {
    assert_eq!(
        parse(&[22, 3, 1, 0, 0]),
        malformed(MalformedReason::EmptyRecord)
    );
    assert_eq!(
        parse(&[22, 3, 1, 0x40, 0x01]),
        malformed(MalformedReason::RecordOverflow)
    );

    let message = handshake(1, &body(&[sni_ext(b"a.example")]));
    let mut split = records(&message[..10], 16384);
    let second = records(&message[10..], 16384);
    // Something other than a handshake record inside the hello.
    let mut alert = split.clone();
    alert.extend_from_slice(&[21, 3, 3, 0, 2, 2, 40]);
    assert_eq!(
        parse(&alert),
        malformed(MalformedReason::UnexpectedContentType)
    );
    let mut bad_version = split.clone();
    bad_version.extend_from_slice(&[22, 4, 1]);
    assert_eq!(
        parse(&bad_version),
        malformed(MalformedReason::BadRecordVersion)
    );
    split.extend_from_slice(&second);
    let got = parse(&split).unwrap();
    assert_eq!((got.records, got.consumed), (2, split.len()));
    assert_eq!(got.server_name.as_deref(), Some("a.example"));

    // Handshake bytes after the ClientHello in its last record.
    let mut extra = message.clone();
    extra.extend_from_slice(&[20, 0, 0, 0]);
    assert_eq!(
        parse(&records(&extra, 16384)),
        malformed(MalformedReason::TrailingHandshakeData)
    );
}

#[test]
fn handshake_header_split_across_records() {
    let message = handshake(1, &body(&[sni_ext(b"x.example"), alpn_ext(&[b"h2"])]));
    for first in 1..4 {
        let mut buf = records(&message[..first], 16384);
        buf.extend_from_slice(&records(&message[first..], 7));
        let got = parse(&buf).unwrap();
        assert_eq!(got.server_name.as_deref(), Some("x.example"));
        assert_eq!(got.consumed, buf.len());
        assert_prefixes_agree(&buf, DEFAULT_MAX_HELLO_LEN);
    }
}

#[test]
fn bytes_after_the_hello_are_not_consumed() {
    let mut buf = hello(&[sni_ext(b"early.example")]);
    let end = buf.len();
    buf.extend_from_slice(&[23, 3, 3, 0, 5, 1, 2, 3, 4, 5]);
    let got = parse(&buf).unwrap();
    assert_eq!(got.consumed, end);
    // Even garbage after the hello does not matter.
    buf.truncate(end);
    buf.extend_from_slice(b"GET /");
    assert_eq!(parse(&buf).unwrap().consumed, end);
}

#[test]
fn too_large_is_decided_from_declared_lengths() {
    // A handshake header declaring 20000 bytes: refused after 9 bytes.
    let buf = [22, 3, 1, 0x10, 0x00, 1, 0x00, 0x4e, 0x20];
    assert_eq!(
        parse(&buf),
        Err(SniError::TooLarge {
            limit: DEFAULT_MAX_HELLO_LEN
        })
    );
    assert_eq!(parse(&buf[..8]), Err(SniError::Incomplete));
    // A record that would end past the limit: refused from its header.
    assert_eq!(
        parse_client_hello(&[22, 3, 1, 0x01, 0x00], 200),
        Err(SniError::TooLarge { limit: 200 })
    );
    // Below any possible record.
    assert_eq!(
        parse_client_hello(&[], 5),
        Err(SniError::TooLarge { limit: 5 })
    );
}

#[test]
fn record_overhead_counts_against_the_limit() {
    let one_byte_records = records(&handshake(1, &body(&[sni_ext(b"a.example")])), 1);
    let exact = one_byte_records.len();
    assert!(parse_client_hello(&one_byte_records, exact).is_ok());
    assert_eq!(
        parse_client_hello(&one_byte_records, exact - 1),
        Err(SniError::TooLarge { limit: exact - 1 })
    );
    for max_len in [exact - 1, exact, exact - 6, 50, 6] {
        assert_prefixes_agree(&one_byte_records, max_len);
    }
}

#[test]
fn host_names_are_checked() {
    let long = vec![b'a'; 255];
    let got = parse(&hello(&[sni_ext(&long)])).unwrap();
    assert_eq!(got.server_name.map(|n| n.len()), Some(255));
    for ok in [
        &b"a"[..],
        b"under_score.example",
        b"10.0.0.1",
        b"x-1.Example.COM.",
    ] {
        let got = parse(&hello(&[sni_ext(ok)])).unwrap();
        assert_eq!(got.server_name.as_deref().map(str::as_bytes), Some(ok));
    }
    let too_long = vec![b'a'; 256];
    for bad in [
        &b""[..],
        &too_long,
        b"a b",
        b"caf\xc3\xa9",
        b"a\0b",
        b"a/b",
        b"[::1]",
    ] {
        assert_eq!(
            parse(&hello(&[sni_ext(bad)])),
            malformed(MalformedReason::InvalidServerName),
            "{bad:?}"
        );
    }
}

#[test]
fn server_name_list_rules() {
    let bad_list = malformed(MalformedReason::BadServerNameList);
    assert_eq!(parse(&hello(&[(SNI, list_u16(&[]))])), bad_list);
    assert_eq!(
        parse(&hello(&[(SNI, vec![])])),
        malformed(MalformedReason::LengthOverrun)
    );
    let two = [&[0, 0, 1, b'a'][..], &[0, 0, 1, b'b']].concat();
    assert_eq!(parse(&hello(&[(SNI, list_u16(&two))])), bad_list);
    let unknown = [1, 0, 1, b'a'];
    assert_eq!(parse(&hello(&[(SNI, list_u16(&unknown))])), bad_list);
    let (_, mut data) = sni_ext(b"a.example");
    data.push(0);
    assert_eq!(
        parse(&hello(&[(SNI, data)])),
        malformed(MalformedReason::TrailingBytes)
    );
    let overrun = [0, 0, 9, b'a'];
    assert_eq!(
        parse(&hello(&[(SNI, list_u16(&overrun))])),
        malformed(MalformedReason::LengthOverrun)
    );
}

#[test]
fn alpn_rules() {
    assert_eq!(
        parse(&hello(&[(ALPN, list_u16(&[]))])),
        malformed(MalformedReason::BadAlpn)
    );
    assert_eq!(
        parse(&hello(&[(ALPN, list_u16(&[2, b'h', b'2', 0]))])),
        malformed(MalformedReason::BadAlpn)
    );
    let (_, mut data) = alpn_ext(&[b"h2"]);
    data.push(0);
    assert_eq!(
        parse(&hello(&[(ALPN, data)])),
        malformed(MalformedReason::TrailingBytes)
    );
}

#[test]
fn duplicate_extensions_are_malformed() {
    let dup = malformed(MalformedReason::DuplicateExtension);
    assert_eq!(parse(&hello(&[sni_ext(b"a"), sni_ext(b"a")])), dup);
    assert_eq!(
        parse(&hello(&[
            (0x1234, vec![]),
            sni_ext(b"a"),
            (0x1234, vec![1])
        ])),
        dup
    );
    assert_eq!(
        parse(&hello(&[alpn_ext(&[b"h2"]), alpn_ext(&[b"h2"])])),
        dup
    );
}

#[test]
fn fixed_fields_are_checked() {
    let exts = extension_block(&[]);
    let suites = [0x13, 0x01];
    let cases = [
        (
            body_with(0x0203, &[], &suites, &[0], &exts),
            MalformedReason::BadLegacyVersion,
        ),
        (
            body_with(0x0303, &[1; 33], &suites, &[0], &exts),
            MalformedReason::SessionIdTooLong,
        ),
        (
            body_with(0x0303, &[], &[], &[0], &exts),
            MalformedReason::BadCipherSuites,
        ),
        (
            body_with(0x0303, &[], &[0x13, 0x01, 0x13], &[0], &exts),
            MalformedReason::BadCipherSuites,
        ),
        (
            body_with(0x0303, &[], &suites, &[], &exts),
            MalformedReason::NoCompressionMethods,
        ),
        (
            body_with(0x0303, &[], &suites, &[0], &[0]),
            MalformedReason::LengthOverrun,
        ),
        (
            body_with(0x0303, &[], &suites, &[0], &[0, 0, 9]),
            MalformedReason::TrailingBytes,
        ),
        (
            body_with(0x0303, &[], &suites, &[0], &[0, 4, 0, 0]),
            MalformedReason::LengthOverrun,
        ),
        (
            body_with(0x0303, &[], &suites, &[0], &[0, 5, 0, 0, 0, 0, 0]),
            MalformedReason::LengthOverrun,
        ),
    ];
    for (body, reason) in cases {
        let buf = records(&handshake(1, &body), 16384);
        assert_eq!(parse(&buf), malformed(reason), "{reason:?}");
        assert_prefixes_agree(&buf, DEFAULT_MAX_HELLO_LEN);
    }
    // A body too short for the random.
    let buf = records(&handshake(1, &[3, 3, 0]), 16384);
    assert_eq!(parse(&buf), malformed(MalformedReason::LengthOverrun));
    // An empty body.
    assert_eq!(
        parse(&records(&handshake(1, &[]), 16384)),
        malformed(MalformedReason::LengthOverrun)
    );
}

#[test]
fn alerts_follow_the_tls_record_format() {
    // ContentType alert(21), version 3.3, length 2, level fatal(2), description.
    assert_eq!(
        alert_record(AlertDescription::UnrecognizedName),
        [21, 3, 3, 0, 2, 2, 112]
    );
    assert_eq!(
        alert_record(AlertDescription::HandshakeFailure),
        [21, 3, 3, 0, 2, 2, 40]
    );
    assert_eq!(
        alert_record(AlertDescription::InternalError),
        [21, 3, 3, 0, 2, 2, 80]
    );
    let codes = [
        (AlertDescription::UnexpectedMessage, 10),
        (AlertDescription::RecordOverflow, 22),
        (AlertDescription::AccessDenied, 49),
        (AlertDescription::DecodeError, 50),
        (AlertDescription::ProtocolVersion, 70),
        (AlertDescription::NoApplicationProtocol, 120),
    ];
    for (desc, code) in codes {
        assert_eq!(desc.code(), code);
    }
}

#[test]
fn errors_map_to_alerts() {
    assert_eq!(SniError::Incomplete.alert(), None);
    assert_eq!(SniError::NotTls.alert(), None);
    assert_eq!(
        SniError::TooLarge { limit: 1 }.alert(),
        Some(AlertDescription::HandshakeFailure)
    );
    assert_eq!(
        SniError::from(MalformedReason::NotClientHello).alert(),
        Some(AlertDescription::UnexpectedMessage)
    );
    assert_eq!(
        SniError::from(MalformedReason::InvalidServerName).alert(),
        Some(AlertDescription::DecodeError)
    );
}

#[test]
fn refragment_round_trips() {
    let mut buf = hello(&[sni_ext(b"frag.example"), alpn_ext(&[b"h2", b"http/1.1"])]);
    let hello_len = buf.len();
    buf.extend_from_slice(b"tail");
    let whole = parse(&buf).unwrap();
    for max in [0, 1, 2, 3, 4, 5, 100, 16384, usize::MAX] {
        let cut = refragment(&buf, max).unwrap();
        assert!(cut.ends_with(b"tail"));
        let got = parse(&cut).unwrap();
        assert_eq!(got.server_name, whole.server_name);
        assert_eq!(got.alpn, whole.alpn);
        assert_eq!(got.consumed, cut.len() - 4);
        let payload = hello_len - 5;
        assert_eq!(got.records, payload.div_ceil(max.clamp(1, 16384)));
        // Re-cutting a re-cut hello back into one record restores it.
        assert_eq!(refragment(&cut, 16384).unwrap(), buf);
    }
    assert_eq!(refragment(&buf[..20], 10), Err(SniError::Incomplete));
    assert_eq!(refragment(b"GET /", 10), Err(SniError::NotTls));
}

#[test]
fn errors_display_one_line() {
    let e = SniError::from(MalformedReason::DuplicateExtension);
    assert_eq!(
        e.to_string(),
        "malformed TLS ClientHello: duplicate extension"
    );
    assert_eq!(
        SniError::TooLarge { limit: 16384 }.to_string(),
        "TLS ClientHello larger than the 16384-byte limit"
    );
}
