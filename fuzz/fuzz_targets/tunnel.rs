//! Fuzzes the tunnel's message decoding: a byte stream is cut into gRPC
//! messages and each decoded into a frame. Nothing may panic; a message
//! length is never less than its prefix; a decoded frame encodes to a
//! message that decodes to the same frame.
#![no_main]

use apiway_wire::tunnel::{decode_message, message_len, PREFIX_LEN};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = Bytes::copy_from_slice(data);
    // A small limit makes `TooLong` reachable.
    let max = 1 << 16;
    while let Ok(Some(n)) = message_len(&rest, max) {
        assert!(n >= PREFIX_LEN && n <= PREFIX_LEN + max);
        if n > rest.len() {
            break;
        }
        let message = rest.split_to(n);
        if let Ok(frame) = decode_message(message) {
            let again = decode_message(frame.clone().to_message()).expect("re-encoded frame decodes");
            assert_eq!(again, frame);
        }
    }
});
