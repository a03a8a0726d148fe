//! Stand-ins for a Kubernetes control plane, so apiway can run a realistic
//! topology on loopback without a real cluster: `apiway standin` and
//! `apiway demo` are built from this crate, and so are apiway's tests.
//!
//! - [`pki`]: a throw-away certificate authority that issues server and client
//!   certificates, and turns them into rustls configurations.
//! - [`standin`]: a stand-in Kubernetes API server (real TLS, HTTP/1.1 and
//!   HTTP/2, flippable `/readyz`, optional client-certificate auth, `Alt-Svc`).
//! - [`fixture_api`]: a fixture Kubernetes API (an in-memory store with
//!   list and watch by `resourceVersion`) that stand-ins can mount.
//! - [`client`]: a small HTTPS client that reports which server answered
//!   (`apiway demo` checks the topology with it).
//!
//! It is product code: no panics on peer input.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod fixture_api;
pub mod pki;
pub mod standin;

pub use client::{https_get, https_get_with_config, Response};
pub use fixture_api::{FixtureApi, FixtureServer};
pub use pki::{Ca, Issued};
pub use standin::{serve_forever, StandinAltSvc, StandinConfig, StandinServer};
