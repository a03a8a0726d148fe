//! The hand-off between a tunnel stream's writer and its HTTP/2 body: room
//! for one message, an abort, and the end, in one small allocation.
//!
//! A tokio mpsc channel would do, but it allocates a block of 32 slots
//! (about 2 KiB here) per channel, and an oneshot and a `PollSender` beside
//! it; an idle tunneled connection would pay that on both sides. The
//! backpressure past this one message is HTTP/2's: hyper polls a body only
//! when its stream has send window.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

/// One gRPC message, in one or two pieces (a `DATA` message's header and
/// its payload, so that the payload is not copied to join them).
pub(crate) type Message = (Bytes, Option<Bytes>);

#[derive(Default)]
struct State {
    item: Option<Message>,
    abort: Option<String>,
    closed: bool,
    receiver_gone: bool,
    receiver: Option<Waker>,
    sender: Option<Waker>,
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding this lock cannot leave the state half-written
    // (every critical section is a few assignments), so poisoning is moot.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The receiver is gone: nothing more can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gone;

/// The sending side; closes the slot when dropped.
pub(crate) struct SlotTx(Arc<Mutex<State>>);

/// The receiving side.
pub(crate) struct SlotRx(Arc<Mutex<State>>);

/// What the receiver gets.
#[derive(Debug)]
pub(crate) enum Received {
    /// The next message.
    Message(Message),
    /// The sender aborted with this reason (any message in the slot is
    /// dropped: an abort is a reset).
    Abort(String),
    /// The sender closed: a clean end.
    End,
}

/// A new slot.
pub(crate) fn slot() -> (SlotTx, SlotRx) {
    let s = Arc::new(Mutex::new(State::default()));
    (SlotTx(s.clone()), SlotRx(s))
}

impl SlotTx {
    /// Ready when the slot is empty.
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Gone>> {
        let mut s = lock(&self.0);
        if s.receiver_gone || s.closed {
            return Poll::Ready(Err(Gone));
        }
        if s.item.is_none() {
            return Poll::Ready(Ok(()));
        }
        s.sender = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Puts `m` in the slot if it is empty; `Err(m)` back otherwise.
    pub(crate) fn try_send(&self, m: Message) -> Result<(), Message> {
        let mut s = lock(&self.0);
        if s.receiver_gone || s.closed || s.item.is_some() {
            return Err(m);
        }
        s.item = Some(m);
        if let Some(w) = s.receiver.take() {
            w.wake();
        }
        Ok(())
    }

    /// Waits for room, then sends.
    pub(crate) async fn send(&self, m: Message) -> Result<(), Gone> {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await?;
        self.try_send(m).map_err(|_| Gone)
    }

    /// Ends the stream cleanly after what is in the slot.
    pub(crate) fn close(&self) {
        let mut s = lock(&self.0);
        s.closed = true;
        if let Some(w) = s.receiver.take() {
            w.wake();
        }
    }

    /// Ends the stream with an abort.
    pub(crate) fn abort(&self, why: String) {
        let mut s = lock(&self.0);
        if s.abort.is_none() && !s.closed {
            s.abort = Some(why);
        }
        s.closed = true;
        if let Some(w) = s.receiver.take() {
            w.wake();
        }
    }
}

impl Drop for SlotTx {
    fn drop(&mut self) {
        self.close();
    }
}

impl SlotRx {
    /// The next message, the abort, or the end.
    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Received> {
        let mut s = lock(&self.0);
        if let Some(why) = s.abort.take() {
            s.item = None;
            return Poll::Ready(Received::Abort(why));
        }
        if let Some(m) = s.item.take() {
            if let Some(w) = s.sender.take() {
                w.wake();
            }
            return Poll::Ready(Received::Message(m));
        }
        if s.closed {
            return Poll::Ready(Received::End);
        }
        s.receiver = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SlotRx {
    fn drop(&mut self) {
        let mut s = lock(&self.0);
        s.receiver_gone = true;
        s.item = None;
        if let Some(w) = s.sender.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(b: &'static [u8]) -> Message {
        (Bytes::from_static(b), None)
    }

    #[tokio::test]
    async fn one_message_at_a_time_then_the_end() {
        let (tx, rx) = slot();
        tx.send(msg(b"a")).await.unwrap();
        assert!(tx.try_send(msg(b"b")).is_err(), "the slot holds one");
        let got = std::future::poll_fn(|cx| rx.poll_recv(cx)).await;
        assert!(matches!(got, Received::Message((b, None)) if b == "a"));
        tx.send(msg(b"b")).await.unwrap();
        drop(tx);
        let got = std::future::poll_fn(|cx| rx.poll_recv(cx)).await;
        assert!(
            matches!(got, Received::Message(_)),
            "what was sent before the close arrives"
        );
        let got = std::future::poll_fn(|cx| rx.poll_recv(cx)).await;
        assert!(matches!(got, Received::End));
    }

    #[tokio::test]
    async fn an_abort_wins_and_a_gone_receiver_fails_the_sender() {
        let (tx, rx) = slot();
        tx.send(msg(b"a")).await.unwrap();
        tx.abort("reset".into());
        let got = std::future::poll_fn(|cx| rx.poll_recv(cx)).await;
        assert!(matches!(got, Received::Abort(w) if w == "reset"));
        let (tx, rx) = slot();
        tx.send(msg(b"a")).await.unwrap();
        // The sender waits for room until the receiver goes.
        let waiting = tokio::spawn(async move { tx.send(msg(b"b")).await });
        tokio::task::yield_now().await;
        drop(rx);
        assert_eq!(waiting.await.unwrap(), Err(Gone));
    }
}
