//! Test support for apiway: what tests and benchmarks need around the
//! product, and nothing the product itself uses (the stand-in API server,
//! the fixture Kubernetes API and the PKI are in `apiway-standin`).
//!
//! - [`process`]: the one launcher for child processes (apiway roles and
//!   real peers alike): own process group, a watchdog, captured output,
//!   readiness by port or by ready file.
//! - [`peers`]: launchers for real third-party peers (HAProxy, nginx, etcd)
//!   and `apiway standin` processes, and helpers for ports and process memory.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod peers;
pub mod process;
