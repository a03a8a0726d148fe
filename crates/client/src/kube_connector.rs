//! The HTTP/1.1 path for kube-rs (feature `kube`): a dialer under kube's
//! own client stack, so kube does TLS, HTTP/1.1, authentication and
//! upgrades while the [`Client`] picks the endpoint.
//!
//! [`KubeConnector`] is a `tower::Service<http::Uri>` that shares the
//! client's endpoint choice, blocks and metrics: each new connection goes
//! to the best endpoint's TCP address, and to the next one when the
//! connect fails (nothing was sent yet, so moving on is always safe).
//! kube's `rustls_https_connector_with_connector` puts TLS on top;
//! [`Client::http1_kube_client`] builds the whole `kube::Client` in one
//! call:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use apiway_client::{Client, ClientConfig};
//!
//! let kube_config = kube::Config::infer().await?;
//! let config = ClientConfig::from_kube_config(&kube_config)?
//!     .with_alternative_hosts("10.0.0.11, 10.0.0.12")?;
//! let client = Client::new(config)?;
//! let kube = client.http1_kube_client(&kube_config)?;
//! let version = kube.apiserver_version().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it differs from the HTTP/2 path ([`crate::kube_service`])
//!
//! - TLS is kube's: the server name is the cluster URL's host (or
//!   `tls_server_name`) on every endpoint, so every endpoint's certificate
//!   must carry that name; `kubernetes.default` is not used. A certificate
//!   error is seen above the dialer: the endpoint is blocked only for the
//!   block period (the connection closes before the server's answer is
//!   read, see below), never for good.
//! - No `/readyz` check before a new connection carries requests: a server
//!   that is up but not ready gets them.
//! - No HTTP/2 PING: a server that hangs on an open connection is noticed
//!   only by kube's read timeout (`kube::Config::read_timeout`), and the
//!   requests on it fail then. A server that hangs before answering a new
//!   connection's TLS handshake is noticed by kube's connect timeout and
//!   blocked.
//! - Requests are not repeated on another endpoint: a request whose
//!   connection fails returns kube's error (a watcher starts again).
//! - An endpoint is in use once it sends its first byte on a new
//!   connection. It is blocked for the block period when its connect
//!   fails (`connect`), when reading fails (`read`, e.g. a reset), and when
//!   a connection is dropped while bytes written to it wait for an answer:
//!   before the server sent anything (`silent`: a hung TLS handshake cut
//!   by kube's connect timeout, or a refused certificate) or after
//!   (`unanswered`: a hung request cut by kube's read timeout, or a
//!   caller that gave up on a request, which blocks a healthy endpoint
//!   for a while). So after a hang, the request that was waiting fails,
//!   and the next connection goes elsewhere.
//! - `Alt-Svc` is learned from every response kube receives.
//! - What works only here: kube's auth layers (token file re-reads, exec
//!   plugins, auth providers), impersonation and the HTTP/1.1 upgrades of
//!   `exec`, `attach` and `port-forward`.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use apiway_core::endpoint::choice::Failure;
use apiway_core::endpoint::failover::{self, connect_address, Reached};
use apiway_core::endpoint::{Address, Host};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower::{BoxError, ServiceBuilder};

use crate::{Client, Error};

/// Dials the [`Client`]'s best endpoint over TCP for kube's HTTP/1.1
/// stack; made by [`Client::kube_connector`]. The URI it is called with is
/// not used: every connection is to one of the client's endpoints.
#[derive(Clone, Debug)]
pub struct KubeConnector {
    client: Client,
}

/// A TCP connection to one endpoint that tells the [`Client`] how the
/// endpoint did: answered (its first byte), failed (a read error), or went
/// silent (closed before it sent a byte).
#[derive(Debug)]
pub struct EndpointStream {
    tcp: TcpStream,
    report: Report,
}

#[derive(Debug)]
struct Report {
    client: Client,
    endpoint: Address,
    /// An earlier connect of the same dial failed.
    failed_over: Option<&'static str>,
    /// The endpoint has sent a byte.
    answered: bool,
    /// Bytes were written since the endpoint last sent one: a request (or
    /// the TLS ClientHello) waits for its answer.
    awaiting: bool,
    /// `awaiting` before the last write.
    awaiting_before_write: bool,
    /// Nothing more to report: a failure was recorded, or the server
    /// closed the connection.
    settled: bool,
}

impl Report {
    fn read(&mut self, bytes: usize) {
        if bytes == 0 {
            // End of stream: the server closed the connection, which says
            // nothing yet (a killed server's next connect is refused).
            self.settled = true;
            return;
        }
        self.awaiting = false;
        if !std::mem::replace(&mut self.answered, true) {
            self.client.record_success(&self.endpoint, self.failed_over);
        }
    }

    fn wrote(&mut self, bytes: usize) {
        if bytes > 0 {
            self.awaiting_before_write = self.awaiting;
            self.awaiting = true;
        }
    }

    /// The connection is being shut down. TLS writes its close_notify
    /// just before: that last write waits for no answer, so it is undone.
    fn closing(&mut self) {
        self.awaiting = self.awaiting_before_write;
    }

    fn failed(&mut self, kind: &'static str, reason: &str) {
        if !std::mem::replace(&mut self.settled, true) {
            self.client
                .fail(&self.endpoint, Failure::Network, kind, reason);
        }
    }
}

impl Drop for EndpointStream {
    fn drop(&mut self) {
        // Dropped while waiting for the server: kube's connect timeout
        // during a hung TLS handshake, its read timeout on a hung request,
        // or a caller that gave up; the next connection should go
        // elsewhere.
        if !self.report.awaiting {
            return;
        }
        if self.report.answered {
            self.report.failed(
                "unanswered",
                "the connection closed while a request waited for its answer",
            );
        } else {
            self.report.failed(
                "silent",
                "the connection closed before the server sent anything",
            );
        }
    }
}

impl AsyncRead for EndpointStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining();
        let result = Pin::new(&mut self.tcp).poll_read(cx, buf);
        match &result {
            Poll::Ready(Ok(())) => {
                let bytes = buf.filled().len() - before;
                // Nothing read into an empty buffer is no end of stream.
                if room > 0 {
                    self.report.read(bytes);
                }
            }
            Poll::Ready(Err(e)) => self.report.failed("read", &e.to_string()),
            Poll::Pending => {}
        }
        result
    }
}

impl AsyncWrite for EndpointStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = result {
            self.report.wrote(written);
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.report.closing();
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = result {
            self.report.wrote(written);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

impl Connection for EndpointStream {
    fn connected(&self) -> Connected {
        self.tcp.connected()
    }
}

impl EndpointStream {
    /// The endpoint this connection goes to, `host:port`.
    pub fn endpoint(&self) -> String {
        self.report.endpoint.to_string()
    }
}

impl Client {
    /// The HTTP/1.1 dialer for kube's own stack; see [`crate::kube_connector`].
    pub fn kube_connector(&self) -> KubeConnector {
        KubeConnector {
            client: self.clone(),
        }
    }

    /// A `kube::Client` over kube's own HTTP/1.1 stack with
    /// [`kube_connector`](Self::kube_connector) underneath: kube's TLS
    /// (from `config`), its connect, read and write timeouts, base URI,
    /// auth and extra-header layers, as kube builds them itself, plus
    /// learning `Alt-Svc` from responses. `config.cluster_url` must be this
    /// client's origin.
    pub fn http1_kube_client(&self, config: &kube::Config) -> Result<kube::Client, Error> {
        self.check_cluster_url(&config.cluster_url)?;
        let kube_error = |e: kube::Error| Error::KubeConfig(e.to_string());
        let https = config
            .rustls_https_connector_with_connector(self.kube_connector())
            .map_err(kube_error)?;
        let mut timeouts = hyper_timeout::TimeoutConnector::new(https);
        timeouts.set_connect_timeout(config.connect_timeout);
        timeouts.set_read_timeout(config.read_timeout);
        timeouts.set_write_timeout(config.write_timeout);
        timeouts.set_reset_reader_on_write(config.reset_reader_on_write);
        let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(timeouts);
        let learner = self.clone();
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(kube_error)?)
            .layer(config.extra_headers_layer().map_err(kube_error)?)
            .map_err(BoxError::from)
            .map_response(move |response: http::Response<hyper::body::Incoming>| {
                learner.learn_alternatives(response.headers());
                response
            })
            .service(http);
        Ok(kube::Client::new(service, config.default_namespace.clone()))
    }

    /// `cluster_url` names this client's origin.
    fn check_cluster_url(&self, cluster_url: &http::Uri) -> Result<(), Error> {
        let origin = &self.config().origin;
        let authority = cluster_url.authority();
        let host = authority.map(|a| a.host().trim_start_matches('[').trim_end_matches(']'));
        let port = authority.and_then(|a| a.port_u16()).unwrap_or(443);
        let same_host = match (&origin.host, host) {
            (Host::Ip(ip), Some(host)) => host.parse() == Ok(*ip),
            (Host::Name(name), Some(host)) => name.eq_ignore_ascii_case(host),
            (_, None) => false,
        };
        if same_host && port == origin.port {
            Ok(())
        } else {
            Err(Error::KubeConfig(format!(
                "cluster URL {cluster_url} is not the client's origin {origin}"
            )))
        }
    }
}

impl tower_service::Service<http::Uri> for KubeConnector {
    type Response = TokioIo<EndpointStream>;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let timeout = client.config().connect_timeout;
            let client = &client;
            // Nothing was sent yet, so moving on after a failed connect is
            // always safe.
            let reached = failover::attempt(client, |key| async move {
                match connect_address(&key, timeout).await {
                    Ok((tcp, peer)) => ControlFlow::Break((tcp, peer, key)),
                    Err(reason) => ControlFlow::Continue(client.fail(
                        &key,
                        Failure::Network,
                        "connect",
                        &reason,
                    )),
                }
            })
            .await;
            let Reached {
                value: (tcp, peer, key),
                failures,
            } = reached.map_err(|attempts| Error::Unreachable { attempts })?;
            let _ = tcp.set_nodelay(true);
            tracing::debug!(endpoint = %key, %peer, "connected (HTTP/1.1 path)");
            Ok(TokioIo::new(EndpointStream {
                tcp,
                report: Report {
                    client: client.clone(),
                    endpoint: key,
                    failed_over: failures.last().map(|a| a.kind),
                    answered: false,
                    awaiting: false,
                    awaiting_before_write: false,
                    settled: false,
                },
            }))
        })
    }
}
