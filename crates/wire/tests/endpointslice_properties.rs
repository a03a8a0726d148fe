//! Property-style tests with a small deterministic PRNG:
//! - generated lists and events encode to JSON that decodes to themselves;
//! - the seed vectors in `testdata/endpointslice/` decode as expected;
//! - many mutations of them (bytes set, removed, inserted, cut short,
//!   numbers swapped for huge ones) never make a decoder panic, and whatever
//!   still decodes re-encodes to the same value and keeps the
//!   ready-at-https-port rule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

mod endpointslice_checks;
mod support;

use endpointslice_checks::{check_event, check_list, check_slice};
use support::Rng;

use apiway_wire::endpointslice::{
    decode_event, decode_list, AddressType, Endpoint, EndpointPort, EndpointSlice,
    EndpointSliceError, EndpointSliceList, Status, WatchEvent, MAX_EVENT_LEN, MAX_LIST_LEN,
};

/// Text with the characters JSON must escape, and some that it need not.
fn text(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "kubernetes",
        "-",
        ".",
        "0",
        "\"",
        "\\",
        "\n",
        "\u{0}",
        "\u{1f}",
        "é",
        "\u{2028}",
        "🦀",
        " ",
        "/",
        "{",
        "]",
    ];
    (0..rng.below(8)).map(|_| rng.pick(PIECES)).collect()
}

fn optional<T>(rng: &mut Rng, make: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    if rng.chance(3) {
        None
    } else {
        Some(make(rng))
    }
}

fn ipv6(rng: &mut Rng) -> Ipv6Addr {
    match rng.below(4) {
        0 => Ipv6Addr::LOCALHOST,
        1 => Ipv6Addr::from(u128::from(rng.next() as u32) | 0xfd00 << 112),
        2 => Ipv4Addr::from(rng.next() as u32).to_ipv6_mapped(),
        _ => Ipv6Addr::from(u128::from(rng.next()) << 64 | u128::from(rng.next())),
    }
}

fn slice(rng: &mut Rng) -> EndpointSlice {
    let address_type = rng.pick(&[
        AddressType::Ipv4,
        AddressType::Ipv4,
        AddressType::Ipv6,
        AddressType::Fqdn,
        AddressType::Other("IPv8".into()),
        AddressType::Other(String::new()),
    ]);
    let endpoints = (0..rng.below(5))
        .map(|_| {
            let addresses = (0..rng.below(4))
                .filter_map(|_| match address_type {
                    AddressType::Ipv4 => Some(IpAddr::V4(Ipv4Addr::from(rng.next() as u32))),
                    AddressType::Ipv6 => Some(IpAddr::V6(ipv6(rng))),
                    AddressType::Fqdn | AddressType::Other(_) => None,
                })
                .collect();
            // What the slice's family cannot parse: names, the other family.
            let other_addresses = (0..rng.below(3))
                .map(|_| match (&address_type, rng.below(3)) {
                    (AddressType::Ipv4, 0) => ipv6(rng).to_string(),
                    (AddressType::Ipv6, 0) => Ipv4Addr::from(rng.next() as u32).to_string(),
                    (_, 1) => "api.example.com".to_owned(),
                    _ => format!("x{}", text(rng)),
                })
                .collect();
            Endpoint {
                addresses,
                other_addresses,
                ready: optional(rng, |rng| rng.chance(2)),
            }
        })
        .collect();
    let ports = (0..rng.below(4))
        .map(|_| EndpointPort {
            name: optional(rng, |rng| {
                if rng.chance(2) {
                    "https".to_owned()
                } else {
                    text(rng)
                }
            }),
            port: optional(rng, |rng| {
                let any = (rng.next() as u16).max(1);
                rng.pick(&[1, 443, 6443, 65535, any])
            }),
        })
        .collect();
    EndpointSlice {
        name: text(rng),
        namespace: optional(rng, text),
        resource_version: text(rng),
        address_type,
        endpoints,
        ports,
    }
}

fn event(rng: &mut Rng) -> WatchEvent {
    match rng.below(5) {
        0 => WatchEvent::Added(slice(rng)),
        1 => WatchEvent::Modified(slice(rng)),
        2 => WatchEvent::Deleted(slice(rng)),
        3 => WatchEvent::Bookmark {
            resource_version: text(rng),
        },
        _ => WatchEvent::Error(Status {
            code: optional(rng, |rng| rng.pick(&[410, 500, 0, u16::MAX])),
            reason: optional(rng, text),
            message: optional(rng, text),
        }),
    }
}

#[test]
fn generated_lists_and_events_round_trip() {
    let mut rng = Rng(0x5eed_0001);
    for _ in 0..3000 {
        let list = EndpointSliceList {
            resource_version: text(&mut rng),
            items: (0..rng.below(4)).map(|_| slice(&mut rng)).collect(),
        };
        let encoded = list.encode();
        assert_eq!(
            decode_list(&encoded).as_ref(),
            Ok(&list),
            "{}",
            String::from_utf8_lossy(&encoded)
        );
        list.items.iter().for_each(check_slice);

        let event = event(&mut rng);
        let line = event.encode();
        assert!(!line.contains(&b'\n'), "an event is one line");
        assert_eq!(
            decode_event(&line).as_ref(),
            Ok(&event),
            "{}",
            String::from_utf8_lossy(&line)
        );
    }
}

fn vector(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/testdata/endpointslice/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn vectors() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/endpointslice");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".md"))
        .collect();
    names.sort();
    assert!(names.len() >= 8, "the seed vectors are there: {names:?}");
    names.into_iter().map(|n| (n.clone(), vector(&n))).collect()
}

fn shown(addresses: &[SocketAddr]) -> Vec<String> {
    addresses.iter().map(ToString::to_string).collect()
}

#[test]
fn the_seed_vectors_decode_as_expected() {
    let list = decode_list(&vector("list-kubernetes.json")).unwrap();
    assert_eq!(list.resource_version, "4711");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].name, "kubernetes");
    assert_eq!(list.items[0].namespace.as_deref(), Some("default"));
    assert_eq!(
        shown(&list.items[0].ready_addresses()),
        ["10.0.0.11:6443", "10.0.0.12:6443"]
    );

    let list = decode_list(&vector("list-dual-stack.json")).unwrap();
    let ready: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|s| shown(&s.ready_addresses()))
        .collect();
    assert_eq!(
        ready,
        [
            vec!["[fd00:10::11]:6443", "[fd00:10::12]:6443"],
            vec![],
            vec![]
        ]
    );
    assert_eq!(list.items[2].address_type, AddressType::Fqdn);
    assert_eq!(
        list.items[2].endpoints[0].other_addresses,
        ["api.example.com"]
    );

    let added = decode_event(&vector("event-added.json")).unwrap();
    let WatchEvent::Added(slice) = &added else {
        panic!("{added:?}")
    };
    assert_eq!(shown(&slice.ready_addresses()), ["10.0.0.11:6443"]);
    let modified = decode_event(&vector("event-modified.json")).unwrap();
    let WatchEvent::Modified(slice) = &modified else {
        panic!("{modified:?}")
    };
    assert!(slice.ready_addresses().is_empty());
    assert_eq!(slice.resource_version, "4713");
    assert!(matches!(
        decode_event(&vector("event-deleted.json")),
        Ok(WatchEvent::Deleted(EndpointSlice { ref name, .. })) if name == "kubernetes"
    ));
    assert_eq!(
        decode_event(&vector("event-bookmark.json")),
        Ok(WatchEvent::Bookmark {
            resource_version: "4720".into()
        })
    );
    let Ok(WatchEvent::Error(status)) = decode_event(&vector("event-error-410.json")) else {
        panic!("an ERROR event")
    };
    assert!(status.is_expired());

    let kinds: Vec<&str> = vector("watch-stream.jsonl")
        .split(|b| *b == b'\n')
        .filter(|line| !line.trim_ascii().is_empty())
        .map(|line| match decode_event(line) {
            Ok(WatchEvent::Added(_)) => "ADDED",
            Ok(WatchEvent::Modified(_)) => "MODIFIED",
            Ok(WatchEvent::Bookmark { .. }) => "BOOKMARK",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "BOOKMARK", "MODIFIED"]);

    // A list is not an event and an event is not a list.
    assert!(decode_event(&vector("list-kubernetes.json")).is_err());
    assert!(decode_list(&vector("event-added.json")).is_err());
}

fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    const INTERESTING: &[&[u8]] = &[
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"null",
        b"0",
        b"-1",
        b"65536",
        b"18446744073709551616",
        b"1e400",
        b"\"IPv6\"",
        b"\"FQDN\"",
        b"\"https\"",
        b"true",
        b"\xff",
    ];
    for _ in 0..=rng.below(3) {
        let len = buf.len();
        match rng.below(5) {
            0 if len > 0 => buf[rng.below(len)] = rng.next() as u8,
            1 if len > 0 => {
                buf.remove(rng.below(len));
            }
            2 => {
                let at = rng.below(len + 1);
                let piece = rng.pick(INTERESTING);
                buf.splice(at..at, piece.iter().copied());
            }
            3 => buf.truncate(rng.below(len + 1)),
            _ => {
                // Swap a number for an interesting token.
                if let Some(start) = (0..len)
                    .map(|_| rng.below(len))
                    .find(|i| buf[*i].is_ascii_digit())
                {
                    let end = (start..len)
                        .find(|i| !buf[*i].is_ascii_digit())
                        .unwrap_or(len);
                    let piece = rng.pick(INTERESTING);
                    buf.splice(start..end, piece.iter().copied());
                }
            }
        }
    }
}

#[test]
fn mutated_vectors_never_panic_and_what_decodes_round_trips() {
    let mut rng = Rng(0x5eed_0002);
    let mut decoded = [0usize; 2];
    for (_, input) in vectors() {
        for _ in 0..2000 {
            let mut buf = input.clone();
            mutate(&mut rng, &mut buf);
            // As the fuzz target does: whole, then line by line.
            decoded[0] += usize::from(check_list(&buf).is_some());
            decoded[1] += usize::from(check_event(&buf).is_some());
            for line in buf.split(|b| *b == b'\n') {
                check_event(line.trim_ascii());
            }
        }
    }
    // The mutations must leave many inputs decodable, or the round-trip
    // checks above would be vacuous.
    assert!(decoded[0] > 500 && decoded[1] > 500, "{decoded:?}");
}

#[test]
fn limits_are_exact() {
    let event = vector("event-bookmark.json");
    let mut padded = event.clone();
    padded.resize(MAX_EVENT_LEN, b' ');
    assert!(decode_event(&padded).is_ok());
    padded.push(b' ');
    assert_eq!(
        decode_event(&padded),
        Err(EndpointSliceError::TooLong {
            what: "watch event",
            len: MAX_EVENT_LEN + 1,
            limit: MAX_EVENT_LEN
        })
    );
    let mut padded = vector("list-kubernetes.json");
    padded.resize(MAX_LIST_LEN, b'\n');
    assert!(decode_list(&padded).is_ok());
    padded.push(b'\n');
    assert!(matches!(
        decode_list(&padded),
        Err(EndpointSliceError::TooLong { .. })
    ));
}
