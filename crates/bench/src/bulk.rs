//! Bulk bytes at the lowest possible cost to the load generator, so the
//! throughput scenario shows the proxy's cost and not the bench's: the
//! sender uses `sendfile(2)` from an in-memory file (no user-space copy),
//! the receiver `recv(MSG_TRUNC)` (the kernel drops the bytes without
//! copying them out).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use anyhow::{Context, Result};
use rustix::fs::{ftruncate, memfd_create, sendfile, MemfdFlags};
use rustix::net::{recv, RecvFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Size of the in-memory file the sender cycles through.
const SOURCE_LEN: u64 = 8 << 20;
/// How much one `recv(MSG_TRUNC)` may drop.
pub const DISCARD_CHUNK: usize = 1 << 20;

/// An in-memory file full of bytes to send.
pub struct Source {
    file: OwnedFd,
}

impl Source {
    /// Creates the file and fills it (so no page is a hole).
    pub fn new() -> Result<Source> {
        let file = memfd_create("apiway-bench-source", MemfdFlags::CLOEXEC)
            .context("creating an in-memory file")?;
        ftruncate(&file, SOURCE_LEN).context("sizing the in-memory file")?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut written = 0u64;
        while written < SOURCE_LEN {
            written +=
                rustix::io::write(&file, &chunk).context("filling the in-memory file")? as u64;
        }
        Ok(Source { file })
    }

    /// Sends from the file, round and round, until the connection fails.
    pub async fn send_forever(&self, stream: &TcpStream) -> io::Result<()> {
        let mut offset = 0u64;
        loop {
            let count = usize::try_from(SOURCE_LEN - offset).unwrap_or(usize::MAX);
            let sent = stream
                .async_io(Interest::WRITABLE, || {
                    let mut at = offset;
                    sendfile(stream.as_fd(), self.file.as_fd(), Some(&mut at), count)
                        .map_err(io::Error::from)
                })
                .await?;
            if sent == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            offset += sent as u64;
            if offset >= SOURCE_LEN {
                offset = 0;
            }
        }
    }
}

/// Drops up to `scratch.len()` received bytes without copying them;
/// returns how many (0 at end of stream). `scratch` is never written to.
pub async fn discard(stream: &TcpStream, scratch: &mut [u8]) -> io::Result<usize> {
    stream
        .async_io(Interest::READABLE, || {
            recv(stream.as_fd(), &mut *scratch, RecvFlags::TRUNC)
                .map(|(_, n)| n)
                .map_err(io::Error::from)
        })
        .await
}

/// Reads exactly `buf.len()` bytes from a stream shared with a writer.
pub async fn read_exact_shared(stream: &TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        stream.readable().await?;
        match stream.try_read(&mut buf[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn sendfile_and_discard_move_bytes() -> Result<()> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let source = Source::new()?;
        let sender = tokio::spawn(async move {
            let (stream, _) = listener.accept().await?;
            source.send_forever(&stream).await
        });
        let stream = TcpStream::connect(addr).await?;
        let mut scratch = vec![0u8; DISCARD_CHUNK];
        let mut total = 0;
        while total < 3 * SOURCE_LEN as usize {
            let n = discard(&stream, &mut scratch).await?;
            assert!(n > 0);
            total += n;
        }
        drop(stream);
        assert!(sender.await?.is_err());
        Ok(())
    }
}
