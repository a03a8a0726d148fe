//! A stand-in Kubernetes API server.
//!
//! It terminates real TLS (tokio-rustls, ALPN `h2` and `http/1.1`), serves
//! HTTP/1.1 and HTTP/2, and answers like an API server where that matters to
//! apiway: health endpoints, `/version` (so `kubectl version` works), and for
//! every other path a JSON report of who answered and what the server saw
//! (SNI, ALPN, client certificate CN).
//!
//! Endpoints:
//!
//! | path | answer |
//! |---|---|
//! | `/livez`, `/healthz` | 200 `ok` |
//! | `/readyz` | 200 `ok`, or 503 after [`StandinServer::set_ready`]`(false)` |
//! | `/version` | Kubernetes-style version JSON (`gitVersion: v1.31.0-apiway-standin`) |
//! | `/stream?bytes=N` | N bytes; the byte at offset `i` is [`pattern_byte`]`(i)` |
//! | `/echo` (POST) | the request body, streamed back |
//! | `/api`, `/api/...`, `/apis`, `/apis/...` with [`StandinConfig::with_api_upstream`] | the upstream's answer, streamed (see [`crate::fixture_api`]) |
//! | `/apis`, `/apis/...` without an API upstream | 404, a Kubernetes `Status` (`NotFound`), as an API server answers for a group it does not serve |
//! | anything else | 200 JSON: `server`, `path`, `query`, `method`, `version`, `client_cn`, `client_organizations`, `sni`, `alpn`, `peer`, `authority` (HTTP/2 `:authority`, or an absolute-form URI's), `alt_used` (the `Alt-Used` header), `authorization` (the header, as sent: test credentials only) |
//!
//! Every response carries `x-apiway-standin: <name>`, and `Alt-Svc` when
//! configured ([`StandinAltSvc`]): a fixed value, or what an
//! [`Advertiser`] lists for the connection's client address, through
//! `apiway_advertise`'s `Alt-Svc` layer, so the stand-in advertises the way a
//! Rust API server using that layer would. [`StandinServer::set_ready`]
//! also marks the stand-in's own address (if advertised) ready or not, and
//! the next response shows it.
//!
//! [`StandinServer::shutdown`] behaves like a crash: the listening port closes
//! and every open connection is dropped without a goodbye.

mod body;
mod pattern;
mod routes;
mod upstream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use apiway_advertise::Address;
use apiway_advertise::{Advertiser, ClientAddress};
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::service::{service_fn, Service};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tower_layer::Layer;
use tracing::{debug, info, warn};

use crate::pki::{self, Ca, Issued, ALPN_H2, ALPN_HTTP11};
pub use pattern::pattern_byte;
use routes::ConnectionInfo;

/// A client that connects but never finishes the TLS handshake is dropped
/// after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a stand-in API server is set up.
#[derive(Clone, Debug)]
pub struct StandinConfig {
    /// Reported in every JSON answer and in the `x-apiway-standin` header, so
    /// a test can tell which backend answered.
    pub name: String,
    /// Where to listen; port 0 picks a free port (see [`StandinServer::addr`]).
    pub listen: SocketAddr,
    /// The serving certificate and key.
    pub server_cert: Issued,
    /// PEM of the CA(s) that sign client certificates. When set, a client
    /// certificate is required, which proves that whatever sits in between
    /// passed TLS through untouched.
    pub client_ca_pem: Option<String>,
    /// The `Alt-Svc` header of every response, if any.
    pub alt_svc: Option<StandinAltSvc>,
    /// `http://host:port` of a Kubernetes API (usually a
    /// [`FixtureApi`](crate::fixture_api::FixtureApi)) that answers every
    /// `/api`, `/api/...`, `/apis` and `/apis/...` request, streamed.
    pub api_upstream: Option<String>,
}

/// The `Alt-Svc` a stand-in sends.
#[derive(Clone, Debug)]
pub enum StandinAltSvc {
    /// This value on every response, as is: for tests that need a value
    /// no advertiser would render (invalid, odd parameters, other
    /// protocols).
    Fixed(String),
    /// What the advertiser lists for each client, computed per response:
    /// the handle can be shared with the test (or other stand-ins) and
    /// updated while serving.
    Advertised(Advertiser),
}

impl StandinConfig {
    /// A config with no client-certificate auth and no `Alt-Svc`.
    pub fn new(name: impl Into<String>, listen: SocketAddr, server_cert: Issued) -> Self {
        StandinConfig {
            name: name.into(),
            listen,
            server_cert,
            client_ca_pem: None,
            alt_svc: None,
            api_upstream: None,
        }
    }

    /// Forwards the Kubernetes API paths to `url` (`http://host:port`),
    /// like kube-apiserver in front of etcd: several stand-ins can share
    /// one store.
    pub fn with_api_upstream(mut self, url: impl Into<String>) -> Self {
        self.api_upstream = Some(url.into());
        self
    }

    /// Requires client certificates signed by `ca`.
    pub fn with_client_ca(mut self, ca: &Ca) -> Self {
        self.client_ca_pem = Some(ca.cert_pem().to_string());
        self
    }

    /// Adds `Alt-Svc: value` to every response.
    pub fn with_alt_svc(mut self, value: impl Into<String>) -> Self {
        self.alt_svc = Some(StandinAltSvc::Fixed(value.into()));
        self
    }

    /// Adds to every response the `Alt-Svc` value `advertiser` renders for
    /// the connection's client address.
    pub fn with_advertiser(mut self, advertiser: Advertiser) -> Self {
        self.alt_svc = Some(StandinAltSvc::Advertised(advertiser));
        self
    }

    /// Builds a config from PEM files, as a command-line entry point would.
    pub fn from_files(
        name: impl Into<String>,
        listen: SocketAddr,
        cert_path: &Path,
        key_path: &Path,
        client_ca_path: Option<&Path>,
    ) -> Result<Self> {
        let server_cert = Issued::from_files(cert_path, key_path)?;
        let client_ca_pem = match client_ca_path {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading client CA {}", path.display()))?,
            ),
            None => None,
        };
        Ok(StandinConfig {
            client_ca_pem,
            ..StandinConfig::new(name, listen, server_cert)
        })
    }
}

/// State shared by the handle, the accept loop and every connection.
struct Shared {
    name: String,
    name_header: HeaderValue,
    /// A fixed `Alt-Svc` value ([`StandinAltSvc::Fixed`]).
    alt_svc: Option<HeaderValue>,
    api_upstream: Option<http::uri::Authority>,
    /// [`StandinAltSvc::Advertised`].
    advertiser: Option<Advertiser>,
    ready: AtomicBool,
    requests: AtomicU64,
    open: AtomicUsize,
}

/// A running stand-in API server. Dropping it stops it (like
/// [`shutdown`](Self::shutdown), without waiting).
pub struct StandinServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for StandinServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandinServer")
            .field("name", &self.shared.name)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl StandinServer {
    /// Binds the listener and starts serving in the background.
    ///
    /// Must be called inside a tokio runtime. Fails if the address cannot be
    /// bound or the certificate, key or client CA do not parse.
    pub async fn start(config: StandinConfig) -> Result<StandinServer> {
        let tls = pki::server_config_from_pem(
            &config.server_cert,
            config.client_ca_pem.as_deref(),
            &[ALPN_H2, ALPN_HTTP11],
        )
        .with_context(|| format!("stand-in {:?}: TLS setup", config.name))?;
        let name_header = HeaderValue::from_str(&config.name).with_context(|| {
            format!(
                "stand-in name {:?} is not a valid header value",
                config.name
            )
        })?;
        let (alt_svc, advertiser) =
            match config.alt_svc {
                Some(StandinAltSvc::Fixed(value)) => (
                    Some(HeaderValue::from_str(&value).with_context(|| {
                        format!("Alt-Svc {value:?} is not a valid header value")
                    })?),
                    None,
                ),
                Some(StandinAltSvc::Advertised(advertiser)) => (None, Some(advertiser)),
                None => (None, None),
            };
        let api_upstream = match &config.api_upstream {
            Some(url) => Some(upstream::parse_upstream(url).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("stand-in {:?}: binding {}", config.name, config.listen))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: config.name,
            name_header,
            alt_svc,
            api_upstream,
            advertiser,
            ready: AtomicBool::new(true),
            requests: AtomicU64::new(0),
            open: AtomicUsize::new(0),
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            listener,
            TlsAcceptor::from(tls),
            shared.clone(),
            stop_rx,
        ));
        debug!(name = %shared.name, %addr, "stand-in API server listening");
        Ok(StandinServer {
            addr,
            shared,
            stop: Some(stop_tx),
            task,
        })
    }

    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Makes `/readyz` answer 200 (`true`) or 503 (`false`), and marks the
    /// stand-in's own address, where its advertiser lists it, ready or not.
    pub fn set_ready(&self, ready: bool) {
        self.shared.ready.store(ready, Ordering::SeqCst);
        if let Some(advertiser) = &self.shared.advertiser {
            advertiser.set_ready(&Address::from(self.addr), ready);
        }
    }

    /// The advertiser of [`StandinAltSvc::Advertised`], to change what is
    /// advertised while serving.
    pub fn advertiser(&self) -> Option<&Advertiser> {
        self.shared.advertiser.as_ref()
    }

    /// Number of HTTP requests received so far (all paths).
    pub fn requests_served(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Number of TCP connections currently open (TLS handshake or not).
    pub fn connections_open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Stops like a crash: closes the listening port and drops every open
    /// connection without a TLS close_notify or HTTP/2 GOAWAY. Returns once
    /// all of them are closed.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.task).await {
            if e.is_panic() {
                warn!(name = %self.shared.name, "stand-in accept loop panicked: {e}");
            }
        }
    }
}

impl Drop for StandinServer {
    fn drop(&mut self) {
        // Dropping the accept loop drops its JoinSet, which aborts every
        // connection task and so closes their sockets.
        self.task.abort();
    }
}

/// Runs a stand-in API server until the returned future is dropped; this is
/// the body of a command-line `standin` subcommand.
pub async fn serve_forever(config: StandinConfig) -> Result<()> {
    let server = StandinServer::start(config).await?;
    info!(name = %server.name(), addr = %server.addr(), "stand-in API server serving");
    std::future::pending::<()>().await;
    drop(server);
    Ok(())
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Counted before the task runs, uncounted when it ends or
                    // is aborted.
                    let open = OpenGuard::new(shared.clone());
                    let acceptor = acceptor.clone();
                    let shared = shared.clone();
                    connections.spawn(serve_connection(tcp, peer, acceptor, shared, open));
                }
                Err(e) => {
                    // Usually EMFILE: back off instead of spinning.
                    warn!(name = %shared.name, "stand-in accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
    debug!(name = %shared.name, "stand-in API server stopped");
}

/// Decrements the open-connection count however the connection ends,
/// including when its task is aborted.
struct OpenGuard(Arc<Shared>);

impl OpenGuard {
    fn new(shared: Arc<Shared>) -> Self {
        shared.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(shared)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    _open: OpenGuard,
) {
    let _ = tcp.set_nodelay(true);

    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            debug!(name = %shared.name, %peer, "TLS handshake failed: {e}");
            return;
        }
        Err(_) => {
            debug!(name = %shared.name, %peer, "TLS handshake timed out");
            return;
        }
    };
    let info = Arc::new(ConnectionInfo::from_tls(tls.get_ref().1, peer));

    let alpn = info.alpn.clone();
    let advertiser = shared.advertiser.clone();
    let routes = service_fn(move |req| routes::handle(req, shared.clone(), info.clone()));
    match advertiser {
        Some(advertiser) => {
            let with_alt_svc = advertiser.layer().layer(routes);
            let service = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ClientAddress::from(peer));
                with_alt_svc.call(req)
            });
            serve_http(tls, alpn.as_deref(), service, peer).await;
        }
        None => serve_http(tls, alpn.as_deref(), routes, peer).await,
    }
}

/// Serves HTTP/1.1 or HTTP/2 on an accepted TLS connection until it ends.
async fn serve_http<S>(tls: TlsStream<TcpStream>, alpn: Option<&str>, service: S, peer: SocketAddr)
where
    S: Service<Request<Incoming>, Response = Response<routes::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Trust ALPN when it was negotiated; sniff the preface otherwise.
    builder = match alpn {
        Some("h2") => builder.http2_only(),
        Some("http/1.1") => builder.http1_only(),
        _ => builder,
    };
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
        debug!(%peer, "stand-in connection ended with error: {e}");
    }
}
