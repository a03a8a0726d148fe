//! Property-style checks over many mutations of the captured vectors: bits
//! flipped, bytes set, lengths nudged, cut short, extended. The parser must
//! never panic, and its answers must hang together:
//! - a decided answer never changes when more bytes arrive;
//! - `Incomplete` only while the buffer is below `max_len`;
//! - a parsed hello survives being re-cut into other record sizes.

use apiway_wire::sni::{parse_client_hello, refragment, ClientHello, SniError};

const MUTANTS_PER_INPUT: usize = 800;

/// xorshift64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }
}

fn inputs() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/sni");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "testdata has the captured vectors");
    let mut inputs = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        for max in [100, 7, 1] {
            if let Ok(cut) = refragment(&bytes, max) {
                inputs.push((format!("{name} cut to {max}"), cut));
            }
        }
        inputs.push((name, bytes));
    }
    inputs
}

fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    const INTERESTING: [u8; 8] = [0, 1, 3, 0x16, 0x7f, 0x80, 0xfe, 0xff];
    for _ in 0..=rng.below(4) {
        let len = buf.len();
        match rng.below(8) {
            0 if len > 0 => {
                let at = rng.below(len);
                buf[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                buf[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => buf.truncate(rng.below(len)),
            3 => {
                for _ in 0..=rng.below(64) {
                    let b = rng.byte();
                    buf.push(b);
                }
            }
            4 => {
                let at = rng.below(len + 1);
                let b = rng.byte();
                buf.insert(at, b);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = rng.below(len - at).min(16) + 1;
                buf.drain(at..at + n);
            }
            6 if len > 0 => {
                let at = rng.below(len);
                let n = rng.below(len - at).min(32) + 1;
                let copy = buf[at..at + n].to_vec();
                let to = rng.below(len + 1);
                buf.splice(to..to, copy);
            }
            7 if len > 1 => {
                // Off-by-one in what may well be a length field.
                let at = rng.below(len - 1);
                let n = u16::from_be_bytes([buf[at], buf[at + 1]]);
                let n = if rng.below(2) == 0 {
                    n.wrapping_add(1)
                } else {
                    n.wrapping_sub(1)
                };
                buf[at..at + 2].copy_from_slice(&n.to_be_bytes());
            }
            _ => {}
        }
    }
}

fn check_valid(hello: &ClientHello, buf: &[u8], max_len: usize) {
    assert!(hello.records >= 1);
    assert!(hello.consumed <= buf.len() && hello.consumed <= max_len);
    if let Some(name) = &hello.server_name {
        assert!((1..=255).contains(&name.len()));
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)));
    }
    assert!(hello.alpn.iter().all(|p| !p.is_empty() && p.len() < 256));
}

fn check(rng: &mut Rng, buf: &[u8], max_len: usize, what: &str) {
    let whole = parse_client_hello(buf, max_len);
    match &whole {
        Err(SniError::Incomplete) => assert!(buf.len() < max_len, "{what}: Incomplete at limit"),
        Err(SniError::TooLarge { limit }) => assert_eq!(*limit, max_len, "{what}"),
        Err(SniError::NotTls | SniError::Malformed(_)) => {}
        Ok(hello) => {
            check_valid(hello, buf, max_len);
            let max_fragment = [1, rng.below(600) + 1][rng.below(2)];
            let cut = refragment(buf, max_fragment).expect("a parsed hello re-cuts");
            let again = parse_client_hello(&cut, usize::MAX).expect("re-cut hello parses");
            assert_eq!(again.server_name, hello.server_name, "{what}");
            assert_eq!(again.alpn, hello.alpn, "{what}");
            assert_eq!(again.legacy_version, hello.legacy_version, "{what}");
            assert_eq!(cut.len() - again.consumed, buf.len() - hello.consumed);
        }
    }
    // Shorter buffers: undecided, or already the same answer.
    for _ in 0..3 {
        let end = rng.below(buf.len() + 1);
        let part = parse_client_hello(&buf[..end], max_len);
        assert!(
            part == Err(SniError::Incomplete) || part == whole,
            "{what}: prefix {end} gave {part:?}, whole {whole:?}"
        );
    }
    // Longer buffers: a decided answer stays decided.
    if whole != Err(SniError::Incomplete) {
        let mut longer = buf.to_vec();
        for _ in 0..=rng.below(40) {
            longer.push(rng.byte());
        }
        assert_eq!(
            parse_client_hello(&longer, max_len),
            whole,
            "{what}: extended"
        );
    }
}

#[test]
fn mutated_vectors_never_panic_and_stay_consistent() {
    let mut rng = Rng(0x05ee_d0fa_91c0_ffee);
    let mut outcomes = [0usize; 5];
    for (name, original) in inputs() {
        for i in 0..MUTANTS_PER_INPUT {
            let mut buf = original.clone();
            mutate(&mut rng, &mut buf);
            for max_len in [16 * 1024, 512, rng.below(2048)] {
                let what = format!("{name} mutant {i} max_len {max_len}");
                check(&mut rng, &buf, max_len, &what);
            }
            let slot = match parse_client_hello(&buf, 16 * 1024) {
                Ok(_) => 0,
                Err(SniError::Incomplete) => 1,
                Err(SniError::NotTls) => 2,
                Err(SniError::Malformed(_)) => 3,
                Err(SniError::TooLarge { .. }) => 4,
            };
            outcomes[slot] += 1;
        }
    }
    // The mutations reach every outcome, so the checks above were exercised.
    assert!(outcomes.iter().all(|&n| n > 0), "outcomes {outcomes:?}");
}

#[test]
fn every_truncation_and_extension_of_the_vectors() {
    let mut rng = Rng(42);
    // Hellos re-cut into 1-byte records are left to `sni_vectors`: every
    // truncation of them here would be quadratic in a 9 KB buffer.
    for (name, original) in inputs().into_iter().filter(|(_, b)| b.len() < 4096) {
        for end in 0..=original.len() {
            check(
                &mut rng,
                &original[..end],
                16 * 1024,
                &format!("{name} cut at {end}"),
            );
        }
    }
}
