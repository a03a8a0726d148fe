//! A small HTTPS client: one connection, one GET, the whole answer.
//!
//! The demo and the tests use it to show which backend answered (the
//! stand-in's `x-apiway-standin` header and JSON `server` field). It dials
//! `addr` directly and sends `sni` as the TLS server name, the way
//! `curl --resolve` does, so a gateway in between can be exercised without
//! DNS. An IP address as `sni` sends no SNI at all (TLS forbids IP SNI),
//! which is how in-cluster clients that dial a ClusterIP behave.
//!
//! There is no built-in timeout: wrap calls in `tokio::time::timeout`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tracing::debug;

use crate::pki::{self, Ca, Issued, ALPN_H2, ALPN_HTTP11};

/// Largest response body read (bigger answers are an error).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// A complete HTTP response.
#[derive(Clone, Debug)]
pub struct Response {
    /// The status code (compares with `u16`: `response.status == 200`).
    pub status: StatusCode,
    /// The body, decoded as UTF-8 (invalid sequences replaced).
    pub body: String,
    /// The response headers.
    pub headers: HeaderMap,
    /// The HTTP version actually spoken.
    pub version: Version,
}

impl Response {
    /// A header's value, if present and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The name of the stand-in that answered (its `x-apiway-standin`
    /// header).
    pub fn standin(&self) -> Option<&str> {
        self.header("x-apiway-standin")
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.body).context("response body is not JSON")
    }
}

/// GETs `https://{sni}{path}` from `addr`, trusting `ca`, optionally with a
/// client certificate, over HTTP/2 (ALPN `h2`) or HTTP/1.1.
pub async fn https_get(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    ca: &Ca,
    client_cert: Option<&Issued>,
    http2: bool,
) -> Result<Response> {
    let alpn: &[&[u8]] = if http2 { &[ALPN_H2] } else { &[ALPN_HTTP11] };
    let config = pki::client_config(ca, client_cert, alpn)?;
    https_get_with_config(addr, sni, path, config, http2).await
}

/// Like [`https_get`] with a prebuilt rustls configuration (its ALPN list is
/// used as is). With `http2`, the server must not have chosen another ALPN
/// protocol; with no ALPN at all, HTTP/2 is spoken with prior knowledge.
pub async fn https_get_with_config(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    config: Arc<ClientConfig>,
    http2: bool,
) -> Result<Response> {
    let server_name = ServerName::try_from(sni.to_string())
        .with_context(|| format!("{sni:?} is not a valid TLS server name"))?;
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let _ = tcp.set_nodelay(true);
    let tls = TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .with_context(|| format!("TLS handshake with {addr} (server name {sni})"))?;

    match tls.get_ref().1.alpn_protocol() {
        Some(alpn) if http2 && alpn != ALPN_H2 => bail!(
            "{addr} chose ALPN {:?}, not h2",
            String::from_utf8_lossy(alpn)
        ),
        Some(ALPN_H2) if !http2 => bail!(
            "{addr} chose ALPN h2 but HTTP/1.1 was asked for: leave h2 out of the client config"
        ),
        _ => {}
    }
    let authority = authority(sni, addr);
    let io = TokioIo::new(tls);
    let response = if http2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .with_context(|| format!("HTTP/2 handshake with {addr}"))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                debug!("HTTP/2 client connection ended: {e}");
            }
        });
        let request = Request::get(format!("https://{authority}{path}"))
            .body(Empty::<Bytes>::new())
            .context("building the request")?;
        sender
            .send_request(request)
            .await
            .with_context(|| format!("GET {path} from {addr}"))?
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .with_context(|| format!("HTTP/1.1 handshake with {addr}"))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                debug!("HTTP/1.1 client connection ended: {e}");
            }
        });
        let request = Request::get(path)
            .header(http::header::HOST, authority)
            .body(Empty::<Bytes>::new())
            .context("building the request")?;
        sender
            .send_request(request)
            .await
            .with_context(|| format!("GET {path} from {addr}"))?
    };

    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow!("reading the body of GET {path} from {addr}: {e}"))?
        .to_bytes();
    Ok(Response {
        status: parts.status,
        body: String::from_utf8_lossy(&body).into_owned(),
        headers: parts.headers,
        version: parts.version,
    })
}

/// The `Host` / `:authority` value: the server name, or the dialed address
/// when the name is an IP (no SNI), with the port unless it is 443.
fn authority(sni: &str, addr: SocketAddr) -> String {
    let host = match sni.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
        Ok(IpAddr::V4(ip)) => ip.to_string(),
        Err(_) => sni.to_string(),
    };
    if addr.port() == 443 {
        host
    } else {
        format!("{host}:{}", addr.port())
    }
}
