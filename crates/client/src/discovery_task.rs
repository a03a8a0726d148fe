//! The handle of the EndpointSlice discovery task a client holds: whether
//! it started, and the channel whose drop (with the client) ends it. Apart
//! from the task itself (`discovery`), which needs the client.

use tokio::sync::watch;

/// Starts and stops the background task.
#[derive(Debug)]
pub(crate) struct DiscoveryTask {
    pub(crate) started: std::sync::atomic::AtomicBool,
    /// Dropped with the client, which ends the task.
    pub(crate) stop: watch::Sender<()>,
    /// The discovered endpoints, for subscribers
    /// ([`Client::discovered`](crate::Client::discovered)).
    pub(crate) discovered: watch::Sender<Vec<apiway_core::endpoint::Address>>,
}

impl DiscoveryTask {
    pub(crate) fn new() -> Self {
        DiscoveryTask {
            started: std::sync::atomic::AtomicBool::new(false),
            stop: watch::channel(()).0,
            discovered: watch::channel(Vec::new()).0,
        }
    }
}
