//! One direction of a relay: move bytes until the source ends, then shut
//! down the destination's write side. The same state machine serves every
//! kind of stream; only the way a chunk is moved ([`Transfer`]) differs.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use crate::pool::Buffer;
#[cfg(target_os = "linux")]
use crate::pool::Pipe;
use crate::{Direction, Observer};

/// Chunks one direction may move in a single poll before it yields, so a
/// fast direction can't starve the other one or other tasks.
const STEPS_PER_POLL: u32 = 64;

/// What one step of a transfer achieved.
pub(crate) enum Step {
    /// This many bytes reached the destination.
    Moved(usize),
    /// The source has no more bytes to give.
    Eof,
}

/// A failed step, by which end of the direction failed.
pub(crate) enum Fault {
    /// Reading the source failed.
    Read(io::Error),
    /// Writing (or shutting down) the destination failed.
    Write(io::Error),
}

/// Whatever a direction holds between polls: nothing while idle, and only
/// while data is in flight a buffer or a pipe from the pool.
#[derive(Default)]
pub(crate) enum Held {
    #[default]
    Nothing,
    /// `buf[start..end]` still has to be written.
    Buffer { buf: Buffer, start: u32, end: u32 },
    /// The pipe's `len` bytes still have to be spliced out.
    #[cfg(target_os = "linux")]
    Pipe(Pipe),
}

/// Per-direction state a [`Transfer`] works on.
#[derive(Default)]
pub(crate) struct Flow {
    pub(crate) held: Held,
    /// Bytes were written since the destination was last flushed.
    pub(crate) unflushed: bool,
    /// Splicing failed as unsupported for this pair; copy from now on.
    #[cfg(target_os = "linux")]
    pub(crate) no_splice: bool,
    /// A read filled the whole copy buffer: this direction carries bulk
    /// data, where splicing pays off ([`crate::RelayMode::Auto`]).
    pub(crate) bulk: bool,
}

/// How bytes get from `R` to `W`: userspace copy, or splice for TCP.
pub(crate) trait Transfer<R, W> {
    /// Moves one chunk, or part of one, from `src` to `dst`.
    ///
    /// Returns `Pending` only with wakers registered; whatever `flow` holds
    /// then is data in flight (an idle direction must hold nothing).
    fn poll_step(
        &self,
        flow: &mut Flow,
        cx: &mut Context<'_>,
        src: &mut R,
        dst: &mut W,
    ) -> Poll<Result<Step, Fault>>;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Transfer,
    Shutdown,
    Done,
}

/// One direction's state machine: transfer until EOF, shut down, done.
pub(crate) struct Half {
    flow: Flow,
    stage: Stage,
    dir: Direction,
    /// Bytes written to the destination so far.
    pub(crate) moved: u64,
}

impl Half {
    pub(crate) fn new(dir: Direction) -> Half {
        Half {
            flow: Flow::default(),
            stage: Stage::Transfer,
            dir,
            moved: 0,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Drives this direction as far as it can go without blocking.
    ///
    /// `Ready(Ok(()))` means the direction is finished: the source ended and
    /// the destination's write side is shut down. Sets `*progress` when
    /// anything happened, for the idle timer.
    pub(crate) fn poll<R, W, T>(
        &mut self,
        cx: &mut Context<'_>,
        transfer: &T,
        src: &mut R,
        dst: &mut W,
        observer: &impl Observer,
        progress: &mut bool,
    ) -> Poll<Result<(), Fault>>
    where
        W: AsyncWrite + Unpin,
        T: Transfer<R, W>,
    {
        let mut steps = 0;
        loop {
            match self.stage {
                Stage::Transfer => match transfer.poll_step(&mut self.flow, cx, src, dst) {
                    Poll::Ready(Ok(Step::Moved(n))) => {
                        self.moved += n as u64;
                        observer.on_bytes(self.dir, n as u64);
                        *progress = true;
                        steps += 1;
                        if steps == STEPS_PER_POLL {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                    }
                    Poll::Ready(Ok(Step::Eof)) => {
                        self.flow.held = Held::Nothing;
                        self.stage = Stage::Shutdown;
                        *progress = true;
                    }
                    Poll::Ready(Err(fault)) => return Poll::Ready(Err(fault)),
                    Poll::Pending => return Poll::Pending,
                },
                Stage::Shutdown => match Pin::new(&mut *dst).poll_shutdown(cx) {
                    Poll::Ready(Ok(())) => self.stage = Stage::Done,
                    // The peer is already gone, so there is nobody left to
                    // tell that this direction ended: that is not a failure.
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::NotConnected => {
                        self.stage = Stage::Done
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(Fault::Write(e))),
                    Poll::Pending => return Poll::Pending,
                },
                Stage::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}
