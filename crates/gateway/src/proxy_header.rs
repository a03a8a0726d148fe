//! Reading the PROXY header(s) at the start of a connection, for `proxy`
//! listeners and `tls` listeners with `proxy_protocol`.
//!
//! Trust goes hop by hop. The TCP peer must be in `trusted_sources`, or no
//! byte is read as a header: a connection from elsewhere is closed unread
//! (the header is mandatory) or read as plain stream (it is optional). On a
//! `proxy` listener a second, stacked header (a load balancer's header,
//! then the agent's) is read only when the first one names a trusted source
//! as its client: the hop that sent the second header. The client a backend
//! learns is the one named by the last header believed.

use std::net::SocketAddr;

use apiway_core::read_until::{read_until, ReadError};
use apiway_wire::proxy::{self, Command, ProxyError};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::cidr::TrustedSources;
use crate::config::ProxyProtocolMode;
use crate::listener_state::ListenerState;
use apiway_core::connector::Origin;

/// What the headers at the start of a connection said.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Headers {
    /// Client and original destination from the innermost header that
    /// carried addresses; `None` when no header did (none was sent, or
    /// `LOCAL` / `UNKNOWN`, which say "use the real connection endpoints").
    pub(crate) addresses: Option<(SocketAddr, SocketAddr)>,
    /// With two stacked headers, the client the outer one named: the hop
    /// (usually a node's agent) that sent the inner one.
    pub(crate) outer_source: Option<SocketAddr>,
    /// Bytes of the buffer the headers took; the rest is the stream.
    pub(crate) consumed: usize,
}

impl Headers {
    /// The client and destination the headers named, or the real endpoints
    /// of `stream` when none did.
    pub(crate) fn origin(
        &self,
        stream: &TcpStream,
        peer: SocketAddr,
        listen: SocketAddr,
    ) -> Origin {
        match self.addresses {
            Some((client, destination)) => Origin {
                client,
                destination,
            },
            None => crate::forward::origin_of(stream, peer, listen),
        }
    }
}

/// Why the headers phase ended the connection.
enum Failure {
    /// A metric reason: `not_proxy`, `malformed`, ...
    Error(&'static str),
    TimedOut,
}

/// Reads up to `max_headers` headers into `buf` as the listener's spec
/// says. `None` when the connection must be closed; the reason was counted
/// and logged.
pub(crate) async fn accept(
    listener: &ListenerState,
    client: &mut TcpStream,
    peer: SocketAddr,
    buf: &mut Vec<u8>,
    max_headers: usize,
) -> Option<Headers> {
    // Held for the whole phase: a reload during it does not change the
    // rules this connection is read under.
    let spec = listener.spec.load_full();
    let handles = &listener.handles;
    let required = match spec.proxy_protocol {
        ProxyProtocolMode::Off => return Some(Headers::default()),
        ProxyProtocolMode::Optional => false,
        ProxyProtocolMode::Required => true,
    };
    if !spec.trusted_sources.contains(peer.ip()) {
        if required {
            handles.rejected(
                peer,
                "source not in trusted_sources, closed without reading",
                "untrusted_source",
            );
            handles.untrusted.inc();
            return None;
        }
        // Optional: an untrusted client's bytes are its stream, whatever
        // they look like.
        return Some(Headers::default());
    }
    let deadline = Instant::now() + spec.proxy_header_timeout;
    let name = &spec.name;
    let read = read(
        client,
        buf,
        required,
        max_headers,
        &spec.trusted_sources,
        deadline,
    );
    match read.await {
        Ok(headers) => {
            if let Some(outer) = headers.outer_source {
                handles.stacked_proxy_headers.inc();
                tracing::debug!(%peer, listener = %name, outer_source = %outer, client = ?headers.addresses.map(|a| a.0), "stacked PROXY headers");
            }
            Some(headers)
        }
        Err(Failure::Error(reason)) => {
            handles.rejected(peer, "no usable PROXY header", reason);
            handles.proxy_header_error(reason).inc();
            None
        }
        Err(Failure::TimedOut) => {
            handles.rejected(peer, "PROXY header timed out", "timeout");
            handles.proxy_header_timeouts.inc();
            None
        }
    }
}

/// Reads the headers. The first is mandatory when `required`; a stacked
/// one is always optional, and so is looked for only in bytes that arrive
/// before `deadline` (a client that speaks first, as a TLS client does,
/// settles it with its first byte).
async fn read(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    required: bool,
    max_headers: usize,
    trusted: &TrustedSources,
    deadline: Instant,
) -> Result<Headers, Failure> {
    let mut headers = Headers::default();
    for layer in 0..max_headers {
        let mandatory = required && layer == 0;
        let start = headers.consumed;
        // The parser refuses a longer header itself; this bounds the buffer.
        let limit = start + proxy::V2_FIXED_LEN + proxy::DEFAULT_MAX_V2_PAYLOAD;
        // Is there a header here? Decided by the signature alone.
        let detected = read_until(client, buf, Some(deadline), limit, |bytes| {
            proxy::detect(bytes.get(start..).unwrap_or_default()).into()
        })
        .await;
        let nothing_yet = buf.len() <= start;
        match detected {
            Ok(_) => {}
            Err(ReadError::Invalid(_)) if mandatory => return Err(Failure::Error("not_proxy")),
            Err(ReadError::Invalid(_)) => return Ok(headers),
            Err(ReadError::Closed) if nothing_yet && !mandatory => return Ok(headers),
            Err(ReadError::TimedOut) if nothing_yet && layer > 0 => return Ok(headers),
            Err(e) => return Err(failure(e)),
        }
        let (header, used) = read_until(client, buf, Some(deadline), limit, |bytes| {
            proxy::parse(bytes.get(start..).unwrap_or_default()).into()
        })
        .await
        .map_err(failure)?;
        headers.consumed += used;
        // LOCAL (and v1 UNKNOWN) say "use the real endpoints of the
        // connection this header came on": what we already have.
        let Some(addresses) = header
            .addresses
            .filter(|_| header.command == Command::Proxy)
        else {
            return Ok(headers);
        };
        if layer > 0 {
            headers.outer_source = headers.addresses.map(|(client, _)| client);
        }
        headers.addresses = Some((addresses.source, addresses.destination));
        // The next header would come from the client this one named; it is
        // believed only if that client is trusted too.
        if !trusted.contains(addresses.source.ip()) {
            return Ok(headers);
        }
    }
    Ok(headers)
}

/// Why reading a header ended without one.
fn failure(e: ReadError<ProxyError>) -> Failure {
    match e {
        ReadError::Invalid(e) => Failure::Error(reason(e)),
        ReadError::TooLarge { .. } => Failure::Error("too_long"),
        ReadError::Closed => Failure::Error("closed"),
        ReadError::Io(_) => Failure::Error("io"),
        ReadError::TimedOut => Failure::TimedOut,
    }
}

/// The metric reason for a parse error.
fn reason(e: ProxyError) -> &'static str {
    match e {
        ProxyError::Incomplete => "incomplete",
        ProxyError::NotProxy => "not_proxy",
        ProxyError::Malformed(_) => "malformed",
        ProxyError::TooLong { .. } => "too_long",
        ProxyError::BadChecksum { .. } => "bad_checksum",
        ProxyError::Unsupported(_) => "unsupported",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cidr::Cidr;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    fn trusted(nets: &[&str]) -> TrustedSources {
        TrustedSources::new(nets.iter().map(|n| Cidr::parse(n).unwrap()).collect())
    }

    /// Runs `read` on a socket that received `sent` (then stays open).
    async fn read_from(
        sent: &[u8],
        required: bool,
        max_headers: usize,
        nets: &[&str],
    ) -> (Result<Headers, &'static str>, Vec<u8>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut accepted, _) = listener.accept().await.unwrap();
        sender.write_all(sent).await.unwrap();
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        let result = read(
            &mut accepted,
            &mut buf,
            required,
            max_headers,
            &trusted(nets),
            deadline,
        )
        .await
        .map_err(|f| match f {
            Failure::Error(r) => r,
            Failure::TimedOut => "timed out",
        });
        (result, buf)
    }

    const OUTER: &[u8] = b"PROXY TCP4 10.0.0.5 192.168.1.1 40000 443\r\n";
    const INNER: &[u8] = b"PROXY TCP4 10.244.1.7 10.96.0.1 51000 443\r\n";

    #[tokio::test]
    async fn stacked_headers_route_on_the_inner_one() {
        let sent = [OUTER, INNER, b"\x16\x03\x01"].concat();
        let (headers, buf) = read_from(&sent, true, 2, &["10.0.0.0/24"]).await;
        let headers = headers.unwrap();
        assert_eq!(
            headers.addresses,
            Some((
                "10.244.1.7:51000".parse().unwrap(),
                "10.96.0.1:443".parse().unwrap()
            ))
        );
        assert_eq!(
            headers.outer_source,
            Some("10.0.0.5:40000".parse().unwrap())
        );
        assert_eq!(&buf[headers.consumed..], b"\x16\x03\x01");
    }

    #[tokio::test]
    async fn an_untrusted_hop_cannot_add_a_header() {
        // The outer header names 10.0.1.5, which is not trusted: what it
        // sent is stream, even if it looks like a header.
        let outer = b"PROXY TCP4 10.0.1.5 192.168.1.1 40000 443\r\n";
        let sent = [&outer[..], INNER].concat();
        let (headers, _) = read_from(&sent, true, 2, &["10.0.0.0/24"]).await;
        let headers = headers.unwrap();
        assert_eq!(headers.consumed, outer.len());
        assert_eq!(headers.outer_source, None);
        // One layer only on tls listeners.
        let sent = [OUTER, INNER].concat();
        let (headers, _) = read_from(&sent, true, 1, &["10.0.0.0/24"]).await;
        assert_eq!(headers.unwrap().consumed, OUTER.len());
    }

    #[tokio::test]
    async fn a_missing_inner_header_is_settled_by_the_first_byte_or_the_deadline() {
        let (headers, _) = read_from(OUTER, true, 2, &["10.0.0.0/24"]).await;
        assert_eq!(
            headers.unwrap().consumed,
            OUTER.len(),
            "deadline, no inner header"
        );
        let sent = [OUTER, b"\x16"].concat();
        let (headers, _) = read_from(&sent, true, 2, &["10.0.0.0/24"]).await;
        assert_eq!(headers.unwrap().consumed, OUTER.len());
    }

    #[tokio::test]
    async fn required_and_optional_headers() {
        assert_eq!(
            read_from(b"\x16\x03", true, 1, &["127.0.0.1"]).await.0,
            Err("not_proxy")
        );
        let (headers, _) = read_from(b"\x16\x03", false, 1, &["127.0.0.1"]).await;
        assert_eq!(headers.unwrap(), Headers::default());
        assert_eq!(
            read_from(b"PROXY TCP4 1.2", true, 1, &["127.0.0.1"])
                .await
                .0,
            Err("timed out")
        );
        assert_eq!(
            read_from(b"PROXY TCP9 ", true, 1, &["127.0.0.1"]).await.0,
            Err("malformed")
        );
        // LOCAL: real endpoints, nothing more is read.
        let local = proxy::ProxyHeader::local()
            .render(&proxy::RenderOptions::default())
            .unwrap();
        let (headers, _) = read_from(&local, true, 2, &["0.0.0.0/0"]).await;
        let headers = headers.unwrap();
        assert_eq!((headers.addresses, headers.consumed), (None, local.len()));
    }
}
