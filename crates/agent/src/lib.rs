//! The agent role: a per-node forwarder for the API server.
//!
//! It listens on local addresses (often the API server's ClusterIP, which it
//! can add to an interface itself) and forwards each connection:
//!
//! - `direct`: to the API server endpoints, preferring one on this host and
//!   then the lowest measured latency, failing over within the connection;
//! - `proxy`: to a gateway with a PROXY protocol v2 header carrying the
//!   original destination (and optionally an AUTHORITY TLV);
//! - `connect`: to a gateway through an HTTP/1.1 `CONNECT` tunnel.
//!
//! Endpoint selection, health, dialing and the relay are core's; this crate
//! configures them, adds the address, and speaks the preface.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod address;
mod agent;
pub mod config;
mod discovery;
pub mod metrics;
mod netlink;
mod upstream;

pub use agent::Agent;
