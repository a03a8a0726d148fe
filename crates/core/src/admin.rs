//! The admin endpoint every long-running role serves.
//!
//! - `/healthz`: should a load balancer send *new* connections here? 503
//!   while draining or while any reason not to is set (KEP-3836: the node is
//!   being deleted or tainted for scale-down). Established connections are
//!   unaffected.
//! - `/livez`: is the data plane programmed (listeners bound, config loaded)?
//! - `/readyz`: can this instance serve now?
//! - `/metrics`: Prometheus text format.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Health verdicts the admin endpoint serves.
#[derive(Debug, Default)]
pub struct Health {
    draining: AtomicBool,
    live: AtomicBool,
    ready: AtomicBool,
    /// Reasons `/healthz` fails besides draining, by source.
    not_healthy: Mutex<BTreeMap<String, String>>,
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

    /// Sets or clears (`None`) a reason for `/healthz` to fail.
    pub fn set_not_healthy(&self, source: &str, reason: Option<String>) {
        let mut map = match self.not_healthy.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match reason {
            Some(r) => map.insert(source.to_owned(), r),
            None => map.remove(source),
        };
    }

    fn healthz(&self) -> (StatusCode, String) {
        if self.is_draining() {
            return (StatusCode::SERVICE_UNAVAILABLE, "draining\n".into());
        }
        let map = match self.not_healthy.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if map.is_empty() {
            (StatusCode::OK, "ok\n".into())
        } else {
            let reasons: String = map.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
            (StatusCode::SERVICE_UNAVAILABLE, reasons)
        }
    }
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
}

impl AdminServer {
    /// Registers the admin server's own metrics; call before freezing the registry.
    pub fn register_metrics(registry: &mut Registry) -> AdminMetrics {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admin_requests",
            "Admin endpoint requests by path and status code",
            requests.clone(),
        );
        AdminMetrics { requests }
    }

    /// Binds `addr`; the error names the address.
    pub async fn bind(
        addr: SocketAddr,
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
            let this = this.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let this = this.clone();
                    async move { Ok::<_, Infallible>(this.answer(&req)) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "admin connection ended with an error");
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
                        ("/healthz", s, b, "text/plain")
                    }
                    "/livez" => verdict(
                        "/livez",
                        self.health.live.load(Ordering::SeqCst),
                        "not live\n",
                    ),
                    "/readyz" => verdict(
                        "/readyz",
                        self.health.ready.load(Ordering::SeqCst),
                        "not ready\n",
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
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            response.headers_mut().insert(http::header::CONTENT_TYPE, v);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_follows_draining_and_reasons() {
        let h = Health::new();
        assert_eq!(h.healthz().0, StatusCode::OK);
        h.set_not_healthy(
            "node",
            Some("tainted ToBeDeletedByClusterAutoscaler".into()),
        );
        let (code, body) = h.healthz();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("ToBeDeletedByClusterAutoscaler"));
        h.set_not_healthy("node", None);
        assert_eq!(h.healthz().0, StatusCode::OK);
        h.start_draining();
        assert_eq!(
            h.healthz(),
            (StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
        );
    }
}
