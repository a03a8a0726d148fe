//! Property-style tests with a small deterministic PRNG: rendered values
//! parse back to themselves, and no input, however mangled, makes the parser
//! panic or breaks the render/parse round trip.

use std::net::{Ipv4Addr, Ipv6Addr};

mod support;

use support::Rng;

use apiway_wire::altsvc::{
    parse, parse_lines, AltSvc, AltSvcError, Alternative, DEFAULT_MAX_AGE, MAX_AGE_CEILING,
};

const TCHARS: &[u8] =
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const REG_NAME_CHARS: &[u8] = b"abcxyzABCXYZ0189-._~!$&'()*+,;=";

fn protocol_id(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 => rng
            .pick(&[&b"h2"[..], b"h3", b"h1", b"http/1.1", b"h3-29"])
            .to_vec(),
        1 => (0..rng.below(255) + 1).map(|_| rng.next() as u8).collect(),
        _ => (0..rng.below(12) + 1)
            .map(|_| match rng.below(8) {
                0 => rng.next() as u8,
                1 => b'%',
                _ => rng.pick(TCHARS),
            })
            .collect(),
    }
}

fn host(rng: &mut Rng) -> Option<String> {
    match rng.below(5) {
        0 => None,
        1 => Some(Ipv4Addr::from(rng.next() as u32).to_string()),
        // Parsing gives the canonical text of an IPv6 address.
        2 => Some(Ipv6Addr::from(u128::from(rng.next()) << rng.below(65)).to_string()),
        _ => {
            let mut name = String::new();
            for _ in 0..rng.below(40) + 1 {
                if rng.chance(10) {
                    name.push_str(rng.pick(&["%41", "%2f", "%FF", "%00"]));
                } else {
                    name.push(char::from(rng.pick(REG_NAME_CHARS)));
                }
            }
            Some(name)
        }
    }
}

fn alternative(rng: &mut Rng) -> Alternative {
    let mut alt = Alternative::new(protocol_id(rng), host(rng), 0);
    let any_port = (rng.next() as u16).max(1);
    alt.port = rng.pick(&[1, 80, 443, 6443, 65535, any_port]);
    alt.max_age = match rng.below(4) {
        0 => DEFAULT_MAX_AGE,
        1 => rng.pick(&[0, 1, 60, 86_399, 86_401, MAX_AGE_CEILING]),
        _ => (rng.next() as u32) % (MAX_AGE_CEILING + 1),
    };
    alt.persist = rng.chance(3);
    alt
}

fn value(rng: &mut Rng) -> AltSvc {
    if rng.chance(20) {
        AltSvc::Clear
    } else {
        AltSvc::Alternatives((0..rng.below(8) + 1).map(|_| alternative(rng)).collect())
    }
}

/// The rendered value with the optional whitespace, empty list elements and
/// empty parameters a recipient must accept.
fn padded(rendered: &str, rng: &mut Rng) -> String {
    let mut out = String::new();
    let mut in_quotes = false;
    let mut escaped = false;
    for c in rendered.chars() {
        let outside = !in_quotes;
        if outside && c == ',' {
            out.push_str(rng.pick(&[",", " ,", ", ,", ",,\t", " , , "]));
            continue;
        }
        if outside && c == ';' {
            out.push_str(rng.pick(&[";", "\t;", ";;", " ; ;"]));
            continue;
        }
        if outside && c == ' ' {
            out.push_str(rng.pick(&["", " ", "\t", "  \t"]));
            continue;
        }
        out.push(c);
        if in_quotes && !escaped && c == '\\' {
            escaped = true;
            continue;
        }
        if c == '"' && !escaped {
            in_quotes = !in_quotes;
        }
        escaped = false;
    }
    format!(
        "{}{out}{}",
        rng.pick(&["", " ", ", "]),
        rng.pick(&["", "\t", " ,"])
    )
}

#[test]
fn render_then_parse_is_identity() {
    let mut rng = Rng(0x5eed_a175_7c00_0001);
    for round in 0..2_000 {
        let original = value(&mut rng);
        let rendered = original.render();
        let parsed = parse(&rendered);
        assert_eq!(parsed.as_ref(), Ok(&original), "round {round}: {rendered}");
        // Rendering is canonical.
        assert_eq!(parsed.map(|v| v.render()), Ok(rendered.clone()));
        // Padding changes nothing.
        let loose = padded(&rendered, &mut rng);
        assert_eq!(
            parse(&loose).as_ref(),
            Ok(&original),
            "round {round}: {loose}"
        );
        // Nor does sending one field line per alternative.
        if let AltSvc::Alternatives(list) = &original {
            let lines: Vec<String> = list.iter().map(Alternative::render).collect();
            assert_eq!(
                parse_lines(lines.iter().map(String::as_str)).as_ref(),
                Ok(&original),
                "round {round}: {lines:?}"
            );
        }
    }
}

/// Parses without panicking; whatever parses renders to a value that parses
/// back to the same thing.
fn check_stable(input: &str) {
    if let Ok(value) = parse(input) {
        let rendered = value.render();
        assert_eq!(
            parse(&rendered),
            Ok(value),
            "{input:?} rendered as {rendered:?}"
        );
    }
}

#[test]
fn mutated_values_never_panic() {
    let mut rng = Rng(0x0bad_c0de_0000_0002);
    let seeds: Vec<String> = [
        r#"h2=":8000""#,
        r#"h2="new.example.org:80""#,
        r#"h3-29=":443"; ma=3600, h2=":443""#,
        r#"w%3Dx%3Ay#z="[::1]:443"; persist=1"#,
        r#"h2=":443"; note="a\"b, c", h3="x:1""#,
        "clear",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain((0..20).map(|_| value(&mut rng).render()))
    .collect();
    let interesting = b"\"\\%,;=:[] \t\r\n\x00\x7f\xff09azAZ";
    for _ in 0..15_000 {
        let mut bytes = seeds[rng.below(seeds.len())].clone().into_bytes();
        for _ in 0..rng.below(4) + 1 {
            let at = rng.below(bytes.len() + 1);
            let byte = if rng.chance(2) {
                rng.pick(interesting)
            } else {
                rng.next() as u8
            };
            match rng.below(5) {
                0 if at < bytes.len() => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                2 if at < bytes.len() => {
                    bytes.remove(at);
                }
                3 => bytes.truncate(at),
                _ => {
                    let end = (at + rng.below(16)).min(bytes.len());
                    let copy = bytes[at..end].to_vec();
                    bytes.splice(at..at, copy);
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        check_stable(&text);
        check_lines_match_joined(&text, &mut rng);
    }
}

/// Cut into field lines, the input parses as the lines joined with ", "
/// would, unless a quoted string was cut in two.
fn check_lines_match_joined(text: &str, rng: &mut Rng) {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() && !rng.chance(4) {
        let mut cut = rng.below(rest.len() + 1);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (line, tail) = rest.split_at(cut);
        lines.push(line);
        rest = tail;
    }
    lines.push(rest);
    let by_lines = parse_lines(lines.iter().copied());
    if !matches!(by_lines, Err(AltSvcError::UnterminatedQuote { .. })) {
        assert_eq!(by_lines, parse(&lines.join(", ")), "{lines:?}");
    }
}

#[test]
fn strings_over_the_grammar_characters() {
    const ALPHABET: &[char] = &[
        'h', '2', '=', '"', ':', '1', '[', ']', '%', ';', ',', '\\', ' ',
    ];
    // Every string of up to 4 characters...
    let mut input = String::new();
    for len in 0..=4u32 {
        for mut n in 0..ALPHABET.len().pow(len) {
            input.clear();
            for _ in 0..len {
                input.push(ALPHABET[n % ALPHABET.len()]);
                n /= ALPHABET.len();
            }
            check_stable(&input);
        }
    }
    // ...and a sample of longer ones.
    let mut rng = Rng(0xa1fa_be70_0000_0003);
    for _ in 0..30_000 {
        input.clear();
        for _ in 0..rng.below(20) + 5 {
            input.push(rng.pick(ALPHABET));
        }
        check_stable(&input);
    }
}
