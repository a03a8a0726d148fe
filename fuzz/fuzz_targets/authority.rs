//! Fuzzes the `host:port` parser: it must never panic, whatever parses
//! must display as text that parses back to the same value (and displays
//! identically again), and a default port must only fill in a missing one.
#![no_main]

use apiway_wire::authority::{Authority, AuthorityError, MAX_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = Authority::parse_bytes(data);
    if data.len() > MAX_LEN {
        assert_eq!(parsed, Err(AuthorityError::TooLong { limit: MAX_LEN }));
    }
    if let Ok(authority) = &parsed {
        assert_ne!(authority.port, 0);
        let text = authority.to_string();
        assert_eq!(Authority::parse(&text).as_ref(), Ok(authority), "{text}");
        assert_eq!(Authority::parse_bytes(text.as_bytes()).as_ref(), Ok(authority));
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    assert_eq!(Authority::parse(text), parsed);
    match Authority::parse_with_default_port(text, 6443) {
        Ok(with_default) => {
            // An explicit port is kept; otherwise the default fills in.
            if let Ok(authority) = &parsed {
                assert_eq!(&with_default, authority);
            }
            let again = Authority::parse(&with_default.to_string());
            assert_eq!(again.as_ref(), Ok(&with_default));
        }
        // Whatever parses with its own port parses with a default too.
        Err(e) => assert!(parsed.is_err(), "{text:?}: {e:?} with a default port"),
    }
});
