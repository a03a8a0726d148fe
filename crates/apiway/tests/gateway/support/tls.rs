//! A real rustls client whose ClientHello the test puts on the wire itself
//! (re-cut into small records, or one byte per write), and which then
//! completes the handshake and an HTTP/1.1 GET over the same socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_standin::pki::{client_config, ALPN_HTTP11};
use rustls::pki_types::ServerName;
use rustls::ClientConnection;

use super::Pki;

/// A client that has produced its ClientHello and waits for the server.
pub struct PendingTls {
    conn: ClientConnection,
    /// The ClientHello as rustls wrote it (one record).
    pub hello: Vec<u8>,
}

/// Starts a handshake to `server_name` (an IP address sends no SNI),
/// trusting the test CA, optionally with the client certificate.
pub fn rustls_hello(pki: &Pki, server_name: &str, client_cert: bool) -> Result<PendingTls> {
    let config = client_config(&pki.ca, client_cert.then_some(&pki.client), &[ALPN_HTTP11])?;
    let name = ServerName::try_from(server_name.to_string())?;
    let mut conn = ClientConnection::new(config, name)?;
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello)?;
    }
    Ok(PendingTls { conn, hello })
}

/// What the server answered.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

impl HttpAnswer {
    /// The stand-in that answered (JSON `server`).
    pub fn server(&self) -> Option<String> {
        let json: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        json["server"].as_str().map(str::to_owned)
    }
}

impl PendingTls {
    /// The connection, to drive by hand after [`hello`](Self::hello) was sent.
    pub fn into_connection(self) -> ClientConnection {
        self.conn
    }

    /// Completes the handshake over `sock`, to which the caller has already
    /// sent [`hello`](Self::hello) in whatever shape, then sends
    /// `GET path` and reads the answer. Blocking: call from
    /// `spawn_blocking`.
    pub fn finish_get(mut self, mut sock: TcpStream, host: &str, path: &str) -> Result<HttpAnswer> {
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        let mut tls = rustls::Stream::new(&mut self.conn, &mut sock);
        tls.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .context("TLS handshake or request")?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match tls.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                // A server that closes without close_notify after a whole answer.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
                Err(e) => return Err(e).context("reading the answer"),
            }
            if let Some(answer) = complete_answer(&raw) {
                return Ok(answer);
            }
        }
        complete_answer(&raw).with_context(|| {
            format!(
                "incomplete HTTP answer: {:?}",
                String::from_utf8_lossy(&raw)
            )
        })
    }
}

fn complete_answer(raw: &[u8]) -> Option<HttpAnswer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length: usize = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    })?;
    if body.len() < length {
        return None;
    }
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(HttpAnswer {
        status,
        body: body[..length].to_string(),
    })
}

/// Connects a blocking socket with Nagle off, so each write is a segment.
pub fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    sock.set_nodelay(true)?;
    Ok(sock)
}

/// Fails unless `answer` is a 200 from the stand-in named `server`.
pub fn expect_server(answer: &HttpAnswer, server: &str) -> Result<()> {
    if answer.status != 200 || answer.server().as_deref() != Some(server) {
        bail!("expected 200 from {server}, got {answer:?}");
    }
    Ok(())
}
