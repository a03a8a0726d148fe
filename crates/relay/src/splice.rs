//! TCP to TCP through a pipe with splice(2): the bytes stay in the kernel.
//!
//! The pipe is taken from the pool only once the source is readable, filled
//! with one splice while empty (so `EAGAIN` can only mean "socket drained"),
//! drained with splices into the destination (where `EAGAIN` can only mean
//! "socket full", since the pipe has data), and given back once empty. Each
//! splice runs inside `TcpStream::try_io`, which clears tokio's readiness on
//! `EAGAIN`, so the task sleeps until epoll reports the socket again: it
//! neither spins nor misses a wakeup.

use std::io;
use std::mem;
use std::task::{Context, Poll};

use rustix::pipe::{splice, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::copy::poll_copy;
use crate::half::{Fault, Flow, Held, Step, Transfer};
use crate::pool::Pipe;

const FLAGS: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// Moves TCP bytes with splice(2) when `splice` is set (falling back to a
/// copy when no pipe is to be had), otherwise copies them in user space.
///
/// With `bulk_only`, a direction copies until one read fills the whole
/// buffer. Small exchanges (API requests, watch events) then cost a read and
/// a write per chunk — tokio skips the `EAGAIN` read after a short one — where
/// a splice costs three calls (in, out, and the `EAGAIN` that proves the
/// socket drained, since a short splice proves nothing). Bulk transfers
/// switch to splice after their first full buffer.
#[derive(Clone, Copy)]
pub(crate) struct Tcp {
    pub(crate) splice: bool,
    pub(crate) bulk_only: bool,
    pub(crate) buffer_size: u32,
}

impl Transfer<TcpStream, TcpStream> for Tcp {
    fn poll_step(
        &self,
        flow: &mut Flow,
        cx: &mut Context<'_>,
        src: &mut TcpStream,
        dst: &mut TcpStream,
    ) -> Poll<Result<Step, Fault>> {
        let copying = matches!(&flow.held, Held::Buffer { start, end, .. } if start < end);
        let splice_now = self.splice && !flow.no_splice && (flow.bulk || !self.bulk_only);
        if splice_now && !copying {
            match poll_splice(flow, cx, src, dst) {
                Poll::Ready(Some(result)) => return Poll::Ready(result),
                Poll::Pending => return Poll::Pending,
                // No pipe to be had: copy this chunk instead.
                Poll::Ready(None) => {}
            }
        }
        poll_copy(flow, cx, src, dst, self.buffer_size as usize)
    }
}

/// One step of splicing; `Ready(None)` when no pipe is available (the
/// source is known readable then, and `flow` holds nothing).
fn poll_splice(
    flow: &mut Flow,
    cx: &mut Context<'_>,
    src: &TcpStream,
    dst: &TcpStream,
) -> Poll<Option<Result<Step, Fault>>> {
    loop {
        if let Held::Pipe(pipe) = &mut flow.held {
            if pipe.len > 0 {
                match dst.poll_write_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(Fault::Write(e)))),
                    Poll::Pending => return Poll::Pending,
                }
                let len = pipe.len as usize;
                let out = dst.try_io(Interest::WRITABLE, || {
                    Ok(splice(pipe.reader(), None, dst, None, len, FLAGS)?)
                });
                match out {
                    Ok(0) => {
                        let e = io::ErrorKind::WriteZero.into();
                        return Poll::Ready(Some(Err(Fault::Write(e))));
                    }
                    Ok(n) => {
                        // The kernel moved at most `len` bytes.
                        pipe.len -= n as u32;
                        return Poll::Ready(Some(Ok(Step::Moved(n))));
                    }
                    // Readiness is cleared: the next poll_write_ready waits.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Some(Err(Fault::Write(e)))),
                }
            }
        }

        // The pipe (if any) is empty: wait for data before holding one.
        match src.poll_read_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(Fault::Read(e)))),
            Poll::Pending => {
                flow.held = Held::Nothing;
                return Poll::Pending;
            }
        }
        if !matches!(flow.held, Held::Pipe(_)) {
            match Pipe::take() {
                Some(pipe) => flow.held = Held::Pipe(pipe),
                None => {
                    flow.held = Held::Nothing;
                    return Poll::Ready(None);
                }
            }
        }
        let Held::Pipe(pipe) = &mut flow.held else {
            unreachable!("a pipe was just put in place")
        };
        // Ask for no more than the empty pipe holds, so that this splice
        // can't block on the pipe and EAGAIN means the socket is drained.
        let capacity = pipe.capacity();
        let into_pipe = src.try_io(Interest::READABLE, || {
            Ok(splice(src, None, pipe.writer(), None, capacity, FLAGS)?)
        });
        match into_pipe {
            Ok(0) => {
                flow.held = Held::Nothing;
                return Poll::Ready(Some(Ok(Step::Eof)));
            }
            // At most `capacity` bytes, which fits in u32.
            Ok(n) => pipe.len = n as u32,
            // Readiness is cleared: the next poll_read_ready either finds
            // new data or registers the waker and gives the pipe back.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if unsupported(&e) => {
                tracing::debug!(error = %e, "splice unsupported on this socket; copying");
                drop(mem::take(&mut flow.held));
                flow.no_splice = true;
                return Poll::Ready(None);
            }
            Err(e) => return Poll::Ready(Some(Err(Fault::Read(e)))),
        }
    }
}

/// Errors by which splice says it can't handle these descriptors at all.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        rustix::io::Errno::from_io_error(e),
        Some(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP)
    )
}
