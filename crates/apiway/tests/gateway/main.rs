//! Behaviour of the real `apiway gateway` binary, run as a separate process
//! with a generated YAML config, against real clients (curl, openssl,
//! etcdctl, rustls), real servers (stand-in API servers, etcd) and HAProxy
//! for comparison.

mod support;

mod access_log;
mod admin;
mod cli;
mod connect;
mod demo;
mod drain;
mod etcd;
mod failover;
mod fragmentation;
mod gateway_api;
mod haproxy;
mod health_checks;
mod limits;
mod node_drain;
mod passthrough;
mod proxy;
mod rejection;
mod reload;
mod routing;
