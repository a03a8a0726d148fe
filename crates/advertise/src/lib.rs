//! Server-side `Alt-Svc` advertising, the counterpart of `apiway-client`:
//! the `Alt-Svc` value an API server (or a proxy in front
//! of it) sends so that clients learn its ready endpoints, and a tower
//! layer that adds it to every response. Rendering is
//! `apiway_wire::altsvc`'s, through [`alt_svc_value`]; this decides what
//! to list, and for whom.
//!
//! - [`Advertiser`]: the advertised endpoints (replaceable while serving,
//!   [`Advertiser::set_endpoints`], [`Advertiser::set_ready`]), the `ma`
//!   they are sent with, and the [`Reachability`] filter by client source
//!   network (rules `CLIENT_CIDR=ENDPOINT_CIDR`; no rules: everyone reaches
//!   everything; a client no rule names gets `clear`).
//! - [`AltSvcLayer`] / [`AltSvcService`]: adds `Alt-Svc` to every response
//!   of the wrapped HTTP service, for the client named by the request's
//!   [`ClientAddress`] extension, as computed when the response is ready.
//!   A response that already has `Alt-Svc` is left untouched. The service
//!   is both a `tower::Service` and a `hyper::service::Service`, so it wraps
//!   either kind of handler.
//!
//! The server inserts [`ClientAddress`] into each request from the address
//! the connection was accepted from; a request without it counts as a
//! client that matches no rule. Behind a proxy, insert the original client
//! address instead (from a PROXY header, say), since that is the network
//! the alternatives must be reachable from.
//!
//! # Example: a hyper server
//!
//! ```no_run
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use apiway_advertise::{
//!     Address, AdvertisedEndpoint, Advertiser, ClientAddress, Reachability, ReachabilityRule,
//! };
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use hyper::body::{Bytes, Incoming};
//! use hyper::service::{service_fn, Service as _};
//! use hyper_util::rt::{TokioExecutor, TokioIo};
//! use hyper_util::server::conn::auto;
//! use tower_layer::Layer as _;
//!
//! async fn handle(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
//!     Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = |text: &str| -> Result<AdvertisedEndpoint, String> {
//!     Ok(AdvertisedEndpoint { address: Address::parse(text)?, ready: true })
//! };
//! // Nodes in 10.1.0.0/16 reach the control-plane network 10.0.0.0/24;
//! // anyone else (through the load balancer) gets `clear`.
//! let advertiser = Advertiser::new(
//!     vec![endpoint("10.0.0.11:6443")?, endpoint("10.0.0.12:6443")?],
//!     Duration::from_secs(60),
//!     Reachability::new(vec![ReachabilityRule::parse("10.1.0.0/16=10.0.0.0/24")?]),
//! );
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:6443").await?;
//! loop {
//!     let (tcp, peer) = listener.accept().await?;
//!     // One service per connection: the layer around the handler, and a
//!     // closure in front that tags each request with this connection's
//!     // client address.
//!     let with_alt_svc = advertiser.layer().layer(service_fn(handle));
//!     let service = service_fn(move |mut req: Request<Incoming>| {
//!         req.extensions_mut().insert(ClientAddress::from(peer));
//!         with_alt_svc.call(req)
//!     });
//!     tokio::spawn(async move {
//!         // (TLS goes here in a real API server.)
//!         let _ = auto::Builder::new(TokioExecutor::new())
//!             .serve_connection(TokioIo::new(tcp), service)
//!             .await;
//!     });
//!     // Elsewhere, as readiness changes:
//!     // advertiser.set_ready(&Address::parse("10.0.0.12:6443")?, false);
//! }
//! # }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod layer;
mod reach;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use apiway_core::endpoint::Host;
use apiway_wire::altsvc::{AltSvc, Alternative};
use arc_swap::ArcSwap;
use http::HeaderValue;

/// The endpoint address type advertised endpoints use (`apiway-core`'s).
pub use apiway_core::endpoint::Address;
pub use layer::{AltSvcFuture, AltSvcLayer, AltSvcService};
pub use reach::{Reachability, ReachabilityRule};

/// One endpoint the server knows, with its readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisedEndpoint {
    /// Where clients reach it.
    pub address: Address,
    /// Whether it is ready (its `/readyz` answers 200); only ready ones are
    /// listed.
    pub ready: bool,
}

/// The `Alt-Svc` value for a response to a client at `client`: every
/// ready endpoint that `reachable(client, endpoint)` allows, as `h2`, with
/// `ma` = `max_age` in whole seconds; `clear` when none is left, so
/// clients drop what they learned before.
///
/// `reachable` is the filter by the client's source network (advertise an
/// endpoint only to clients that can reach it, e.g. by CIDR); pass
/// `|_, _| true` to list every ready endpoint to everyone. This is the one
/// renderer: [`Advertiser`] calls it with its [`Reachability`].
pub fn alt_svc_value(
    endpoints: &[AdvertisedEndpoint],
    client: IpAddr,
    max_age: Duration,
    reachable: impl Fn(IpAddr, &Address) -> bool,
) -> String {
    let ma = u32::try_from(max_age.as_secs()).unwrap_or(u32::MAX);
    let alternatives: Vec<Alternative> = endpoints
        .iter()
        .filter(|e| e.ready && reachable(client, &e.address))
        .map(|e| {
            let host = match &e.address.host {
                Host::Ip(ip) => ip.to_string(),
                Host::Name(name) => name.clone(),
            };
            Alternative {
                max_age: ma,
                ..Alternative::new("h2", Some(host), e.address.port)
            }
        })
        .collect();
    if alternatives.is_empty() {
        AltSvc::Clear.render()
    } else {
        AltSvc::Alternatives(alternatives).render()
    }
}

/// The address a request came from, as a request extension: the server
/// inserts it per connection (see the [module example](self)), and
/// [`AltSvcService`] filters the advertised endpoints by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientAddress(pub IpAddr);

impl From<SocketAddr> for ClientAddress {
    fn from(peer: SocketAddr) -> Self {
        ClientAddress(peer.ip())
    }
}

impl From<IpAddr> for ClientAddress {
    fn from(ip: IpAddr) -> Self {
        ClientAddress(ip)
    }
}

/// The endpoints a server advertises, with their `ma` and the filter by
/// client network; a cheap handle (clones share the list) that can be
/// updated while serving. Each response reads the list once, without
/// locking, and renders the value for its client (a few hundred bytes, no
/// I/O).
#[derive(Clone, Debug)]
pub struct Advertiser {
    shared: Arc<AdvertiserState>,
}

#[derive(Debug)]
struct AdvertiserState {
    endpoints: ArcSwap<Vec<AdvertisedEndpoint>>,
    max_age: Duration,
    reachability: Reachability,
}

impl Advertiser {
    /// Advertises `endpoints` (the ready ones) with `ma` = `max_age`, each
    /// to the clients `reachability` allows.
    pub fn new(
        endpoints: Vec<AdvertisedEndpoint>,
        max_age: Duration,
        reachability: Reachability,
    ) -> Advertiser {
        Advertiser {
            shared: Arc::new(AdvertiserState {
                endpoints: ArcSwap::from_pointee(endpoints),
                max_age,
                reachability,
            }),
        }
    }

    /// Replaces the whole list, readiness included; the next response uses
    /// it.
    pub fn set_endpoints(&self, endpoints: Vec<AdvertisedEndpoint>) {
        self.shared.endpoints.store(Arc::new(endpoints));
    }

    /// Marks every listed endpoint at `address` ready or not, as a server
    /// does for itself when its readiness changes; the next response uses
    /// it. Returns whether any endpoint is at `address`.
    pub fn set_ready(&self, address: &Address, ready: bool) -> bool {
        let previous = self.shared.endpoints.rcu(|endpoints| {
            let mut endpoints = Vec::clone(endpoints);
            for endpoint in endpoints.iter_mut().filter(|e| &e.address == address) {
                endpoint.ready = ready;
            }
            endpoints
        });
        previous.iter().any(|e| &e.address == address)
    }

    /// The list as it is now.
    pub fn endpoints(&self) -> Arc<Vec<AdvertisedEndpoint>> {
        self.shared.endpoints.load_full()
    }

    /// The `ma` sent with each alternative.
    pub fn max_age(&self) -> Duration {
        self.shared.max_age
    }

    /// The filter by client network.
    pub fn reachability(&self) -> &Reachability {
        &self.shared.reachability
    }

    /// The `Alt-Svc` value for a client at `client` (`None`: unknown, which
    /// matches no rule): the ready endpoints it reaches, or `clear`.
    pub fn value_for(&self, client: Option<IpAddr>) -> String {
        let endpoints = self.shared.endpoints.load();
        let reachability = &self.shared.reachability;
        // `alt_svc_value` wants an address; an unknown client is tested by
        // `reaches` as `None`, so the placeholder is never looked at.
        let placeholder = IpAddr::from([0, 0, 0, 0]);
        alt_svc_value(
            &endpoints,
            client.unwrap_or(placeholder),
            self.shared.max_age,
            |_, endpoint| reachability.reaches(client, endpoint),
        )
    }

    /// [`value_for`](Self::value_for) as a header value; `None` only if a
    /// listed name made it unfit for a header, which [`Address::parse`]
    /// does not let through.
    pub fn header_for(&self, client: Option<IpAddr>) -> Option<HeaderValue> {
        let value = self.value_for(client);
        match HeaderValue::from_str(&value) {
            Ok(header) => Some(header),
            Err(_) => {
                tracing::warn!(value, "Alt-Svc value is not a valid header value; not sent");
                None
            }
        }
    }

    /// The tower layer that adds this advertiser's `Alt-Svc` to responses.
    pub fn layer(&self) -> AltSvcLayer {
        AltSvcLayer::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(text: &str, ready: bool) -> AdvertisedEndpoint {
        AdvertisedEndpoint {
            address: Address::parse(text).expect("address"),
            ready,
        }
    }

    #[test]
    fn lists_ready_reachable_endpoints_or_clear() {
        let endpoints = [
            ep("10.0.0.1:6443", true),
            ep("10.0.0.2:6443", false),
            ep("[fd00::3]:6443", true),
            ep("api-4.example:6443", true),
        ];
        let all = |_: IpAddr, _: &Address| true;
        let client: IpAddr = "10.1.0.9".parse().expect("ip");
        let value = alt_svc_value(&endpoints, client, Duration::from_secs(60), all);
        assert_eq!(
            value,
            r#"h2="10.0.0.1:6443"; ma=60, h2="[fd00::3]:6443"; ma=60, h2="api-4.example:6443"; ma=60"#
        );
        // What a client parses back is what was listed.
        let parsed = apiway_wire::altsvc::parse(&value).expect("parses");
        let AltSvc::Alternatives(alternatives) = parsed else {
            panic!("alternatives expected");
        };
        assert_eq!(alternatives.len(), 3);

        // Only IPv4 endpoints for an IPv4 client.
        let same_family =
            |c: IpAddr, a: &Address| matches!(a.host, Host::Ip(ip) if ip.is_ipv4() == c.is_ipv4());
        let value = alt_svc_value(&endpoints, client, Duration::from_secs(60), same_family);
        assert_eq!(value, r#"h2="10.0.0.1:6443"; ma=60"#);

        let none = alt_svc_value(&endpoints[1..2], client, Duration::from_secs(60), all);
        assert_eq!(none, "clear");
    }
}
