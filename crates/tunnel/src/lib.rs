//! The node-to-control-plane tunnel (Kubernetes KEP-2025): an agent asks a
//! tunnel server in the control-plane network to dial the API server, and
//! relays a node-local connection through it.
//!
//! One gRPC stream (konnectivity-client's `ProxyService/Proxy`, messages in
//! [`apiway_wire::tunnel`]) carries one tunneled TCP connection, so HTTP/2
//! flow control gives every connection its own backpressure:
//!
//! - [`stream`]: a Proxy stream as a byte stream (read and write halves,
//!   half-close, reset), and the relay between it and a TCP socket;
//! - [`server`]: the `tunnel-server` role: authenticated agents, allowed
//!   destinations, dialing with failover through core's endpoint sets;
//! - [`client`]: the agent's side: warm HTTP/2 connections to every tunnel
//!   server, a dial that fails over between them.
#![warn(missing_docs)]

pub mod client;
pub mod config;
mod grpc;
pub mod identity;
pub mod metrics;
pub mod server;
mod slot;
pub mod stream;
pub mod tokens;

pub use grpc::PROXY_PATH;
