//! Property test of `apiway_wire::authority`: authorities built from random
//! parts display as text that parses back to the same value, and random
//! edits of valid texts never panic the parser and keep that property.
//! A small deterministic generator stands in for a property-testing crate
//! (the wire crate takes no new dependencies); the fuzz target `authority`
//! checks the same properties on arbitrary bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use apiway_wire::authority::{Authority, Host, MAX_LABEL_LEN, MAX_NAME_LEN};

/// xorshift64*: reproducible, good enough to pick parts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn label(rng: &mut Rng) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    let longest = if rng.below(8) == 0 { MAX_LABEL_LEN } else { 10 };
    let len = 1 + rng.below(longest);
    (0..len)
        .map(|_| char::from(CHARS[rng.below(CHARS.len())]))
        .collect()
}

/// A host text that must parse: a name (possibly with a trailing dot and
/// mixed case), an IPv4 address or a bracketed IPv6 address.
fn host(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => Ipv4Addr::from(rng.next() as u32).to_string(),
        1 => {
            let bits = (u128::from(rng.next()) << 64) | u128::from(rng.next());
            let bits = if rng.below(2) == 0 {
                bits
            } else {
                bits & 0xffff
            };
            format!("[{}]", Ipv6Addr::from(bits))
        }
        _ => loop {
            let mut name = (0..1 + rng.below(5))
                .map(|_| label(rng))
                .collect::<Vec<_>>()
                .join(".");
            // The last label of a name is never all digits.
            name.push_str(".k8s");
            if name.len() <= MAX_NAME_LEN {
                if rng.below(3) == 0 {
                    name.push('.');
                }
                break name;
            }
        },
    }
}

#[test]
fn generated_authorities_round_trip() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let host_text = host(&mut rng);
        let port = 1 + rng.below(65535) as u16;
        let text = format!("{host_text}:{port}");
        let parsed = Authority::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.port, port);
        if let Host::Name(name) = &parsed.host {
            assert_eq!(name, &host_text.trim_end_matches('.').to_ascii_lowercase());
        }
        let shown = parsed.to_string();
        assert_eq!(Authority::parse(&shown).as_ref(), Ok(&parsed), "{text}");
        assert_eq!(Authority::parse(&shown).unwrap().to_string(), shown);
        let without_port = Authority::parse_with_default_port(&host_text, port);
        assert_eq!(without_port.as_ref(), Ok(&parsed), "{host_text}");
    }
}

#[test]
fn edited_texts_never_panic_and_still_round_trip() {
    const BYTES: &[u8] = b"[]:.%@-_ aZ09\xff\x00";
    let mut rng = Rng(42);
    for _ in 0..20_000 {
        let mut text = format!("{}:{}", host(&mut rng), rng.below(70_000)).into_bytes();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(text.len() + 1);
            match rng.below(3) {
                0 if at < text.len() => {
                    text.remove(at);
                }
                1 if at < text.len() => text[at] = BYTES[rng.below(BYTES.len())],
                _ => text.insert(at, BYTES[rng.below(BYTES.len())]),
            }
        }
        if let Ok(parsed) = Authority::parse_bytes(&text) {
            let shown = parsed.to_string();
            assert_eq!(Authority::parse(&shown), Ok(parsed), "{shown}");
        }
    }
}
