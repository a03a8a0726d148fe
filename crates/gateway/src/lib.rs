//! The gateway role: one L4 load balancer in front of many API servers.
//!
//! A `kind: tls` listener reads the SNI from the TLS ClientHello without
//! terminating TLS, picks the route, dials a healthy backend and relays the
//! bytes untouched, so client-certificate authentication works end to end.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
mod gateway;
pub mod metrics;
pub mod router;
mod sni_listener;

pub use gateway::Gateway;
