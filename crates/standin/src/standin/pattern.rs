//! A response body of N bytes that is generated, not buffered, so relay tests
//! can move gigabytes without the stand-in holding them in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

const CHUNK: usize = 64 * 1024;

/// The chunk every frame is sliced from; its length is a multiple of 256 so
/// the byte at stream offset `i` is always `i % 256`.
static PATTERN: [u8; CHUNK] = make_pattern();

const fn make_pattern() -> [u8; CHUNK] {
    let mut out = [0u8; CHUNK];
    let mut i = 0;
    while i < CHUNK {
        out[i] = (i % 256) as u8;
        i += 1;
    }
    out
}

/// The byte `/stream` sends at `offset`, for checking integrity end to end.
pub fn pattern_byte(offset: u64) -> u8 {
    (offset % 256) as u8
}

/// `remaining` bytes of the pattern, in 64 KiB frames.
pub(crate) struct PatternBody {
    remaining: u64,
}

impl PatternBody {
    pub(crate) fn new(len: u64) -> Self {
        PatternBody { remaining: len }
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let len = usize::try_from(self.remaining).map_or(CHUNK, |r| r.min(CHUNK));
        self.remaining -= len as u64;
        Poll::Ready(Some(Ok(Frame::data(
            Bytes::from_static(&PATTERN).slice(..len),
        ))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn body_has_exact_length_and_pattern() {
        let len = (CHUNK as u64) * 2 + 1000;
        let collected = match PatternBody::new(len).collect().await {
            Ok(c) => c.to_bytes(),
            Err(never) => match never {},
        };
        assert_eq!(collected.len() as u64, len);
        for (i, b) in collected.iter().enumerate() {
            assert_eq!(*b, pattern_byte(i as u64));
        }
    }
}
