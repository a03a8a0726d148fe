//! The admin endpoint every long-running role serves.
//!
//! - `/healthz`: should a load balancer send *new* connections here? 503
//!   while draining or while any reason not to is set (KEP-3836: the node is
//!   being deleted or tainted for scale-down). Established connections are
//!   unaffected.
//! - `/livez`: is the data plane programmed (listeners bound, config loaded)?
//! - `/readyz`: can this instance serve now?
//! - `/metrics`: Prometheus text format.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// Health verdicts the admin endpoint serves.
#[derive(Debug)]
pub struct Health {
    draining: AtomicBool,
    live: AtomicBool,
    ready: AtomicBool,
    /// Whether every configuration source has had its first complete
    /// read (a Kubernetes source: its first full sync).
    synced: AtomicBool,
    /// When the data plane was last programmed (started, or a
    /// configuration applied): `lastUpdated` in the bodies.
    updated: Mutex<SystemTime>,
    /// What the role knows about its Node; `None` when node-unaware.
    node: Mutex<Option<NodeView>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            draining: AtomicBool::new(false),
            live: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            synced: AtomicBool::new(true),
            updated: Mutex::new(SystemTime::now()),
            node: Mutex::new(None),
        }
    }
}

/// The Node as the admin endpoint reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// Whether the load balancer should send new connections here.
    pub eligible: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// When the last Node event arrived; `None` before the first.
    pub last_event: Option<SystemTime>,
}

impl Health {
    /// A new verdict set: not live, not ready, not draining.
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// Starts draining: `/healthz` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether draining has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Sets the `/livez` verdict.
    pub fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::SeqCst);
    }

    /// Sets the `/readyz` verdict.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Sets whether every configuration source has synced; `/readyz`
    /// fails until it has.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::SeqCst);
    }

    /// The `/readyz` verdict: the role is ready and its sources synced.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && self.synced.load(Ordering::SeqCst)
    }

    /// Records that the data plane was just programmed.
    pub fn mark_updated(&self) {
        *lock(&self.updated) = SystemTime::now();
    }

    /// Sets what is known of the Node (the role becomes node-aware).
    pub fn set_node(&self, view: NodeView) {
        *lock(&self.node) = Some(view);
    }

    /// What is known of the Node; `None` when node-unaware.
    pub fn node(&self) -> Option<NodeView> {
        lock(&self.node).clone()
    }

    /// `/healthz`: 503 while draining or while the Node is not eligible;
    /// the body is kube-proxy's (`lastUpdated`, `currentTime`,
    /// `nodeEligible` when node-aware) plus, when failing, `reason`.
    fn healthz(&self) -> (StatusCode, String) {
        let node = self.node();
        let eligible = node.as_ref().map(|n| n.eligible);
        let reason = if self.is_draining() {
            Some("draining".to_owned())
        } else {
            node.and_then(|n| n.reason)
                .filter(|_| eligible == Some(false))
        };
        let mut body = self.times();
        if let Some(eligible) = eligible {
            body.insert("nodeEligible".into(), serde_json::Value::Bool(eligible));
        }
        let status = match reason {
            None => StatusCode::OK,
            Some(reason) => {
                body.insert("reason".into(), serde_json::Value::String(reason));
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        (status, json_line(body))
    }

    /// `/livez`: 200 while the data plane is programmed; ignores the Node.
    fn livez(&self) -> (StatusCode, String) {
        let status = if self.live.load(Ordering::SeqCst) {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, json_line(self.times()))
    }

    fn times(&self) -> serde_json::Map<String, serde_json::Value> {
        let updated = *lock(&self.updated);
        let mut body = serde_json::Map::new();
        body.insert("lastUpdated".into(), rfc3339(updated).into());
        body.insert("currentTime".into(), rfc3339(SystemTime::now()).into());
        body
    }
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

fn json_line(body: serde_json::Map<String, serde_json::Value>) -> String {
    let mut text = serde_json::Value::Object(body).to_string();
    text.push('\n');
    text
}

const JSON: &str = "application/json";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: u16,
}

/// `apiway_healthz_total{code}` and `apiway_livez_total{code}`, as
/// kube-proxy counts its answers; the series of 200 and 503 exist from
/// the start.
#[derive(Clone, Debug, Default)]
struct AnswerMetrics {
    healthz: Family<CodeLabels, Counter>,
    livez: Family<CodeLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    path: &'static str,
    code: u16,
}

/// A bound admin server.
pub struct AdminServer {
    listener: TcpListener,
    health: Arc<Health>,
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    answers: AnswerMetrics,
    /// One permit per open connection.
    slots: Arc<tokio::sync::Semaphore>,
    refused: Counter,
}

/// How long one admin connection may stay open, however busy: scrapers
/// reconnect, and an idle or slow client cannot hold a slot for long.
const ADMIN_CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

impl AdminServer {
    /// Registers the admin server's own metrics; call before freezing the registry.
    pub fn register_metrics(registry: &mut Registry) -> AdminMetrics {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admin_requests",
            "Admin endpoint requests by path and status code",
            requests.clone(),
        );
        let answers = AnswerMetrics::default();
        for code in [200, 503] {
            let _ = answers.healthz.get_or_create(&CodeLabels { code });
            let _ = answers.livez.get_or_create(&CodeLabels { code });
        }
        registry.register(
            "healthz",
            "/healthz answers by status code",
            answers.healthz.clone(),
        );
        registry.register(
            "livez",
            "/livez answers by status code",
            answers.livez.clone(),
        );
        let refused = Counter::default();
        registry.register(
            "admin_connections_refused",
            "Admin connections closed at once because admin.max_connections were open",
            refused.clone(),
        );
        AdminMetrics {
            requests,
            answers,
            refused,
        }
    }

    /// Binds `addr`; the error names the address.
    pub async fn bind(
        addr: SocketAddr,
        max_connections: usize,
        health: Arc<Health>,
        registry: Arc<Registry>,
        metrics: AdminMetrics,
    ) -> anyhow::Result<AdminServer> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot bind the admin address {addr}: {e}"))?;
        Ok(AdminServer {
            listener,
            health,
            registry,
            requests: metrics.requests,
            answers: metrics.answers,
            slots: Arc::new(tokio::sync::Semaphore::new(max_connections.max(1))),
            refused: metrics.refused,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` fires.
    pub async fn serve(self, stop: CancellationToken) {
        let this = Arc::new(self);
        loop {
            let (stream, _) = tokio::select! {
                _ = stop.cancelled() => return,
                r = this.listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Ok(permit) = this.slots.clone().try_acquire_owned() else {
                // Full: close at once (the descriptor comes back now).
                this.refused.inc();
                drop(stream);
                continue;
            };
            let this = this.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |req| {
                    let this = this.clone();
                    async move { Ok::<_, Infallible>(this.answer(&req)) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                match tokio::time::timeout(ADMIN_CONNECTION_LIFETIME, conn).await {
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "admin connection ended with an error")
                    }
                    Ok(Ok(())) => {}
                    Err(_) => tracing::debug!("admin connection closed after its lifetime"),
                }
            });
        }
    }

    fn answer<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let (path, status, body, content_type) =
            if req.method() != Method::GET && req.method() != Method::HEAD {
                (
                    "other",
                    StatusCode::METHOD_NOT_ALLOWED,
                    "use GET\n".to_string(),
                    "text/plain",
                )
            } else {
                match req.uri().path() {
                    "/healthz" => {
                        let (s, b) = self.health.healthz();
                        ("/healthz", s, b, JSON)
                    }
                    "/livez" => {
                        let (s, b) = self.health.livez();
                        ("/livez", s, b, JSON)
                    }
                    "/readyz" => verdict(
                        "/readyz",
                        self.health.is_ready(),
                        if self.health.synced.load(Ordering::SeqCst) {
                            "not ready\n"
                        } else {
                            "not ready: a configuration source has not synced yet\n"
                        },
                    ),
                    "/metrics" => (
                        "/metrics",
                        StatusCode::OK,
                        crate::metrics::render(&self.registry),
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                    _ => (
                        "other",
                        StatusCode::NOT_FOUND,
                        "not found\n".into(),
                        "text/plain",
                    ),
                }
            };
        self.requests
            .get_or_create(&RequestLabels {
                path,
                code: status.as_u16(),
            })
            .inc();
        let answers = match path {
            "/healthz" => Some(&self.answers.healthz),
            "/livez" => Some(&self.answers.livez),
            _ => None,
        };
        if let Some(family) = answers {
            family
                .get_or_create(&CodeLabels {
                    code: status.as_u16(),
                })
                .inc();
        }
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            response.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        if content_type == JSON {
            response.headers_mut().insert(
                http::header::X_CONTENT_TYPE_OPTIONS,
                http::HeaderValue::from_static("nosniff"),
            );
        }
        response
    }
}

fn verdict(
    path: &'static str,
    ok: bool,
    no: &str,
) -> (&'static str, StatusCode, String, &'static str) {
    if ok {
        (path, StatusCode::OK, "ok\n".into(), "text/plain")
    } else {
        (
            path,
            StatusCode::SERVICE_UNAVAILABLE,
            no.into(),
            "text/plain",
        )
    }
}

/// The admin server's own metric families.
#[derive(Clone)]
pub struct AdminMetrics {
    requests: Family<RequestLabels, Counter>,
    answers: AnswerMetrics,
    refused: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_follows_draining_and_the_node() {
        let h = Health::new();
        let (code, body) = h.healthz();
        assert_eq!(code, StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(body["lastUpdated"].is_string() && body["currentTime"].is_string());
        assert!(body.get("nodeEligible").is_none(), "node-unaware: {body}");
        h.set_node(NodeView {
            eligible: false,
            reason: Some("tainted ToBeDeletedByClusterAutoscaler".into()),
            last_event: Some(SystemTime::now()),
        });
        let (code, body) = h.healthz();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["nodeEligible"], false);
        assert!(body["reason"].as_str().unwrap().contains("ToBeDeleted"));
        // /livez ignores the Node.
        h.set_live(true);
        assert_eq!(h.livez().0, StatusCode::OK);
        h.set_node(NodeView {
            eligible: true,
            reason: None,
            last_event: Some(SystemTime::now()),
        });
        assert_eq!(h.healthz().0, StatusCode::OK);
        h.start_draining();
        let (code, body) = h.healthz();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (body["nodeEligible"].clone(), body["reason"].clone()),
            (true.into(), "draining".into())
        );
    }
}
