//! Fuzzes the CONNECT request parser: it must never panic, a decided answer
//! must not change with more bytes, `Incomplete` must stay below the limit,
//! `consumed` must lie within both, every error must map to an answer, and a
//! parsed authority must render to text that parses back to itself.
#![no_main]

use apiway_wire::connect::{parse, Authority, ConnectError, DEFAULT_MAX_HEAD_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small limit makes `TooLarge` reachable with short inputs.
    for limit in [64, DEFAULT_MAX_HEAD_LEN] {
        check(data, limit);
    }
});

fn check(data: &[u8], limit: usize) {
    let whole = parse(data, limit);
    match &whole {
        Err(ConnectError::Incomplete) => assert!(data.len() < limit, "Incomplete at the limit"),
        Err(ConnectError::TooLarge { limit: reported }) => {
            assert_eq!(*reported, limit);
            assert!(data.len() >= limit);
        }
        Err(e) => assert!(e.status().is_some(), "{e:?} has no answer"),
        Ok((request, consumed)) => {
            assert!(*consumed <= data.len() && *consumed <= limit);
            let text = request.authority.to_string();
            assert_eq!(
                Authority::parse(&text).as_ref(),
                Ok(&request.authority),
                "{text}"
            );
            let again = parse(data.get(..*consumed).unwrap_or_default(), limit);
            assert_eq!(
                again.as_ref().map(|(r, n)| (r, *n)),
                Ok((request, *consumed))
            );
        }
    }
    // A shorter buffer is undecided or already gives the same answer.
    for end in [data.len() / 2, data.len().saturating_sub(1), 8] {
        if end < data.len() {
            let part = parse(data.get(..end).unwrap_or_default(), limit);
            assert!(
                part == Err(ConnectError::Incomplete) || part == whole,
                "{part:?} vs {whole:?}"
            );
        }
    }
}
