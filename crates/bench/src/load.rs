//! The load generator's side of each kind of connection.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::bulk::{self, Source, DISCARD_CHUNK};
use crate::protocol::{self, Measurement, REQUEST_LEN, RESPONSE_LEN};

/// How long any single exchange may take before it counts as hung.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects with `TCP_NODELAY`, as latency-minded clients do.
pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// `hello` followed by a short request: what a plain-mode client sends at
/// once.
pub fn hello_and_request(hello: &[u8]) -> Vec<u8> {
    let mut bytes = hello.to_vec();
    bytes.push(protocol::REQUEST);
    bytes.resize(hello.len() + REQUEST_LEN, b'r');
    bytes
}

/// Sends bulk data for `window` (as the backend measures it) and returns
/// what the backend received.
pub async fn upload(
    addr: SocketAddr,
    hello: &[u8],
    window: Duration,
    source: &Arc<Source>,
) -> Result<Measurement> {
    let mut stream = connect(addr).await.context("connecting")?;
    let mut head = hello.to_vec();
    head.push(protocol::UPLOAD);
    let millis = u32::try_from(window.as_millis()).unwrap_or(u32::MAX);
    head.extend_from_slice(&millis.to_be_bytes());
    stream.write_all(&head).await.context("sending the hello")?;

    let stream = Arc::new(stream);
    let send = {
        let stream = stream.clone();
        let source = source.clone();
        tokio::spawn(async move { source.send_forever(&stream).await })
    };
    let mut answer = [0u8; Measurement::LEN];
    let read = tokio::time::timeout(
        window + EXCHANGE_TIMEOUT,
        bulk::read_exact_shared(&stream, &mut answer),
    )
    .await;
    send.abort();
    match read {
        Ok(Ok(())) => Ok(Measurement::decode(&answer)),
        Ok(Err(e)) => Err(e).context("reading the backend's measurement"),
        Err(_) => bail!(
            "no measurement from the backend within {:?}",
            window + EXCHANGE_TIMEOUT
        ),
    }
}

/// Receives bulk data for `window` after the first byte and returns what
/// arrived.
pub async fn download(addr: SocketAddr, hello: &[u8], window: Duration) -> Result<Measurement> {
    let mut stream = connect(addr).await.context("connecting")?;
    let mut head = hello.to_vec();
    head.push(protocol::DOWNLOAD);
    stream.write_all(&head).await.context("sending the hello")?;
    let mut scratch = vec![0u8; DISCARD_CHUNK];
    let receive = async {
        let mut bytes = 0u64;
        let mut started = None;
        loop {
            let n = bulk::discard(&stream, &mut scratch).await?;
            if n == 0 {
                bail!("the stream ended early");
            }
            let start = *started.get_or_insert_with(Instant::now);
            bytes += n as u64;
            let elapsed = start.elapsed();
            if elapsed >= window {
                return Ok(Measurement { bytes, elapsed });
            }
        }
    };
    tokio::time::timeout(window + EXCHANGE_TIMEOUT, receive)
        .await
        .context("download hung")?
}

/// How a short connection ended badly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The connection could not be made.
    Connect,
    /// Reset (ECONNRESET, EPIPE) by the other side.
    Reset,
    /// The peer closed before the whole answer arrived.
    Eof,
    /// Nothing happened for [`EXCHANGE_TIMEOUT`].
    Timeout,
    /// The TLS handshake failed.
    Tls,
    /// Anything else.
    Other,
}

impl Failure {
    fn of(error: &io::Error) -> Failure {
        match error.kind() {
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted => Failure::Reset,
            io::ErrorKind::UnexpectedEof => Failure::Eof,
            io::ErrorKind::InvalidData => Failure::Tls,
            _ => Failure::Other,
        }
    }

    /// Short name for notes.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Reset => "reset",
            Failure::Eof => "early EOF",
            Failure::Timeout => "timeout",
            Failure::Tls => "TLS",
            Failure::Other => "other",
        }
    }
}

/// A short TLS-less exchange: connect, send hello and request, read the
/// whole answer, close. Returns the time from connect to the last byte.
pub async fn plain_exchange(addr: SocketAddr, request: &[u8]) -> Result<Duration, Failure> {
    open_request(addr, request).await.map(|opened| opened.took)
}

/// A connection that made one request and has the whole answer.
pub struct Opened {
    /// The connection, still open (the backend waits for the client to
    /// close).
    pub stream: TcpStream,
    /// From the start until `connect` returned (the kernel completed the
    /// handshake; the proxy may not have accepted yet).
    pub connected: Duration,
    /// From the start until the last byte of the answer.
    pub took: Duration,
}

/// The start of [`plain_exchange`]: connect, send hello and request, read
/// the whole answer; the connection is left open.
pub async fn open_request(addr: SocketAddr, request: &[u8]) -> Result<Opened, Failure> {
    let started = Instant::now();
    let exchange = async {
        let mut stream = connect(addr).await.map_err(|_| Failure::Connect)?;
        let connected = started.elapsed();
        stream
            .write_all(request)
            .await
            .map_err(|e| Failure::of(&e))?;
        let mut answer = [0u8; RESPONSE_LEN];
        stream
            .read_exact(&mut answer)
            .await
            .map_err(|e| Failure::of(&e))?;
        Ok(Opened {
            stream,
            connected,
            took: started.elapsed(),
        })
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

/// A short exchange over real TLS (full handshake every time).
pub async fn tls_exchange(
    addr: SocketAddr,
    connector: &TlsConnector,
    server_name: &ServerName<'static>,
) -> Result<Duration, Failure> {
    let started = Instant::now();
    let exchange = async {
        let tcp = connect(addr).await.map_err(|_| Failure::Connect)?;
        let mut tls = connector
            .connect(server_name.clone(), tcp)
            .await
            .map_err(|e| match Failure::of(&e) {
                Failure::Other => Failure::Tls,
                other => other,
            })?;
        let mut request = [b'r'; REQUEST_LEN];
        request[0] = protocol::REQUEST;
        tls.write_all(&request).await.map_err(|e| Failure::of(&e))?;
        tls.flush().await.map_err(|e| Failure::of(&e))?;
        let mut answer = [0u8; RESPONSE_LEN];
        tls.read_exact(&mut answer)
            .await
            .map_err(|e| Failure::of(&e))?;
        let took = started.elapsed();
        // close_notify, as a well-behaved client ends.
        let _ = tls.shutdown().await;
        Ok(took)
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

/// Opens an echo connection and completes one small round trip, so it is
/// established all the way to the backend. The stream is left open.
pub async fn open_echo(addr: SocketAddr, hello: &[u8]) -> Result<TcpStream> {
    let open = async {
        let mut stream = connect(addr).await.context("connecting")?;
        let mut head = hello.to_vec();
        head.push(protocol::ECHO);
        let ping = [b'p'; 64];
        head.extend_from_slice(&ping);
        stream.write_all(&head).await.context("sending")?;
        let mut pong = [0u8; 64];
        stream
            .read_exact(&mut pong)
            .await
            .context("reading the echo")?;
        if pong != ping {
            bail!("the echo came back different");
        }
        anyhow::Ok(stream)
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, open)
        .await
        .context("opening an echo connection hung")?
}

/// A long-lived connection streaming both ways until told to stop.
pub struct Stream {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Stream {
    /// Opens an echo connection and keeps writing `chunk` bytes every
    /// `pace` while reading the echo. `sent` counts bytes in flight for
    /// progress reports.
    pub async fn start(
        addr: SocketAddr,
        hello: &[u8],
        chunk: usize,
        pace: Duration,
        progress: Arc<AtomicU64>,
    ) -> Result<Stream> {
        let stream = open_echo(addr, hello).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(stream_both_ways(
            stream,
            chunk,
            pace,
            stop.clone(),
            progress,
        ));
        Ok(Stream { stop, task })
    }

    /// Asks it to end (half-close, then read the rest of the echo) and
    /// returns whether it saw a reset, an early end or lost bytes.
    pub async fn finish(self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match tokio::time::timeout(EXCHANGE_TIMEOUT, self.task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Err(format!("task failed: {e}")),
            Err(_) => Err("did not end within the timeout after its planned end".into()),
        }
    }
}

async fn stream_both_ways(
    stream: TcpStream,
    chunk: usize,
    pace: Duration,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
) -> Result<(), String> {
    let (mut reader, mut writer) = stream.into_split();
    let writing = {
        let stop = stop.clone();
        async move {
            let data = vec![b's'; chunk];
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                writer
                    .write_all(&data)
                    .await
                    .map_err(|e| format!("write failed: {e}"))?;
                sent += chunk as u64;
                progress.fetch_add(chunk as u64, Ordering::Relaxed);
                tokio::time::sleep(pace).await;
            }
            writer
                .shutdown()
                .await
                .map_err(|e| format!("half-close failed: {e}"))?;
            Ok::<u64, String>(sent)
        }
    };
    let reading = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut received = 0u64;
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => {
                    if !stop.load(Ordering::Relaxed) {
                        return Err("early EOF before the planned end".to_string());
                    }
                    return Ok(received);
                }
                Ok(n) => received += n as u64,
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    };
    let (sent, received) = tokio::try_join!(writing, reading)?;
    if sent != received {
        return Err(format!("sent {sent} bytes but {received} came back"));
    }
    Ok(())
}
