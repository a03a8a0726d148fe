//! Fuzzes the ClientHello parser: it must never panic, a decided answer must
//! not change with more bytes, and a parsed hello must parse the same after
//! being re-cut into other record sizes.
#![no_main]

use apiway_wire::sni::{parse_client_hello, refragment, SniError, DEFAULT_MAX_HELLO_LEN};
use libfuzzer_sys::fuzz_target;

/// A small limit makes `TooLarge` reachable with short inputs.
const SMALL_MAX_LEN: usize = 512;

fuzz_target!(|data: &[u8]| {
    for max_len in [SMALL_MAX_LEN, DEFAULT_MAX_HELLO_LEN] {
        check(data, max_len);
    }
});

fn check(data: &[u8], max_len: usize) {
    let whole = parse_client_hello(data, max_len);
    match &whole {
        Err(SniError::Incomplete) => assert!(data.len() < max_len, "Incomplete at the limit"),
        Err(SniError::TooLarge { limit }) => assert_eq!(*limit, max_len),
        Err(SniError::NotTls | SniError::Malformed(_)) => {}
        Ok(hello) => {
            assert!(hello.records >= 1);
            assert!(hello.consumed <= data.len() && hello.consumed <= max_len);
            if let Some(name) = &hello.server_name {
                assert!((1..=255).contains(&name.len()));
            }
            // The input length picks a fragment size, so the corpus explores many.
            for max_fragment in [1, data.len() % 700 + 1] {
                let cut = refragment(data, max_fragment).expect("a parsed hello re-cuts");
                let again = parse_client_hello(&cut, usize::MAX).expect("re-cut hello parses");
                assert_eq!(again.server_name, hello.server_name);
                assert_eq!(again.alpn, hello.alpn);
                assert_eq!(again.legacy_version, hello.legacy_version);
                assert_eq!(cut.len() - again.consumed, data.len() - hello.consumed);
            }
        }
    }
    // A shorter buffer is undecided or already gives the same answer.
    for end in [data.len() / 2, data.len().saturating_sub(1)] {
        let part = parse_client_hello(data.get(..end).unwrap_or_default(), max_len);
        assert!(
            part == Err(SniError::Incomplete) || part == whole,
            "{part:?} vs {whole:?}"
        );
    }
}
