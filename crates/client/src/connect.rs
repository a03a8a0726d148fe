//! One HTTP/2 connection to one endpoint: TCP (through core's
//! [`connect_address`](apiway_core::endpoint::failover::connect_address)), TLS
//! that verifies the certificate for the right name, the HTTP/2 handshake
//! and, on an alternative, a `/readyz` check before it carries traffic.

use std::sync::Arc;
use std::time::Duration;

use apiway_core::endpoint::choice::Failure;
use apiway_core::endpoint::failover::connect_address;
use apiway_core::endpoint::Address;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;

/// The request body type on the wire: whole bodies, so a safe request can
/// be sent again on another endpoint.
pub(crate) type Body = Full<Bytes>;

/// How to reach one endpoint and what to call it there.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// TLS server name (SNI and certificate check).
    pub(crate) server_name: ServerName<'static>,
    /// `:authority` of requests.
    pub(crate) authority: http::uri::Authority,
    /// `Alt-Used` value on an alternative; `None` on the origin.
    pub(crate) alt_used: Option<HeaderValue>,
}

/// Why a connection could not be made; every case is before any request
/// was sent.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub(crate) failure: Failure,
    /// The `reason` label of the failure metric.
    pub(crate) kind: &'static str,
    pub(crate) reason: String,
}

impl ConnectError {
    fn network(kind: &'static str, reason: impl Into<String>) -> Self {
        ConnectError {
            failure: Failure::Network,
            kind,
            reason: reason.into(),
        }
    }
}

/// Timeouts and TLS of new connections.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub(crate) tls: TlsConnector,
    pub(crate) connect_timeout: Duration,
    pub(crate) check_timeout: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_timeout: Duration,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("connect_timeout", &self.connect_timeout)
            .field("check_timeout", &self.check_timeout)
            .field("keepalive", &self.keepalive)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .finish_non_exhaustive()
    }
}

impl Dialer {
    /// `config`'s TLS with ALPN set to `h2` only, and its timeouts.
    pub(crate) fn new(config: &crate::ClientConfig) -> Dialer {
        let mut tls = (*config.tls).clone();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        Dialer {
            tls: TlsConnector::from(Arc::new(tls)),
            connect_timeout: config.connect_timeout,
            check_timeout: config.check_timeout,
            keepalive: config.keepalive,
            keepalive_timeout: config.keepalive_timeout,
        }
    }

    /// Connects to `endpoint` as `target`; with `check`, `/readyz` must
    /// answer 200 before the connection is returned.
    pub(crate) async fn connect(
        &self,
        endpoint: &Address,
        target: &Target,
        check: bool,
    ) -> Result<SendRequest<Body>, ConnectError> {
        let (tcp, peer) = connect_address(endpoint, self.connect_timeout)
            .await
            .map_err(|e| ConnectError::network("connect", e))?;
        let _ = tcp.set_nodelay(true);
        let setup = async {
            let tls = self
                .tls
                .connect(target.server_name.clone(), tcp)
                .await
                .map_err(|e| tls_error(&e))?;
            if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(ConnectError::network(
                    "no_h2",
                    format!("{peer}: the server does not speak HTTP/2 (ALPN h2)"),
                ));
            }
            let (mut sender, connection) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(self.keepalive)
                .keep_alive_timeout(self.keepalive_timeout)
                .keep_alive_while_idle(true)
                .handshake::<_, Body>(TokioIo::new(tls))
                .await
                .map_err(|e| {
                    ConnectError::network("http2", format!("{peer}: HTTP/2 handshake: {e}"))
                })?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%peer, "API server connection ended: {e}");
                }
            });
            if check {
                readyz(&mut sender, target)
                    .await
                    .map_err(|e| ConnectError::network("not_ready", format!("{peer}: {e}")))?;
            }
            Ok(sender)
        };
        match tokio::time::timeout(self.check_timeout, setup).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError::network(
                "timeout",
                format!(
                    "{peer}: TLS and readiness check took longer than {:?}",
                    self.check_timeout
                ),
            )),
        }
    }
}

/// A certificate that does not verify is a [`Failure::Certificate`];
/// anything else during the handshake is a network failure.
fn tls_error(e: &std::io::Error) -> ConnectError {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(
            err @ (rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented),
        ) => ConnectError {
            failure: Failure::Certificate,
            kind: "certificate",
            reason: format!("certificate rejected: {}", certificate_words(err)),
        },
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)) => {
            ConnectError::network(
                "tls",
                format!("TLS handshake: {e} (the server answered something that is not TLS: if it speaks plain HTTP, kubectl says \"server gave HTTP response to HTTPS client\"; the kubeconfig's server then needs http://)"),
            )
        }
        _ => ConnectError::network("tls", format!("TLS handshake: {e}")),
    }
}

/// A certificate error in kubectl's words where kubectl has them (so a
/// search finds the same advice), with rustls's own after it.
fn certificate_words(err: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let words = match err {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            Some("x509: certificate signed by unknown authority")
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            Some("x509: certificate has expired or is not yet valid")
        }
        rustls::Error::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            Some("x509: certificate has expired or is not yet valid")
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => Some("x509: certificate is not valid for the server name"),
        _ => None,
    };
    match words {
        Some(w) => format!("{w} ({err})"),
        None => err.to_string(),
    }
}

async fn readyz(sender: &mut SendRequest<Body>, target: &Target) -> Result<(), String> {
    let uri = Uri::builder()
        .scheme("https")
        .authority(target.authority.clone())
        .path_and_query("/readyz")
        .build()
        .map_err(|e| format!("readiness check: {e}"))?;
    let mut request = Request::builder().method(Method::GET).uri(uri);
    if let Some(alt_used) = &target.alt_used {
        request = request.header(crate::ALT_USED, alt_used.clone());
    }
    let request = request
        .body(Body::default())
        .map_err(|e| format!("readiness check: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("readiness check: {e}"))?;
    match response.status() {
        StatusCode::OK => Ok(()),
        status => Err(format!("not ready: /readyz answered {status}")),
    }
}
