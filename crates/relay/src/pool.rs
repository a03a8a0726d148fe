//! A small, bounded, process-wide pool of copy buffers and splice pipes.
//!
//! A relay takes a buffer or a pipe only once a socket is readable and gives
//! it back as soon as the data has been drained, so an idle connection holds
//! neither. The pool keeps a few of each so that bursts on many connections
//! don't allocate, free, or create and close pipes on every chunk; beyond its
//! bounds, returned items are simply freed.

use std::mem;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Idle buffers kept for reuse, in bytes (64 buffers of the default 64 KiB).
const IDLE_BUFFER_BYTES: usize = 4 << 20;

/// Empty pipes kept for reuse (two descriptors each).
#[cfg(target_os = "linux")]
const IDLE_PIPES: usize = 64;

/// Default bound on pipes in use at once (two descriptors each).
///
/// With the 20,000 descriptor limit the relays run under, 1,024 pipes take at
/// most about a tenth of it; a chunk that finds no pipe is copied in user space
/// instead, so the bound only costs speed, never correctness.
pub const DEFAULT_PIPE_LIMIT: usize = 1024;

static BUFFERS: Mutex<IdleBuffers> = Mutex::new(IdleBuffers {
    list: Vec::new(),
    bytes: 0,
});
static BUFFERS_IN_USE: AtomicUsize = AtomicUsize::new(0);

#[cfg(target_os = "linux")]
static PIPES: Mutex<Vec<PipeFds>> = Mutex::new(Vec::new());
#[cfg(target_os = "linux")]
static PIPES_IN_USE: AtomicUsize = AtomicUsize::new(0);
#[cfg(target_os = "linux")]
static PIPE_LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_PIPE_LIMIT);
#[cfg(target_os = "linux")]
static PIPES_UNAVAILABLE: AtomicU64 = AtomicU64::new(0);
#[cfg(target_os = "linux")]
static PIPES_TAKEN: AtomicU64 = AtomicU64::new(0);

struct IdleBuffers {
    list: Vec<Box<[u8]>>,
    /// Sum of the lengths in `list`.
    bytes: usize,
}

/// How many pooled buffers and pipes exist right now, process-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Buffers held by relays, each holding data in flight.
    pub buffers_in_use: usize,
    /// Free buffers kept for reuse.
    pub buffers_idle: usize,
    /// Pipes held by relays, each holding (or about to hold) data in flight.
    pub pipes_in_use: usize,
    /// Empty pipes kept for reuse.
    pub pipes_idle: usize,
    /// Times, since the process started, that a relay wanted a pipe and got
    /// none (limit reached, or out of descriptors), so copied instead.
    pub pipes_unavailable: u64,
    /// Times, since the process started, that a relay took a pipe to splice.
    pub pipes_taken: u64,
}

/// Current pool usage, e.g. for metrics or to check that idle relays hold nothing.
pub fn stats() -> PoolStats {
    let buffers_idle = lock(&BUFFERS).list.len();
    #[cfg(target_os = "linux")]
    let (pipes_in_use, pipes_idle, pipes_unavailable) = (
        PIPES_IN_USE.load(Ordering::Relaxed),
        lock(&PIPES).len(),
        PIPES_UNAVAILABLE.load(Ordering::Relaxed),
    );
    #[cfg(not(target_os = "linux"))]
    let (pipes_in_use, pipes_idle, pipes_unavailable) = (0, 0, 0);
    #[cfg(target_os = "linux")]
    let pipes_taken = PIPES_TAKEN.load(Ordering::Relaxed);
    #[cfg(not(target_os = "linux"))]
    let pipes_taken = 0;
    PoolStats {
        buffers_in_use: BUFFERS_IN_USE.load(Ordering::Relaxed),
        buffers_idle,
        pipes_in_use,
        pipes_idle,
        pipes_unavailable,
        pipes_taken,
    }
}

/// Frees every idle buffer and closes every idle pipe (in-use ones are untouched).
pub fn trim() {
    let freed = {
        let mut idle = lock(&BUFFERS);
        idle.bytes = 0;
        mem::take(&mut idle.list)
    };
    drop(freed);
    #[cfg(target_os = "linux")]
    {
        let closed = mem::take(&mut *lock(&PIPES));
        drop(closed);
    }
}

/// Sets how many pipes may be in use at once, process-wide.
///
/// Lower it when the process is short of file descriptors; `0` disables
/// splicing altogether (every chunk is copied in user space).
pub fn set_pipe_limit(limit: usize) {
    #[cfg(target_os = "linux")]
    PIPE_LIMIT.store(limit, Ordering::Relaxed);
    #[cfg(not(target_os = "linux"))]
    let _ = limit;
}

/// The pool's lists hold no invariants a panic could break, so a poisoned
/// lock is still fine to use.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A copy buffer on loan from the pool; returned to it when dropped.
pub(crate) struct Buffer(Box<[u8]>);

impl Buffer {
    /// Takes a buffer of exactly `size` bytes, reusing an idle one if possible.
    pub(crate) fn take(size: usize) -> Buffer {
        let reused = {
            let mut idle = lock(&BUFFERS);
            let found = idle.list.iter().rposition(|b| b.len() == size);
            found.map(|i| {
                idle.bytes -= size;
                idle.list.swap_remove(i)
            })
        };
        BUFFERS_IN_USE.fetch_add(1, Ordering::Relaxed);
        // Zeroed allocations come straight from the kernel's zero pages, so
        // initialising them is nearly free.
        Buffer(reused.unwrap_or_else(|| vec![0u8; size].into_boxed_slice()))
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        BUFFERS_IN_USE.fetch_sub(1, Ordering::Relaxed);
        let buf = mem::take(&mut self.0);
        let mut idle = lock(&BUFFERS);
        if idle.bytes + buf.len() <= IDLE_BUFFER_BYTES {
            idle.bytes += buf.len();
            idle.list.push(buf);
        }
        // Otherwise `buf` is freed on return, after the guard (declared
        // later, dropped first) has released the lock.
    }
}

#[cfg(target_os = "linux")]
pub(crate) use self::pipe::{Pipe, PipeFds};

#[cfg(target_os = "linux")]
mod pipe {
    use super::*;
    use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, PipeFlags};
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

    /// What a pipe is grown to when the budget allows: a 1 MiB pipe moves a
    /// bulk transfer in a quarter of the splices of a 256 KiB one (the
    /// relay's CPU per GiB drops by about a third on loopback).
    const LARGE_PIPE: usize = 1 << 20;

    /// Large pipes allowed at once. Pipe sizes count against a per-user
    /// quota (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default) past
    /// which Linux gives new pipes a mere two pages; staying at half of it
    /// keeps every pipe at least at the default 64 KiB.
    const LARGE_PIPES_MAX: usize = 32;

    static LARGE_PIPES: AtomicUsize = AtomicUsize::new(0);

    /// An open pipe: both ends and its capacity.
    pub(crate) struct PipeFds {
        read: OwnedFd,
        write: OwnedFd,
        capacity: u32,
        large: bool,
    }

    impl PipeFds {
        /// A fresh nonblocking pipe, grown to [`LARGE_PIPE`] if the budget allows.
        fn open() -> rustix::io::Result<PipeFds> {
            let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
            let mut large = LARGE_PIPES.fetch_add(1, Ordering::Relaxed) < LARGE_PIPES_MAX;
            // Growing can fail (quota, or a lower pipe-max-size); the pipe
            // works at its default size then.
            if !large || fcntl_setpipe_size(&write, LARGE_PIPE).is_err() {
                LARGE_PIPES.fetch_sub(1, Ordering::Relaxed);
                large = false;
            }
            let capacity = fcntl_getpipe_size(&write)?;
            Ok(PipeFds {
                read,
                write,
                // Pipe sizes are at most pipe-max-size, 1 MiB by default.
                capacity: capacity.min(u32::MAX as usize) as u32,
                large,
            })
        }
    }

    #[cfg(test)]
    impl PipeFds {
        pub(crate) fn reader_fd(&self) -> std::os::fd::RawFd {
            use std::os::fd::AsRawFd;
            self.read.as_raw_fd()
        }
    }

    impl Drop for PipeFds {
        fn drop(&mut self) {
            if self.large {
                LARGE_PIPES.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// A pipe on loan from the pool, with the number of bytes it holds.
    ///
    /// Dropped empty, it goes back to the pool; dropped with data still in it
    /// (the relay was cancelled mid-chunk), it is closed so that stale bytes
    /// can never reach another connection.
    pub(crate) struct Pipe {
        fds: Option<PipeFds>,
        /// Bytes spliced in and not yet spliced out.
        pub(crate) len: u32,
    }

    impl Pipe {
        /// Takes an empty pipe, or `None` when the in-use limit is reached or
        /// no pipe can be created (out of descriptors): the caller then copies.
        pub(crate) fn take() -> Option<Pipe> {
            let limit = PIPE_LIMIT.load(Ordering::Relaxed);
            if PIPES_IN_USE.fetch_add(1, Ordering::Relaxed) >= limit {
                PIPES_IN_USE.fetch_sub(1, Ordering::Relaxed);
                PIPES_UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            let reused = lock(&PIPES).pop();
            let fds = match reused {
                Some(idle) => idle,
                None => match PipeFds::open() {
                    Ok(fresh) => fresh,
                    Err(e) => {
                        PIPES_IN_USE.fetch_sub(1, Ordering::Relaxed);
                        PIPES_UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, "no pipe for splice; copying instead");
                        return None;
                    }
                },
            };
            PIPES_TAKEN.fetch_add(1, Ordering::Relaxed);
            Some(Pipe {
                fds: Some(fds),
                len: 0,
            })
        }

        fn fds(&self) -> &PipeFds {
            match &self.fds {
                Some(fds) => fds,
                None => unreachable!("a live Pipe always has its descriptors"),
            }
        }

        /// The end bytes are spliced out of.
        pub(crate) fn reader(&self) -> BorrowedFd<'_> {
            self.fds().read.as_fd()
        }

        /// The end bytes are spliced into.
        pub(crate) fn writer(&self) -> BorrowedFd<'_> {
            self.fds().write.as_fd()
        }

        /// Bytes the pipe holds at most.
        pub(crate) fn capacity(&self) -> usize {
            self.fds().capacity as usize
        }
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            PIPES_IN_USE.fetch_sub(1, Ordering::Relaxed);
            let Some(fds) = self.fds.take() else { return };
            if self.len == 0 {
                let mut idle = lock(&PIPES);
                if idle.len() < IDLE_PIPES {
                    idle.push(fds);
                }
            }
            // A pipe not pooled is closed here, after the lock is released.
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    // The pool is process-wide: this is the only unit test that takes pipes,
    // and it checks the pipes it held rather than global counts.
    #[test]
    fn an_empty_pipe_is_reused_and_a_full_one_is_not() {
        let pipe = Pipe::take().expect("a pipe");
        assert!(pipe.capacity() >= 64 * 1024, "capacity {}", pipe.capacity());
        let reader = pipe.reader().as_raw_fd();
        drop(pipe);
        assert!(
            idle_pipe_readers().contains(&reader),
            "empty pipe was not pooled"
        );

        let mut pipe = Pipe::take().expect("a pipe");
        let n = rustix::io::write(pipe.writer(), b"stale bytes").unwrap();
        pipe.len = n as u32;
        let reader = pipe.reader().as_raw_fd();
        drop(pipe);
        assert!(
            !idle_pipe_readers().contains(&reader),
            "pipe with data was pooled"
        );
    }

    #[test]
    fn buffers_come_back_with_the_asked_size() {
        let a = Buffer::take(12345);
        assert_eq!(a.len(), 12345);
        drop(a);
        let b = Buffer::take(4096);
        assert_eq!(b.len(), 4096);
    }

    fn idle_pipe_readers() -> Vec<std::os::fd::RawFd> {
        lock(&PIPES).iter().map(|p| p.reader_fd()).collect()
    }

    use std::os::fd::AsRawFd;
}
