//! Fuzzes the PROXY protocol parser: it must never panic, `detect` must agree
//! with it, a decided answer must not change with more bytes, `Incomplete`
//! must stay below the size limit, and a parsed header must render (as v2
//! with and without checksum and padding, and as v1 when v1 can express it)
//! to bytes that parse back to the same header.
#![no_main]

use apiway_wire::proxy::{
    detect, parse_with, Command, ParseOptions, ProxyError, ProxyHeader, RenderOptions, Version,
    V1_MAX_LEN, V2_FIXED_LEN,
};
use libfuzzer_sys::fuzz_target;

/// A small limit makes `TooLong` reachable with short inputs.
const SMALL: ParseOptions = ParseOptions { max_v2_payload: 64 };
/// Rendered headers may use the whole length field.
const LARGEST: ParseOptions = ParseOptions {
    max_v2_payload: 65535,
};

fuzz_target!(|data: &[u8]| {
    for options in [SMALL, ParseOptions::default()] {
        check(data, &options);
    }
});

fn check(data: &[u8], options: &ParseOptions) {
    let whole = parse_with(data, options);
    let limit = match detect(data) {
        Ok(Version::V1) => V1_MAX_LEN,
        Ok(Version::V2) => V2_FIXED_LEN + options.max_v2_payload,
        Err(e) => {
            assert_eq!(whole, Err(e), "detect and parse disagree");
            return;
        }
    };
    match &whole {
        Err(ProxyError::NotProxy) => panic!("NotProxy after detect recognized a header"),
        Err(ProxyError::Incomplete) => assert!(data.len() < limit, "Incomplete at the limit"),
        Err(ProxyError::TooLong { limit: reported }) => assert_eq!(*reported, limit),
        Err(_) => {}
        Ok((header, consumed)) => {
            assert!(*consumed <= data.len() && *consumed <= limit);
            round_trips(header);
        }
    }
    // A shorter buffer is undecided or already gives the same answer.
    for end in [data.len() / 2, data.len().saturating_sub(1), 16, 13] {
        if end < data.len() {
            let part = parse_with(data.get(..end).unwrap_or_default(), options);
            assert!(
                part == Err(ProxyError::Incomplete) || part == whole,
                "{part:?} vs {whole:?}"
            );
        }
    }
}

fn round_trips(header: &ProxyHeader) {
    for (crc32c, noop) in [
        (header.tlvs.crc32c_verified, None),
        (true, Some(3)),
        (false, Some(0)),
    ] {
        let bytes = header
            .render_v2(&RenderOptions { crc32c, noop })
            .expect("a parsed header renders as v2");
        let (again, consumed) = parse_with(&bytes, &LARGEST).expect("a rendered header parses");
        assert_eq!(consumed, bytes.len());
        let mut expected = header.clone();
        expected.version = Version::V2;
        expected.tlvs.crc32c_verified = crc32c;
        assert_eq!(again, expected);
    }
    if header.command == Command::Proxy && !header.tlvs.has_values() {
        let bytes = header.render_v1().expect("renders as v1");
        let (again, consumed) = parse_with(&bytes, &LARGEST).expect("a rendered v1 line parses");
        assert_eq!(consumed, bytes.len());
        assert_eq!(again.version, Version::V1);
        assert_eq!(again.addresses, header.addresses);
    }
}
