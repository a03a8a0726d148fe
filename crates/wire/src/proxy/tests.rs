//! Unit tests for the PROXY protocol codecs: every rule of the specification
//! that the parser enforces, with valid and invalid headers, truncations,
//! mutations, round trips and checksum vectors.

use std::net::{Ipv6Addr, SocketAddr};

use super::text::{format_ipv6, parse_ipv6};
use super::*;

// ---------------------------------------------------------------- helpers

fn sa(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn malformed<T>(reason: MalformedReason) -> Result<T, ProxyError> {
    Err(ProxyError::Malformed(reason))
}

fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// A v2 header with the given version/command and family bytes, and
/// `payload` (address block and TLVs) after the length field.
fn v2(version_command: u8, family: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(version_command);
    out.push(family);
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Appends a CRC32C TLV to a v2 header, fixes the length, and fills in the
/// checksum.
fn with_crc(mut header: Vec<u8>) -> Vec<u8> {
    header.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
    let len = (header.len() - V2_FIXED_LEN) as u16;
    header[14..16].copy_from_slice(&len.to_be_bytes());
    let sum = crc32c(&header);
    let at = header.len() - 4;
    header[at..].copy_from_slice(&sum.to_be_bytes());
    header
}

/// The address block of TCP over IPv4 from 192.168.0.1:56324 to
/// 192.168.0.11:443, the specification's example.
const TCP4_BLOCK: [u8; 12] = [192, 168, 0, 1, 192, 168, 0, 11, 0xdc, 0x04, 0x01, 0xbb];

fn tcp6_block() -> Vec<u8> {
    let mut block = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
    block.extend_from_slice(&"fd00::a:b".parse::<Ipv6Addr>().unwrap().octets());
    block.extend_from_slice(&[0x30, 0x39, 0x19, 0x2b]);
    block
}

/// Every answer for a prefix of `buf` is `Incomplete` or the answer for the
/// whole buffer; returns the latter.
fn parse_checked(buf: &[u8]) -> Result<(ProxyHeader, usize), ProxyError> {
    let whole = parse(buf);
    for end in 0..buf.len() {
        let part = parse(&buf[..end]);
        assert!(
            part == Err(ProxyError::Incomplete) || part == whole,
            "prefix {end} of {buf:?}: {part:?} vs {whole:?}"
        );
    }
    whole
}

/// A valid header: parses, every strict prefix is `Incomplete`, and it
/// renders back to something that parses to the same value.
fn valid(buf: &[u8]) -> ProxyHeader {
    let (header, consumed) = parse(buf).unwrap_or_else(|e| panic!("{buf:?}: {e}"));
    assert_eq!(consumed, buf.len(), "whole buffer is the header");
    for end in 0..buf.len() {
        assert_eq!(
            parse(&buf[..end]),
            Err(ProxyError::Incomplete),
            "prefix {end}"
        );
    }
    assert_round_trip(&header);
    header
}

fn assert_round_trip(header: &ProxyHeader) {
    let options = RenderOptions {
        crc32c: header.tlvs.crc32c_verified,
        noop: None,
    };
    let bytes = header.render(&options).unwrap();
    let (again, consumed) = parse(&bytes).unwrap();
    assert_eq!(&again, header, "{bytes:?}");
    assert_eq!(consumed, bytes.len());
}

fn all_tlvs() -> Tlvs {
    Tlvs {
        alpn: Some(b"h2".to_vec()),
        authority: Some("api.a.example.com".into()),
        crc32c_verified: false,
        unique_id: Some(vec![0xab; MAX_UNIQUE_ID_LEN]),
        ssl: Some(SslInfo {
            client: SslInfo::CLIENT_SSL | SslInfo::CLIENT_CERT_CONN | SslInfo::CLIENT_CERT_SESS,
            verify: 0,
            version: Some("TLSv1.3".into()),
            common_name: Some("system:node:worker-1 ☃".into()),
            cipher: Some("TLS_AES_256_GCM_SHA384".into()),
            sig_alg: Some("SHA256".into()),
            key_alg: Some("RSA2048".into()),
            unknown: vec![(0x26, b"future".to_vec()), (0x26, vec![])],
        }),
        netns: Some("blue".into()),
        unknown: vec![(0xea, vec![1, 2, 3]), (0x06, vec![]), (0xea, vec![4])],
    }
}

// ---------------------------------------------------------------- CRC32C

#[test]
fn crc32c_known_vectors() {
    // The check value of the CRC-32C catalogue entry, and the iSCSI vectors
    // of RFC 3720, appendix B.4.
    assert_eq!(crc32c(b""), 0);
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(&[0; 32]), 0x8A91_36AA);
    assert_eq!(crc32c(&[0xff; 32]), 0x62A8_AB43);
    let ascending: Vec<u8> = (0..32).collect();
    assert_eq!(crc32c(&ascending), 0x46DD_794E);
    let descending: Vec<u8> = (0..32).rev().collect();
    assert_eq!(crc32c(&descending), 0x113F_DB5C);
}

#[test]
fn crc32c_in_pieces_matches_whole() {
    let data: Vec<u8> = (0..=255).cycle().take(1000).collect();
    for cut in [0, 1, 7, 500, 999, 1000] {
        let (a, b) = data.split_at(cut);
        assert_eq!(
            crc32c::Crc32c::new().update(a).update(b).finish(),
            crc32c(&data)
        );
    }
}

// ---------------------------------------------------------------- detect

#[test]
fn detect_decides_from_few_bytes() {
    assert_eq!(detect(b""), Err(ProxyError::Incomplete));
    assert_eq!(detect(b"P"), Err(ProxyError::Incomplete));
    assert_eq!(detect(b"PROX"), Err(ProxyError::Incomplete));
    assert_eq!(detect(b"PROXY"), Ok(Version::V1));
    assert_eq!(detect(b"PROXY TCP4"), Ok(Version::V1));
    assert_eq!(detect(b"\r"), Err(ProxyError::Incomplete));
    assert_eq!(detect(&V2_SIGNATURE[..11]), Err(ProxyError::Incomplete));
    assert_eq!(detect(&V2_SIGNATURE), Ok(Version::V2));
    // NotProxy as soon as one byte differs.
    for other in [
        &b"G"[..],
        b"\x16\x03\x01",
        b"SSH-2.0",
        b"PRI * HTTP/2.0",
        b"PROXZ",
        b"proxy",
        b"\r\n\r\n\x01",
        b"\r\r",
        b"\0",
        b" PROXY",
    ] {
        assert_eq!(detect(other), Err(ProxyError::NotProxy), "{other:?}");
        assert_eq!(parse(other), Err(ProxyError::NotProxy), "{other:?}");
    }
}

// ---------------------------------------------------------------- v1

#[test]
fn v1_spec_example_before_http_request() {
    let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
    let (header, consumed) = parse(buf).unwrap();
    assert_eq!(
        header,
        ProxyHeader::tcp(Version::V1, sa("192.168.0.1:56324"), sa("192.168.0.11:443"))
    );
    assert_eq!(
        &buf[consumed..],
        b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n"
    );
}

#[test]
fn v1_valid_lines() {
    let cases: &[(&str, Option<(&str, &str)>)] = &[
        (
            "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
            Some(("255.255.255.255:65535", "255.255.255.255:65535")),
        ),
        (
            "PROXY TCP4 0.0.0.0 10.0.0.1 0 0\r\n",
            Some(("0.0.0.0:0", "10.0.0.1:0")),
        ),
        (
            "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
            Some((
                "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
                "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
            )),
        ),
        (
            "PROXY TCP6 2001:DB8::1 ::1 1 443\r\n",
            Some(("[2001:db8::1]:1", "[::1]:443")),
        ),
        (
            "PROXY TCP6 2001:0db8:0000:0000:0000:0000:0000:0001 :: 1 443\r\n",
            Some(("[2001:db8::1]:1", "[::]:443")),
        ),
        (
            "PROXY TCP6 1:2:3:4:5:6:7:: 1:: 12 34\r\n",
            Some(("[1:2:3:4:5:6:7:0]:12", "[1::]:34")),
        ),
        (
            "PROXY TCP6 ::ffff:127.0.0.1 ::ffff:10.1.2.3 40000 6443\r\n",
            Some(("[::ffff:127.0.0.1]:40000", "[::ffff:10.1.2.3]:6443")),
        ),
        (
            "PROXY TCP6 1:2:3:4:5:6:1.2.3.4 ::1 1 2\r\n",
            Some(("[1:2:3:4:5:6:102:304]:1", "[::1]:2")),
        ),
        ("PROXY UNKNOWN\r\n", None),
        ("PROXY UNKNOWN \r\n", None),
        (
            "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
            None,
        ),
        ("PROXY UNKNOWN whatever \x01\x7f\u{e9} bytes\r\n", None),
    ];
    for (line, expected) in cases {
        let header = valid(line.as_bytes());
        assert_eq!(header.version, Version::V1);
        assert_eq!(header.command, Command::Proxy);
        assert_eq!(header.tlvs, Tlvs::default());
        let expected = expected.map(|(s, d)| Addresses {
            source: sa(s),
            destination: sa(d),
        });
        assert_eq!(header.addresses, expected, "{line:?}");
    }
}

#[test]
fn v1_unknown_ignores_any_byte_but_cr_and_lf() {
    let mut line = b"PROXY UNKNOWN ".to_vec();
    line.extend((0..=255u8).filter(|b| *b != b'\r' && *b != b'\n').take(90));
    line.extend_from_slice(b"\r\n");
    assert_eq!(valid(&line).addresses, None);
    let mut line = b"PROXY UNKNOWN ".to_vec();
    line.extend((128..=255u8).take(90));
    line.extend_from_slice(b"\r\n");
    assert_eq!(valid(&line).addresses, None);
}

#[test]
fn v1_length_limit_is_107_bytes() {
    // The specification's worst case, exactly 107 bytes, is accepted.
    let worst = format!(
        "PROXY UNKNOWN {0} {0} 65535 65535\r\n",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    );
    assert_eq!(worst.len(), V1_MAX_LEN);
    assert_eq!(valid(worst.as_bytes()).addresses, None);

    let filler = |n: usize| format!("PROXY UNKNOWN {}", "x".repeat(n - 14));
    // 106 bytes without CRLF: maybe the CRLF is next.
    assert_eq!(parse(filler(106).as_bytes()), Err(ProxyError::Incomplete));
    // 106 bytes and a CR: the LF would be byte 108.
    let too_long = Err(ProxyError::TooLong { limit: V1_MAX_LEN });
    assert_eq!(parse(format!("{}\r", filler(106)).as_bytes()), too_long);
    assert_eq!(parse(format!("{}\r\n", filler(106)).as_bytes()), too_long);
    assert_eq!(parse(filler(107).as_bytes()), too_long);
    assert_eq!(parse(filler(500).as_bytes()), too_long);
    // 105 + CRLF = 107 is fine.
    assert_eq!(
        valid(format!("{}\r\n", filler(105)).as_bytes()).addresses,
        None
    );
}

#[test]
fn v1_malformed_lines() {
    use MalformedReason::*;
    let cases: &[(&[u8], MalformedReason)] = &[
        (b"PROXY\r\n", V1BadSeparator),
        (b"PROXYTCP4", V1BadSeparator),
        (b"PROXY  TCP4", V1BadProtocol),
        (b"PROXY TCP5 ", V1BadProtocol),
        (b"PROXY tcp4 ", V1BadProtocol),
        (b"PROXY UDP4 ", V1BadProtocol),
        (b"PROXY UNKNOWNX\r\n", V1BadProtocol),
        (b"PROXY UNKNOWN\n", V1BadLineEnd),
        (b"PROXY UNKNOWN\rX", V1BadLineEnd),
        (b"PROXY UNKNOWN foo\nbar\r\n", V1BadLineEnd),
        (b"PROXY UNKNOWN foo\rbar\r\n", V1BadLineEnd),
        (b"PROXY TCP4\r\n", V1BadSeparator),
        (b"PROXY TCP4  1.2.3.4", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8", V1BadIpv4),
        (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.004 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1..3.4 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.4. 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.x 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1111.2.3.4 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.4.5.6.7.8.9 5", V1BadIpv4),
        (b"PROXY TCP4 ::1 ::1 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP6 ::1 1.2.3.4 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1:2:3:4:5:6:7 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1:2:3:4::5:6:7:8 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1::2::3 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 ::: ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 :1 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1: ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 12345:: ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 1.2.3.4:: ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 ::1.2.3.4:5 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 ::01.2.3.4 ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 ::g ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 fe80::1%lo ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP6 [::1] ::1 1 2\r\n", V1BadIpv6),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 00\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 123456", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 0x10 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4/8 5.6.7.8 1 2\r\n", V1BadIpv4),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2/", V1BadPort),
        (b"PROXY TCP4 1.2.3.4\r\n", V1BadSeparator),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n", V1BadPort),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", V1BadSeparator),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\t2\r\n", V1BadSeparator),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", V1BadLineEnd),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", V1BadLineEnd),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", V1BadLineEnd),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", V1BadLineEnd),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", V1BadLineEnd),
        (b"PROXY TCP6 ::1 ::1 1 2\0", V1BadLineEnd),
    ];
    for (line, reason) in cases {
        assert_eq!(parse_checked(line), malformed(*reason), "{line:?}");
    }
}

#[test]
fn v1_garbage_is_refused_before_the_crlf() {
    // A listener can drop these without waiting for more bytes.
    assert_eq!(parse(b"PROXY X"), malformed(MalformedReason::V1BadProtocol));
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4/"),
        malformed(MalformedReason::V1BadIpv4)
    );
    assert_eq!(parse(b"PROXY TCP4 25"), Err(ProxyError::Incomplete));
    assert_eq!(
        parse(b"PROXY TCP4 256"),
        malformed(MalformedReason::V1BadIpv4)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 05"),
        malformed(MalformedReason::V1BadIpv4)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 01"),
        malformed(MalformedReason::V1BadPort)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 7000"),
        Err(ProxyError::Incomplete)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 70000"),
        malformed(MalformedReason::V1BadPort)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 "),
        malformed(MalformedReason::V1BadLineEnd)
    );
}

#[test]
fn ipv6_text_agrees_with_std() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for i in 0..5000 {
        // Mostly zero groups, so `::` shows up in every position.
        let mut groups = [0u16; 8];
        for g in &mut groups {
            if rng.below(3) == 0 {
                *g = rng.next() as u16 >> (rng.below(4) * 4);
            }
        }
        if i % 7 == 0 {
            groups = [0, 0, 0, 0, 0, 0xffff, groups[6], groups[7]];
        }
        let ip = Ipv6Addr::from(groups);
        let mut ours = String::new();
        format_ipv6(&ip, &mut ours);
        assert!(!ours.contains('.'), "{ours}");
        assert_eq!(ours.parse::<Ipv6Addr>().unwrap(), ip, "{ours}");
        assert_eq!(parse_ipv6(ours.as_bytes()), Some(ip), "{ours}");
        let std_text = ip.to_string();
        assert_eq!(parse_ipv6(std_text.as_bytes()), Some(ip), "{std_text}");
        // RFC 5952 form is what std writes, dotted forms aside.
        if !std_text.contains('.') {
            assert_eq!(ours, std_text);
        }
    }
}

// ---------------------------------------------------------------- v2

#[test]
fn v2_tcp4_and_tcp6() {
    let header = valid(&v2(0x21, 0x11, &TCP4_BLOCK));
    assert_eq!(
        header,
        ProxyHeader::tcp(Version::V2, sa("192.168.0.1:56324"), sa("192.168.0.11:443"))
    );
    let header = valid(&v2(0x21, 0x21, &tcp6_block()));
    assert_eq!(
        header,
        ProxyHeader::tcp(
            Version::V2,
            sa("[2001:db8::1]:12345"),
            sa("[fd00::a:b]:6443")
        )
    );
}

#[test]
fn v2_exact_bytes_rendered() {
    let header = ProxyHeader::tcp(Version::V2, sa("192.168.0.1:56324"), sa("192.168.0.11:443"));
    assert_eq!(
        header.render_v2(&RenderOptions::default()).unwrap(),
        v2(0x21, 0x11, &TCP4_BLOCK)
    );
    assert_eq!(
        header.render_v1().unwrap(),
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    );
    let with_checksum = header
        .render_v2(&RenderOptions {
            crc32c: true,
            noop: None,
        })
        .unwrap();
    assert_eq!(with_checksum, with_crc(v2(0x21, 0x11, &TCP4_BLOCK)));
    assert_eq!(
        ProxyHeader::local()
            .render_v2(&RenderOptions::default())
            .unwrap(),
        v2(0x20, 0x00, &[])
    );
}

#[test]
fn v2_local_ignores_family_and_addresses() {
    for (family, block) in [
        (0x00, vec![]),
        (0x11, TCP4_BLOCK.to_vec()),
        (0x12, TCP4_BLOCK.to_vec()),
        (0x21, tcp6_block()),
        (0x22, tcp6_block()),
        (0x31, vec![b'/'; 216]),
        (0x32, vec![0; 216]),
    ] {
        let (header, consumed) = parse_checked(&v2(0x20, family, &block)).unwrap();
        assert_eq!(header, ProxyHeader::local(), "{family:#x}");
        assert_eq!(consumed, V2_FIXED_LEN + block.len());
        // TLVs follow the address block of the family given.
        let mut payload = block.clone();
        payload.extend_from_slice(&tlv(PP2_TYPE_UNIQUE_ID, b"id-1"));
        let header = valid(&with_crc(v2(0x20, family, &payload)));
        assert_eq!(header.addresses, None);
        assert!(header.tlvs.crc32c_verified);
        assert_eq!(header.tlvs.unique_id.as_deref(), Some(&b"id-1"[..]));
    }
    // A LOCAL header may carry more than its address block, and must be
    // skipped by its length.
    let (_, consumed) = parse(&v2(0x20, 0x00, &tlv(0xe0, &[0; 40]))).unwrap();
    assert_eq!(consumed, V2_FIXED_LEN + 43);
}

#[test]
fn v2_proxy_unspec_has_no_addresses() {
    let header = valid(&v2(0x21, 0x00, &[]));
    assert_eq!(header.command, Command::Proxy);
    assert_eq!(header.addresses, None);
    let header = valid(&v2(
        0x21,
        0x00,
        &tlv(PP2_TYPE_AUTHORITY, b"kubernetes.default.svc"),
    ));
    assert_eq!(
        header.tlvs.authority.as_deref(),
        Some("kubernetes.default.svc")
    );
}

#[test]
fn v2_udp_and_unix_are_unsupported_for_proxy() {
    for (family, block_len, unsupported) in [
        (0x12, 12, Unsupported::Udp4),
        (0x22, 36, Unsupported::Udp6),
        (0x31, 216, Unsupported::UnixStream),
        (0x32, 216, Unsupported::UnixDatagram),
    ] {
        let buf = v2(0x21, family, &vec![0; block_len]);
        assert_eq!(
            parse_checked(&buf),
            Err(ProxyError::Unsupported(unsupported))
        );
        // Decided from the family byte alone.
        assert_eq!(parse(&buf[..14]), Err(ProxyError::Unsupported(unsupported)));
    }
}

#[test]
fn v2_bad_fixed_part() {
    use MalformedReason::*;
    for version_command in [0x01, 0x11, 0x31, 0xf1, 0x00] {
        assert_eq!(
            parse_checked(&v2(version_command, 0x11, &TCP4_BLOCK)),
            malformed(V2BadVersion)
        );
    }
    for version_command in [0x22, 0x2f, 0x23] {
        assert_eq!(
            parse_checked(&v2(version_command, 0x11, &TCP4_BLOCK)),
            malformed(V2BadCommand)
        );
    }
    for family in [0x01, 0x02, 0x10, 0x20, 0x30, 0x13, 0x23, 0x33, 0x41, 0xff] {
        for command in [0x20, 0x21] {
            let buf = v2(command, family, &TCP4_BLOCK);
            assert_eq!(parse_checked(&buf), malformed(V2BadFamily), "{family:#x}");
            assert_eq!(parse(&buf[..14]), malformed(V2BadFamily));
        }
    }
}

#[test]
fn v2_length_must_cover_the_address_block() {
    for (family, needed) in [(0x11, 12), (0x21, 36), (0x12, 12), (0x31, 216)] {
        for len in [0, needed - 1] {
            let buf = v2(0x20, family, &vec![0; len]);
            assert_eq!(
                parse_checked(&buf),
                malformed(MalformedReason::V2LengthTooShort),
                "{family:#x} {len}"
            );
            // Decided from the length field, before the bytes arrive.
            assert_eq!(
                parse(&buf[..16]),
                malformed(MalformedReason::V2LengthTooShort)
            );
        }
    }
    for len in [0, 11] {
        let buf = v2(0x21, 0x11, &vec![0; len]);
        assert_eq!(parse(&buf), malformed(MalformedReason::V2LengthTooShort));
    }
}

#[test]
fn v2_length_limit_is_checked_up_front() {
    let mut big = TCP4_BLOCK.to_vec();
    big.extend_from_slice(&tlv(0xe0, &vec![0; DEFAULT_MAX_V2_PAYLOAD - 12 - 3]));
    let buf = v2(0x21, 0x11, &big);
    assert_eq!(buf.len(), V2_FIXED_LEN + DEFAULT_MAX_V2_PAYLOAD);
    assert!(parse(&buf).is_ok());

    big.push(0);
    let buf = v2(0x21, 0x11, &big);
    let too_long = Err(ProxyError::TooLong {
        limit: V2_FIXED_LEN + DEFAULT_MAX_V2_PAYLOAD,
    });
    assert_eq!(parse(&buf[..16]), too_long);
    assert_eq!(parse(&buf), too_long);

    // The limit is configurable up to what the length field can express.
    let options = ParseOptions {
        max_v2_payload: 65535,
    };
    let mut huge = TCP4_BLOCK.to_vec();
    huge.extend_from_slice(&tlv(0xe0, &vec![7; 65535 - 12 - 3]));
    let buf = v2(0x21, 0x11, &huge);
    let (header, consumed) = parse_with(&buf, &options).unwrap();
    assert_eq!(consumed, 65535 + 16);
    assert_eq!(header.tlvs.unknown[0].1.len(), 65520);
    assert_eq!(
        parse_with(&buf[..100], &options),
        Err(ProxyError::Incomplete)
    );
    let tight = ParseOptions { max_v2_payload: 12 };
    assert!(parse_with(&v2(0x21, 0x11, &TCP4_BLOCK), &tight).is_ok());
    assert_eq!(
        parse_with(&v2(0x21, 0x21, &tcp6_block()), &tight),
        Err(ProxyError::TooLong { limit: 28 })
    );
}

#[test]
fn v2_every_tlv_type() {
    let mut ssl = vec![0x07, 0, 0, 0, 0];
    ssl.extend_from_slice(&tlv(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3"));
    ssl.extend_from_slice(&tlv(PP2_SUBTYPE_SSL_CN, "system:node:wörker".as_bytes()));
    ssl.extend_from_slice(&tlv(PP2_SUBTYPE_SSL_CIPHER, b"TLS_AES_128_GCM_SHA256"));
    ssl.extend_from_slice(&tlv(PP2_SUBTYPE_SSL_SIG_ALG, b"SHA256"));
    ssl.extend_from_slice(&tlv(PP2_SUBTYPE_SSL_KEY_ALG, b"EC256"));
    ssl.extend_from_slice(&tlv(0x2a, b"sub"));

    let mut payload = TCP4_BLOCK.to_vec();
    for part in [
        tlv(PP2_TYPE_NOOP, &[]),
        tlv(PP2_TYPE_ALPN, b"h2"),
        tlv(0xf0, b"experiment"),
        tlv(PP2_TYPE_AUTHORITY, b"api.a.example.com"),
        tlv(PP2_TYPE_UNIQUE_ID, &[0; 128]),
        tlv(PP2_TYPE_NOOP, &[0; 9]),
        tlv(PP2_TYPE_SSL, &ssl),
        tlv(PP2_TYPE_NETNS, b"ns-1"),
        tlv(0xf0, b""),
        tlv(
            PP2_SUBTYPE_SSL_VERSION,
            b"top-level 0x21 is not a registered type",
        ),
    ] {
        payload.extend_from_slice(&part);
    }
    let header = valid(&with_crc(v2(0x21, 0x11, &payload)));
    let expected = Tlvs {
        alpn: Some(b"h2".to_vec()),
        authority: Some("api.a.example.com".into()),
        crc32c_verified: true,
        unique_id: Some(vec![0; 128]),
        ssl: Some(SslInfo {
            client: 0x07,
            verify: 0,
            version: Some("TLSv1.3".into()),
            common_name: Some("system:node:wörker".into()),
            cipher: Some("TLS_AES_128_GCM_SHA256".into()),
            sig_alg: Some("SHA256".into()),
            key_alg: Some("EC256".into()),
            unknown: vec![(0x2a, b"sub".to_vec())],
        }),
        netns: Some("ns-1".into()),
        unknown: vec![
            (0xf0, b"experiment".to_vec()),
            (0xf0, vec![]),
            (0x21, b"top-level 0x21 is not a registered type".to_vec()),
        ],
    };
    assert_eq!(header.tlvs, expected);
    let ssl = header.tlvs.ssl.unwrap();
    assert!(ssl.client_ssl());
    assert!(ssl.client_cert_verified());
}

#[test]
fn v2_tlvs_must_fill_the_length_exactly() {
    use MalformedReason::*;
    let cases: Vec<Vec<u8>> = vec![
        vec![0x01],
        vec![0x01, 0x00],
        vec![0x01, 0x00, 0x01],
        vec![0x01, 0x00, 0x03, b'h', b'2'],
        [tlv(PP2_TYPE_ALPN, b"h2"), vec![0xe0]].concat(),
        [tlv(PP2_TYPE_ALPN, b"h2"), vec![0xe0, 0x00]].concat(),
        vec![0x04, 0xff, 0xff, 0, 0, 0],
    ];
    for tail in cases {
        let mut payload = TCP4_BLOCK.to_vec();
        payload.extend_from_slice(&tail);
        assert_eq!(
            parse_checked(&v2(0x21, 0x11, &payload)),
            malformed(TlvOverrun),
            "{tail:?}"
        );
    }
}

#[test]
fn v2_bad_tlv_values() {
    use MalformedReason::*;
    let ssl_with = |sub: &[u8]| tlv(PP2_TYPE_SSL, &[&[1, 0, 0, 0, 0][..], sub].concat());
    let cases: Vec<(Vec<u8>, MalformedReason)> = vec![
        (
            [tlv(PP2_TYPE_ALPN, b"h2"), tlv(PP2_TYPE_ALPN, b"h2")].concat(),
            DuplicateTlv { tlv_type: 1 },
        ),
        (
            [tlv(PP2_TYPE_AUTHORITY, b"a"), tlv(PP2_TYPE_AUTHORITY, b"b")].concat(),
            DuplicateTlv { tlv_type: 2 },
        ),
        (
            [tlv(PP2_TYPE_UNIQUE_ID, b""), tlv(PP2_TYPE_UNIQUE_ID, b"")].concat(),
            DuplicateTlv { tlv_type: 5 },
        ),
        (
            [tlv(PP2_TYPE_NETNS, b"a"), tlv(PP2_TYPE_NETNS, b"a")].concat(),
            DuplicateTlv { tlv_type: 0x30 },
        ),
        (
            [ssl_with(&[]), ssl_with(&[])].concat(),
            DuplicateTlv { tlv_type: 0x20 },
        ),
        (
            [tlv(PP2_TYPE_CRC32C, &[0; 4]), tlv(PP2_TYPE_CRC32C, &[0; 4])].concat(),
            DuplicateTlv { tlv_type: 3 },
        ),
        (tlv(PP2_TYPE_CRC32C, &[0; 3]), BadCrc32cLength),
        (tlv(PP2_TYPE_CRC32C, &[0; 5]), BadCrc32cLength),
        (tlv(PP2_TYPE_CRC32C, &[]), BadCrc32cLength),
        (tlv(PP2_TYPE_AUTHORITY, b""), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a b"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a..b"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b".a"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a."), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a:443"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a/b"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"a\0"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, b"\xff\xfe"), BadAuthority),
        (tlv(PP2_TYPE_AUTHORITY, "a\u{85}b".as_bytes()), BadAuthority),
        (
            tlv(PP2_TYPE_AUTHORITY, "a\u{3000}b".as_bytes()),
            BadAuthority,
        ),
        (
            tlv(PP2_TYPE_AUTHORITY, "x".repeat(64).as_bytes()),
            BadAuthority,
        ),
        (
            tlv(
                PP2_TYPE_AUTHORITY,
                (vec!["x".repeat(63); 4].join(".") + ".x").as_bytes(),
            ),
            BadAuthority,
        ),
        (tlv(PP2_TYPE_UNIQUE_ID, &[1; 129]), UniqueIdTooLong),
        (tlv(PP2_TYPE_SSL, &[]), SslTooShort),
        (tlv(PP2_TYPE_SSL, &[1, 0, 0, 0]), SslTooShort),
        (ssl_with(&[0x21]), TlvOverrun),
        (ssl_with(&[0x21, 0, 5, b'a']), TlvOverrun),
        (
            ssl_with(&tlv(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3\xc3\xa9")),
            SslBadString,
        ),
        (
            ssl_with(&tlv(PP2_SUBTYPE_SSL_CIPHER, b"\x80")),
            SslBadString,
        ),
        (
            ssl_with(&tlv(PP2_SUBTYPE_SSL_SIG_ALG, b"\xff")),
            SslBadString,
        ),
        (
            ssl_with(&tlv(PP2_SUBTYPE_SSL_KEY_ALG, b"\xff")),
            SslBadString,
        ),
        (ssl_with(&tlv(PP2_SUBTYPE_SSL_CN, b"\xc3")), SslBadString),
        (
            ssl_with(&[tlv(0x22, b"a"), tlv(0x22, b"a")].concat()),
            DuplicateTlv { tlv_type: 0x22 },
        ),
        (tlv(PP2_TYPE_NETNS, "é".as_bytes()), BadNetns),
    ];
    for (tlvs, reason) in cases {
        let mut payload = TCP4_BLOCK.to_vec();
        payload.extend_from_slice(&tlvs);
        assert_eq!(
            parse_checked(&v2(0x21, 0x11, &payload)),
            malformed(reason),
            "{tlvs:?}"
        );
    }
}

#[test]
fn v2_host_names_accepted() {
    let longest_label = "x".repeat(63);
    let longest_name = [
        &"x".repeat(63)[..],
        &"x".repeat(63),
        &"x".repeat(63),
        &"x".repeat(63),
    ]
    .join(".")[..255]
        .to_owned();
    for name in [
        "a",
        "kubernetes.default.svc",
        "API.Example.COM",
        "_acme-challenge.x-1.example",
        "10.96.0.1",
        "bücher.example",
        "例え.テスト",
        &longest_label,
        &longest_name,
    ] {
        let mut payload = TCP4_BLOCK.to_vec();
        payload.extend_from_slice(&tlv(PP2_TYPE_AUTHORITY, name.as_bytes()));
        let header = valid(&v2(0x21, 0x11, &payload));
        assert_eq!(header.tlvs.authority.as_deref(), Some(name));
    }
}

#[test]
fn v2_checksum_is_verified() {
    let mut payload = TCP4_BLOCK.to_vec();
    payload.extend_from_slice(&tlv(PP2_TYPE_AUTHORITY, b"api.example.com"));
    let good = with_crc(v2(0x21, 0x11, &payload));
    assert!(valid(&good).tlvs.crc32c_verified);
    // Flipping any bit of an address, a port, a TLV value or the checksum
    // itself is caught.
    let value_bytes = (16..28).chain(31..46).chain(good.len() - 4..good.len());
    for at in value_bytes {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[at] ^= 1 << bit;
            assert!(
                matches!(parse(&bad), Err(ProxyError::BadChecksum { .. })),
                "byte {at} bit {bit}"
            );
        }
    }
    // A checksum is verified whatever its position.
    let mut payload = TCP4_BLOCK.to_vec();
    payload.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
    payload.extend_from_slice(&tlv(PP2_TYPE_UNIQUE_ID, b"abc"));
    let mut buf = v2(0x21, 0x11, &payload);
    let sum = crc32c(&buf);
    buf[31..35].copy_from_slice(&sum.to_be_bytes());
    assert!(valid(&buf).tlvs.crc32c_verified);
    buf[31..35].copy_from_slice(&sum.to_le_bytes());
    assert_eq!(
        parse(&buf),
        Err(ProxyError::BadChecksum {
            received: sum.swap_bytes(),
            computed: sum
        })
    );
}

#[test]
fn v2_checksum_checked_before_values() {
    // A corrupted authority is reported as corruption.
    let mut payload = TCP4_BLOCK.to_vec();
    payload.extend_from_slice(&tlv(PP2_TYPE_AUTHORITY, b"api.example.com"));
    let mut buf = with_crc(v2(0x21, 0x11, &payload));
    buf[31] = b' ';
    assert!(matches!(parse(&buf), Err(ProxyError::BadChecksum { .. })));
}

// ---------------------------------------------------------------- stacking

#[test]
fn stacked_headers_parse_one_after_the_other() {
    // A cloud load balancer's v2 header, then the agent's, then the stream.
    let lb = ProxyHeader {
        tlvs: Tlvs {
            unique_id: Some(b"lb-7".to_vec()),
            ..Tlvs::default()
        },
        ..ProxyHeader::tcp(Version::V2, sa("203.0.113.9:50000"), sa("198.51.100.1:443"))
    };
    let agent = ProxyHeader::tcp(Version::V2, sa("10.0.5.6:41000"), sa("10.96.0.1:443"));
    let crc = RenderOptions {
        crc32c: true,
        noop: None,
    };
    let mut stream = lb.render_v2(&crc).unwrap();
    stream.extend_from_slice(&agent.render_v2(&RenderOptions::default()).unwrap());
    stream.extend_from_slice(b"PROXY TCP4 10.0.5.6 10.96.0.1 41000 443\r\n");
    stream.extend_from_slice(b"\x16\x03\x01 rest of the stream");

    let (first, used) = parse(&stream).unwrap();
    assert_eq!(first.tlvs.unique_id.as_deref(), Some(&b"lb-7"[..]));
    assert!(first.tlvs.crc32c_verified);
    let rest = &stream[used..];
    let (second, used) = parse(rest).unwrap();
    assert_eq!(second, agent);
    let rest = &rest[used..];
    let (third, used) = parse(rest).unwrap();
    assert_eq!(third.version, Version::V1);
    assert_eq!(third.addresses, agent.addresses);
    let rest = &rest[used..];
    assert_eq!(rest, b"\x16\x03\x01 rest of the stream");
    assert_eq!(detect(rest), Err(ProxyError::NotProxy));
}

// ---------------------------------------------------------------- rendering

#[test]
fn round_trips() {
    let pairs = [
        ("1.2.3.4:1", "5.6.7.8:65535"),
        ("0.0.0.0:0", "255.255.255.255:0"),
        ("[::]:0", "[::1]:443"),
        ("[2001:db8:0:0:1:0:0:1]:1", "[fe80::1:0:0:0]:2"),
        ("[::ffff:10.0.0.1]:80", "[64:ff9b::c000:201]:6443"),
        (
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
            "[1:0:0:1:0:0:0:1]:9",
        ),
    ];
    for (source, destination) in pairs {
        for version in [Version::V1, Version::V2] {
            assert_round_trip(&ProxyHeader::tcp(version, sa(source), sa(destination)));
        }
        for crc32c in [false, true] {
            let mut header = ProxyHeader::tcp(Version::V2, sa(source), sa(destination));
            header.tlvs = all_tlvs();
            header.tlvs.crc32c_verified = crc32c;
            assert_round_trip(&header);
        }
    }
    let unknown = ProxyHeader {
        version: Version::V1,
        command: Command::Proxy,
        addresses: None,
        tlvs: Tlvs::default(),
    };
    assert_round_trip(&unknown);
    assert_eq!(unknown.render_v1().unwrap(), b"PROXY UNKNOWN\r\n");
    assert_round_trip(&ProxyHeader {
        version: Version::V2,
        ..unknown
    });
    assert_round_trip(&ProxyHeader::local());
    assert_round_trip(&ProxyHeader {
        tlvs: Tlvs {
            crc32c_verified: true,
            ..all_tlvs()
        },
        ..ProxyHeader::local()
    });
}

#[test]
fn noop_padding_is_skipped() {
    let header = ProxyHeader::tcp(Version::V2, sa("1.2.3.4:1"), sa("5.6.7.8:2"));
    for (crc32c, padding) in [(false, 0), (true, 1), (true, 500)] {
        let bytes = header
            .render_v2(&RenderOptions {
                crc32c,
                noop: Some(padding),
            })
            .unwrap();
        assert_eq!(
            bytes.len(),
            28 + 3 + usize::from(padding) + if crc32c { 7 } else { 0 }
        );
        let (parsed, _) = parse(&bytes).unwrap();
        assert_eq!(parsed.addresses, header.addresses);
        assert_eq!(parsed.tlvs.crc32c_verified, crc32c);
        assert!(!parsed.tlvs.has_values());
    }
}

#[test]
fn ipv6_scope_is_not_carried() {
    let scoped = SocketAddr::V6(std::net::SocketAddrV6::new(
        "fe80::1".parse().unwrap(),
        80,
        7,
        3,
    ));
    let header = ProxyHeader::tcp(Version::V2, scoped, sa("[fe80::2]:443"));
    for bytes in [
        header.render_v1().unwrap(),
        header.render_v2(&RenderOptions::default()).unwrap(),
    ] {
        let (parsed, _) = parse(&bytes).unwrap();
        assert_eq!(parsed.addresses.unwrap().source, sa("[fe80::1]:80"));
    }
}

#[test]
fn render_errors() {
    let tcp = ProxyHeader::tcp(Version::V2, sa("1.2.3.4:1"), sa("5.6.7.8:2"));
    let opts = RenderOptions::default();
    assert_eq!(
        ProxyHeader::local().render_v1(),
        Err(RenderError::LocalInV1)
    );
    let with = |tlvs: Tlvs| ProxyHeader {
        tlvs,
        ..tcp.clone()
    };
    assert_eq!(with(all_tlvs()).render_v1(), Err(RenderError::TlvsInV1));
    // A parsed v2 header with only a verified checksum converts to v1.
    assert!(with(Tlvs {
        crc32c_verified: true,
        ..Tlvs::default()
    })
    .render_v1()
    .is_ok());
    let mixed = ProxyHeader::tcp(Version::V2, sa("1.2.3.4:1"), sa("[::1]:2"));
    assert_eq!(mixed.render_v1(), Err(RenderError::MixedFamilies));
    assert_eq!(mixed.render_v2(&opts), Err(RenderError::MixedFamilies));
    let local_with_addresses = ProxyHeader {
        command: Command::Local,
        ..tcp.clone()
    };
    assert_eq!(
        local_with_addresses.render_v2(&opts),
        Err(RenderError::AddressesWithLocal)
    );

    let bad_tlvs = [
        (
            Tlvs {
                authority: Some("not a host".into()),
                ..Tlvs::default()
            },
            RenderError::InvalidTlv(MalformedReason::BadAuthority),
        ),
        (
            Tlvs {
                unique_id: Some(vec![0; 129]),
                ..Tlvs::default()
            },
            RenderError::InvalidTlv(MalformedReason::UniqueIdTooLong),
        ),
        (
            Tlvs {
                netns: Some("ns-é".into()),
                ..Tlvs::default()
            },
            RenderError::InvalidTlv(MalformedReason::BadNetns),
        ),
        (
            Tlvs {
                ssl: Some(SslInfo {
                    cipher: Some("é".into()),
                    ..SslInfo::default()
                }),
                ..Tlvs::default()
            },
            RenderError::InvalidTlv(MalformedReason::SslBadString),
        ),
        (
            Tlvs {
                ssl: Some(SslInfo {
                    unknown: vec![(PP2_SUBTYPE_SSL_CN, vec![])],
                    ..SslInfo::default()
                }),
                ..Tlvs::default()
            },
            RenderError::KnownTypeAsUnknown { tlv_type: 0x22 },
        ),
        (
            Tlvs {
                unknown: vec![(PP2_TYPE_NOOP, vec![])],
                ..Tlvs::default()
            },
            RenderError::KnownTypeAsUnknown { tlv_type: 4 },
        ),
        (
            Tlvs {
                unknown: vec![(PP2_TYPE_AUTHORITY, b"a".to_vec())],
                ..Tlvs::default()
            },
            RenderError::KnownTypeAsUnknown { tlv_type: 2 },
        ),
        (
            Tlvs {
                unknown: vec![(0xe0, vec![0; 65536])],
                ..Tlvs::default()
            },
            RenderError::TooLong,
        ),
        (
            Tlvs {
                unknown: vec![(0xe0, vec![0; 40000]), (0xe1, vec![0; 40000])],
                ..Tlvs::default()
            },
            RenderError::TooLong,
        ),
    ];
    for (tlvs, error) in bad_tlvs {
        assert_eq!(with(tlvs).render_v2(&opts), Err(error));
    }
    // The largest header the length field allows renders; one more byte does not.
    let fits = with(Tlvs {
        unknown: vec![(0xe0, vec![0; 65535 - 12 - 3])],
        ..Tlvs::default()
    });
    assert_eq!(fits.render_v2(&opts).unwrap().len(), 65535 + 16);
    let noop = RenderOptions {
        crc32c: false,
        noop: Some(0),
    };
    assert_eq!(fits.render_v2(&noop), Err(RenderError::TooLong));
}

// ---------------------------------------------------------------- mutations

/// xorshift64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let mut payload = TCP4_BLOCK.to_vec();
    payload.extend_from_slice(&tlv(PP2_TYPE_AUTHORITY, b"api.a.example.com"));
    let mut all = ProxyHeader::tcp(Version::V2, sa("[2001:db8::1]:1"), sa("[::1]:2"));
    all.tlvs = all_tlvs();
    vec![
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
        b"PROXY TCP6 2001:db8::1 ::ffff:1.2.3.4 1 65535\r\n".to_vec(),
        b"PROXY UNKNOWN 1 2 3\r\n".to_vec(),
        v2(0x21, 0x11, &TCP4_BLOCK),
        with_crc(v2(0x21, 0x11, &payload)),
        v2(0x20, 0x00, &[]),
        all.render_v2(&RenderOptions {
            crc32c: true,
            noop: Some(3),
        })
        .unwrap(),
    ]
}

/// Checks that hold for any input: no panic, prefix consistency, parsed
/// headers round-trip, and detect agrees with parse.
fn check_any(buf: &[u8]) {
    let whole = parse(buf);
    for end in [0, 1, buf.len() / 2, buf.len().saturating_sub(1)] {
        let part = parse(&buf[..end.min(buf.len())]);
        assert!(
            part == Err(ProxyError::Incomplete) || part == whole,
            "{buf:?}"
        );
    }
    match detect(buf) {
        Err(e) => assert_eq!(whole, Err(e)),
        Ok(_) => assert!(!matches!(whole, Err(ProxyError::NotProxy))),
    }
    if let Ok((header, consumed)) = &whole {
        assert!(*consumed <= buf.len());
        assert_round_trip(header);
    }
}

#[test]
fn every_single_byte_change_is_handled() {
    for seed in seeds() {
        for at in 0..seed.len() {
            for value in [
                0x00, 0x01, 0x0a, 0x0d, 0x20, 0x2e, 0x30, 0x3a, 0x7f, 0x80, 0xff,
            ] {
                let mut mutant = seed.clone();
                mutant[at] = value;
                check_any(&mutant);
            }
            for bit in 0..8 {
                let mut mutant = seed.clone();
                mutant[at] ^= 1 << bit;
                check_any(&mutant);
            }
        }
    }
}

#[test]
fn random_mutations_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let seeds = seeds();
    for round in 0..20_000 {
        let mut buf = seeds[round % seeds.len()].clone();
        for _ in 0..=rng.below(4) {
            let len = buf.len();
            match rng.below(5) {
                0 if len > 0 => {
                    let at = rng.below(len);
                    buf[at] = rng.next() as u8;
                }
                1 if len > 0 => {
                    let at = rng.below(len);
                    buf.remove(at);
                }
                2 => {
                    let at = rng.below(len + 1);
                    buf.insert(at, rng.next() as u8);
                }
                3 => buf.truncate(rng.below(len + 1)),
                _ => buf.extend((0..rng.below(8)).map(|_| rng.next() as u8)),
            }
        }
        check_any(&buf);
    }
}
