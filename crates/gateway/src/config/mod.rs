//! The gateway's configuration: the file as written ([`file`]), the typed
//! spec every source produces ([`spec`]), and its validation into a
//! [`Snapshot`] ([`validate()`]).
//!
//! Parsing and validation happen before anything changes; a configuration
//! that fails here never replaces a running one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use apiway_core::config::Common;
use apiway_core::endpoint::EndpointSetSpec;
use apiway_core::relay::RelayConfig;
use apiway_wire::connect::Authority;
use serde::Deserialize;

use crate::cidr::TrustedSources;
use crate::router::SniRouter;

pub mod file;
pub mod spec;
mod validate;

pub use file::{decode, BackendConfig, ConfigFile, ListenerConfig, RouteConfig};
pub use spec::{BackendGroupDef, GatewaySpec, ListenerDef, RouteDef};
pub use validate::validate;

/// What a listener does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerKind {
    /// TLS passthrough routed by SNI.
    Tls,
    /// A PROXY protocol header (v1 or v2) from a trusted sender, routed by
    /// the original destination it names.
    Proxy,
    /// HTTP/1.1 `CONNECT host:port`, routed by that authority.
    Connect,
}

/// Whether a `tls` listener reads a PROXY header before the ClientHello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocolMode {
    /// Never: the first byte belongs to the ClientHello.
    #[default]
    Off,
    /// A trusted source may send one; its first bytes tell.
    Optional,
    /// A trusted source must send one; others are closed unread.
    Required,
}

/// The PROXY header a route sends to its backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendProxyProtocol {
    /// The text line, `PROXY TCP4 ...`.
    V1,
    /// The binary header.
    V2,
}

impl SendProxyProtocol {
    /// The header's version, as the connector and the health check send it.
    pub fn version(self) -> apiway_wire::proxy::Version {
        match self {
            SendProxyProtocol::V1 => apiway_wire::proxy::Version::V1,
            SendProxyProtocol::V2 => apiway_wire::proxy::Version::V2,
        }
    }
}

/// A validated listener.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerSpec {
    /// Name.
    pub name: String,
    /// Address.
    pub address: SocketAddr,
    /// Kind.
    pub kind: ListenerKind,
    /// Connection limit.
    pub max_connections: usize,
    /// What happens at the limit.
    pub when_full: apiway_core::listener::WhenFull,
    /// ClientHello timeout.
    pub client_hello_timeout: Duration,
    /// ClientHello size limit.
    pub max_client_hello_bytes: usize,
    /// Whether a PROXY header comes first (`Required` for `proxy` listeners).
    pub proxy_protocol: ProxyProtocolMode,
    /// Senders whose PROXY headers are believed.
    pub trusted_sources: TrustedSources,
    /// PROXY header timeout.
    pub proxy_header_timeout: Duration,
    /// CONNECT request head timeout.
    pub request_timeout: Duration,
    /// CONNECT request head size limit.
    pub max_request_bytes: usize,
}

/// A validated route.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSpec {
    /// Name.
    pub name: String,
    /// Shares of new connections, each with its backends and their health.
    pub groups: Vec<BackendGroupSpec>,
    /// Per-backend connect timeout.
    pub connect_timeout: Duration,
    /// Relay settings.
    pub relay: RelayConfig,
    /// PROXY header sent to backends.
    pub send_proxy_protocol: Option<SendProxyProtocol>,
}

/// A validated share of a route.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendGroupSpec {
    /// Name (metrics label of its endpoint set).
    pub name: String,
    /// Relative share of new connections.
    pub weight: u32,
    /// Backends and their health.
    pub endpoints: EndpointSetSpec,
}

/// A validated configuration, ready to apply.
#[derive(Debug)]
pub struct Snapshot {
    /// Admin endpoint, drain timing, reload interval.
    pub common: Common,
    /// Listeners.
    pub listeners: Vec<ListenerSpec>,
    /// Routes, indexed by the router.
    pub routes: Vec<RouteSpec>,
    /// SNI to route index, for every `tls` listener.
    pub router: SniRouter,
    /// SNI to route index for one listener (by name), looked up before
    /// [`Snapshot::router`].
    pub listener_routers: HashMap<String, SniRouter>,
    /// Original destination to route index (`proxy` listeners).
    pub destinations: HashMap<SocketAddr, usize>,
    /// CONNECT authority to route index (`connect` listeners).
    pub authorities: HashMap<Authority, usize>,
    /// Route index for no SNI / no match; `None` rejects.
    pub default_route: Option<usize>,
    /// Where connections are logged when they end, if anywhere.
    pub access_log: Option<crate::access_log::AccessLogConfig>,
}

/// Parses and validates a configuration file's text. The error is one line
/// naming the problem and where it is.
pub fn parse(text: &str) -> Result<Snapshot, String> {
    validate(decode(text)?)
}

/// How destinations are compared: an IPv4-mapped IPv6 address (what a
/// dual-stack sender may put in a `TCP6` header) is its IPv4 address, and
/// IPv6 flow info and scope are not part of it.
pub fn destination_key(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => SocketAddr::from((*v6.ip(), v6.port())),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests;
