//! What the load generator and the bench backends say to each other.
//!
//! A connection starts with a real rustls ClientHello (one TLS record), so a
//! proxy sees exactly what a TLS client would send. Nothing else is TLS: the
//! backend reads the record, discards it, and then reads a one-byte mode that
//! says what the rest of the connection is.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Client sends `UPLOAD` + duration (u32 ms, big endian), then bytes without
/// end; the backend counts what it receives for that long after the first
/// byte and answers with [`Measurement`] (16 bytes).
pub const UPLOAD: u8 = b'U';
/// Client sends `DOWNLOAD`; the backend sends bytes until the connection
/// breaks. The client measures.
pub const DOWNLOAD: u8 = b'D';
/// Client sends [`REQUEST_LEN`] bytes starting with `REQUEST`; the backend
/// answers [`RESPONSE_LEN`] bytes and waits for the client to close.
pub const REQUEST: u8 = b'R';
/// The backend echoes every byte until the client ends its writes, then
/// closes.
pub const ECHO: u8 = b'E';

/// Size of a short request, mode byte included.
pub const REQUEST_LEN: usize = 100;
/// Size of the answer to a short request.
pub const RESPONSE_LEN: usize = 200;
/// The largest TLS record a ClientHello may use.
const MAX_RECORD: usize = 16 * 1024 + 2048;

/// A real ClientHello, as rustls sends it first, for `server_name`.
///
/// It offers `h2` and `http/1.1` like kubectl. The key share inside is
/// never used: no handshake follows.
pub fn client_hello(server_name: &str) -> Result<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = ServerName::try_from(server_name.to_string())
        .with_context(|| format!("{server_name} is not a valid TLS server name"))?;
    let mut connection =
        ClientConnection::new(Arc::new(config), name).context("starting a rustls client")?;
    let mut hello = Vec::new();
    while connection.wants_write() {
        connection
            .write_tls(&mut hello)
            .context("writing the ClientHello")?;
    }
    Ok(hello)
}

/// Reads and discards one TLS handshake record (the ClientHello).
pub async fn skip_client_hello(stream: &mut (impl AsyncRead + Unpin)) -> Result<()> {
    let mut header = [0u8; 5];
    stream
        .read_exact(&mut header)
        .await
        .context("reading the ClientHello record header")?;
    if header[0] != 0x16 {
        bail!("the connection does not start with a TLS handshake record");
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len > MAX_RECORD {
        bail!("ClientHello record of {len} bytes is too large");
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .await
        .context("reading the ClientHello")?;
    Ok(())
}

/// What the receiving side of a bulk transfer saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Bytes received in the window.
    pub bytes: u64,
    /// From the first received byte to the end of the window.
    pub elapsed: Duration,
}

impl Measurement {
    /// Encoded size.
    pub const LEN: usize = 16;

    /// Bits per second.
    pub fn gbit_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 * 8.0 / secs / 1e9
    }

    /// Big-endian bytes, then nanoseconds.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..8].copy_from_slice(&self.bytes.to_be_bytes());
        let nanos = u64::try_from(self.elapsed.as_nanos()).unwrap_or(u64::MAX);
        out[8..].copy_from_slice(&nanos.to_be_bytes());
        out
    }

    /// The inverse of [`encode`](Self::encode).
    pub fn decode(bytes: &[u8; Self::LEN]) -> Measurement {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[..8]);
        let count = u64::from_be_bytes(word);
        word.copy_from_slice(&bytes[8..]);
        Measurement {
            bytes: count,
            elapsed: Duration::from_nanos(u64::from_be_bytes(word)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hello_is_one_record_the_backend_skips() -> Result<()> {
        let mut hello = client_hello("api.bench.example.com")?;
        assert_eq!(hello[0], 0x16);
        hello.push(ECHO);
        let mut reader = &hello[..];
        skip_client_hello(&mut reader).await?;
        assert_eq!(reader, [ECHO]);
        Ok(())
    }

    #[test]
    fn measurement_round_trips() {
        let m = Measurement {
            bytes: 123_456_789,
            elapsed: Duration::from_millis(1500),
        };
        assert_eq!(Measurement::decode(&m.encode()), m);
        assert!((m.gbit_per_s() - 0.658_436_208).abs() < 1e-6);
    }
}
