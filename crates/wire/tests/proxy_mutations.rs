//! Property-style checks over many mutations of the captured PROXY headers:
//! bytes set, bits flipped, bytes inserted and removed, the v2 length nudged,
//! cut short, extended. The parser must never panic, and its answers must
//! hang together:
//! - a decided answer never changes when more bytes arrive;
//! - `Incomplete` only while the buffer is below the size limit;
//! - `detect` agrees with `parse`;
//! - a parsed header renders to bytes that parse to the same header.

use apiway_wire::proxy::{
    detect, parse_with, ParseOptions, ProxyError, RenderOptions, Version, V1_MAX_LEN, V2_FIXED_LEN,
};

const MUTANTS_PER_INPUT: usize = 3000;

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
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/proxy");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    assert!(files.len() >= 11, "testdata has the captured vectors");
    files
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    const INTERESTING: [u8; 12] = [
        0, 1, 3, b'\r', b'\n', b' ', b'.', b':', b'0', 0x7f, 0x80, 0xff,
    ];
    for _ in 0..=rng.below(3) {
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
            2 if len > 0 => {
                let at = rng.below(len);
                buf[at] = rng.byte();
            }
            3 if len > 0 => {
                buf.remove(rng.below(len));
            }
            4 => {
                let at = rng.below(len + 1);
                buf.insert(at, INTERESTING[rng.below(INTERESTING.len())]);
            }
            // The v2 length field, nudged a little either way.
            5 if len >= 16 => {
                let field = u16::from_be_bytes([buf[14], buf[15]]);
                let delta = rng.below(9) as u16;
                let nudged = if rng.below(2) == 0 {
                    field.wrapping_add(delta)
                } else {
                    field.wrapping_sub(delta)
                };
                buf[14..16].copy_from_slice(&nudged.to_be_bytes());
            }
            6 => buf.truncate(rng.below(len + 1)),
            _ => buf.extend((0..rng.below(16)).map(|_| rng.byte())),
        }
    }
}

fn check(name: &str, buf: &[u8], options: &ParseOptions) {
    let whole = parse_with(buf, options);
    let limit = match detect(buf) {
        Ok(Version::V1) => V1_MAX_LEN,
        Ok(Version::V2) => V2_FIXED_LEN + options.max_v2_payload,
        Err(e) => {
            assert_eq!(whole, Err(e), "{name}: detect vs parse on {buf:?}");
            return;
        }
    };
    assert_ne!(whole, Err(ProxyError::NotProxy), "{name}: {buf:?}");
    if whole == Err(ProxyError::Incomplete) {
        assert!(
            buf.len() < limit,
            "{name}: Incomplete at {} bytes",
            buf.len()
        );
    }
    for end in [1, 13, 14, 16, buf.len() / 2, buf.len().saturating_sub(1)] {
        if end < buf.len() {
            let part = parse_with(&buf[..end], options);
            assert!(
                part == Err(ProxyError::Incomplete) || part == whole,
                "{name}: prefix {end} gives {part:?}, whole gives {whole:?}: {buf:?}"
            );
        }
    }
    if let Ok((header, consumed)) = whole {
        assert!(consumed <= buf.len() && consumed <= limit);
        let render = RenderOptions {
            crc32c: header.tlvs.crc32c_verified,
            noop: None,
        };
        let again = header.render(&render).expect("a parsed header renders");
        let options = ParseOptions {
            max_v2_payload: 65535,
        };
        assert_eq!(
            parse_with(&again, &options),
            Ok((header, again.len())),
            "{name}: round trip of {buf:?}"
        );
    }
}

#[test]
fn mutations_of_captured_headers() {
    let mut rng = Rng(0x5eed_0f9a_7e3a_1100);
    let small = ParseOptions { max_v2_payload: 64 };
    let default = ParseOptions::default();
    for (name, bytes) in inputs() {
        check(&name, &bytes, &default);
        check(&name, &bytes, &small);
        for _ in 0..MUTANTS_PER_INPUT {
            let mut buf = bytes.clone();
            mutate(&mut rng, &mut buf);
            check(&name, &buf, &default);
            check(&name, &buf, &small);
        }
    }
}

#[test]
fn every_cut_of_captured_streams() {
    for (name, bytes) in inputs() {
        for end in 0..=bytes.len() {
            check(&name, &bytes[..end], &ParseOptions::default());
        }
    }
}
