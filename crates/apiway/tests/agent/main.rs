//! Behaviour of the real `apiway agent` binary, run as a separate process
//! against stand-in API servers (in-process, or `apiway standin` processes
//! that can be killed or SIGSTOPped), HAProxy with `accept-proxy`, a small
//! CONNECT server, curl, and network namespaces the tests create.

// The gateway tests' helpers (PKI, stand-ins, curl, metrics parsing); not
// every one of them is used here.
#[path = "../gateway/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

mod agent_support;

mod bind_address;
mod cli;
mod connect;
mod direct;
mod discover;
mod failover;
mod in_cluster;
mod node_drain;
mod prefer_local;
mod process_limits;
mod proxy;
mod reload;
mod resets;
mod restart;
mod round_robin_dns;
