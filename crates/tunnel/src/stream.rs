//! One tunneled connection as a byte stream, and the relay between it and a
//! TCP socket, the same on the agent and on the server.
//!
//! Ends map one to one: the TCP side's FIN ends the stream's sending half
//! (END_STREAM from an agent, an OK status from a server) and the stream's
//! clean end is a FIN on the TCP side; a reset on either side becomes a
//! reset on the other (RST_STREAM or an ABORTED status one way, a TCP RST
//! the other).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use apiway_relay::{relay_io, Observer, RelayConfig, RelayEnd, RelayOutcome};
use apiway_wire::tunnel::Frame;
use bytes::Bytes;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::grpc::{Inbound, OutboundTx};

/// The largest DATA payload one write sends.
const MAX_CHUNK: usize = 64 * 1024;

/// A Proxy stream after a successful dial: reads the peer's `DATA`, writes
/// ours.
pub struct TunnelStream {
    inbound: Inbound<Incoming>,
    unread: Bytes,
    read_ended: bool,
    tx: OutboundTx,
    connect_id: i64,
    close_requested: bool,
}

impl TunnelStream {
    pub(crate) fn new(inbound: Inbound<Incoming>, tx: OutboundTx, connect_id: i64) -> TunnelStream {
        TunnelStream {
            inbound,
            unread: Bytes::new(),
            read_ended: false,
            tx,
            connect_id,
            close_requested: false,
        }
    }

    /// The connection's id (the server's `connectID`).
    pub fn connect_id(&self) -> i64 {
        self.connect_id
    }

    /// Whether the peer sent `CLOSE_REQ`.
    pub fn close_requested(&self) -> bool {
        self.close_requested
    }

    /// Resets the stream: an ABORTED status (server) or RST_STREAM
    /// (agent) with `why`.
    pub fn reset(&mut self, why: &str) {
        self.tx.abort(why.to_owned());
    }

    /// Sends one frame (waiting for room).
    pub(crate) async fn send(&mut self, frame: Frame) -> io::Result<()> {
        self.tx
            .send((frame.to_message(), None))
            .await
            .map_err(|_| broken())
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the tunnel stream is closed")
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.unread.is_empty() {
                let n = this.unread.len().min(buf.remaining());
                buf.put_slice(&this.unread.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.read_ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.inbound.poll_next(cx)) {
                None => this.read_ended = true,
                Some(Err(e)) => return Poll::Ready(Err(e.into_io())),
                Some(Ok(frame)) => match frame {
                    Frame::Data {
                        connect_id,
                        data,
                        error,
                    } => {
                        if let Some(e) = error {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::ConnectionReset,
                                format!("the peer failed: {e}"),
                            )));
                        }
                        if connect_id != this.connect_id && connect_id != 0 {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "DATA for connection {connect_id} on the stream of {}",
                                    this.connect_id
                                ),
                            )));
                        }
                        this.unread = data;
                    }
                    Frame::Close { .. } => {
                        this.close_requested = true;
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "the peer asked to close (CLOSE_REQ)",
                        )));
                    }
                    // The answer to our CLOSE_REQ, or a DRAIN notice: the
                    // stream itself goes on to its end.
                    Frame::Closed { .. } | Frame::Drain => {}
                    other => {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("unexpected {} on an open connection", kind(&other)),
                        )))
                    }
                },
            }
        }
    }
}

/// A frame's packet type, for messages.
pub(crate) fn kind(frame: &Frame) -> &'static str {
    match frame {
        Frame::Dial { .. } => "DIAL_REQ",
        Frame::Dialed { .. } => "DIAL_RSP",
        Frame::Data { .. } => "DATA",
        Frame::Close { .. } => "CLOSE_REQ",
        Frame::Closed { .. } => "CLOSE_RSP",
        Frame::CancelDial { .. } => "DIAL_CLS",
        Frame::Drain => "DRAIN",
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.tx.poll_ready(cx)).map_err(|_| broken())?;
        let n = buf.len().min(MAX_CHUNK);
        // The header, then the bytes as they are: one copy (out of the
        // relay's buffer), not two.
        let header = apiway_wire::tunnel::data_message_header(this.connect_id, n);
        let payload = Bytes::copy_from_slice(&buf[..n]);
        this.tx
            .try_send((header, Some(payload)))
            .map_err(|_| broken())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tx.close();
        Poll::Ready(Ok(()))
    }
}

/// Relays between `tcp` and `tunnel` until both directions end, then
/// passes a reset on: the TCP side's reset resets the stream, the stream's
/// reset (or failure) resets the TCP side. `observer` sees bytes as
/// `ClientToBackend` = TCP → tunnel.
pub async fn splice<O: Observer + Unpin>(
    tcp: TcpStream,
    tunnel: &mut TunnelStream,
    cfg: &RelayConfig,
    observer: O,
) -> RelayOutcome {
    if let Some(keepalive) = &cfg.keepalive {
        apiway_relay::apply_keepalive([&tcp], keepalive);
    }
    let mut tcp = tcp;
    let outcome = relay_io(&mut tcp, &mut *tunnel, cfg, observer).await;
    match outcome.end {
        RelayEnd::Closed => {}
        RelayEnd::ClientError(_) => tunnel.reset("the connection was reset"),
        RelayEnd::IdleTimeout => {
            tunnel.reset("idle timeout");
            reset_tcp(&tcp);
        }
        // The peer asked to close: a clean close here too.
        RelayEnd::BackendError(_) if tunnel.close_requested() => {}
        RelayEnd::BackendError(_) => reset_tcp(&tcp),
    }
    outcome
}

/// Makes closing `tcp` send RST instead of FIN.
pub(crate) fn reset_tcp(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO));
}
