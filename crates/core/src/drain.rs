//! Graceful shutdown. On SIGTERM `/healthz` turns 503 at once; listeners keep
//! accepting for a drain delay so the load balancer notices, then stop;
//! established connections get a grace period to finish, then are closed.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::Health;

/// Timing of a graceful shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainTiming {
    /// How long listeners keep accepting after `/healthz` turned 503.
    pub drain_delay: Duration,
    /// How long established connections may take to finish afterwards.
    pub grace_period: Duration,
}

impl Default for DrainTiming {
    fn default() -> Self {
        DrainTiming {
            drain_delay: Duration::from_secs(5),
            grace_period: Duration::from_secs(30),
        }
    }
}

/// Coordinates listeners and connection tasks through a shutdown.
#[derive(Clone, Debug, Default)]
pub struct Drain {
    stop_accepting: CancellationToken,
    abort: CancellationToken,
    connections: TaskTracker,
    /// Accept loops still holding their listening socket.
    listeners: TaskTracker,
}

impl Drain {
    /// A fresh coordinator.
    pub fn new() -> Drain {
        Drain::default()
    }

    /// Fires when listeners must stop accepting.
    pub fn stop_accepting(&self) -> &CancellationToken {
        &self.stop_accepting
    }

    /// Fires when the grace period is over and connections must close.
    pub fn abort(&self) -> &CancellationToken {
        &self.abort
    }

    /// Held by an accept loop while its listening socket is open, so the
    /// shutdown knows when every one is closed (an agent then tells its
    /// own listeners from a successor's).
    pub fn listener_open(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.listeners.token()
    }

    /// Connections still running.
    pub fn active(&self) -> usize {
        self.connections.len()
    }

    /// Runs a connection task that is waited for on shutdown and dropped
    /// (closing its sockets) when the grace period runs out.
    pub fn spawn<F>(&self, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let abort = self.abort.clone();
        self.connections.spawn(async move {
            tokio::select! {
                biased;
                _ = connection => {}
                _ = abort.cancelled() => {}
            }
        });
    }

    /// Performs the shutdown sequence; `hurry` (a second signal) skips the
    /// remaining waits.
    pub async fn run(&self, health: &Health, timing: DrainTiming, hurry: impl Future<Output = ()>) {
        tokio::pin!(hurry);
        health.start_draining();
        tracing::info!(
            drain_delay = ?timing.drain_delay,
            grace_period = ?timing.grace_period,
            "draining: /healthz now fails; still accepting during the drain delay"
        );
        let hurried = tokio::select! {
            _ = tokio::time::sleep(timing.drain_delay) => false,
            _ = &mut hurry => true,
        };
        self.stop_accepting.cancel();
        // The accept loops close their sockets as soon as they run.
        self.listeners.close();
        if tokio::time::timeout(Duration::from_secs(1), self.listeners.wait())
            .await
            .is_err()
        {
            tracing::warn!("a listening socket is still open after 1 s");
        }
        self.connections.close();
        let open = self.connections.len();
        if !hurried && open > 0 {
            tracing::info!(open, "stopped accepting; waiting for connections to finish");
            tokio::select! {
                _ = self.connections.wait() => {}
                _ = tokio::time::sleep(timing.grace_period) => {
                    tracing::warn!(open = self.connections.len(), "grace period over; closing connections");
                }
                _ = &mut hurry => {}
            }
        }
        self.abort.cancel();
        self.connections.wait().await;
    }
}

/// Waits for SIGTERM or SIGINT and returns its name.
pub async fn termination_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers there is nothing to wait for.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Waits for the first SIGTERM or SIGINT and logs it; returns the future
/// that resolves on a second one, which a role passes to its shutdown as
/// the signal to skip the remaining waits.
pub async fn first_termination() -> impl Future<Output = ()> {
    let signal = termination_signal().await;
    tracing::info!(signal, "shutting down");
    async {
        let again = termination_signal().await;
        tracing::warn!(signal = again, "second signal; closing now");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn waits_for_connections_then_aborts_stragglers() {
        let drain = Drain::new();
        let health = Health::new();
        let quick_done = Arc::new(AtomicBool::new(false));
        let q = quick_done.clone();
        drain.spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            q.store(true, Ordering::SeqCst);
        });
        drain.spawn(std::future::pending());
        let timing = DrainTiming {
            drain_delay: Duration::from_secs(1),
            grace_period: Duration::from_secs(10),
        };
        let started = tokio::time::Instant::now();
        drain.run(&health, timing, std::future::pending()).await;
        assert!(health.is_draining());
        assert!(drain.stop_accepting().is_cancelled());
        assert!(quick_done.load(Ordering::SeqCst));
        assert_eq!(drain.active(), 0);
        assert_eq!(started.elapsed(), Duration::from_secs(11));
    }
}
