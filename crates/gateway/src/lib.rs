//! The gateway role: one L4 load balancer in front of many API servers.
//!
//! A `kind: tls` listener reads the SNI from the TLS ClientHello without
//! terminating TLS, picks the route, dials a healthy backend and relays the
//! bytes untouched, so client-certificate authentication works end to end.
//! A `kind: proxy` listener routes by the original destination a trusted
//! sender's PROXY header names; a `kind: connect` listener routes HTTP
//! `CONNECT host:port` tunnels by their authority.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod access_log;
pub mod cidr;
pub mod config;
mod connect_listener;
mod connection;
mod forward;
mod gateway;
mod listener_state;
pub mod metrics;
mod proxy_header;
mod proxy_listener;
mod route;
pub mod router;
mod sni_listener;

pub use gateway::Gateway;
