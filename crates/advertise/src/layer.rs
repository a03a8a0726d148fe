//! The tower layer that adds `Alt-Svc` to responses.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::header::ALT_SVC;
use http::{Request, Response};

use super::{Advertiser, ClientAddress};

/// Wraps an HTTP service in an [`AltSvcService`]; made by
/// [`Advertiser::layer`].
#[derive(Clone, Debug)]
pub struct AltSvcLayer {
    advertiser: Advertiser,
}

impl AltSvcLayer {
    /// A layer advertising what `advertiser` holds at each response.
    pub fn new(advertiser: Advertiser) -> AltSvcLayer {
        AltSvcLayer { advertiser }
    }
}

impl<S> tower_layer::Layer<S> for AltSvcLayer {
    type Service = AltSvcService<S>;

    fn layer(&self, inner: S) -> AltSvcService<S> {
        AltSvcService {
            inner,
            advertiser: self.advertiser.clone(),
        }
    }
}

/// An HTTP service that adds `Alt-Svc` to every response of `S` that does
/// not have one, for the client in the request's [`ClientAddress`]
/// extension. Implements `tower::Service` and `hyper::service::Service`,
/// whichever `S` does.
#[derive(Clone, Debug)]
pub struct AltSvcService<S> {
    inner: S,
    advertiser: Advertiser,
}

impl<S> AltSvcService<S> {
    /// What the response future needs, read before the request moves into
    /// the inner service.
    fn pending<B>(&self, req: &Request<B>) -> AltSvcFuture<()> {
        AltSvcFuture {
            inner: (),
            client: req.extensions().get::<ClientAddress>().map(|c| c.0),
            advertiser: Some(self.advertiser.clone()),
        }
    }
}

impl<S, B, ResBody> tower_service::Service<Request<B>> for AltSvcService<S>
where
    S: tower_service::Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = AltSvcFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let pending = self.pending(&req);
        pending.wrap(self.inner.call(req))
    }
}

impl<S, B, ResBody> hyper::service::Service<Request<B>> for AltSvcService<S>
where
    S: hyper::service::Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = AltSvcFuture<S::Future>;

    fn call(&self, req: Request<B>) -> Self::Future {
        let pending = self.pending(&req);
        pending.wrap(self.inner.call(req))
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`AltSvcService`]: the inner future's
    /// response with `Alt-Svc` added. The value is computed when the
    /// response is ready, so a readiness change made while a request was
    /// being handled already shows in its response.
    pub struct AltSvcFuture<F> {
        #[pin]
        inner: F,
        client: Option<IpAddr>,
        // Taken when the response is ready, so polling again cannot add
        // the header twice.
        advertiser: Option<Advertiser>,
    }
}

impl AltSvcFuture<()> {
    fn wrap<F>(self, inner: F) -> AltSvcFuture<F> {
        AltSvcFuture {
            inner,
            client: self.client,
            advertiser: self.advertiser,
        }
    }
}

impl<F, ResBody, E> Future for AltSvcFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(advertiser) = this.advertiser.take() {
            let headers = response.headers_mut();
            // The application said something itself (a fixed value, a
            // deliberate `clear`): that wins.
            if !headers.contains_key(ALT_SVC) {
                if let Some(value) = advertiser.header_for(*this.client) {
                    headers.insert(ALT_SVC, value);
                }
            }
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::time::Duration;

    use http::HeaderValue;
    use http_body_util::{BodyExt, Empty, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use tower::ServiceExt;
    use tower_layer::Layer;

    use super::*;
    use crate::Address;
    use crate::{AdvertisedEndpoint, Reachability, ReachabilityRule};

    fn endpoints(list: &[(&str, bool)]) -> Vec<AdvertisedEndpoint> {
        list.iter()
            .map(|(text, ready)| AdvertisedEndpoint {
                address: Address::parse(text).expect("address"),
                ready: *ready,
            })
            .collect()
    }

    fn rules(list: &[&str]) -> Reachability {
        Reachability::new(
            list.iter()
                .map(|r| ReachabilityRule::parse(r).expect("rule"))
                .collect(),
        )
    }

    /// Answers 200, with `Alt-Svc: <its own>` when the path is `/own`.
    async fn app(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        if req.uri().path() == "/own" {
            response
                .headers_mut()
                .insert(ALT_SVC, HeaderValue::from_static("h3=\":443\""));
        }
        Ok(response)
    }

    async fn alt_svc_of<S>(service: S, client: Option<&str>, path: &str) -> Option<String>
    where
        S: tower_service::Service<Request<()>, Response = Response<&'static str>>,
        S::Error: std::fmt::Debug,
    {
        let mut req = Request::get(path).body(()).expect("request");
        if let Some(ip) = client {
            req.extensions_mut()
                .insert(ClientAddress(ip.parse().expect("ip")));
        }
        let response = service.oneshot(req).await.expect("response");
        response
            .headers()
            .get(ALT_SVC)
            .map(|v| v.to_str().expect("ascii").to_owned())
    }

    #[tokio::test]
    async fn tower_service_adds_the_value_for_each_client() {
        let advertiser = Advertiser::new(
            endpoints(&[("10.0.0.1:6443", true), ("10.0.1.1:6443", true)]),
            Duration::from_secs(30),
            rules(&["10.1.0.0/16=10.0.0.0/24", "10.2.0.0/16=10.0.0.0/23"]),
        );
        let service = advertiser
            .layer()
            .layer(tower::service_fn(|req: Request<()>| async move {
                let mut response = Response::new("ok");
                if req.uri().path() == "/own" {
                    response
                        .headers_mut()
                        .insert(ALT_SVC, HeaderValue::from_static("clear"));
                }
                Ok::<_, Infallible>(response)
            }));
        let one = r#"h2="10.0.0.1:6443"; ma=30"#;
        let both = r#"h2="10.0.0.1:6443"; ma=30, h2="10.0.1.1:6443"; ma=30"#;
        let cases = [
            (Some("10.1.2.3"), "/", Some(one)),
            (Some("::ffff:10.1.2.3"), "/", Some(one)),
            (Some("10.2.2.3"), "/", Some(both)),
            (Some("192.0.2.1"), "/", Some("clear")),
            (None, "/", Some("clear")),
            // The application's own value is left alone.
            (Some("10.2.2.3"), "/own", Some("clear")),
        ];
        for (client, path, expected) in cases {
            let got = alt_svc_of(service.clone(), client, path).await;
            assert_eq!(got.as_deref(), expected, "{client:?} {path}");
        }

        // Updates apply to the next response.
        assert!(advertiser.set_ready(&Address::parse("10.0.0.1:6443").expect("address"), false));
        assert!(!advertiser.set_ready(&Address::parse("10.0.0.1:443").expect("address"), false));
        let got = alt_svc_of(service.clone(), Some("10.2.2.3"), "/").await;
        assert_eq!(got.as_deref(), Some(r#"h2="10.0.1.1:6443"; ma=30"#));
        advertiser.set_endpoints(endpoints(&[("10.0.0.9:6443", true)]));
        let got = alt_svc_of(service.clone(), Some("10.1.2.3"), "/").await;
        assert_eq!(got.as_deref(), Some(r#"h2="10.0.0.9:6443"; ma=30"#));

        // No rules: everyone, the unknown client included, sees every
        // ready endpoint.
        let open = Advertiser::new(
            endpoints(&[("10.0.0.1:6443", true), ("api.example:6443", true)]),
            Duration::from_secs(5),
            Reachability::everyone(),
        );
        let service = open
            .layer()
            .layer(tower::service_fn(|_: Request<()>| async {
                Ok::<_, Infallible>(Response::new("ok"))
            }));
        for client in [None, Some("192.0.2.1"), Some("fd00::1")] {
            let got = alt_svc_of(service.clone(), client, "/").await;
            assert_eq!(
                got.as_deref(),
                Some(r#"h2="10.0.0.1:6443"; ma=5, h2="api.example:6443"; ma=5"#),
                "{client:?}"
            );
        }
    }

    /// GETs `path` over a fresh HTTP/1.1 connection from `source` and
    /// returns the `Alt-Svc` header.
    async fn get_from(source: &str, server: SocketAddr, path: &str) -> Option<String> {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(source.parse().expect("ip"), 0))
            .expect("bind source");
        let tcp = socket.connect(server).await.expect("connect");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let req = Request::get(path)
            .header(http::header::HOST, "kubernetes.default")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let response = sender.send_request(req).await.expect("response");
        let value = response
            .headers()
            .get(ALT_SVC)
            .map(|v| v.to_str().expect("ascii").to_owned());
        let body = response.into_body().collect().await.expect("body");
        assert_eq!(body.to_bytes(), "ok");
        value
    }

    #[tokio::test]
    async fn hyper_server_advertises_by_connection_source() {
        let advertiser = Advertiser::new(
            endpoints(&[
                ("127.0.0.2:6443", true),
                ("127.0.0.3:6443", true),
                ("127.0.0.4:6443", false),
            ]),
            Duration::from_secs(60),
            rules(&["127.0.0.1/32=127.0.0.2/32", "127.0.0.5/32=127.0.0.0/24"]),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let serving = advertiser.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    return;
                };
                // As in the module example.
                let with_alt_svc = serving.layer().layer(hyper::service::service_fn(app));
                let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(ClientAddress::from(peer));
                    hyper::service::Service::call(&with_alt_svc, req)
                });
                tokio::spawn(async move {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });

        let from_1 = get_from("127.0.0.1", addr, "/").await;
        assert_eq!(from_1.as_deref(), Some(r#"h2="127.0.0.2:6443"; ma=60"#));
        let from_5 = get_from("127.0.0.5", addr, "/").await;
        assert_eq!(
            from_5.as_deref(),
            Some(r#"h2="127.0.0.2:6443"; ma=60, h2="127.0.0.3:6443"; ma=60"#)
        );
        assert_eq!(
            get_from("127.0.0.6", addr, "/").await.as_deref(),
            Some("clear")
        );
        assert_eq!(
            get_from("127.0.0.5", addr, "/own").await.as_deref(),
            Some("h3=\":443\"")
        );
        server.abort();
    }
}
