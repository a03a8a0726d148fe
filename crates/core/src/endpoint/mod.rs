//! The endpoint model: one for every role. The gateway's routes, the
//! agent's upstream, the client library and the tunnel server all pick
//! API server (or backend) endpoints the same way.
//!
//! A file per idea; each builds only on the ones above it:
//!
//! | file | the idea |
//! |---|---|
//! | [`address`] | `host:port` as configured; whether an address is local |
//! | [`penalty`] | backoff ejection, fixed blocks, permanent blocks |
//! | [`select`] | the one selection order, the policies, hysteresis |
//! | [`membership`] | members from config, DNS and discovery, with expiry; the origin as last resort |
//! | [`check`] | active checks as configured (TCP, HTTPS `/readyz`) |
//! | [`member`] | one endpoint of a set: check verdict, ejection, latency, load |
//! | [`set`] | [`EndpointSet`]: the shared, reloadable set of the gateway and the agent |
//! | [`checker`] | the tasks that run checks and follow DNS for a set |
//! | [`choice`] | [`EndpointChoice`](choice::EndpointChoice): the client's origin and alternatives |
//! | [`failover`] | the one loop that tries endpoints until one works |
//!
//! Selection and penalties take the time as an argument (`now`), so they
//! are tested without sleeping; only the tasks in [`checker`] and the
//! loop in [`failover`] read the clock.

pub mod address;
pub mod check;
pub mod checker;
pub mod choice;
pub mod failover;
pub mod member;
pub mod membership;
pub mod penalty;
pub mod select;
pub mod set;

pub use address::{is_local_ip, Address, Host};
pub use member::{Endpoint, Lease};
pub use penalty::Ejection;
pub use select::Policy;
pub use set::{EndpointSet, EndpointSetSpec, Members};
