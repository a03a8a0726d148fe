//! The stand-in's endpoints (listed in the [module docs](super)).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, ALT_SVC, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rustls::ServerConnection;

use crate::fixture_api::{REMOTE_GROUP, REMOTE_USER};
use serde_json::json;

use super::pattern::PatternBody;
use super::Shared;

/// Error type of response bodies: only `/echo` can fail (the client's
/// request body breaking off).
pub(crate) use super::body::{Body, BoxError};

/// Largest `/stream?bytes=N` accepted (1 TiB): enough for any benchmark.
const MAX_STREAM_BYTES: u64 = 1 << 40;

/// What the TLS handshake told the server about one connection.
pub(crate) struct ConnectionInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) sni: Option<String>,
    pub(crate) alpn: Option<String>,
    pub(crate) client_cn: Option<String>,
    pub(crate) client_organizations: Vec<String>,
}

impl ConnectionInfo {
    pub(crate) fn from_tls(conn: &ServerConnection, peer: SocketAddr) -> Self {
        let (client_cn, client_organizations) = conn
            .peer_certificates()
            .and_then(|certs| certs.first())
            .map(|cert| subject_names(cert.as_ref()))
            .unwrap_or_default();
        ConnectionInfo {
            peer,
            sni: conn.server_name().map(str::to_string),
            alpn: conn
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            client_cn,
            client_organizations,
        }
    }
}

/// CN and O values of a DER certificate's subject; empty if it does not
/// parse (rustls already verified it, so that would be surprising).
fn subject_names(der: &[u8]) -> (Option<String>, Vec<String>) {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return (None, Vec::new());
    };
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .find_map(|attr| attr.as_str().ok().map(str::to_string));
    let orgs = subject
        .iter_organization()
        .filter_map(|attr| attr.as_str().ok().map(str::to_string))
        .collect();
    (cn, orgs)
}

pub(crate) async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    conn: Arc<ConnectionInfo>,
) -> Result<Response<Body>, Infallible> {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let mut response = match &shared.api_upstream {
        Some(upstream) if super::upstream::is_api_path(req.uri().path()) => {
            let mut req = req;
            front_proxy_identity(req.headers_mut(), &conn);
            super::upstream::forward(req, upstream).await
        }
        _ => route(req, &shared, &conn),
    };
    let headers = response.headers_mut();
    headers.insert("x-apiway-standin", shared.name_header.clone());
    if let Some(alt_svc) = &shared.alt_svc {
        headers.insert(ALT_SVC, alt_svc.clone());
    }
    Ok(response)
}

/// Tells the API behind the stand-in who a verified client certificate
/// names, as kube-apiserver's front proxy does (`X-Remote-User`,
/// `X-Remote-Group`); the same headers from the client are dropped, so a
/// client cannot claim an identity.
fn front_proxy_identity(headers: &mut http::HeaderMap, conn: &ConnectionInfo) {
    headers.remove(REMOTE_USER);
    headers.remove(REMOTE_GROUP);
    let Some(cn) = &conn.client_cn else { return };
    if let Ok(value) = http::HeaderValue::from_str(cn) {
        headers.insert(REMOTE_USER, value);
    }
    for org in &conn.client_organizations {
        if let Ok(value) = http::HeaderValue::from_str(org) {
            headers.append(REMOTE_GROUP, value);
        }
    }
}

fn route(req: Request<Incoming>, shared: &Shared, conn: &ConnectionInfo) -> Response<Body> {
    match req.uri().path() {
        "/livez" | "/healthz" => text(StatusCode::OK, "ok"),
        "/readyz" if shared.ready.load(Ordering::SeqCst) => text(StatusCode::OK, "ok"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "readyz check failed"),
        // With or without the trailing slash (the official Python client
        // asks for `/version/`).
        "/version" | "/version/" => json_response(StatusCode::OK, &version()),
        "/stream" => stream(req.uri().query()),
        "/echo" if req.method() == Method::POST => echo(req),
        "/echo" => text(StatusCode::METHOD_NOT_ALLOWED, "POST only"),
        // API groups need an API behind the stand-in: without one, the
        // answer a real API server gives for a group it does not serve (a
        // client then learns that, instead of parsing the report below).
        p if p == "/apis" || p.starts_with("/apis/") => {
            json_response(StatusCode::NOT_FOUND, &not_found_status())
        }
        _ => json_response(StatusCode::OK, &report(&req, shared, conn)),
    }
}

/// The `Status` a Kubernetes API server answers for a path it does not
/// serve.
fn not_found_status() -> serde_json::Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    })
}

/// A Kubernetes-like version document, enough for `kubectl version`.
fn version() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "31",
        "gitVersion": "v1.31.0-apiway-standin",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-08-13T00:00:00Z",
        "goVersion": "go1.22.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Who answered and what this server saw of the request.
fn report(req: &Request<Incoming>, shared: &Shared, conn: &ConnectionInfo) -> serde_json::Value {
    json!({
        "server": shared.name,
        "path": req.uri().path(),
        "query": req.uri().query(),
        "method": req.method().as_str(),
        "version": format!("{:?}", req.version()),
        "client_cn": conn.client_cn,
        "client_organizations": conn.client_organizations,
        "sni": conn.sni,
        "alpn": conn.alpn,
        "peer": conn.peer.to_string(),
        "authority": req.uri().authority().map(|a| a.as_str().to_owned()),
        "alt_used": req
            .headers()
            .get("alt-used")
            .and_then(|v| v.to_str().ok()),
        "authorization": req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    })
}

fn stream(query: Option<&str>) -> Response<Body> {
    let bytes = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("bytes="))
        .and_then(|n| n.parse::<u64>().ok());
    match bytes {
        Some(n) if n <= MAX_STREAM_BYTES => {
            let mut response = Response::new(PatternBody::new(n).map_err(|e| match e {}).boxed());
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            response
        }
        _ => text(
            StatusCode::BAD_REQUEST,
            "usage: /stream?bytes=N (N at most 2^40)",
        ),
    }
}

fn echo(req: Request<Incoming>) -> Response<Body> {
    let content_type = req.headers().get(CONTENT_TYPE).cloned();
    let mut response = Response::new(req.into_body().map_err(BoxError::from).boxed());
    if let Some(ct) = content_type {
        response.headers_mut().insert(CONTENT_TYPE, ct);
    }
    response
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|e| match e {}).boxed()
}
