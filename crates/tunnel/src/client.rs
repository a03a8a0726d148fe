//! The agent's side of the tunnel: a warm HTTP/2 connection to every tunnel
//! server of an endpoint set (DNS names expand to every address), and a
//! dial that opens one Proxy stream on the best server, failing over to
//! the others when a server is down, unreachable or draining.

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiway_core::endpoint::failover;
use apiway_core::endpoint::{Address, Endpoint, EndpointSet, Host};
use apiway_core::sync::lock;
use apiway_core::tls::TlsClientOptions;
use apiway_wire::tunnel::Frame;
use arc_swap::ArcSwap;
use http::Request;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::gauge::Gauge;
use rustls_pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use crate::grpc::{self, Inbound, Outbound, Side};
use crate::metrics::{PeerLabels, TunnelMetrics};
use crate::stream::TunnelStream;
use crate::tokens::TokenFile;

/// How the agent reaches its tunnel servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    /// CA that signs the servers' certificates, the agent's client
    /// certificate, and the server name to verify [default: each server's
    /// host].
    pub tls: TlsClientOptions,
    /// TCP, TLS and HTTP/2 handshake to one server.
    pub connect_timeout: Duration,
    /// From DIAL_REQ to DIAL_RSP; and how long a connection waits while no
    /// server is up.
    pub dial_timeout: Duration,
    /// HTTP/2 PING interval.
    pub keepalive_interval: Duration,
    /// PING answer timeout: then the server counts as dead.
    pub keepalive_timeout: Duration,
    /// A bearer token to send on every stream (a projected ServiceAccount
    /// token), re-read when the file changes.
    pub token_file: Option<std::path::PathBuf>,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            tls: TlsClientOptions::default(),
            connect_timeout: Duration::from_secs(2),
            dial_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(2),
            token_file: None,
        }
    }
}

/// Why a dial through the tunnel failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// No tunnel server could be reached.
    #[error("no tunnel server reachable: {0}")]
    Unavailable(apiway_core::dial::DialError),
    /// A server answered DIAL_RSP with an error (destination not allowed,
    /// dial failed): the same on every server, so not retried.
    #[error("the tunnel server {server} refused: {reason}")]
    Refused {
        /// The server.
        server: String,
        /// Its answer.
        reason: String,
    },
}

/// One server's connection state.
struct ServerConn {
    sender: Mutex<Option<SendRequest<Outbound>>>,
    connecting: tokio::sync::Mutex<()>,
    /// Consecutive failed connects, and when the next may start.
    backoff: Mutex<(u32, Instant)>,
    up: Gauge,
}

/// The agent's tunnel: servers, their connections, dials.
pub struct TunnelClient {
    servers: Arc<EndpointSet>,
    conns: Mutex<HashMap<String, Arc<ServerConn>>>,
    settings: ArcSwap<ClientSettings>,
    token: ArcSwap<Option<TokenFile>>,
    metrics: TunnelMetrics,
}

enum Failure {
    /// The server could not be used: try the next.
    Server(String),
    /// The server answered: done.
    Refused(String),
}

impl TunnelClient {
    /// A client of `servers`; [`keep_warm`](Self::keep_warm) starts the
    /// background connections.
    pub fn new(
        servers: Arc<EndpointSet>,
        settings: ClientSettings,
        metrics: TunnelMetrics,
    ) -> Arc<TunnelClient> {
        let token = settings.token_file.clone().map(TokenFile::new);
        Arc::new(TunnelClient {
            servers,
            conns: Mutex::new(HashMap::new()),
            settings: ArcSwap::from_pointee(settings),
            token: ArcSwap::from_pointee(token),
            metrics,
        })
    }

    /// The metrics (for the relay's byte counts and open streams).
    pub fn metrics(&self) -> &TunnelMetrics {
        &self.metrics
    }

    /// Replaces the settings (new connections use them).
    pub fn set_settings(&self, settings: ClientSettings) {
        let same_file = self
            .token
            .load()
            .as_ref()
            .as_ref()
            .map(|t| t.path().to_owned())
            == settings.token_file;
        if !same_file {
            self.token
                .store(Arc::new(settings.token_file.clone().map(TokenFile::new)));
        }
        self.settings.store(Arc::new(settings));
    }

    /// Keeps a connection to every server up (reconnecting with jittered
    /// backoff), so a dial never waits for a handshake, until `stop`.
    pub fn keep_warm(self: &Arc<Self>, stop: CancellationToken) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                {
                    let Some(this) = weak.upgrade() else { return };
                    let members = this.servers.members();
                    for endpoint in members.endpoints.iter() {
                        let state = this.state(endpoint.name());
                        if lock(&state.sender).as_ref().is_some_and(|s| !s.is_closed()) {
                            continue;
                        }
                        if lock(&state.backoff).1 > Instant::now() {
                            continue;
                        }
                        let this = this.clone();
                        let endpoint = endpoint.clone();
                        tokio::spawn(async move {
                            let _ = this.connection(&endpoint).await;
                        });
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        });
    }

    fn state(&self, name: &str) -> Arc<ServerConn> {
        lock(&self.conns)
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(ServerConn {
                    sender: Mutex::new(None),
                    connecting: tokio::sync::Mutex::new(()),
                    backoff: Mutex::new((0, Instant::now())),
                    up: self.metrics.tunnels.get_or_create_owned(&PeerLabels {
                        peer: name.to_owned(),
                    }),
                })
            })
            .clone()
    }

    /// The live connection to `endpoint`, made now if there is none.
    async fn connection(&self, endpoint: &Endpoint) -> Result<SendRequest<Outbound>, String> {
        let state = self.state(endpoint.name());
        let live = |state: &ServerConn| {
            lock(&state.sender)
                .as_ref()
                .filter(|s| !s.is_closed())
                .cloned()
        };
        if let Some(s) = live(&state) {
            return Ok(s);
        }
        let _connecting = state.connecting.lock().await;
        if let Some(s) = live(&state) {
            return Ok(s);
        }
        let settings = self.settings.load_full();
        match tokio::time::timeout(settings.connect_timeout, handshake(endpoint, &settings)).await {
            Ok(Ok((sender, conn))) => {
                *lock(&state.backoff) = (0, Instant::now());
                *lock(&state.sender) = Some(sender.clone());
                state.up.inc();
                let name = endpoint.name().to_owned();
                tracing::info!(server = %name, "tunnel server connected");
                let state2 = state.clone();
                tokio::spawn(async move {
                    let result = conn.await;
                    lock(&state2.sender).take();
                    state2.up.dec();
                    match result {
                        Ok(()) => tracing::info!(server = %name, "tunnel server connection closed"),
                        Err(e) => {
                            tracing::warn!(server = %name, "tunnel server connection lost: {e}")
                        }
                    }
                });
                Ok(sender)
            }
            Ok(Err(e)) => Err(self.failed_connect(&state, endpoint, e)),
            Err(_) => Err(self.failed_connect(
                &state,
                endpoint,
                format!(
                    "no TLS/HTTP/2 handshake within {:?}",
                    settings.connect_timeout
                ),
            )),
        }
    }

    fn failed_connect(&self, state: &ServerConn, endpoint: &Endpoint, e: String) -> String {
        let mut backoff = lock(&state.backoff);
        backoff.0 = backoff.0.saturating_add(1);
        // 100 ms doubling to 10 s, with ±50 % jitter: no reconnect storm
        // when a server comes back to a thousand agents.
        let base = Duration::from_millis(100).saturating_mul(1 << backoff.0.min(7));
        let base = base.min(Duration::from_secs(10));
        let jitter = 0.5 + fastrand::f64();
        backoff.1 = Instant::now() + base.mul_f64(jitter);
        if backoff.0 <= 1 {
            tracing::warn!(
                server = endpoint.name(),
                "cannot connect to the tunnel server: {e}"
            );
        } else {
            tracing::debug!(
                server = endpoint.name(),
                attempts = backoff.0,
                "cannot connect to the tunnel server: {e}"
            );
        }
        e
    }

    /// Opens a tunneled connection to `destination` (`host:port`, as the
    /// server's allowed destination names it). While no server is up it
    /// retries until the dial timeout.
    pub async fn dial(&self, destination: &str) -> Result<TunnelStream, DialError> {
        self.dial_via(&self.servers, destination).await
    }

    /// [`dial`](Self::dial) through the servers of `servers` (the set the
    /// connector seam hands in; connections are kept per server address).
    pub async fn dial_via(
        &self,
        servers: &EndpointSet,
        destination: &str,
    ) -> Result<TunnelStream, DialError> {
        let started = Instant::now();
        let settings = self.settings.load_full();
        let deadline = started + settings.dial_timeout;
        let settings = &*settings;
        let mut first_round = true;
        loop {
            let record = first_round;
            first_round = false;
            let reached = failover::attempt(servers, |endpoint| async move {
                let name = endpoint.name().to_owned();
                match self.open(&endpoint, destination, settings).await {
                    Ok(stream) => {
                        endpoint.record_connect_success();
                        ControlFlow::Break(Ok(stream))
                    }
                    Err(Failure::Refused(reason)) => ControlFlow::Break(Err(DialError::Refused {
                        server: name,
                        reason,
                    })),
                    Err(Failure::Server(e)) => {
                        // Once per dial: waiting for a server to come up
                        // is not a new failure every 100 ms.
                        if record {
                            endpoint.record_connect_failure(&servers.members().ejection);
                        }
                        ControlFlow::Continue((name, e))
                    }
                }
            })
            .await;
            match reached {
                Ok(r) => {
                    let result = r.value;
                    self.metrics.dial(match &result {
                        Ok(_) => "ok",
                        Err(_) => "refused",
                    });
                    if result.is_ok() {
                        self.metrics
                            .dial_seconds
                            .observe(started.elapsed().as_secs_f64());
                    }
                    return result;
                }
                Err(failures) => {
                    if Instant::now() + Duration::from_millis(100) >= deadline {
                        self.metrics.dial("failed");
                        let set = servers.name().to_owned();
                        return Err(DialError::Unavailable(if failures.is_empty() {
                            apiway_core::dial::DialError::NoEndpoints { set }
                        } else {
                            apiway_core::dial::DialError::AllFailed { set, failures }
                        }));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// One Proxy stream on `endpoint`'s connection: DIAL_REQ, DIAL_RSP.
    async fn open(
        &self,
        endpoint: &Endpoint,
        destination: &str,
        settings: &ClientSettings,
    ) -> Result<TunnelStream, Failure> {
        let mut sender = self.connection(endpoint).await.map_err(Failure::Server)?;
        let (tx, body) = grpc::outbound(Side::Client);
        let random = fastrand::i64(..);
        let dial = Frame::Dial {
            protocol: "tcp".into(),
            address: destination.to_owned(),
            random,
        };
        // Room for one message: this cannot wait.
        let _ = tx.try_send((dial.to_message(), None));
        let mut request = Request::post(format!("https://{}{}", endpoint.name(), grpc::PROXY_PATH));
        if let Some(file) = self.token.load().as_ref() {
            // A problem of this agent's: no other server would help.
            let token = file.token().map_err(Failure::Refused)?;
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .header(http::header::CONTENT_TYPE, grpc::CONTENT_TYPE)
            .header(http::header::TE, "trailers")
            .header(
                http::header::USER_AGENT,
                concat!("apiway/", env!("CARGO_PKG_VERSION")),
            )
            .body(body)
            .map_err(|e| Failure::Server(e.to_string()))?;
        let exchange = async {
            sender
                .ready()
                .await
                .map_err(|e| Failure::Server(format!("connection not usable: {e}")))?;
            let response = sender.send_request(request).await.map_err(|e| {
                // A GOAWAY (draining server) or a dead connection: the next
                // server takes the connection; drop this one.
                Failure::Server(format!("cannot open a stream: {e}"))
            })?;
            if let Some((code, message)) = grpc::status_of(response.headers()) {
                let what = match code {
                    16 => "unauthenticated",
                    12 => "not served",
                    _ => "refused",
                };
                return Err(Failure::Refused(format!(
                    "{what} (gRPC status {code}): {message}"
                )));
            }
            if response.status() != http::StatusCode::OK {
                return Err(Failure::Server(format!("HTTP {}", response.status())));
            }
            let mut inbound = Inbound::new(response.into_body(), true);
            match inbound.next().await {
                Some(Ok(Frame::Dialed {
                    result: Ok(connect_id),
                    ..
                })) => Ok((inbound, connect_id)),
                Some(Ok(Frame::Dialed {
                    result: Err(reason),
                    ..
                })) => Err(Failure::Refused(reason)),
                Some(Ok(other)) => Err(Failure::Server(format!(
                    "answered DIAL_REQ with {}",
                    crate::stream::kind(&other)
                ))),
                Some(Err(e)) => Err(Failure::Server(e.to_string())),
                None => Err(Failure::Server("the stream ended before DIAL_RSP".into())),
            }
        };
        match tokio::time::timeout(settings.dial_timeout, exchange).await {
            Ok(Ok((inbound, connect_id))) => Ok(TunnelStream::new(inbound, tx, connect_id)),
            Ok(Err(e)) => {
                if let Failure::Server(_) = e {
                    // Not this connection again.
                    if let Some(state) = lock(&self.conns).get(endpoint.name()) {
                        lock(&state.sender).take();
                    }
                }
                Err(e)
            }
            Err(_) => {
                // A hung server (PING has not caught it yet): dropping the
                // stream cancels the dial there, and the next server gets
                // the connection.
                if let Some(state) = lock(&self.conns).get(endpoint.name()) {
                    lock(&state.sender).take();
                }
                Err(Failure::Server(format!(
                    "no DIAL_RSP for {destination} within {:?}",
                    settings.dial_timeout
                )))
            }
        }
    }
}

/// The connector seam's tunnel: `connect` opens a Proxy stream to
/// `destination` on the best tunnel server of the set it is given, and
/// writes the client's early bytes into it.
pub struct TunnelConnector {
    /// The connections to the servers.
    pub client: Arc<TunnelClient>,
    /// `host:port` the server dials.
    pub destination: Arc<str>,
}

impl apiway_core::connector::Connector for TunnelConnector {
    type Output = TunnelStream;

    async fn connect<'a>(
        &'a self,
        set: &'a EndpointSet,
        _origin: impl FnOnce() -> Result<apiway_core::connector::Origin, String> + Send + 'a,
        early: &'a [u8],
    ) -> Result<TunnelStream, apiway_core::connector::ConnectorError> {
        use apiway_core::connector::ConnectorError;
        let mut stream =
            self.client
                .dial_via(set, &self.destination)
                .await
                .map_err(|e| match e {
                    DialError::Unavailable(d) => ConnectorError::Unavailable(d),
                    DialError::Refused { server, reason } => ConnectorError::Refused {
                        upstream: server,
                        authority: self.destination.to_string(),
                        reason,
                    },
                })?;
        if !early.is_empty() {
            use tokio::io::AsyncWriteExt;
            stream
                .write_all(early)
                .await
                .map_err(|e| ConnectorError::Preface(format!("writing into the tunnel: {e}")))?;
        }
        Ok(stream)
    }
}

type Connection = hyper::client::conn::http2::Connection<
    TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Outbound,
    TokioExecutor,
>;

/// TCP, TLS (ALPN h2, the agent's certificate) and the HTTP/2 handshake.
async fn handshake(
    endpoint: &Endpoint,
    settings: &ClientSettings,
) -> Result<(SendRequest<Outbound>, Connection), String> {
    let (tcp, _) =
        apiway_core::endpoint::failover::connect_endpoint(endpoint, settings.connect_timeout)
            .await?;
    let _ = tcp.set_nodelay(true);
    let config = apiway_core::tls::cached_client_config(&settings.tls, &[b"h2"])
        .map_err(|e| e.to_string())?;
    let name = match &settings.tls.server_name {
        Some(n) => n.clone(),
        None => match Address::parse(endpoint.name()) {
            Ok(Address {
                host: Host::Name(n),
                ..
            }) => n,
            Ok(Address {
                host: Host::Ip(ip), ..
            }) => ip.to_string(),
            Err(e) => return Err(e),
        },
    };
    let server_name = match name.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => {
            ServerName::try_from(name.clone()).map_err(|e| format!("server name {name}: {e}"))?
        }
    };
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(crate::config::STREAM_WINDOW)
        .initial_connection_window_size(crate::config::CONNECTION_WINDOW)
        .max_frame_size(64 * 1024)
        .keep_alive_interval(settings.keepalive_interval)
        .keep_alive_timeout(settings.keepalive_timeout)
        .keep_alive_while_idle(true);
    builder
        .handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP/2: {e}"))
}
