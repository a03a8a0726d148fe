//! Fuzzes the static token file parser: never panics; every token it
//! returns has a token and a user, and no empty group or audience.
#![no_main]

use apiway_wire::token_file::parse_token_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(tokens) = parse_token_file(&text) {
        for t in &tokens {
            assert!(!t.token.is_empty() && !t.user.is_empty());
            assert!(t.groups.iter().chain(&t.audiences).all(|g| !g.is_empty()));
        }
    }
});
