//! PROXY headers captured from real senders, HAProxy 2.6 and nginx 1.22
//! (see `testdata/proxy/README.md`): each file holds the bytes a listener
//! received on one connection, the header(s) then the proxied stream.

use std::net::SocketAddr;

use apiway_wire::proxy::{
    detect, parse, Addresses, Command, ProxyError, ProxyHeader, RenderOptions, SslInfo, Tlvs,
    Version,
};

fn read(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/proxy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn sa(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn addresses(source: &str, destination: &str) -> Option<Addresses> {
    Some(Addresses {
        source: sa(source),
        destination: sa(destination),
    })
}

/// Parses the header at the start of `bytes`, checks every shorter prefix
/// is `Incomplete`, and that the header renders back to the same value.
fn parse_header(bytes: &[u8]) -> (ProxyHeader, usize) {
    let (header, consumed) = parse(bytes).unwrap();
    for end in 0..consumed {
        assert_eq!(
            parse(&bytes[..end]),
            Err(ProxyError::Incomplete),
            "prefix {end}"
        );
    }
    let options = RenderOptions {
        crc32c: header.tlvs.crc32c_verified,
        noop: None,
    };
    let again = header.render(&options).unwrap();
    assert_eq!(parse(&again).unwrap(), (header.clone(), again.len()));
    (header, consumed)
}

fn v1(source: &str, destination: &str) -> ProxyHeader {
    ProxyHeader::tcp(Version::V1, sa(source), sa(destination))
}

#[test]
fn haproxy_v1_tcp4() {
    let bytes = read("haproxy-v1-tcp4.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header, v1("127.0.0.1:42720", "127.0.0.1:18404"));
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v1_tcp6() {
    let bytes = read("haproxy-v1-tcp6.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header, v1("[::1]:34456", "[::1]:18405"));
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v1_ipv4_mapped_is_written_dotted() {
    // HAProxy writes IPv4-mapped addresses as `::ffff:127.0.0.1`, outside the
    // specification's hex-groups grammar; the parser accepts that form.
    let bytes = read("haproxy-v1-v4mapped.bin");
    assert!(bytes.starts_with(b"PROXY TCP6 ::ffff:127.0.0.1 ::ffff:127.0.0.1 "));
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(
        header,
        v1("[::ffff:127.0.0.1]:35062", "[::ffff:127.0.0.1]:18406")
    );
    assert_eq!(&bytes[consumed..], b"ping\n");
    // Rendered back in hex groups only.
    assert!(header
        .render_v1()
        .unwrap()
        .starts_with(b"PROXY TCP6 ::ffff:7f00:1 ::ffff:7f00:1 "));
}

#[test]
fn nginx_v1() {
    let bytes = read("nginx-v1-tcp4.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header, v1("127.0.0.1:59106", "127.0.0.1:18412"));
    assert_eq!(&bytes[consumed..], b"ping\n");

    let bytes = read("nginx-v1-tcp6.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header, v1("[::1]:39306", "[::1]:18413"));
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v2_tcp4_with_checksum_and_unique_id() {
    let bytes = read("haproxy-v2-tcp4-crc32c-unique-id.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header.version, Version::V2);
    assert_eq!(header.command, Command::Proxy);
    assert_eq!(
        header.addresses,
        addresses("127.0.0.1:48402", "127.0.0.1:18401")
    );
    assert!(header.tlvs.crc32c_verified);
    // unique-id-format %{+X}o %ci:%cp_%fi:%fp_%Ts_%rt:%pid
    let id = String::from_utf8(header.tlvs.unique_id.clone().unwrap()).unwrap();
    assert!(id.starts_with("7F000001:BD12_7F000001:47E1_"), "{id}");
    assert_eq!(
        Tlvs {
            unique_id: None,
            crc32c_verified: false,
            ..header.tlvs
        },
        Tlvs::default()
    );
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v2_tls_terminated_with_authority_alpn_and_ssl() {
    let bytes = read("haproxy-v2-tls-authority-ssl.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(
        header.addresses,
        addresses("127.0.0.1:57452", "127.0.0.1:18402")
    );
    let tlvs = &header.tlvs;
    assert!(tlvs.crc32c_verified);
    assert_eq!(tlvs.authority.as_deref(), Some("api.a.example.com"));
    // Sent although `alpn` is not among the proxy-v2-options.
    assert_eq!(tlvs.alpn.as_deref(), Some(&b"h2"[..]));
    assert!(tlvs.unique_id.as_deref().unwrap().starts_with(b"7F000001:"));
    assert_eq!(
        tlvs.ssl,
        Some(SslInfo {
            client: SslInfo::CLIENT_SSL | SslInfo::CLIENT_CERT_CONN | SslInfo::CLIENT_CERT_SESS,
            verify: 0,
            version: Some("TLSv1.3".into()),
            common_name: Some("system:node:worker-1".into()),
            cipher: Some("TLS_AES_256_GCM_SHA384".into()),
            sig_alg: Some("RSA-SHA256".into()),
            key_alg: Some("RSA2048".into()),
            unknown: vec![],
        })
    );
    assert!(tlvs.ssl.as_ref().unwrap().client_cert_verified());
    assert_eq!(tlvs.netns, None);
    assert!(tlvs.unknown.is_empty());
    // The proxied stream is the decrypted client data.
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v2_tcp6_and_ipv4_mapped() {
    let bytes = read("haproxy-v2-tcp6-crc32c.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header.addresses, addresses("[::1]:40056", "[::1]:18403"));
    assert!(header.tlvs.crc32c_verified);
    assert_eq!(&bytes[consumed..], b"ping\n");

    let bytes = read("haproxy-v2-v4mapped-crc32c.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(
        header.addresses,
        addresses("[::ffff:127.0.0.1]:48000", "[::ffff:127.0.0.1]:18407")
    );
    assert!(header.tlvs.crc32c_verified);
    assert_eq!(&bytes[consumed..], b"ping\n");
}

#[test]
fn haproxy_v2_health_check_is_local() {
    let bytes = read("haproxy-v2-local-health-check.bin");
    let (header, consumed) = parse_header(&bytes);
    assert_eq!(header.command, Command::Local);
    assert_eq!(header.addresses, None);
    assert!(header.tlvs.crc32c_verified);
    assert!(!header.tlvs.has_values());
    assert_eq!(consumed, bytes.len());
}

#[test]
fn haproxy_stacked_v2_then_v1() {
    // HAProxy chained to HAProxy: the outer proxy's v1 header reached the
    // inner one as stream data, and the inner one put its v2 header first.
    let bytes = read("haproxy-stacked-v2-then-v1.bin");
    let (inner, used) = parse_header(&bytes);
    assert_eq!(inner.version, Version::V2);
    assert_eq!(
        inner.addresses,
        addresses("127.0.0.1:56718", "127.0.0.1:18409")
    );
    assert!(inner.tlvs.crc32c_verified);
    let rest = &bytes[used..];
    assert_eq!(detect(rest), Ok(Version::V1));
    let (outer, used) = parse_header(rest);
    assert_eq!(outer, v1("127.0.0.1:47360", "127.0.0.1:18410"));
    assert_eq!(&rest[used..], b"ping\n");
}

#[test]
fn every_checksummed_capture_detects_every_bit_flip_after_the_fixed_part() {
    for name in [
        "haproxy-v2-tcp4-crc32c-unique-id.bin",
        "haproxy-v2-tls-authority-ssl.bin",
        "haproxy-v2-tcp6-crc32c.bin",
        "haproxy-v2-local-health-check.bin",
    ] {
        let bytes = read(name);
        let (_, consumed) = parse(&bytes).unwrap();
        // HAProxy puts the checksum TLV first, right after the addresses.
        let address_len = match bytes[13] {
            0x11 => 12,
            0x21 => 36,
            _ => 0,
        };
        let checksum_type_at = 16 + address_len;
        assert_eq!(bytes[checksum_type_at], 0x03, "{name}");
        for at in 16..consumed {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << bit;
                match parse(&bad) {
                    // A flipped TLV length breaks the structure instead.
                    Err(ProxyError::BadChecksum { .. } | ProxyError::Malformed(_)) => {}
                    // The protocol cannot protect the checksum's own type
                    // byte: changed, the TLV is no longer a checksum.
                    Ok((header, _)) if at == checksum_type_at => {
                        assert!(!header.tlvs.crc32c_verified)
                    }
                    other => panic!("{name} byte {at} bit {bit}: {other:?}"),
                }
            }
        }
    }
}
