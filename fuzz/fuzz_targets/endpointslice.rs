//! Fuzzes the EndpointSlice decoders: neither may panic on any bytes, fed
//! whole (as a list body and as one event line) and cut at each `\n` (as a
//! watch body is); whatever decodes must re-encode to JSON that decodes to
//! the same value, and its ready addresses must be IP addresses of the
//! slice's family at its `https` port.
#![no_main]

use apiway_wire::endpointslice::{
    decode_event, decode_list, EndpointSlice, WatchEvent, MAX_EVENT_LEN, MAX_LIST_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_list(data);
    check_event(data);
    for line in data.split(|b| *b == b'\n') {
        check_event(line.trim_ascii());
    }
});

fn check_list(data: &[u8]) {
    let list = match decode_list(data) {
        Ok(list) => list,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    list.items.iter().for_each(check_slice);
    let encoded = list.encode();
    // Written back, `{}` endpoints grow: past the limit is not comparable.
    if encoded.len() <= MAX_LIST_LEN {
        assert_eq!(decode_list(&encoded).as_ref(), Ok(&list));
    }
}

fn check_event(data: &[u8]) {
    let event = match decode_event(data) {
        Ok(event) => event,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    match &event {
        WatchEvent::Added(slice) | WatchEvent::Modified(slice) | WatchEvent::Deleted(slice) => {
            check_slice(slice)
        }
        WatchEvent::Error(status) => assert!(!status.to_string().is_empty()),
        WatchEvent::Bookmark { .. } => {}
    }
    let encoded = event.encode();
    assert!(!encoded.contains(&b'\n'));
    if encoded.len() <= MAX_EVENT_LEN {
        assert_eq!(decode_event(&encoded).as_ref(), Ok(&event));
    }
}

fn check_slice(slice: &EndpointSlice) {
    let ready = slice.ready_addresses();
    let Some(port) = slice.https_port() else {
        assert!(ready.is_empty());
        return;
    };
    assert_ne!(port, 0);
    for address in &ready {
        assert_eq!(address.port(), port);
        assert!(slice
            .endpoints
            .iter()
            .any(|e| e.ready != Some(false) && e.addresses.contains(&address.ip())));
    }
    assert!(slice.address_type.is_ip() || ready.is_empty());
}
