//! Plain TCP backends run by the test itself: the gateway relays bytes
//! without terminating TLS, so a backend need not speak TLS to show what
//! arrived.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use apiway_wire::sni::{parse_client_hello, ClientHello, SniError, DEFAULT_MAX_HELLO_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::any_port;

/// What one connection to a [`Recorder`] carried.
#[derive(Debug)]
pub struct Recorded {
    /// Every byte received.
    pub bytes: Vec<u8>,
    /// The ClientHello those bytes start with, if they hold a whole one.
    pub hello: Option<ClientHello>,
}

/// Records the first bytes of each connection: reads until a whole
/// ClientHello arrived (then up to 100 ms more, or EOF) and closes.
/// Connections that carried no bytes at all (readiness probes, health
/// checks) are counted but not recorded.
pub struct Recorder {
    addr: SocketAddr,
    received: mpsc::UnboundedReceiver<Recorded>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Recorder {
    pub async fn start() -> Result<Recorder> {
        let listener = TcpListener::bind(any_port()).await?;
        let addr = listener.local_addr()?;
        let (tx, received) = mpsc::unbounded_channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(record(stream, tx.clone()));
            }
        });
        Ok(Recorder {
            addr,
            received,
            connections,
            task,
        })
    }

    /// Connections accepted so far, empty ones included.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next recorded connection.
    pub async fn next(&mut self, timeout: Duration) -> Result<Recorded> {
        tokio::time::timeout(timeout, self.received.recv())
            .await
            .with_context(|| {
                format!(
                    "no connection reached the backend {} within {timeout:?}",
                    self.addr
                )
            })?
            .context("recorder stopped")
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(mut stream: TcpStream, tx: mpsc::UnboundedSender<Recorded>) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let mut hello = None;
    loop {
        let read = if hello.is_some() {
            match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await {
                Ok(r) => r,
                Err(_) => break,
            }
        } else {
            stream.read(&mut buf).await
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
        if hello.is_none() {
            match parse_client_hello(&bytes, DEFAULT_MAX_HELLO_LEN) {
                Ok(h) => hello = Some(h),
                Err(SniError::Incomplete) => {}
                Err(_) => {}
            }
        }
    }
    if !bytes.is_empty() {
        let _ = tx.send(Recorded { bytes, hello });
    }
}

/// Sends back every byte it receives; on EOF, closes its sending side.
pub struct EchoBackend {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl EchoBackend {
    pub async fn start() -> Result<EchoBackend> {
        let listener = TcpListener::bind(any_port()).await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                        let _ = w.shutdown().await;
                    }
                });
            }
        });
        Ok(EchoBackend {
            addr,
            connections,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for EchoBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
