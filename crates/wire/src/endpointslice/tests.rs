//! Unit tests on hand-written lists and events, one rule at a time.
//! Generated and mutated inputs are in `tests/endpointslice_*.rs`.

use super::*;
use serde_json::{json, Value};

fn slice(name: &str, family: &str, endpoints: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "7",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": family,
        "endpoints": endpoints,
        "ports": ports,
    })
}

fn list_of(items: Value) -> Vec<u8> {
    json!({"kind": "EndpointSliceList", "metadata": {"resourceVersion": "7"}, "items": items})
        .to_string()
        .into_bytes()
}

fn event(kind: &str, object: Value) -> Vec<u8> {
    json!({"type": kind, "object": object})
        .to_string()
        .into_bytes()
}

fn shown(addresses: &[SocketAddr]) -> Vec<String> {
    addresses.iter().map(ToString::to_string).collect()
}

fn malformed(result: Result<impl std::fmt::Debug, EndpointSliceError>, wanted: &str) {
    match result {
        Err(EndpointSliceError::Malformed { reason, .. }) => {
            assert!(
                reason.contains(wanted),
                "{reason:?} does not say {wanted:?}"
            )
        }
        other => panic!("expected Malformed ({wanted}), got {other:?}"),
    }
}

#[test]
fn ready_addresses_at_the_https_port() {
    let list = decode_list(&list_of(json!([
        slice(
            "b-v6",
            "IPv6",
            json!([{"addresses": ["fd00::1"]}]),
            json!([{"port": 6443}])
        ),
        slice(
            "a-v4",
            "IPv4",
            json!([
                {"addresses": ["10.0.0.1", "10.0.0.9"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "conditions": {}},
                {"addresses": ["not-an-ip"]},
            ]),
            json!([{"name": "metrics", "port": 9090}, {"name": "https", "port": 6443}])
        ),
        slice(
            "c-fqdn",
            "FQDN",
            json!([{"addresses": ["api.example"]}]),
            json!([{"port": 6443}])
        ),
        slice(
            "d-ambiguous",
            "IPv4",
            json!([{"addresses": ["10.0.0.4"]}]),
            json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}])
        ),
    ])))
    .expect("parses");
    assert_eq!(list.resource_version, "7");
    let by_slice: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|s| shown(&s.ready_addresses()))
        .collect();
    assert_eq!(
        by_slice,
        [
            vec!["[fd00::1]:6443"],
            vec!["10.0.0.1:6443", "10.0.0.9:6443", "10.0.0.3:6443"],
            vec![],
            vec![],
        ]
    );
    let a = &list.items[1];
    assert_eq!(a.name, "a-v4");
    assert_eq!(a.namespace.as_deref(), Some("default"));
    assert_eq!(a.address_type, AddressType::Ipv4);
    assert_eq!(a.https_port(), Some(6443));
    assert_eq!(a.endpoints[2].ready, None);
    assert_eq!(a.endpoints[3].other_addresses, ["not-an-ip"]);
    assert_eq!(list.items[3].https_port(), None, "two ports, no https");
}

#[test]
fn fqdn_and_unknown_slices_are_kept_but_not_ip() {
    let list = decode_list(&list_of(json!([
        slice(
            "f",
            "FQDN",
            json!([{"addresses": ["api.example", "10.0.0.1"]}]),
            json!([{"name": "https", "port": 443}])
        ),
        slice(
            "u",
            "IPv8",
            json!([{"addresses": ["10.0.0.2"]}]),
            json!([{"port": 443}])
        ),
    ])))
    .expect("parses");
    let [fqdn, unknown] = list.items.as_slice() else {
        panic!("two slices: {list:?}")
    };
    assert_eq!(fqdn.address_type, AddressType::Fqdn);
    assert!(!fqdn.address_type.is_ip());
    assert!(fqdn.endpoints[0].addresses.is_empty());
    assert_eq!(
        fqdn.endpoints[0].other_addresses,
        ["api.example", "10.0.0.1"]
    );
    assert!(fqdn.ready_addresses().is_empty());
    assert_eq!(unknown.address_type, AddressType::Other("IPv8".into()));
    assert_eq!(unknown.address_type.as_str(), "IPv8");
    assert!(unknown.ready_addresses().is_empty());
}

#[test]
fn an_address_of_the_other_family_is_not_used() {
    let list = decode_list(&list_of(json!([
        slice(
            "v4",
            "IPv4",
            json!([{"addresses": ["fd00::1", "10.0.0.1", "010.0.0.1", " 10.0.0.2"]}]),
            json!([{"port": 443}])
        ),
        slice(
            "v6",
            "IPv6",
            json!([{"addresses": ["10.0.0.1", "::ffff:10.0.0.3", "fe80::1%eth0"]}]),
            json!([{"port": 443}])
        ),
    ])))
    .expect("parses");
    assert_eq!(shown(&list.items[0].ready_addresses()), ["10.0.0.1:443"]);
    assert_eq!(
        list.items[0].endpoints[0].other_addresses,
        ["fd00::1", "010.0.0.1", " 10.0.0.2"]
    );
    assert_eq!(
        shown(&list.items[1].ready_addresses()),
        ["[::ffff:10.0.0.3]:443"]
    );
    assert_eq!(
        list.items[1].endpoints[0].other_addresses,
        ["10.0.0.1", "fe80::1%eth0"]
    );
}

#[test]
fn go_nulls_and_missing_lists_are_empty() {
    let list = decode_list(br#"{"metadata": {"resourceVersion": "3"}, "items": null}"#).unwrap();
    assert!(list.items.is_empty());
    let list = decode_list(br#"{"metadata": {"resourceVersion": "3"}}"#).unwrap();
    assert!(list.items.is_empty());
    let list = decode_list(&list_of(json!([
        {"metadata": {"name": "empty", "resourceVersion": "2"}, "addressType": "IPv4", "endpoints": null, "ports": null},
        {"metadata": {"name": "bare", "resourceVersion": "2"}, "addressType": "IPv4",
         "endpoints": [{"addresses": null, "conditions": null}, {}], "ports": [{}]},
    ])))
    .unwrap();
    assert!(list.items[0].endpoints.is_empty() && list.items[0].ports.is_empty());
    assert_eq!(list.items[0].namespace, None);
    let bare = &list.items[1];
    assert_eq!(bare.endpoints.len(), 2);
    assert!(bare
        .endpoints
        .iter()
        .all(|e| e.addresses.is_empty() && e.ready.is_none()));
    assert_eq!(
        bare.ports,
        [EndpointPort {
            name: None,
            port: None
        }]
    );
    assert_eq!(bare.https_port(), None, "the only port has no number");
}

#[test]
fn port_numbers_outside_1_to_65535_are_refused() {
    for port in [0, -1, 65536, i64::from(i32::MAX)] {
        let body = list_of(json!([slice(
            "p",
            "IPv4",
            json!([]),
            json!([{"port": port}])
        )]));
        assert_eq!(
            decode_list(&body),
            Err(EndpointSliceError::InvalidPort {
                slice: "p".into(),
                port
            }),
            "{port}"
        );
    }
    for port in [1, 65535] {
        let body = list_of(json!([slice(
            "p",
            "IPv4",
            json!([]),
            json!([{"port": port}])
        )]));
        assert_eq!(
            decode_list(&body).unwrap().items[0].https_port(),
            Some(u16::try_from(port).unwrap())
        );
    }
}

#[test]
fn huge_numbers_are_malformed_not_wrapped() {
    let huge = |n: &str| {
        format!(
            r#"{{"metadata": {{"resourceVersion": "1"}}, "items": [{{"metadata": {{"name": "h", "resourceVersion": "1"}},
               "addressType": "IPv4", "ports": [{{"port": {n}}}]}}]}}"#
        )
    };
    malformed(decode_list(huge("18446744073709551616").as_bytes()), "");
    malformed(decode_list(huge("9223372036854775808").as_bytes()), "");
    malformed(decode_list(huge("1e400").as_bytes()), "");
    malformed(decode_list(huge("6443.0").as_bytes()), "floating point");
    assert!(matches!(
        decode_list(huge("-9223372036854775808").as_bytes()),
        Err(EndpointSliceError::InvalidPort { .. })
    ));
    let status = |code: &str| format!(r#"{{"type": "ERROR", "object": {{"code": {code}}}}}"#);
    malformed(decode_event(status("65536").as_bytes()), "");
    malformed(decode_event(status("-410").as_bytes()), "");
    malformed(
        decode_event(status("4100000000000000000000").as_bytes()),
        "",
    );
}

#[test]
fn truncated_json_is_malformed() {
    let body = list_of(json!([slice(
        "a",
        "IPv4",
        json!([{"addresses": ["10.0.0.1"]}]),
        json!([{"port": 443}])
    )]));
    for end in 0..body.len() {
        malformed(decode_list(&body[..end]), "");
    }
    assert!(decode_list(&body).is_ok());
    let line = event("ADDED", slice("a", "IPv4", json!([]), json!([])));
    for end in 0..line.len() {
        assert!(decode_event(&line[..end]).is_err(), "{end}");
    }
    malformed(decode_list(b"not json"), "expected");
    let mut twice = body.clone();
    twice.extend(b" {}");
    malformed(decode_list(&twice), "trailing");
}

#[test]
fn wrong_types_are_malformed() {
    let with = |field: &str, value: Value| {
        let mut s = slice(
            "w",
            "IPv4",
            json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]),
            json!([{"name": "https", "port": 443}]),
        );
        let pointer = field.split('.').collect::<Vec<_>>();
        let mut at = &mut s;
        for key in &pointer[..pointer.len() - 1] {
            at = match key.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*key],
            };
        }
        at[pointer[pointer.len() - 1]] = value;
        list_of(json!([s]))
    };
    malformed(
        decode_list(&with("metadata.name", json!(5))),
        "invalid type",
    );
    malformed(
        decode_list(&with("metadata.resourceVersion", json!(7))),
        "invalid type",
    );
    malformed(
        decode_list(&with("addressType", json!(null))),
        "invalid type",
    );
    malformed(decode_list(&with("endpoints", json!({}))), "invalid type");
    malformed(
        decode_list(&with("endpoints.0.addresses", json!("10.0.0.1"))),
        "invalid type",
    );
    malformed(
        decode_list(&with("endpoints.0.addresses", json!([1]))),
        "invalid type",
    );
    malformed(
        decode_list(&with("endpoints.0.conditions.ready", json!("false"))),
        "invalid type",
    );
    malformed(
        decode_list(&with("ports.0.port", json!("443"))),
        "invalid type",
    );
    malformed(
        decode_list(&with("ports.0.name", json!(["https"]))),
        "invalid type",
    );
    malformed(decode_list(b"5"), "invalid type");
    malformed(decode_list(b"null"), "invalid type");
    malformed(
        decode_list(br#"{"metadata": {"resourceVersion": "1"}, "items": {}}"#),
        "invalid type",
    );
    malformed(
        decode_event(br#"{"type": 1, "object": {}}"#),
        "invalid type",
    );
    malformed(
        decode_event(br#"{"type": "ERROR", "object": {"code": "410"}}"#),
        "invalid type",
    );
    // Fields this module does not read may hold anything.
    let mut extra = slice(
        "x",
        "IPv4",
        json!([{"addresses": ["10.0.0.1"], "hostname": 3, "conditions": {"serving": "yes"}}]),
        json!([{"port": 443, "protocol": 6}]),
    );
    extra["kind"] = json!(["not", "a", "string"]);
    extra["metadata"]["managedFields"] = json!([[[[{}]]]]);
    assert!(decode_list(&list_of(json!([extra]))).is_ok());
}

#[test]
fn missing_fields_are_malformed() {
    malformed(decode_list(b"{}"), "missing field `metadata`");
    malformed(
        decode_list(br#"{"metadata": {}, "items": []}"#),
        "missing field `resourceVersion`",
    );
    let without = |field: &str| {
        let mut s = slice("m", "IPv4", json!([]), json!([]));
        match field.split_once('.') {
            Some((outer, inner)) => s[outer].as_object_mut().unwrap().remove(inner),
            None => s.as_object_mut().unwrap().remove(field),
        };
        list_of(json!([s]))
    };
    malformed(
        decode_list(&without("metadata.name")),
        "missing field `name`",
    );
    malformed(
        decode_list(&without("metadata.resourceVersion")),
        "missing field `resourceVersion`",
    );
    malformed(
        decode_list(&without("addressType")),
        "missing field `addressType`",
    );
    malformed(
        decode_list(&without("metadata")),
        "missing field `metadata`",
    );
    assert!(decode_list(&without("metadata.namespace")).is_ok());
    malformed(decode_event(br#"{"object": {}}"#), "missing field `type`");
    malformed(
        decode_event(br#"{"type": "ADDED"}"#),
        "missing field `object`",
    );
    malformed(
        decode_event(br#"{"type": "BOOKMARK", "object": {"metadata": {}}}"#),
        "missing field `resourceVersion`",
    );
    malformed(
        decode_event(&event(
            "DELETED",
            json!({"metadata": {"resourceVersion": "2"}}),
        )),
        "missing field `name`",
    );
}

#[test]
fn repeated_keys_are_malformed() {
    malformed(
        decode_list(br#"{"metadata": {"resourceVersion": "1", "resourceVersion": "2"}}"#),
        "duplicate field",
    );
    malformed(
        decode_event(br#"{"type": "ADDED", "type": "ERROR", "object": {}}"#),
        "duplicate field",
    );
}

#[test]
fn every_event_type() {
    let s = slice(
        "k",
        "IPv4",
        json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]),
        json!([{"name": "https", "port": 6443}]),
    );
    let decoded = decode_list(&list_of(json!([s.clone()])))
        .unwrap()
        .items
        .remove(0);
    assert_eq!(
        decode_event(&event("ADDED", s.clone())),
        Ok(WatchEvent::Added(decoded.clone()))
    );
    assert_eq!(
        decode_event(&event("MODIFIED", s.clone())),
        Ok(WatchEvent::Modified(decoded.clone()))
    );
    assert_eq!(
        decode_event(&event("DELETED", s)),
        Ok(WatchEvent::Deleted(decoded))
    );
    let bookmark = json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "metadata": {"resourceVersion": "12"}});
    assert_eq!(
        decode_event(&event("BOOKMARK", bookmark)),
        Ok(WatchEvent::Bookmark {
            resource_version: "12".into()
        })
    );
    // Whitespace around the line, as a watch body may carry, is allowed.
    let mut padded = b"  \t".to_vec();
    padded.extend(event(
        "BOOKMARK",
        json!({"metadata": {"resourceVersion": "13"}}),
    ));
    padded.extend(b"\r\n");
    assert!(matches!(
        decode_event(&padded),
        Ok(WatchEvent::Bookmark { .. })
    ));
    assert_eq!(
        decode_event(&event("SYNC", json!({}))),
        Err(EndpointSliceError::UnknownEventType("SYNC".into()))
    );
    assert_eq!(
        decode_event(&event("added", json!({}))),
        Err(EndpointSliceError::UnknownEventType("added".into()))
    );
}

#[test]
fn a_410_error_event_is_expired() {
    let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": "too old resource version: 5 (12)", "reason": "Expired", "code": 410});
    let Ok(WatchEvent::Error(status)) = decode_event(&event("ERROR", gone)) else {
        panic!("an ERROR event")
    };
    assert!(status.is_expired());
    assert_eq!(status.reason.as_deref(), Some("Expired"));
    assert_eq!(
        status.message.as_deref(),
        Some("too old resource version: 5 (12)")
    );

    let other = decode_event(&event(
        "ERROR",
        json!({"kind": "Status", "code": 500, "message": "boom"}),
    ));
    let Ok(WatchEvent::Error(status)) = other else {
        panic!("an ERROR event: {other:?}")
    };
    assert!(!status.is_expired());
    assert_eq!(status.code, Some(500));
    assert_eq!(status.to_string(), "500: boom");
    let bare = decode_event(&event("ERROR", json!({})));
    assert_eq!(
        bare,
        Ok(WatchEvent::Error(Status {
            code: None,
            reason: None,
            message: None
        }))
    );
}

#[test]
fn lengths_are_checked_before_parsing() {
    let long = vec![b' '; MAX_LIST_LEN + 1];
    assert_eq!(
        decode_list(&long),
        Err(EndpointSliceError::TooLong {
            what: "EndpointSliceList",
            len: MAX_LIST_LEN + 1,
            limit: MAX_LIST_LEN
        })
    );
    let long = vec![b'{'; MAX_EVENT_LEN + 1];
    assert!(matches!(
        decode_event(&long),
        Err(EndpointSliceError::TooLong {
            what: "watch event",
            limit: MAX_EVENT_LEN,
            ..
        })
    ));
    // At the limit, the JSON itself is read.
    let mut at_limit = br#"{"metadata": {"resourceVersion": "1"}}"#.to_vec();
    at_limit.resize(MAX_LIST_LEN, b' ');
    assert!(decode_list(&at_limit).is_ok());
    let mut at_limit =
        br#"{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}}"#.to_vec();
    at_limit.resize(MAX_EVENT_LEN, b'\n');
    assert!(decode_event(&at_limit).is_ok());
    let error = decode_list(&vec![b' '; MAX_LIST_LEN + 1]).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "EndpointSliceList of {} bytes is over the {MAX_LIST_LEN}-byte limit",
            MAX_LIST_LEN + 1
        )
    );
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    // serde_json skips an ignored field without recursing, however deep.
    let deep = format!(
        r#"{{"metadata": {{"resourceVersion": "1", "x": {}}}}}"#,
        nested(200_000)
    );
    assert!(decode_list(deep.as_bytes()).is_ok());
    let deep = format!(
        r#"{{"type": "BOOKMARK", "object": {{"metadata": {{"resourceVersion": "1"}}, "x": {}}}}}"#,
        nested(200_000)
    );
    assert!(decode_event(deep.as_bytes()).is_ok());
    // In a field it reads, the first level of the wrong type is an error.
    let deep = format!(
        r#"{{"metadata": {{"resourceVersion": "1"}}, "items": [{}]}}"#,
        nested(200_000)
    );
    malformed(decode_list(deep.as_bytes()), "invalid type");
}

#[test]
fn encode_then_decode_gives_the_same_value() {
    let list = decode_list(&list_of(json!([
        slice(
            "a",
            "IPv4",
            json!([
                {"addresses": ["10.0.0.1", "bad"], "conditions": {"ready": true}},
                {"addresses": [], "conditions": {}},
            ]),
            json!([{"name": "https", "port": 6443}, {"port": 1}, {"name": ""}])
        ),
        slice(
            "b",
            "IPv6",
            json!([{"addresses": ["fd00:0::1"], "conditions": {"ready": false}}]),
            json!([])
        ),
        slice(
            "c",
            "FQDN",
            json!([{"addresses": ["api.example"]}]),
            json!([{"port": 443}])
        ),
    ])))
    .unwrap();
    let encoded = list.encode();
    assert_eq!(decode_list(&encoded).as_ref(), Ok(&list));
    let text = String::from_utf8(encoded).unwrap();
    assert!(text.contains(r#""addresses":["fd00::1"]"#), "{text}");
    assert!(text.contains(r#""kind":"EndpointSliceList""#), "{text}");

    for event in [
        WatchEvent::Added(list.items[0].clone()),
        WatchEvent::Modified(list.items[1].clone()),
        WatchEvent::Deleted(list.items[2].clone()),
        WatchEvent::Bookmark {
            resource_version: "99".into(),
        },
        WatchEvent::Error(Status {
            code: Some(410),
            reason: Some("Expired".into()),
            message: Some("\"old\"\n".into()),
        }),
    ] {
        let line = event.encode();
        assert!(!line.contains(&b'\n'), "one line");
        assert_eq!(decode_event(&line), Ok(event));
    }
}
