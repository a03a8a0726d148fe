//! Fuzzes the CONNECT response parser: it must never panic, `Incomplete`
//! must stay below the limit, a decided answer must not change with more
//! bytes, and a parsed head must end inside the buffer.
#![no_main]

use apiway_wire::connect_response::{parse, ConnectResponseError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for max in [64, apiway_wire::connect_response::DEFAULT_MAX_RESPONSE_LEN] {
        let whole = parse(data, max);
        match &whole {
            Err(ConnectResponseError::Incomplete) => assert!(data.len() < max),
            Err(ConnectResponseError::TooLong { limit }) => assert_eq!(*limit, max),
            Ok((head, consumed)) => {
                assert!(*consumed <= data.len() && *consumed <= max);
                assert!((200..1000).contains(&head.status));
                // The head alone parses to the same answer.
                assert_eq!(parse(&data[..*consumed], max).as_ref(), Ok(&(head.clone(), *consumed)));
            }
            Err(_) => {}
        }
        for end in [data.len() / 2, data.len().saturating_sub(1)] {
            if end < data.len() {
                let part = parse(&data[..end], max);
                let decided_same = match (&part, &whole) {
                    (Ok(a), Ok(b)) => a == b,
                    (Err(a), Err(b)) => a == b,
                    _ => false,
                };
                assert!(
                    part == Err(ConnectResponseError::Incomplete) || decided_same,
                    "{part:?} vs {whole:?}"
                );
            }
        }
    }
});
