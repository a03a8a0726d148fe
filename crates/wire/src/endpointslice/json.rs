//! The JSON shapes, read and written by serde, and their conversion to and
//! from the typed values of the parent module (where the validation is).

use serde::de::{Deserialize, Deserializer};
use serde::Serialize;
use serde_json::value::RawValue;

use super::{
    AddressType, Endpoint, EndpointPort, EndpointSlice, EndpointSliceError, EndpointSliceList,
    Status, WatchEvent, MAX_EVENT_LEN, MAX_LIST_LEN,
};

const LIST: &str = "EndpointSliceList";
const EVENT: &str = "watch event";

#[derive(serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct ListJson {
    // `kind` and `apiVersion` are written for a reader's sake, never read.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    metadata: ListMetaJson,
    #[serde(default, deserialize_with = "null_as_empty")]
    items: Vec<SliceJson>,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMetaJson {
    resource_version: String,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct SliceJson {
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    metadata: ObjectMetaJson,
    address_type: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    endpoints: Vec<EndpointJson>,
    #[serde(default, deserialize_with = "null_as_empty")]
    ports: Vec<PortJson>,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectMetaJson {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    resource_version: String,
}

#[derive(serde::Deserialize, Serialize)]
struct EndpointJson {
    #[serde(default, deserialize_with = "null_as_empty")]
    addresses: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    conditions: ConditionsJson,
}

#[derive(Default, serde::Deserialize, Serialize)]
struct ConditionsJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
}

#[derive(serde::Deserialize, Serialize)]
struct PortJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    // Wider than a port so that 0, negative and too-large numbers are a
    // clear `InvalidPort`, not a serde message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    port: Option<i64>,
}

/// An event as read: the object is decoded once `type` says what it is.
#[derive(serde::Deserialize)]
struct EventJson<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// An event as written.
#[derive(Serialize)]
struct EventOut<T> {
    #[serde(rename = "type")]
    kind: &'static str,
    object: T,
}

#[derive(serde::Deserialize, Serialize)]
struct BookmarkJson {
    metadata: ListMetaJson,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// Go writes an empty slice or map as `null`: read it as empty.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn check_len(input: &[u8], what: &'static str, limit: usize) -> Result<(), EndpointSliceError> {
    if input.len() > limit {
        return Err(EndpointSliceError::TooLong {
            what,
            len: input.len(),
            limit,
        });
    }
    Ok(())
}

fn from_json<'a, T: Deserialize<'a>>(
    input: &'a [u8],
    what: &'static str,
) -> Result<T, EndpointSliceError> {
    serde_json::from_slice(input).map_err(|e| EndpointSliceError::Malformed {
        what,
        reason: e.to_string(),
    })
}

pub(super) fn list(body: &[u8]) -> Result<EndpointSliceList, EndpointSliceError> {
    check_len(body, LIST, MAX_LIST_LEN)?;
    let list: ListJson = from_json(body, LIST)?;
    Ok(EndpointSliceList {
        resource_version: list.metadata.resource_version,
        items: list
            .items
            .into_iter()
            .map(slice)
            .collect::<Result<_, _>>()?,
    })
}

pub(super) fn event(line: &[u8]) -> Result<WatchEvent, EndpointSliceError> {
    check_len(line, EVENT, MAX_EVENT_LEN)?;
    let event: EventJson = from_json(line, EVENT)?;
    let object = event.object.get().as_bytes();
    Ok(match event.kind.as_str() {
        "ADDED" => WatchEvent::Added(slice(from_json(object, EVENT)?)?),
        "MODIFIED" => WatchEvent::Modified(slice(from_json(object, EVENT)?)?),
        "DELETED" => WatchEvent::Deleted(slice(from_json(object, EVENT)?)?),
        "BOOKMARK" => {
            let bookmark: BookmarkJson = from_json(object, EVENT)?;
            WatchEvent::Bookmark {
                resource_version: bookmark.metadata.resource_version,
            }
        }
        "ERROR" => {
            let status: StatusJson = from_json(object, EVENT)?;
            WatchEvent::Error(Status {
                code: status.code,
                reason: status.reason,
                message: status.message,
            })
        }
        _ => return Err(EndpointSliceError::UnknownEventType(event.kind)),
    })
}

fn slice(json: SliceJson) -> Result<EndpointSlice, EndpointSliceError> {
    let name = json.metadata.name;
    let ports = json
        .ports
        .into_iter()
        .map(|p| {
            let port = p
                .port
                .map(|n| {
                    u16::try_from(n).ok().filter(|n| *n != 0).ok_or_else(|| {
                        EndpointSliceError::InvalidPort {
                            slice: name.clone(),
                            port: n,
                        }
                    })
                })
                .transpose()?;
            Ok(EndpointPort { name: p.name, port })
        })
        .collect::<Result<_, _>>()?;
    let address_type = AddressType::from_wire(json.address_type);
    let endpoints = json
        .endpoints
        .into_iter()
        .map(|e| {
            let mut addresses = Vec::new();
            let mut other_addresses = Vec::new();
            for text in e.addresses {
                match address_type.parse_address(&text) {
                    Some(ip) => addresses.push(ip),
                    None => other_addresses.push(text),
                }
            }
            Endpoint {
                addresses,
                other_addresses,
                ready: e.conditions.ready,
            }
        })
        .collect();
    Ok(EndpointSlice {
        name,
        namespace: json.metadata.namespace,
        resource_version: json.metadata.resource_version,
        address_type,
        endpoints,
        ports,
    })
}

fn slice_json(slice: &EndpointSlice) -> SliceJson {
    SliceJson {
        kind: Some("EndpointSlice"),
        api_version: Some("discovery.k8s.io/v1"),
        metadata: ObjectMetaJson {
            name: slice.name.clone(),
            namespace: slice.namespace.clone(),
            resource_version: slice.resource_version.clone(),
        },
        address_type: slice.address_type.as_str().to_owned(),
        endpoints: slice
            .endpoints
            .iter()
            .map(|e| EndpointJson {
                addresses: e
                    .addresses
                    .iter()
                    .map(ToString::to_string)
                    .chain(e.other_addresses.iter().cloned())
                    .collect(),
                conditions: ConditionsJson { ready: e.ready },
            })
            .collect(),
        ports: slice
            .ports
            .iter()
            .map(|p| PortJson {
                name: p.name.clone(),
                port: p.port.map(i64::from),
            })
            .collect(),
    }
}

fn to_json(value: &impl Serialize) -> Vec<u8> {
    // Only strings, integers, booleans and derived structs: nothing here
    // can fail to serialize (no maps with non-string keys, no floats).
    serde_json::to_vec(value).unwrap_or_default()
}

pub(super) fn encode_list(list: &EndpointSliceList) -> Vec<u8> {
    to_json(&ListJson {
        kind: Some(LIST),
        api_version: Some("discovery.k8s.io/v1"),
        metadata: ListMetaJson {
            resource_version: list.resource_version.clone(),
        },
        items: list.items.iter().map(slice_json).collect(),
    })
}

pub(super) fn encode_event(event: &WatchEvent) -> Vec<u8> {
    match event {
        WatchEvent::Added(slice) => to_json(&EventOut {
            kind: "ADDED",
            object: slice_json(slice),
        }),
        WatchEvent::Modified(slice) => to_json(&EventOut {
            kind: "MODIFIED",
            object: slice_json(slice),
        }),
        WatchEvent::Deleted(slice) => to_json(&EventOut {
            kind: "DELETED",
            object: slice_json(slice),
        }),
        WatchEvent::Bookmark { resource_version } => to_json(&EventOut {
            kind: "BOOKMARK",
            object: BookmarkJson {
                metadata: ListMetaJson {
                    resource_version: resource_version.clone(),
                },
            },
        }),
        WatchEvent::Error(status) => to_json(&EventOut {
            kind: "ERROR",
            object: StatusJson {
                kind: Some("Status"),
                api_version: Some("v1"),
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
        }),
    }
}
