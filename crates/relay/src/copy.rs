//! Userspace copy: read into a pooled buffer, write it out, give it back.

use std::io;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::half::{Fault, Flow, Held, Step, Transfer};
use crate::pool::Buffer;

/// Copies through a buffer taken from the pool only while data flows.
///
/// `AsyncRead` has no way to wait for data without a buffer, so each read
/// borrows one from the pool and gives it straight back if the read is
/// pending; a buffer stays with the direction only while it holds bytes the
/// destination hasn't taken yet.
#[derive(Clone, Copy)]
pub(crate) struct Userspace {
    pub(crate) buffer_size: u32,
}

impl<R, W> Transfer<R, W> for Userspace
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    fn poll_step(
        &self,
        flow: &mut Flow,
        cx: &mut Context<'_>,
        src: &mut R,
        dst: &mut W,
    ) -> Poll<Result<Step, Fault>> {
        poll_copy(flow, cx, src, dst, self.buffer_size as usize)
    }
}

/// One step of a userspace copy (see [`Userspace`]).
pub(crate) fn poll_copy<R, W>(
    flow: &mut Flow,
    cx: &mut Context<'_>,
    src: &mut R,
    dst: &mut W,
    buffer_size: usize,
) -> Poll<Result<Step, Fault>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        if let Held::Buffer { buf, start, end } = &mut flow.held {
            if start < end {
                let pending = &buf[*start as usize..*end as usize];
                return match Pin::new(&mut *dst).poll_write(cx, pending) {
                    Poll::Ready(Ok(0)) => {
                        Poll::Ready(Err(Fault::Write(io::ErrorKind::WriteZero.into())))
                    }
                    Poll::Ready(Ok(n)) => {
                        // `n <= pending.len()`, so this stays within `end`.
                        *start += n as u32;
                        flow.unflushed = true;
                        Poll::Ready(Ok(Step::Moved(n)))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(Fault::Write(e))),
                    Poll::Pending => Poll::Pending,
                };
            }
        }

        // Nothing left to write: read the next chunk.
        let mut buf = match mem::take(&mut flow.held) {
            Held::Buffer { buf, .. } => buf,
            _ => Buffer::take(buffer_size),
        };
        let mut read_buf = ReadBuf::new(&mut buf);
        match Pin::new(&mut *src).poll_read(cx, &mut read_buf) {
            Poll::Ready(Ok(())) => {
                let n = read_buf.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(Step::Eof));
                }
                if n == buf.len() {
                    flow.bulk = true;
                }
                flow.held = Held::Buffer {
                    buf,
                    start: 0,
                    end: n as u32,
                };
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Fault::Read(e))),
            Poll::Pending => {
                // Idle from here on: the buffer goes back to the pool, and
                // anything a buffering writer (TLS) still holds is pushed out.
                drop(buf);
                if flow.unflushed {
                    match Pin::new(&mut *dst).poll_flush(cx) {
                        Poll::Ready(Ok(())) => flow.unflushed = false,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(Fault::Write(e))),
                        Poll::Pending => {}
                    }
                }
                return Poll::Pending;
            }
        }
    }
}
