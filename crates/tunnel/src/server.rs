//! `apiway tunnel-server`: accepts agents over mutual TLS and HTTP/2, and
//! for each Proxy stream dials the destination the agent asks for, if it is
//! allowed for the agent's identity, then relays.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiway_core::config::Common;
use apiway_core::endpoint::{Address, EndpointSet};
use apiway_core::listener::{self, Slots};
use apiway_core::metrics::BackendMetrics;
use apiway_core::runtime::{Role, RoleContext};
use apiway_core::sync::lock;
use apiway_wire::tunnel::Frame;
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Destination, H2Settings, ServerSettings, Snapshot};
use crate::grpc::{self, Code, Inbound, Outbound, OutboundTx, Side};
use crate::identity::{self, ReloadingTls};
use crate::metrics::{PeerLabels, TunnelMetrics};
use crate::stream::{self, TunnelStream};
use crate::tokens::TokenAuth;

/// Time an agent has for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time from a stream's start to its DIAL_REQ.
const DIAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A destination with its live endpoint set.
struct Live {
    spec: Destination,
    set: Arc<EndpointSet>,
    stop: CancellationToken,
}

/// What the per-stream tasks read (swapped on reload).
struct Settings {
    destinations: Vec<Arc<Live>>,
    dial_timeout: Duration,
    relay: apiway_relay::RelayConfig,
}

struct Shared {
    settings: ArcSwap<Settings>,
    tls: Arc<ReloadingTls>,
    metrics: TunnelMetrics,
    next_id: AtomicI64,
    streams: Arc<Slots>,
    h2: H2Settings,
    drain: apiway_core::drain::Drain,
    tokens: Option<TokenAuth>,
}

/// The tunnel server role.
pub struct TunnelServer {
    shared: Arc<Shared>,
    listen: SocketAddr,
    backend_metrics: BackendMetrics,
    stop: CancellationToken,
    /// Serializes set building in `apply` with the running sets.
    sets: Mutex<()>,
}

impl Role for TunnelServer {
    const NAME: &'static str = "tunnel-server";
    type Spec = ServerSettings;
    type Snapshot = Snapshot;

    fn validate(spec: ServerSettings) -> Result<Snapshot, String> {
        config::build(spec)
    }

    fn common(snapshot: &Snapshot) -> Common {
        snapshot.common
    }

    fn fixed(snapshot: &Snapshot) -> Vec<(&'static str, String)> {
        vec![
            ("listen", snapshot.listen.to_string()),
            ("cert / key / client_ca", format!("{:?}", snapshot.tls)),
            ("keepalive", format!("{:?}", snapshot.h2)),
            ("token_review", format!("{:?}", snapshot.tokens)),
        ]
    }

    fn max_connections(snapshot: &Snapshot) -> Option<u64> {
        Some(snapshot.max_connections as u64)
    }

    fn start(
        snapshot: Snapshot,
        context: &RoleContext,
        registry: &mut Registry,
    ) -> anyhow::Result<Arc<TunnelServer>> {
        let socket =
            listener::bind(snapshot.listen).map_err(|e| anyhow::anyhow!("--listen {e}"))?;
        let listen = socket.local_addr()?;
        let tls = ReloadingTls::new(&snapshot.tls, snapshot.tokens.is_some())
            .map_err(anyhow::Error::msg)?;
        tls.watch(
            snapshot.tls.clone(),
            snapshot.common.reload_interval,
            context.stop.clone(),
        );
        let metrics = TunnelMetrics::default();
        metrics.register(registry);
        let backend_metrics = BackendMetrics::default();
        backend_metrics.register(registry);
        let server = Arc::new(TunnelServer {
            shared: Arc::new(Shared {
                settings: ArcSwap::from_pointee(Settings {
                    destinations: Vec::new(),
                    dial_timeout: snapshot.dial_timeout,
                    relay: snapshot.relay.clone(),
                }),
                tls,
                metrics,
                next_id: AtomicI64::new(1),
                streams: Slots::new(snapshot.max_connections),
                h2: snapshot.h2,
                drain: context.drain.clone(),
                tokens: snapshot.tokens.clone().map(TokenAuth::new),
            }),
            listen,
            backend_metrics,
            stop: context.stop.clone(),
            sets: Mutex::new(()),
        });
        server.apply_settings(&snapshot);
        tracing::info!(address = %listen, destinations = snapshot.destinations.len(), "listening for agents");
        if snapshot.destinations.is_empty() {
            tracing::warn!("no --allowed-destination: every dial will be refused");
        }
        let shared = server.shared.clone();
        // Agent connections are few and long-lived; the limit that
        // matters is on streams (--max-connections).
        let agents = Slots::new(usize::MAX / 2);
        tokio::spawn(listener::accept_loop(
            socket,
            agents,
            context.drain.clone(),
            context.stop.clone(),
            |_| {},
            move |tcp, peer, slot| {
                let shared = shared.clone();
                async move {
                    let _slot = slot;
                    serve_agent(shared, tcp, peer).await;
                }
            },
        ));
        Ok(server)
    }

    fn apply(self: &Arc<Self>, snapshot: Snapshot) -> Result<(), String> {
        self.apply_settings(&snapshot);
        self.shared.streams.set_max(snapshot.max_connections);
        Ok(())
    }

    fn listeners(&self) -> Vec<(String, SocketAddr)> {
        vec![("tunnel".into(), self.listen)]
    }
}

impl TunnelServer {
    /// Builds or updates the destinations' endpoint sets; a destination
    /// that stays keeps its set (health, ejections); one that goes stops
    /// its checks, while its open connections carry on.
    fn apply_settings(&self, snapshot: &Snapshot) {
        let _guard = lock(&self.sets);
        let old = self.shared.settings.load_full();
        let mut destinations = Vec::new();
        for spec in &snapshot.destinations {
            let live = match old
                .destinations
                .iter()
                .find(|l| l.spec.address == spec.address)
            {
                Some(l) => {
                    if l.spec.set != spec.set {
                        l.set.apply(&spec.set);
                    }
                    Arc::new(Live {
                        spec: spec.clone(),
                        set: l.set.clone(),
                        stop: l.stop.clone(),
                    })
                }
                None => {
                    let set = EndpointSet::new(
                        &spec.address.to_string(),
                        &spec.set,
                        self.backend_metrics.clone(),
                    );
                    let stop = self.stop.child_token();
                    apiway_core::endpoint::checker::spawn_checker(&set, stop.clone());
                    apiway_core::endpoint::checker::spawn_resolver(
                        &set,
                        spec.set.clone(),
                        apiway_core::endpoint::check::DNS_REFRESH,
                        stop.clone(),
                    );
                    Arc::new(Live {
                        spec: spec.clone(),
                        set,
                        stop,
                    })
                }
            };
            destinations.push(live);
        }
        for l in &old.destinations {
            if !destinations
                .iter()
                .any(|d| d.spec.address == l.spec.address)
            {
                l.stop.cancel();
            }
        }
        self.shared.settings.store(Arc::new(Settings {
            destinations,
            dial_timeout: snapshot.dial_timeout,
            relay: snapshot.relay.clone(),
        }));
    }
}

/// Why a TLS handshake failed, as a metric label.
fn handshake_failure(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError, Error};
    match e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
        Some(Error::NoCertificatesPresented) => "no_certificate",
        Some(Error::InvalidCertificate(CertificateError::Expired))
        | Some(Error::InvalidCertificate(CertificateError::ExpiredContext { .. })) => {
            "expired_certificate"
        }
        Some(Error::InvalidCertificate(CertificateError::NotValidYet))
        | Some(Error::InvalidCertificate(CertificateError::NotValidYetContext { .. })) => {
            "certificate_not_valid_yet"
        }
        Some(Error::InvalidCertificate(CertificateError::Revoked)) => "revoked_certificate",
        Some(Error::InvalidCertificate(_)) => "untrusted_certificate",
        _ => "tls_handshake",
    }
}

/// One agent connection: TLS, its identity, then HTTP/2 until it ends or
/// the server drains (GOAWAY; open streams finish).
async fn serve_agent(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(shared.tls.current());
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            let reason = handshake_failure(&e);
            shared.metrics.auth_failure(reason);
            tracing::warn!(%peer, reason, "agent refused: TLS handshake failed: {e}");
            return;
        }
        Err(_) => {
            shared.metrics.auth_failure("handshake_timeout");
            tracing::warn!(%peer, "agent refused: no TLS handshake within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    // The certificate's identity; without a certificate (allowed only
    // with --token-review) each stream brings a token.
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
    let identity: Option<Arc<str>> = match cert {
        Some(cert) => match identity::of_certificate(cert) {
            Some(id) => Some(id.into()),
            None => {
                shared.metrics.auth_failure("no_identity");
                tracing::warn!(%peer, "agent refused: its certificate names no subject CN or SAN");
                return;
            }
        },
        None => None,
    };
    let shown = identity
        .as_deref()
        .unwrap_or("(token per stream)")
        .to_owned();
    let up = identity.as_ref().map(|id| {
        let g = shared.metrics.tunnels.get_or_create_owned(&PeerLabels {
            peer: id.to_string(),
        });
        g.inc();
        g
    });
    tracing::info!(%peer, identity = %shown, "agent connected");
    let service = {
        let shared = shared.clone();
        let identity = identity.clone();
        hyper::service::service_fn(move |req| {
            let shared = shared.clone();
            let identity = identity.clone();
            async move { Ok::<_, Infallible>(handle(shared, identity, req).await) }
        })
    };
    let h2 = shared.h2;
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(h2.stream_window)
        .initial_connection_window_size(h2.connection_window)
        .max_frame_size(64 * 1024)
        .keep_alive_interval(h2.keepalive_interval)
        .keep_alive_timeout(h2.keepalive_timeout)
        .max_concurrent_streams(100_000);
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shared.drain.stop_accepting().cancelled() => {
            // GOAWAY: the agent opens new streams elsewhere; the open ones
            // finish (or the grace period ends them).
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Some(up) = up {
        up.dec();
    }
    match result {
        Ok(()) => tracing::info!(%peer, identity = %shown, "agent disconnected"),
        Err(e) => tracing::info!(%peer, identity = %shown, "agent connection ended: {e}"),
    }
}

type Answer = Response<Either<Outbound, Empty<Bytes>>>;

/// A trailers-only answer: the status in the headers, no body.
fn refuse(code: Code, message: &str) -> Answer {
    let mut r = Response::new(Either::Right(Empty::new()));
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, grpc::CONTENT_TYPE);
    r.headers_mut().extend(grpc::status_headers(code, message));
    r
}

/// The bearer token of a request, if it has one.
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn handle(shared: Arc<Shared>, cert: Option<Arc<str>>, req: Request<Incoming>) -> Answer {
    if req.uri().path() != grpc::PROXY_PATH {
        return refuse(
            Code::Unimplemented,
            &format!(
                "{} is not served here; the tunnel serves {}",
                req.uri().path(),
                grpc::PROXY_PATH
            ),
        );
    }
    let grpc_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "application/grpc" || v.starts_with("application/grpc+proto"));
    if req.method() != http::Method::POST || !grpc_type {
        return refuse(
            Code::InvalidArgument,
            "a Proxy call is a POST of application/grpc",
        );
    }
    // The certificate's identity, else the token's.
    let identity = match (cert, bearer(req.headers()), &shared.tokens) {
        (Some(id), _, _) => id,
        (None, Some(token), Some(tokens)) => match tokens.check(token).await {
            Ok(id) => id,
            Err((reason, why)) => {
                shared.metrics.auth_failure(reason);
                tracing::warn!(reason, "stream refused: {why}");
                return refuse(Code::Unauthenticated, &why);
            }
        },
        (None, _, _) => {
            shared.metrics.auth_failure("no_credentials");
            return refuse(
                Code::Unauthenticated,
                "no credentials: present a client certificate or an Authorization: Bearer token",
            );
        }
    };
    let (tx, body) = grpc::outbound(Side::Server);
    let inbound = Inbound::new(req.into_body(), false);
    tokio::spawn(serve_stream(shared, identity, inbound, tx));
    let mut r = Response::new(Either::Left(body));
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, grpc::CONTENT_TYPE);
    r
}

/// Aborts a stream before any dial: an ABORTED status with `why`.
fn abort(tx: OutboundTx, why: String) {
    tx.abort(why);
}

/// Answers DIAL_REQ with an error, then ends the stream.
async fn answer_error(tx: OutboundTx, random: i64, error: String) {
    let _ = tx
        .send((
            Frame::Dialed {
                result: Err(error),
                random,
            }
            .to_message(),
            None,
        ))
        .await;
}

/// What the relay phase of a stream holds: the destination socket, the
/// stream, and what is released when it ends.
struct Dialed {
    tcp: TcpStream,
    tunnel: TunnelStream,
    relay: apiway_relay::RelayConfig,
    _lease: apiway_core::endpoint::Lease,
    _slot: apiway_core::listener::Slot,
}

/// One Proxy stream: DIAL_REQ, the dial, DIAL_RSP, then the relay. The dial
/// phase is boxed and freed before the relay, so that an idle connection
/// holds only what the relay needs.
async fn serve_stream(
    shared: Arc<Shared>,
    identity: Arc<str>,
    inbound: Inbound<Incoming>,
    tx: OutboundTx,
) {
    let Some(mut d) = Box::pin(dial_phase(&shared, &identity, inbound, tx)).await else {
        return;
    };
    let m = &shared.metrics;
    m.open.inc();
    let outcome = stream::splice(d.tcp, &mut d.tunnel, &d.relay, m.observer()).await;
    let connect_id = d.tunnel.connect_id();
    if d.tunnel.close_requested() {
        let _ = d
            .tunnel
            .send(Frame::Closed {
                connect_id,
                error: None,
            })
            .await;
    }
    m.open.dec();
    tracing::debug!(%identity, connect_id, ?outcome, "connection closed");
}

/// DIAL_REQ, the checks, the dial and DIAL_RSP; `None` when the stream
/// ends there (answered, refused or abandoned).
async fn dial_phase(
    shared: &Shared,
    identity: &str,
    mut inbound: Inbound<Incoming>,
    tx: OutboundTx,
) -> Option<Dialed> {
    let m = &shared.metrics;
    // Every early end answers (or aborts) and yields no relay.
    macro_rules! end {
        ($e:expr) => {{
            $e;
            return None;
        }};
    }
    let (protocol, address, random) =
        match tokio::time::timeout(DIAL_REQUEST_TIMEOUT, inbound.next()).await {
            Ok(Some(Ok(Frame::Dial {
                protocol,
                address,
                random,
            }))) => (protocol, address, random),
            Ok(Some(Ok(other))) => end!(abort(
                tx,
                format!(
                    "a stream starts with DIAL_REQ, not {}",
                    stream::kind(&other)
                ),
            )),
            Ok(Some(Err(e))) => end!(abort(tx, format!("bad first message: {e}"))),
            Ok(None) => return None,
            Err(_) => end!(abort(
                tx,
                format!("no DIAL_REQ within {DIAL_REQUEST_TIMEOUT:?}")
            )),
        };
    let started = Instant::now();
    let refuse = |why: String| {
        m.dial("refused");
        tracing::warn!(%identity, destination = %address, "dial refused: {why}");
        why
    };
    if protocol != "tcp" {
        let why = refuse(format!("protocol `{protocol}` is not served; only tcp"));
        end!(answer_error(tx, random, why).await);
    }
    let settings = shared.settings.load_full();
    let destination = Address::parse(&address).ok().and_then(|a| {
        settings
            .destinations
            .iter()
            .find(|d| d.spec.address == a)
            .cloned()
    });
    let Some(destination) = destination else {
        let why = refuse(format!(
            "destination {address} is not allowed (not an --allowed-destination of this tunnel server)"
        ));
        end!(answer_error(tx, random, why).await);
    };
    if !destination.spec.allows(identity) {
        let why = refuse(format!(
            "destination {address} is not allowed for agent `{identity}`"
        ));
        end!(answer_error(tx, random, why).await);
    }
    let Some(slot) = shared.streams.try_take() else {
        m.dial("failed");
        let why = "the tunnel server is at its --max-connections limit".to_owned();
        tracing::warn!(%identity, destination = %address, "{why}");
        end!(answer_error(tx, random, why).await);
    };

    // The dial, cancelled when the agent gives up (DIAL_CLS or a reset).
    let dial = tokio::time::timeout(
        settings.dial_timeout,
        apiway_core::dial::connect(&destination.set, settings.dial_timeout),
    );
    tokio::pin!(dial);
    let mut sent_everything = false;
    let dialed = loop {
        tokio::select! {
            r = &mut dial => break Some(r),
            f = inbound.next(), if !sent_everything => match f {
                None => sent_everything = true,
                Some(Ok(Frame::CancelDial { .. })) | Some(Err(_)) => break None,
                Some(Ok(other)) => {
                    end!(abort(tx, format!("{} before DIAL_RSP", stream::kind(&other))));
                }
            }
        }
    };
    let connected = match dialed {
        None => {
            m.dial("cancelled");
            tracing::debug!(%identity, destination = %address, "dial cancelled by the agent");
            return None;
        }
        Some(Err(_)) => {
            m.dial("timeout");
            let why = format!("dial {address} timed out after {:?}", settings.dial_timeout);
            tracing::warn!(%identity, "{why}");
            end!(answer_error(tx, random, why).await);
        }
        Some(Ok(Err(e))) => {
            m.dial("failed");
            let why = format!("dial {address}: {e}");
            tracing::warn!(%identity, "{why}");
            end!(answer_error(tx, random, why).await);
        }
        Some(Ok(Ok(c))) => c,
    };
    let connect_id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    if tx
        .send((
            Frame::Dialed {
                result: Ok(connect_id),
                random,
            }
            .to_message(),
            None,
        ))
        .await
        .is_err()
    {
        m.dial("cancelled");
        return None;
    }
    m.dial("ok");
    m.dial_seconds.observe(started.elapsed().as_secs_f64());
    tracing::debug!(%identity, destination = %address, backend = %connected.peer, connect_id, "dialed");
    let apiway_core::dial::Connected {
        stream: tcp, lease, ..
    } = connected;
    Some(Dialed {
        tcp,
        tunnel: TunnelStream::new(inbound, tx, connect_id),
        relay: settings.relay.clone(),
        _lease: lease,
        _slot: slot,
    })
}
