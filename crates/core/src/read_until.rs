//! Reading the start of a connection until a `wire` parser has a whole
//! value: the one loop behind the gateway's ClientHello, PROXY header and
//! CONNECT request reads and the agent's read of a CONNECT answer.
//!
//! The parser sees the whole buffer on every call and answers through
//! [`Decoded`]; reading stops at a deadline and at a size limit, so a peer
//! that sends slowly or endlessly costs a bounded amount of time and memory.
//! Bytes after the value stay in the buffer: they belong to the stream.

use std::io;

use apiway_wire::decode::Decoded;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// Why [`read_until`] returned without a value.
#[derive(Debug, thiserror::Error)]
pub enum ReadError<E> {
    /// The parser refused the bytes.
    #[error("{0}")]
    Invalid(E),
    /// The buffer reached `max_bytes` and the parser still wanted more.
    #[error("no complete value within {limit} bytes")]
    TooLarge {
        /// The `max_bytes` passed to [`read_until`].
        limit: usize,
    },
    /// The peer closed its side before the value was complete.
    #[error("the peer closed the connection")]
    Closed,
    /// Reading failed.
    #[error("reading failed: {0}")]
    Io(#[from] io::Error),
    /// The deadline passed before the value was complete.
    #[error("timed out")]
    TimedOut,
}

/// Reads from `stream` into `buf` until `decode(buf)` is
/// [`Decoded::Complete`], and returns that value.
///
/// `buf` may already hold bytes (they are decoded before anything is
/// read); it never grows beyond `max_bytes`. Without a `deadline` the
/// caller bounds the time. On an error `buf` holds everything read, so a
/// caller can tell, say, a peer that sent nothing from one that stopped
/// half-way.
pub async fn read_until<S, T, E, F>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    deadline: Option<Instant>,
    max_bytes: usize,
    mut decode: F,
) -> Result<T, ReadError<E>>
where
    S: AsyncRead + Unpin,
    F: FnMut(&[u8]) -> Decoded<T, E>,
{
    loop {
        match decode(buf) {
            Decoded::Complete(value) => return Ok(value),
            Decoded::Invalid(e) => return Err(ReadError::Invalid(e)),
            Decoded::Incomplete => {}
        }
        let room = max_bytes.saturating_sub(buf.len());
        if room == 0 {
            return Err(ReadError::TooLarge { limit: max_bytes });
        }
        // Grow by what is there already (at least 512 bytes): few reads for
        // a value that spans many segments, little memory for a short one.
        let want = buf.len().max(512).min(room);
        buf.reserve(want);
        let mut limited = (&mut *stream).take(want as u64);
        let read = limited.read_buf(buf);
        let read = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, read)
                .await
                .map_err(|_| ReadError::TimedOut)?,
            None => read.await,
        };
        match read {
            Ok(0) => return Err(ReadError::Closed),
            Ok(_) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use apiway_wire::connect_response::{self, ConnectResponseError};
    use tokio::io::AsyncWriteExt;

    use super::*;

    type Answer = Result<(u16, usize), ReadError<ConnectResponseError>>;

    /// Reads a CONNECT answer from a pipe that received `chunks`, one write
    /// each, and then stays open (`close` false) or is closed.
    async fn read_answer(chunks: &[&[u8]], close: bool, max: usize) -> (Answer, Vec<u8>) {
        let (mut near, mut far) = tokio::io::duplex(64);
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for chunk in chunks {
                far.write_all(&chunk).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !close {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        let answer = read_until(&mut near, &mut buf, Some(deadline), max, |b| {
            Decoded::from(connect_response::parse(b, max)).map(|(r, n)| (r.status, n))
        })
        .await;
        writer.abort();
        (answer, buf)
    }

    #[tokio::test]
    async fn reads_across_segments_and_leaves_what_follows() {
        let (answer, buf) =
            read_answer(&[b"HTTP/1.1 2", b"00 OK\r\n", b"\r\n\x16\x03"], false, 8192).await;
        let (status, consumed) = answer.unwrap();
        assert_eq!(status, 200);
        assert_eq!(&buf[consumed..], b"\x16\x03");
    }

    #[tokio::test]
    async fn each_way_of_ending_without_a_value() {
        let (answer, _) = read_answer(&[b"SSH-2.0"], false, 8192).await;
        assert!(matches!(
            answer,
            Err(ReadError::Invalid(ConnectResponseError::Malformed(_)))
        ));
        let (answer, buf) = read_answer(&[b"HTTP/1.1 200"], true, 8192).await;
        assert!(matches!(answer, Err(ReadError::Closed)));
        assert_eq!(buf, b"HTTP/1.1 200");
        let (answer, _) = read_answer(&[b"HTTP/1.1 200"], false, 8192).await;
        assert!(matches!(answer, Err(ReadError::TimedOut)));
        // The parser's own limit is larger: the reader's stops first, and the
        // buffer never grows past it.
        let mut long = b"HTTP/1.1 200 OK\r\n".to_vec();
        long.extend(std::iter::repeat_n(b"X-Pad: 0123456789\r\n".as_slice(), 200).flatten());
        let (answer, buf) = read_answer(&[&long], false, 100).await;
        assert!(matches!(
            answer,
            Err(ReadError::Invalid(ConnectResponseError::TooLong {
                limit: 100
            }))
        ));
        assert!(buf.len() <= 100);
        let mut buf = Vec::new();
        let mut empty: &[u8] = b"";
        let answer = read_until(&mut empty, &mut buf, None, 0, |_| {
            Decoded::<(), ()>::Incomplete
        })
        .await;
        assert!(matches!(answer, Err(ReadError::TooLarge { limit: 0 })));
    }

    #[tokio::test]
    async fn bytes_already_buffered_are_decoded_first() {
        let mut buf = b"HTTP/1.0 403 Forbidden\n\n".to_vec();
        let mut nothing: &[u8] = b"";
        let answer = read_until(&mut nothing, &mut buf, None, 8192, |b| {
            Decoded::from(connect_response::parse(b, 8192))
        })
        .await;
        assert_eq!(answer.unwrap().0.status, 403);
    }
}
