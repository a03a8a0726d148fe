//! What every apiway role shares.
//!
//! Endpoint sets with health (active probes and passive ejection), selection
//! policies, dialing with failover, the admin server, metrics, config reload
//! and graceful drain. The gateway, the agent and the client library compose
//! these pieces; none re-implements them.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod causes;
pub mod choice;
pub mod cidr;
pub mod config;
pub mod config_text;
pub mod connector;
pub mod dial;
pub mod drain;
pub mod duration;
pub mod endpoint;
pub mod forward;
pub mod health;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod node;
pub mod read_until;
pub mod ready;
pub mod reload;
pub mod runtime;
pub mod select;
pub mod sync;
pub mod tls;

pub use apiway_relay as relay;
