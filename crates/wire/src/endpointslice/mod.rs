//! Kubernetes `discovery.k8s.io/v1` EndpointSlices as an API server sends
//! them: the body of a list, and one line of a watch.
//!
//! A client that learns the API server's endpoints from the
//! `default/kubernetes` EndpointSlices lists them once with [`decode_list`],
//! then watches from the list's `resourceVersion` and hands each line of the
//! watch body (the events are newline-delimited JSON) to [`decode_event`].
//! Both check the length first ([`MAX_LIST_LEN`], [`MAX_EVENT_LEN`]), then
//! read the JSON into private serde structs, then validate it into the typed
//! values here. Nothing here reads a clock or touches a socket.
//!
//! ```
//! use apiway_wire::endpointslice::{decode_event, decode_list, WatchEvent};
//!
//! let list = decode_list(br#"{"kind": "EndpointSliceList",
//!     "metadata": {"resourceVersion": "41"},
//!     "items": [{"metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": "40"},
//!                "addressType": "IPv4",
//!                "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}},
//!                              {"addresses": ["10.0.0.8"], "conditions": {"ready": false}}],
//!                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}"#).unwrap();
//! assert_eq!(list.resource_version, "41");
//! let ready: Vec<String> = list.items[0].ready_addresses().iter().map(|a| a.to_string()).collect();
//! assert_eq!(ready, ["10.0.0.7:6443"]);
//!
//! let gone = decode_event(br#"{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}"#).unwrap();
//! assert!(matches!(gone, WatchEvent::Error(status) if status.is_expired()));
//! ```
//!
//! # What is accepted
//!
//! - Fields this module does not name (`kind`, `labels`, `managedFields`,
//!   `protocol`, `hostname`, the `serving` and `terminating` conditions,
//!   ...) are ignored, whatever they hold. A field it names must have the
//!   JSON type Kubernetes gives it, else the whole list or event is
//!   [`EndpointSliceError::Malformed`]; so are duplicate keys, a missing
//!   required field (a list's or slice's `metadata.resourceVersion`, a
//!   slice's `metadata.name` and `addressType`, an event's `type` and
//!   `object`) and a number too large for its field. (As serde reads
//!   structs, a JSON array in place of an object is read by position.)
//! - `endpoints`, `ports`, `items` and an endpoint's `addresses` may be
//!   missing or `null`, which Go's encoder writes for an empty list: both
//!   mean empty.
//! - A port number outside 1 to 65535 rejects the whole list or event
//!   ([`EndpointSliceError::InvalidPort`]); a port without a number (which
//!   Kubernetes reads as "every port") is kept as [`EndpointPort::port`]
//!   `None`.
//! - In an `IPv4` or `IPv6` slice each address must parse as an address of
//!   that family; one that does not is kept in
//!   [`Endpoint::other_addresses`] rather than rejecting the slice, so one
//!   bad address costs only itself. `FQDN` slices (and any address type a
//!   later Kubernetes may add) are kept, with every address in
//!   `other_addresses`, so a caller that wants IPs skips them by
//!   [`AddressType::is_ip`] while watch events that name them still apply.
//! - An event `type` other than `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`
//!   and `ERROR` is [`EndpointSliceError::UnknownEventType`].
//!
//! [`EndpointSliceList::encode`] and [`WatchEvent::encode`] write the JSON
//! back; decoding what they write gives the same value.

mod json;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Longest list body [`decode_list`] reads, in bytes: 4 MiB.
///
/// The `default/kubernetes` Service has a slice or two with one endpoint
/// per API server; even a full slice (1000 endpoints) is far below this.
pub const MAX_LIST_LEN: usize = 4 << 20;

/// Longest watch event line [`decode_event`] reads, in bytes: 1 MiB, which
/// also bounds how much a caller buffers while waiting for a line's end.
pub const MAX_EVENT_LEN: usize = 1 << 20;

/// An `EndpointSliceList`: the answer to a list request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSliceList {
    /// `metadata.resourceVersion`: where a watch that follows this list
    /// starts.
    pub resource_version: String,
    /// The slices, in the order sent.
    pub items: Vec<EndpointSlice>,
}

/// One EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSlice {
    /// `metadata.name`, unique in its namespace.
    pub name: String,
    /// `metadata.namespace`, when sent.
    pub namespace: Option<String>,
    /// `metadata.resourceVersion` of this object.
    pub resource_version: String,
    /// The kind of every address in the slice.
    pub address_type: AddressType,
    /// The endpoints, in the order sent.
    pub endpoints: Vec<Endpoint>,
    /// The ports every endpoint serves, in the order sent.
    pub ports: Vec<EndpointPort>,
}

/// An EndpointSlice's `addressType`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AddressType {
    /// `IPv4`: addresses are dotted-quad IPv4 addresses.
    Ipv4,
    /// `IPv6`: addresses are IPv6 addresses.
    Ipv6,
    /// `FQDN`: addresses are DNS names (deprecated by Kubernetes; nothing
    /// to dial without a resolver).
    Fqdn,
    /// Any other value, as sent.
    Other(String),
}

/// One endpoint of a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The addresses that parse as the slice's IP family, in the order
    /// sent; always empty in a slice that is not `IPv4` or `IPv6`.
    pub addresses: Vec<IpAddr>,
    /// Every other address, as sent: the names of an `FQDN` slice, or
    /// text that is not an address of the slice's family.
    pub other_addresses: Vec<String>,
    /// `conditions.ready`; `None` when not sent, which Kubernetes says to
    /// read as ready.
    pub ready: Option<bool>,
}

/// One port of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointPort {
    /// `name`, when sent (the API server's own port is `https`).
    pub name: Option<String>,
    /// `port`, from 1 to 65535; `None` when not sent.
    pub port: Option<u16>,
}

/// One event of an EndpointSlice watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// `ADDED`: a slice was created (or existed when the watch started).
    Added(EndpointSlice),
    /// `MODIFIED`: a slice changed; this is its new state.
    Modified(EndpointSlice),
    /// `DELETED`: a slice is gone; this is its last state.
    Deleted(EndpointSlice),
    /// `BOOKMARK`: nothing changed up to this `resourceVersion`, where a
    /// new watch may start.
    Bookmark {
        /// The object's `metadata.resourceVersion`.
        resource_version: String,
    },
    /// `ERROR`: the watch failed; its object is a `Status`.
    Error(Status),
}

/// A Kubernetes `Status`, as an `ERROR` watch event carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Status {
    /// `code`: the HTTP status it stands for (`410` when the watch's
    /// `resourceVersion` is too old).
    pub code: Option<u16>,
    /// `reason`, a CamelCase word (`Expired`, `Gone`, `InternalError`).
    pub reason: Option<String>,
    /// `message`, for a person.
    pub message: Option<String>,
}

/// Why a list body or watch event line was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointSliceError {
    /// The input is longer than the limit; checked before any parsing.
    #[error("{what} of {len} bytes is over the {limit}-byte limit")]
    TooLong {
        /// `EndpointSliceList` or `watch event`.
        what: &'static str,
        /// The input's length.
        len: usize,
        /// [`MAX_LIST_LEN`] or [`MAX_EVENT_LEN`].
        limit: usize,
    },
    /// The input is not JSON, or not JSON of the expected shape: a required
    /// field is missing, a field has the wrong type, a number does not fit
    /// its field, or a key is repeated.
    #[error("{what} does not parse: {reason}")]
    Malformed {
        /// `EndpointSliceList` or `watch event`.
        what: &'static str,
        /// What serde_json found, with the line and column.
        reason: String,
    },
    /// A watch event's `type` is not one Kubernetes defines.
    #[error("unknown watch event type {0:?}")]
    UnknownEventType(String),
    /// A port number is outside 1 to 65535.
    #[error("EndpointSlice {slice:?} has port {port}, outside 1-65535")]
    InvalidPort {
        /// The slice's name.
        slice: String,
        /// The number sent.
        port: i64,
    },
}

/// Reads the body of an EndpointSlice list response.
pub fn decode_list(body: &[u8]) -> Result<EndpointSliceList, EndpointSliceError> {
    json::list(body)
}

/// Reads one line of an EndpointSlice watch response (without its `\n`;
/// surrounding whitespace is allowed).
pub fn decode_event(line: &[u8]) -> Result<WatchEvent, EndpointSliceError> {
    json::event(line)
}

impl EndpointSliceList {
    /// This list as a JSON `EndpointSliceList` body.
    pub fn encode(&self) -> Vec<u8> {
        json::encode_list(self)
    }
}

impl WatchEvent {
    /// This event as one JSON watch line, without the trailing `\n`.
    pub fn encode(&self) -> Vec<u8> {
        json::encode_event(self)
    }
}

impl AddressType {
    /// The value as Kubernetes writes it (`IPv4`, `IPv6`, `FQDN`).
    pub fn as_str(&self) -> &str {
        match self {
            AddressType::Ipv4 => "IPv4",
            AddressType::Ipv6 => "IPv6",
            AddressType::Fqdn => "FQDN",
            AddressType::Other(other) => other,
        }
    }

    /// Whether the slice's addresses are IP addresses, so something a
    /// client can dial without resolving names.
    pub fn is_ip(&self) -> bool {
        matches!(self, AddressType::Ipv4 | AddressType::Ipv6)
    }

    fn from_wire(value: String) -> AddressType {
        match value.as_str() {
            "IPv4" => AddressType::Ipv4,
            "IPv6" => AddressType::Ipv6,
            "FQDN" => AddressType::Fqdn,
            _ => AddressType::Other(value),
        }
    }

    /// `text` as an address of this family, if it is one.
    fn parse_address(&self, text: &str) -> Option<IpAddr> {
        match self {
            AddressType::Ipv4 => text.parse().ok().map(IpAddr::V4),
            AddressType::Ipv6 => text.parse().ok().map(IpAddr::V6),
            AddressType::Fqdn | AddressType::Other(_) => None,
        }
    }
}

impl Status {
    /// Whether this is `410 Gone`: the watch's `resourceVersion` is older
    /// than the server's history, so the caller must list again.
    pub fn is_expired(&self) -> bool {
        self.code == Some(410)
    }
}

impl fmt::Display for Status {
    /// `code reason: message`, leaving out what was not sent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = match (self.code, &self.reason) {
            (Some(code), Some(reason)) => format!("{code} {reason}"),
            (Some(code), None) => code.to_string(),
            (None, Some(reason)) => reason.clone(),
            (None, None) => String::new(),
        };
        match (head.is_empty(), &self.message) {
            (true, None) => f.write_str("a Status without code, reason or message"),
            (true, Some(message)) => f.write_str(message),
            (false, None) => f.write_str(&head),
            (false, Some(message)) => write!(f, "{head}: {message}"),
        }
    }
}

impl EndpointSlice {
    /// The port a client dials: the one named `https`, else the slice's
    /// only port. `None` when the slice has several ports and none is named
    /// `https`, or the chosen port has no number.
    pub fn https_port(&self) -> Option<u16> {
        let chosen = self
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .or(match self.ports.as_slice() {
                [only] => Some(only),
                _ => None,
            })?;
        chosen.port
    }

    /// Where a client can reach the API server through this slice: every IP
    /// address of every endpoint whose `ready` is not `false`, at
    /// [`EndpointSlice::https_port`], in the order sent. Empty for a slice
    /// whose addresses are not IPs or that has no such port.
    pub fn ready_addresses(&self) -> Vec<SocketAddr> {
        let Some(port) = self.https_port() else {
            return Vec::new();
        };
        self.endpoints
            .iter()
            .filter(|e| e.ready != Some(false))
            .flat_map(|e| &e.addresses)
            .map(|ip| SocketAddr::new(*ip, port))
            .collect()
    }
}
