//! Active health checks and DNS following for endpoint sets: the endpoint
//! model's [`check`](crate::endpoint::check) (what a check is) and
//! [`checker`](crate::endpoint::checker) (the tasks that run it), under
//! the path the roles use.

pub use crate::endpoint::check::{
    read_token, CheckDefaults, CheckKind, CheckProxy, HealthCheck, HealthCheckConfig, Probe,
    SendProxy, DNS_REFRESH, DNS_TIMEOUT,
};
pub use crate::endpoint::checker::{needs_checker, spawn_checker, spawn_resolver};
