//! Both directions of one connection, the idle timer, and the outcome.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};

use crate::half::{Fault, Half, Transfer};
use crate::{Direction, Observer, RelayEnd, RelayOutcome};

/// The relay future: owns both streams, so dropping it closes them.
///
/// Kept small on purpose, since one exists per proxied connection: two
/// streams, two [`Half`]s (which hold nothing while idle), a pointer to the
/// idle timer when one is configured, and the observer (typically a pointer).
pub(crate) struct Duplex<A, B, T, O> {
    client: A,
    backend: B,
    transfer: T,
    to_backend: Half,
    to_client: Half,
    idle: Option<Box<IdleTimer>>,
    observer: O,
}

/// Fires once no byte has moved for `timeout`.
///
/// The sleep is re-armed only when it fires, never per chunk: activity just
/// records the time, which keeps the timer wheel out of the data path.
struct IdleTimer {
    sleep: Pin<Box<Sleep>>,
    timeout: Duration,
    last_activity: Instant,
}

impl IdleTimer {
    fn new(timeout: Duration) -> IdleTimer {
        let now = Instant::now();
        IdleTimer {
            sleep: Box::pin(tokio::time::sleep_until(now + timeout)),
            timeout,
            last_activity: now,
        }
    }

    /// `true` once the connection has been idle for the whole timeout.
    fn poll_expired(&mut self, cx: &mut Context<'_>, progress: bool) -> bool {
        if progress {
            self.last_activity = Instant::now();
        }
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            let deadline = self.last_activity + self.timeout;
            if deadline <= Instant::now() {
                return true;
            }
            self.sleep.as_mut().reset(deadline);
        }
    }
}

impl<A, B, T, O> Duplex<A, B, T, O> {
    pub(crate) fn new(
        client: A,
        backend: B,
        transfer: T,
        idle_timeout: Option<Duration>,
        observer: O,
    ) -> Self {
        Duplex {
            client,
            backend,
            transfer,
            to_backend: Half::new(Direction::ClientToBackend),
            to_client: Half::new(Direction::BackendToClient),
            idle: idle_timeout.map(|t| Box::new(IdleTimer::new(t))),
            observer,
        }
    }

    /// The client, the backend and the observer.
    pub(crate) fn parts(&self) -> (&A, &B, &O) {
        (&self.client, &self.backend, &self.observer)
    }

    fn outcome(&self, end: RelayEnd) -> RelayOutcome {
        RelayOutcome {
            client_to_backend: self.to_backend.moved,
            backend_to_client: self.to_client.moved,
            end,
        }
    }
}

impl<A, B, T, O> Future for Duplex<A, B, T, O>
where
    A: AsyncWrite + Unpin,
    B: AsyncWrite + Unpin,
    T: Transfer<A, B> + Transfer<B, A> + Unpin,
    O: Observer + Unpin,
{
    type Output = RelayOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RelayOutcome> {
        let this = self.get_mut();
        let mut progress = false;

        let to_backend = this.to_backend.poll(
            cx,
            &this.transfer,
            &mut this.client,
            &mut this.backend,
            &this.observer,
            &mut progress,
        );
        if let Poll::Ready(Err(fault)) = to_backend {
            let end = match fault {
                Fault::Read(e) => RelayEnd::ClientError(e.kind()),
                Fault::Write(e) => RelayEnd::BackendError(e.kind()),
            };
            return Poll::Ready(this.outcome(end));
        }

        let to_client = this.to_client.poll(
            cx,
            &this.transfer,
            &mut this.backend,
            &mut this.client,
            &this.observer,
            &mut progress,
        );
        if let Poll::Ready(Err(fault)) = to_client {
            let end = match fault {
                Fault::Read(e) => RelayEnd::BackendError(e.kind()),
                Fault::Write(e) => RelayEnd::ClientError(e.kind()),
            };
            return Poll::Ready(this.outcome(end));
        }

        if this.to_backend.is_done() && this.to_client.is_done() {
            return Poll::Ready(this.outcome(RelayEnd::Closed));
        }
        if let Some(idle) = &mut this.idle {
            if idle.poll_expired(cx, progress) {
                return Poll::Ready(this.outcome(RelayEnd::IdleTimeout));
            }
        }
        Poll::Pending
    }
}
