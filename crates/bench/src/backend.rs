//! Backends the proxies forward to: a plain TCP server speaking the
//! [`protocol`](crate::protocol) and, for the real-TLS variant, a rustls
//! server. Both live in this process; dropping one stops accepting and
//! closes every connection it holds. [`Backend::close_all`] closes them
//! while it keeps accepting, the way a restarting API server drops every
//! watch.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::bulk::{self, Source, DISCARD_CHUNK};
use crate::protocol::{self, Measurement, REQUEST_LEN, RESPONSE_LEN};

/// Worker threads of each backend's own runtime.
const BACKEND_THREADS: usize = 2;

/// A listening backend on its own tokio runtime (its own threads), so the
/// load generator's tasks and the backend's never share a worker thread.
/// Dropping it stops the runtime, closing every connection it holds.
pub struct Backend {
    addr: SocketAddr,
    runtime: Option<Runtime>,
    /// Asks the accept loop to close every connection; it answers how many.
    close_all: mpsc::UnboundedSender<oneshot::Sender<usize>>,
    /// Connections being served right now.
    open: Arc<AtomicUsize>,
}

impl Backend {
    /// A plain TCP backend on 127.0.0.1 (any port).
    pub async fn plain() -> Result<Backend> {
        let source = Arc::new(Source::new()?);
        Backend::start(move |stream| {
            let source = source.clone();
            async move {
                // A broken connection is the client's business; it reports.
                let _ = serve_plain(stream, &source).await;
            }
        })
        .await
    }

    /// A TLS backend: handshake, read [`REQUEST_LEN`] bytes, answer
    /// [`RESPONSE_LEN`] bytes, wait for the client to close.
    pub async fn tls(acceptor: TlsAcceptor) -> Result<Backend> {
        Backend::start(move |stream| {
            let acceptor = acceptor.clone();
            async move {
                let _ = serve_tls(acceptor, stream).await;
            }
        })
        .await
    }

    async fn start<F, Fut>(serve: F) -> Result<Backend>
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(BACKEND_THREADS)
            .thread_name("bench-backend")
            .enable_all()
            .build()
            .context("starting a runtime for a backend")?;
        let (bound_tx, bound_rx) = oneshot::channel();
        let (close_all, commands) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicUsize::new(0));
        let counter = open.clone();
        // The listener must be created inside the backend's runtime so its
        // sockets use that runtime's I/O driver.
        runtime.spawn(async move {
            match bind().await {
                Ok(listener) => {
                    let addr = listener.local_addr().map_err(anyhow::Error::from);
                    let ok = addr.is_ok();
                    if bound_tx.send(addr).is_ok() && ok {
                        accept_loop(listener, serve, commands, counter).await;
                    }
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                }
            }
        });
        let addr = bound_rx
            .await
            .context("the backend runtime stopped before binding")??;
        Ok(Backend {
            addr,
            runtime: Some(runtime),
            close_all,
            open,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection it holds now (an orderly close: nothing is
    /// left unread) and goes on accepting; returns how many it closed.
    /// The closing itself runs on the backend's threads right after.
    pub async fn close_all(&self) -> Result<usize> {
        let (reply, closed) = oneshot::channel();
        self.close_all
            .send(reply)
            .map_err(|_| anyhow::anyhow!("the backend's accept loop has stopped"))?;
        closed
            .await
            .context("the backend's accept loop stopped before closing")
    }

    /// Connections it is serving now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime may not block inside another runtime.
            runtime.shutdown_background();
        }
    }
}

async fn bind() -> Result<TcpListener> {
    // std's listen backlog is 128; under connection storms the kernel's
    // somaxconn (4096 here) is what a real server would use.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    socket.listen(4096).context("listening for a backend")
}

/// Accepts forever; each connection runs in a task owned by this loop, so
/// aborting the loop drops them all, and a close-all command aborts every
/// task (dropping a task closes its socket).
async fn accept_loop<F, Fut>(
    listener: TcpListener,
    serve: F,
    mut commands: mpsc::UnboundedReceiver<oneshot::Sender<usize>>,
    open: Arc<AtomicUsize>,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let served = OpenConnection::new(open.clone());
                    let task = serve(stream);
                    connections.spawn(async move {
                        task.await;
                        drop(served);
                    });
                }
                // Out of file descriptors and the like: back off a little.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(reply) = commands.recv() => {
                let closing = open.load(Ordering::Relaxed);
                connections.abort_all();
                let _ = reply.send(closing);
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Counts one served connection until dropped (also when its task is
/// aborted).
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(open: Arc<AtomicUsize>) -> OpenConnection {
        open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(open)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_plain(mut stream: TcpStream, source: &Source) -> Result<()> {
    protocol::skip_client_hello(&mut stream).await?;
    let mode = stream.read_u8().await?;
    match mode {
        protocol::UPLOAD => upload(stream).await,
        protocol::DOWNLOAD => Ok(source.send_forever(&stream).await?),
        protocol::REQUEST => request(&mut stream).await,
        protocol::ECHO => echo(stream).await,
        other => anyhow::bail!("unknown mode {other}"),
    }
}

/// Counts received bytes for the requested window, reports, then drains.
async fn upload(mut stream: TcpStream) -> Result<()> {
    let window = Duration::from_millis(u64::from(stream.read_u32().await?));
    let mut scratch = vec![0u8; DISCARD_CHUNK];
    let mut bytes = 0u64;
    let mut started = None;
    loop {
        let n = bulk::discard(&stream, &mut scratch).await?;
        if n == 0 {
            return Ok(());
        }
        let start = *started.get_or_insert_with(Instant::now);
        bytes += n as u64;
        let elapsed = start.elapsed();
        if elapsed >= window {
            stream
                .write_all(&Measurement { bytes, elapsed }.encode())
                .await?;
            break;
        }
    }
    while bulk::discard(&stream, &mut scratch).await? != 0 {}
    Ok(())
}

async fn request(stream: &mut (impl AsyncRead + AsyncWrite + Unpin)) -> Result<()> {
    // The mode byte was the first byte of the request.
    let mut rest = [0u8; REQUEST_LEN - 1];
    stream.read_exact(&mut rest).await?;
    stream.write_all(&[0x61u8; RESPONSE_LEN]).await?;
    stream.flush().await?;
    let mut sink = [0u8; 512];
    while stream.read(&mut sink).await? != 0 {}
    Ok(())
}

async fn echo(stream: TcpStream) -> Result<()> {
    let (mut reader, mut writer) = stream.into_split();
    tokio::io::copy(&mut reader, &mut writer).await?;
    writer.shutdown().await?;
    Ok(())
}

async fn serve_tls(acceptor: TlsAcceptor, stream: TcpStream) -> Result<()> {
    let mut tls = acceptor.accept(stream).await?;
    let mut first = [0u8; 1];
    tls.read_exact(&mut first).await?;
    request(&mut tls).await
}
