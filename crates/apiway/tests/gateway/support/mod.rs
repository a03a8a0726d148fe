//! What the gateway tests share: the gateway process, certificates, stand-in
//! API servers, raw TCP backends, and the real clients (curl, openssl,
//! rustls over a raw socket).

pub mod backend;
pub mod metrics;
pub mod process;
pub mod tls;
pub mod tools;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use apiway_standin::pki::{Ca, Issued};
use apiway_standin::{StandinConfig, StandinServer};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use backend::{EchoBackend, Recorder};
pub use process::GatewayProcess;

pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// `127.0.0.1:0`.
pub fn any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// A CA, a client certificate (CN `alice`) and their PEM files, for curl,
/// openssl and etcdctl.
pub struct Pki {
    pub ca: Ca,
    pub client: Issued,
    pub ca_pem: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    _dir: TempDir,
}

impl Pki {
    pub fn new() -> Result<Pki> {
        let dir = tempfile::Builder::new().prefix("apiway-pki-").tempdir()?;
        let ca = Ca::new("apiway test CA")?;
        let client = ca.issue_client("alice", &["system:masters"])?;
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.cert_pem())?;
        let (client_cert, client_key) = client.write(dir.path(), "alice")?;
        Ok(Pki {
            ca,
            client,
            ca_pem,
            client_cert,
            client_key,
            _dir: dir,
        })
    }

    /// Starts a stand-in API server named `name` with a certificate for
    /// `names` (and 127.0.0.1); with `mtls`, it requires client certificates
    /// from this CA.
    pub async fn standin(&self, name: &str, names: &[&str], mtls: bool) -> Result<StandinServer> {
        let cert = self.ca.issue_server(names, &[LOCALHOST])?;
        let mut config = StandinConfig::new(name, any_port(), cert);
        if mtls {
            config = config.with_client_ca(&self.ca);
        }
        StandinServer::start(config)
            .await
            .with_context(|| format!("starting stand-in {name}"))
    }
}

/// `https_get` through `addr` with server name `sni`, trusting the test CA,
/// over HTTP/2 or HTTP/1.1, failing after 5 s.
pub async fn https(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    pki: &Pki,
    http2: bool,
) -> Result<apiway_standin::Response> {
    tokio::time::timeout(
        Duration::from_secs(5),
        apiway_standin::https_get(addr, sni, path, &pki.ca, None, http2),
    )
    .await
    .with_context(|| format!("GET https://{sni}{path} via {addr} timed out"))?
}

/// A TCP port on 127.0.0.1 where nothing listens.
pub fn closed_port() -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(any_port())?;
    Ok(listener.local_addr()?)
}

/// Polls `check` every 20 ms until it returns `Ok`, or fails after `timeout`
/// with the last `Err` (a description of what was seen instead).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= deadline => {
                bail!("timed out after {timeout:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A plain-HTTP/1.1 `GET path` on `addr`: status code and body.
pub async fn http_get_plain(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .context("connect timed out")?
        .with_context(|| format!("connecting to {addr}"))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw))
        .await
        .context("admin answer timed out")??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP header end in {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Reads from `stream` until EOF, an error or `timeout`; returns the bytes
/// and how the read ended.
pub async fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, Closed) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (out, Closed::StillOpen),
            Ok(Ok(0)) => return (out, Closed::Eof),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return (out, Closed::Error(e.kind())),
        }
    }
}

/// Sends `bytes` to `addr` and returns what came back before the gateway
/// closed (or 5 s passed).
pub async fn send_raw(addr: SocketAddr, bytes: &[u8]) -> Result<(Vec<u8>, Closed)> {
    let mut client = TcpStream::connect(addr).await?;
    client.write_all(bytes).await?;
    Ok(read_until_closed(&mut client, Duration::from_secs(5)).await)
}

/// How a connection ended from the reader's side.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    Eof,
    Error(std::io::ErrorKind),
    StillOpen,
}

/// A ClientHello captured from a real client (`crates/wire/testdata/sni`):
/// fixed bytes, where a fresh hello would differ from run to run.
pub fn captured_hello(file: &str) -> Result<Vec<u8>> {
    let path = format!("{}/../wire/testdata/sni/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).with_context(|| format!("reading {path}"))
}
