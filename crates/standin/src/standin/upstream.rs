//! Forwarding the Kubernetes API paths (`/api`, `/api/...`, `/apis`,
//! `/apis/...`) to an upstream over plain HTTP/1.1, as kube-apiserver
//! answers from etcd: the stand-in is the front, the upstream (usually a
//! [`FixtureApi`](crate::fixture_api::FixtureApi)) holds the data, and
//! response bodies stream through, so watches work.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, TRANSFER_ENCODING, UPGRADE};
use http::uri::Authority;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::body::{Body as ResponseBody, BoxError};

/// Whether the stand-in forwards `path` when it has an upstream (the API
/// paths, and `/openapi/...`, which the fixture answers with 404, so
/// kubectl skips client-side validation instead of failing on the
/// stand-in's report).
pub(crate) fn is_api_path(path: &str) -> bool {
    ["/api", "/apis", "/openapi"]
        .iter()
        .any(|prefix| path == *prefix || path.starts_with(&format!("{prefix}/")))
}

/// Parses `http://host:port` (a trailing slash allowed) into the authority
/// to connect to.
pub(crate) fn parse_upstream(url: &str) -> Result<Authority, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("API upstream {url:?}: only http://host:port is supported"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let authority: Authority = rest
        .parse()
        .map_err(|_| format!("API upstream {url:?}: not host:port"))?;
    if authority.port_u16().is_none() {
        return Err(format!("API upstream {url:?}: a port is required"));
    }
    Ok(authority)
}

/// Headers that describe one connection, not the message (RFC 9110
/// section 7.6.1); HTTP/2 forbids them.
const HOP_BY_HOP: [HeaderName; 4] = [
    CONNECTION,
    TRANSFER_ENCODING,
    UPGRADE,
    HeaderName::from_static("keep-alive"),
];

/// Sends `req` to `upstream` on a new connection and returns its response
/// with the body streaming; `502` with a `Status` when the upstream cannot
/// be reached.
pub(crate) async fn forward(
    req: Request<Incoming>,
    upstream: &Authority,
) -> Response<ResponseBody> {
    match try_forward(req, upstream).await {
        Ok(response) => response,
        Err(reason) => {
            let status = serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": format!("API upstream {upstream}: {reason}"),
                "reason": "ServiceUnavailable",
                "code": 502,
            });
            let mut response = Response::new(
                http_body_util::Full::new(Bytes::from(status.to_string()))
                    .map_err(|e| match e {})
                    .boxed(),
            );
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}

async fn try_forward(
    req: Request<Incoming>,
    upstream: &Authority,
) -> Result<Response<ResponseBody>, String> {
    let tcp = TcpStream::connect(upstream.as_str())
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
    // The connection task ends when the response body is done or dropped
    // (the downstream client went away), which closes the socket.
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let (mut parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    parts.uri = path_and_query
        .parse()
        .map_err(|e| format!("request URI: {e}"))?;
    parts.version = http::Version::HTTP_11;
    for name in &HOP_BY_HOP {
        parts.headers.remove(name);
    }
    let host = HeaderValue::from_str(upstream.as_str()).map_err(|e| format!("host: {e}"))?;
    parts.headers.insert(HOST, host);
    let response = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(|e| format!("request: {e}"))?;
    let (mut parts, body) = response.into_parts();
    for name in &HOP_BY_HOP {
        parts.headers.remove(name);
    }
    Ok(Response::from_parts(
        parts,
        body.map_err(BoxError::from).boxed(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_and_upstream_urls() {
        for path in ["/api", "/api/v1/pods", "/apis", "/apis/discovery.k8s.io/v1"] {
            assert!(is_api_path(path), "{path}");
        }
        for path in ["/apix", "/readyz", "/version", "/", "/apis-x"] {
            assert!(!is_api_path(path), "{path}");
        }
        assert_eq!(
            parse_upstream("http://127.0.0.1:8080/").map(|a| a.to_string()),
            Ok("127.0.0.1:8080".to_owned())
        );
        assert!(parse_upstream("https://127.0.0.1:8080").is_err());
        assert!(parse_upstream("http://127.0.0.1").is_err());
    }
}
