//! The checks every decoded EndpointSlice list or watch event must pass,
//! shared by `tests/endpointslice_properties.rs` and the `endpointslice`
//! fuzz target (which includes this file by path), so the two hold the
//! decoders to the same rules.

use std::fmt::Debug;
use std::net::SocketAddr;

use apiway_wire::endpointslice::{
    decode_event, decode_list, AddressType, EndpointSlice, EndpointSliceError, EndpointSliceList,
    WatchEvent, MAX_EVENT_LEN, MAX_LIST_LEN,
};

/// Decodes `input` as a list body; see [`check_round_trip`] and
/// [`check_slice`].
pub fn check_list(input: &[u8]) -> Option<EndpointSliceList> {
    let list = check_round_trip(input, decode_list, EndpointSliceList::encode, MAX_LIST_LEN)?;
    list.items.iter().for_each(check_slice);
    Some(list)
}

/// Decodes `input` as one watch line; see [`check_round_trip`] and
/// [`check_slice`]. An event encodes to one line, and a `Status` always
/// has something to say.
pub fn check_event(input: &[u8]) -> Option<WatchEvent> {
    let event = check_round_trip(input, decode_event, WatchEvent::encode, MAX_EVENT_LEN)?;
    assert!(!event.encode().contains(&b'\n'), "{event:?}");
    match &event {
        WatchEvent::Added(slice) | WatchEvent::Modified(slice) | WatchEvent::Deleted(slice) => {
            check_slice(slice)
        }
        WatchEvent::Error(status) => assert!(!status.to_string().is_empty()),
        WatchEvent::Bookmark { .. } => {}
    }
    Some(event)
}

/// Whatever decodes must re-encode to JSON that decodes to the same value
/// (when the encoding is within `limit`: `{}` endpoints grow when written
/// back), and every error must have a message.
fn check_round_trip<T: PartialEq + Debug>(
    input: &[u8],
    decode: fn(&[u8]) -> Result<T, EndpointSliceError>,
    encode: fn(&T) -> Vec<u8>,
    limit: usize,
) -> Option<T> {
    let value = match decode(input) {
        Ok(value) => value,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return None;
        }
    };
    let encoded = encode(&value);
    if encoded.len() <= limit {
        assert_eq!(decode(&encoded).as_ref(), Ok(&value));
    }
    Some(value)
}

/// The rule `ready_addresses` keeps, said another way: IP addresses of the
/// slice's family, of endpoints not marked unready, at the port named
/// `https`, else the only port.
pub fn check_slice(slice: &EndpointSlice) {
    let ready = slice.ready_addresses();
    let Some(port) = slice.https_port() else {
        assert!(ready.is_empty(), "{slice:?}");
        return;
    };
    assert_ne!(port, 0);
    let named_https = slice
        .ports
        .iter()
        .filter(|p| p.name.as_deref() == Some("https"))
        .count();
    assert!(named_https > 0 || slice.ports.len() == 1);
    let expected: Vec<SocketAddr> = slice
        .endpoints
        .iter()
        .filter(|e| e.ready != Some(false))
        .flat_map(|e| e.addresses.iter().map(|ip| SocketAddr::new(*ip, port)))
        .collect();
    assert_eq!(ready, expected);
    assert!(slice.address_type.is_ip() || ready.is_empty());
    for address in &ready {
        let family_ok = match slice.address_type {
            AddressType::Ipv4 => address.is_ipv4(),
            _ => address.is_ipv6(),
        };
        assert!(family_ok, "{address} in a {:?} slice", slice.address_type);
    }
}
