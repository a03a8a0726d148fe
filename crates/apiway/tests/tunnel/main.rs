//! The node-to-control-plane tunnel through the real binaries: `apiway
//! tunnel-server` and `apiway agent --upstream tunnel`, with stand-in and
//! fixture API servers, kubectl, curl, Python grpcio as a second gRPC
//! implementation, and killed or stopped servers.

#[path = "../gateway/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

// The agent tests' helpers: network namespaces, curl inside them.
#[path = "../agent/agent_support.rs"]
#[allow(dead_code, unused_imports)]
mod agent_support;
mod tunnel_support;

mod deploy;
mod dns;
mod faults;
mod interop;
mod kep;
mod path;
mod refusals;
