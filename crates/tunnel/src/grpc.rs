//! gRPC over HTTP/2 for the one method the tunnel has: request and response
//! bodies as streams of [`Frame`]s.
//!
//! The framing and the protobuf are `apiway_wire::tunnel`'s; this module is
//! the I/O around them: [`Inbound`] reads messages from a hyper body (and
//! the status in its trailers), [`Outbound`] is the body that sends them
//! and ends with a clean end, a status, or a reset.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use apiway_wire::tunnel::{self, Frame};
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use http_body::Body;

use crate::slot::{slot, Received, SlotRx, SlotTx};

/// The request path of `ProxyService.Proxy` (the proto has no package).
pub const PROXY_PATH: &str = "/ProxyService/Proxy";

/// `application/grpc`.
pub(crate) const CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// gRPC status codes the tunnel uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Code {
    Ok = 0,
    InvalidArgument = 3,
    Aborted = 10,
    Unimplemented = 12,
    Unauthenticated = 16,
}

/// `grpc-status` and `grpc-message` headers (trailers, or the headers of a
/// trailers-only answer).
pub(crate) fn status_headers(code: Code, message: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from(code as u16));
    if !message.is_empty() {
        // grpc-message is percent-encoded; keep printable ASCII as is.
        let encoded: String = message
            .bytes()
            .map(|b| {
                if (0x20..0x7f).contains(&b) && b != b'%' {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&encoded) {
            h.insert("grpc-message", v);
        }
    }
    h
}

/// The status a `grpc-status` header map carries: `None` without one.
pub(crate) fn status_of(headers: &HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some((code, message))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why reading a stream failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InboundError {
    /// The peer ended the stream with a non-OK status.
    #[error("status {code}: {message}")]
    Status {
        /// The gRPC code.
        code: u32,
        /// Its message.
        message: String,
    },
    /// The stream was reset or the connection failed.
    #[error("{0}")]
    Transport(String),
    /// A message was malformed.
    #[error("{0}")]
    Malformed(String),
}

impl InboundError {
    pub(crate) fn into_io(self) -> io::Error {
        let kind = match &self {
            InboundError::Malformed(_) => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::ConnectionReset,
        };
        io::Error::new(kind, self.to_string())
    }
}

/// Messages read from a request or response body.
pub(crate) struct Inbound<B> {
    body: B,
    /// Bytes of a message that spans DATA frames.
    partial: BytesMut,
    /// The current DATA frame's unread bytes.
    current: Bytes,
    ended: bool,
    /// Responses must end with a status; requests end with END_STREAM.
    needs_status: bool,
}

impl<B> Inbound<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// Reads `body`; `needs_status` for a response (trailers required).
    pub(crate) fn new(body: B, needs_status: bool) -> Inbound<B> {
        Inbound {
            body,
            partial: BytesMut::new(),
            current: Bytes::new(),
            ended: false,
            needs_status,
        }
    }

    /// The next frame; `None` at a clean end.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame, InboundError>>> {
        let malformed = |e: &dyn std::fmt::Display| InboundError::Malformed(e.to_string());
        loop {
            // A whole message in the current frame: no copy.
            if self.partial.is_empty() {
                match tunnel::message_len(&self.current, tunnel::MAX_MESSAGE_LEN) {
                    Err(e) => return Poll::Ready(Some(Err(malformed(&e)))),
                    Ok(Some(n)) if n <= self.current.len() => {
                        let message = self.current.split_to(n);
                        return Poll::Ready(Some(
                            tunnel::decode_message(message).map_err(|e| malformed(&e)),
                        ));
                    }
                    Ok(_) => {
                        self.partial.extend_from_slice(&self.current);
                        self.current = Bytes::new();
                    }
                }
            } else {
                match tunnel::message_len(&self.partial, tunnel::MAX_MESSAGE_LEN) {
                    Err(e) => return Poll::Ready(Some(Err(malformed(&e)))),
                    Ok(Some(n)) if n <= self.partial.len() + self.current.len() => {
                        let take = n - self.partial.len();
                        self.partial.extend_from_slice(&self.current[..take]);
                        self.current.advance(take);
                        let message = std::mem::take(&mut self.partial).freeze();
                        return Poll::Ready(Some(
                            tunnel::decode_message(message).map_err(|e| malformed(&e)),
                        ));
                    }
                    Ok(_) => {
                        self.partial.extend_from_slice(&self.current);
                        self.current = Bytes::new();
                        // A prefix alone: read on to learn the length.
                    }
                }
            }
            if self.ended {
                if !self.partial.is_empty() {
                    self.partial = BytesMut::new();
                    return Poll::Ready(Some(Err(InboundError::Malformed(
                        "the stream ended inside a message".into(),
                    ))));
                }
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => {
                    self.ended = true;
                    if self.needs_status {
                        return Poll::Ready(Some(Err(InboundError::Transport(
                            "the stream ended without a status".into(),
                        ))));
                    }
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(InboundError::Transport(e.to_string()))));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.current = data,
                    Err(frame) => {
                        self.ended = true;
                        self.needs_status = false;
                        let Some(trailers) = frame.trailers_ref() else {
                            continue;
                        };
                        match status_of(trailers) {
                            Some((0, _)) => {}
                            Some((code, message)) => {
                                return Poll::Ready(Some(Err(InboundError::Status {
                                    code,
                                    message,
                                })))
                            }
                            None => {
                                return Poll::Ready(Some(Err(InboundError::Transport(
                                    "trailers without grpc-status".into(),
                                ))))
                            }
                        }
                    }
                },
            }
        }
    }

    /// The next frame.
    pub(crate) async fn next(&mut self) -> Option<Result<Frame, InboundError>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// Which side sends: a client ends its request with END_STREAM (or a
/// reset), a server its response with trailers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// The feeding end of an [`Outbound`].
pub(crate) type OutboundTx = SlotTx;

/// A request or response body fed through a [`slot`](crate::slot).
pub(crate) struct Outbound {
    rx: SlotRx,
    /// The second piece of the message whose first was just sent.
    rest: Option<Bytes>,
    side: Side,
    done: bool,
}

/// A body and its feeding end.
pub(crate) fn outbound(side: Side) -> (OutboundTx, Outbound) {
    let (tx, rx) = slot();
    (
        tx,
        Outbound {
            rx,
            rest: None,
            side,
            done: false,
        },
    )
}

impl Body for Outbound {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(rest) = self.rest.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(rest))));
        }
        match ready!(self.rx.poll_recv(cx)) {
            Received::Message((first, rest)) => {
                self.rest = rest;
                Poll::Ready(Some(Ok(http_body::Frame::data(first))))
            }
            Received::Abort(message) => {
                self.done = true;
                Poll::Ready(Some(match self.side {
                    Side::Server => Ok(http_body::Frame::trailers(status_headers(
                        Code::Aborted,
                        &message,
                    ))),
                    // hyper resets the stream on a body error.
                    Side::Client => Err(io::Error::new(io::ErrorKind::ConnectionReset, message)),
                }))
            }
            Received::End => {
                self.done = true;
                match self.side {
                    Side::Server => Poll::Ready(Some(Ok(http_body::Frame::trailers(
                        status_headers(Code::Ok, ""),
                    )))),
                    Side::Client => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded_both_ways() {
        let h = status_headers(Code::Aborted, "100% not allowed: ü");
        assert_eq!(h["grpc-status"], "10");
        assert_eq!(h["grpc-message"], "100%25 not allowed: %C3%BC");
        assert_eq!(status_of(&h), Some((10, "100% not allowed: ü".to_owned())));
    }

    #[tokio::test]
    async fn messages_split_across_frames_are_joined() {
        let frames = [
            Frame::Data {
                connect_id: 1,
                data: Bytes::from_static(b"hello"),
                error: None,
            },
            Frame::Close { connect_id: 1 },
        ];
        let mut all = Vec::new();
        for f in &frames {
            all.extend_from_slice(&f.clone().to_message());
        }
        // Every split point, one byte at a time included.
        for step in [1, 2, 3, 7, all.len()] {
            let chunks: Vec<Result<http_body::Frame<Bytes>, io::Error>> = all
                .chunks(step)
                .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
            let mut inbound = Inbound::new(body, false);
            for f in &frames {
                assert_eq!(&inbound.next().await.unwrap().unwrap(), f);
            }
            assert!(inbound.next().await.is_none());
        }
    }
}
