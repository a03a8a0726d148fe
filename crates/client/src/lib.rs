//! API server failover inside Rust programs.
//!
//! A [`Client`] talks HTTPS (HTTP/2) to one Kubernetes API server origin,
//! say the internal load balancer `https://api-int.example:6443`, and
//! sends each request to the best of the origin's endpoints instead, the
//! way the OpenShift "resilient control-plane networking" proposal
//! describes. Endpoints come from a static list (`alternative_hosts`),
//! from the `default/kubernetes` EndpointSlices ([`discovery`], opt-in with
//! [`ClientConfig::with_endpoint_slice_discovery`], so it works with
//! unmodified API servers) and from `Alt-Svc` response headers (RFC 7838,
//! parsed by `apiway_wire::altsvc`), listed in that order; the choice
//! among them is
//! [`apiway_core::endpoint::choice`], core's endpoint model, which serves every role:
//!
//! 1. the endpoint in use, while it works (no flapping), except that a
//!    local endpoint the client left after a failure takes over again
//!    once its block ends;
//! 2. otherwise an alternative whose address is on a local interface;
//! 3. otherwise the origin, if listed; otherwise the next alternative;
//! 4. when every alternative is blocked or failed, the origin itself.
//!
//! # What happens on each kind of failure
//!
//! | failure | the endpoint | the request |
//! |---|---|---|
//! | TCP connect refused or timed out ([`ClientConfig::connect_timeout`]) | blocked for [`ClientConfig::block_period`] (20 s) | moves to the next endpoint: it was never sent |
//! | TLS handshake fails (reset, timeout) | blocked for the block period | moves on: never sent |
//! | certificate does not verify | blocked for good (until the client is dropped) | moves on: never sent |
//! | `/readyz` is not 200 (checked on every new connection to an alternative) | blocked for the block period | moves on: never sent |
//! | connection fails before the request was written | blocked for the block period | moves on |
//! | connection fails after the request may have been written | blocked for the block period | GET and HEAD move on; any other method returns [`Error::MaybeSent`] and is **not** sent again |
//! | every alternative blocked or failed | — | the origin is tried once, blocked or not; if it fails too, [`Error::Unreachable`] lists each attempt |
//! | the response body breaks off after the headers | — | the caller sees the body error; nothing is retried |
//! | any HTTP status, 5xx included | nothing changes | returned as is |
//! | EndpointSlice list or watch fails (no answer, a status other than 200, a body that breaks off or does not parse) | a broken watch body blocks its endpoint for the block period | discovery retries after 1 s, doubling to 30 s; the last list stays for [`ClientConfig::max_age`] after the last success, then is dropped |
//! | EndpointSlice watch answers `410 Gone` | — | discovery lists again at once |
//!
//! Alternatives learned from `Alt-Svc` expire after min(`ma` less the
//! response's `Age`, [`ClientConfig::max_age`] (70 s)); each response that carries `Alt-Svc` replaces the learned list
//! (`clear` empties it; alternatives other than `h2` are ignored; a header
//! that does not parse is ignored). With no alternatives the client sends
//! every request to the origin, exactly as a plain HTTP/2 client would.
//!
//! On an alternative, the TLS server name and `:authority` are
//! `kubernetes.default` ([`ClientConfig::alternative_server_name`]) and the
//! request carries `Alt-Used: host:port`. The certificate is always
//! verified against [`ClientConfig::tls`]'s roots.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use apiway_client::{Client, ClientConfig};
//! use rustls_pki_types::pem::PemObject;
//! use rustls_pki_types::CertificateDer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Trust the cluster CA, present a client certificate if you have one.
//! let mut roots = rustls::RootCertStore::empty();
//! let ca = std::fs::read("/etc/kubernetes/pki/ca.crt")?;
//! for cert in CertificateDer::pem_slice_iter(&ca) {
//!     roots.add(cert?)?;
//! }
//! let provider = Arc::new(rustls::crypto::ring::default_provider());
//! let tls = rustls::ClientConfig::builder_with_provider(provider)
//!     .with_safe_default_protocol_versions()?
//!     .with_root_certificates(roots)
//!     .with_no_client_auth();
//!
//! let config = ClientConfig::new("https://api-int.example:6443", Arc::new(tls))?
//!     .with_alternative_hosts("10.0.0.11, 10.0.0.12, 10.0.0.13")?;
//! let client = Client::new(config)?;
//!
//! let response = client.get("/api/v1/namespaces/default/pods?limit=10").await?;
//! println!("{} from {:?}", response.status(), client.endpoint_in_use());
//! for endpoint in client.endpoints() {
//!     println!("{endpoint:?}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Discovered endpoints are the ready ones (`conditions.ready` not false)
//! at the slice's `https` port; they change with each watch event and
//! never expire while discovery works.
//!
//! # kube-rs (feature `kube`)
//!
//! Two ways under a `kube::Client`, both sharing one [`Client`]'s
//! endpoints, blocks and metrics, both set up from a `kube::Config` with
//! [`ClientConfig::from_kube_config`]:
//!
//! - [`Client::kube_client`] ([`kube_service`]): HTTP/2 through this
//!   client, with everything above (`/readyz` checks, PING, safe retries,
//!   `kubernetes.default` on alternatives); exec credential plugins and
//!   rotated token files through [`Credentials`]; no upgrades.
//! - [`Client::http1_kube_client`] ([`kube_connector`]): kube's own
//!   HTTP/1.1 stack, TLS and auth, with this client only choosing where
//!   each connection goes.
//!
//! `examples/watch_pods.rs` lists and watches pods through either.
//!
//! # Diagnostics
//!
//! [`Client::probe`] checks every endpoint the client knows the way it
//! checks one before first use; `apiway endpoints --kubeconfig FILE` prints
//! what it finds for a cluster.
//!
//! # The server side
//!
//! The `apiway-advertise` crate is for Rust API servers and proxies: a tower
//! layer that adds the `Alt-Svc` header this client learns from, listing the
//! ready endpoints each client can reach from its source network.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod config;
mod connect;
mod credentials;
pub mod discovery;
mod discovery_task;
mod error;
#[cfg(feature = "kube")]
mod kube_config;
#[cfg(feature = "kube")]
pub mod kube_connector;
#[cfg(feature = "kube")]
pub mod kube_service;
mod learn;
mod metrics;

pub use apiway_core::endpoint::choice::{Block, Failure};
pub use apiway_core::endpoint::Address;
pub use client::{Client, EndpointStatus, ProbeReport, Stage, BODY_RETRIES};
pub use config::{ClientConfig, DEFAULT_ALTERNATIVE_SERVER_NAME};
pub use credentials::{AuthorizationFuture, Credentials, TokenFile, TOKEN_FILE_REREAD};
pub use error::{Attempt, Error};
#[cfg(feature = "kube")]
pub use kube_connector::{EndpointStream, KubeConnector};
#[cfg(feature = "kube")]
pub use kube_service::KubeService;
pub use metrics::{
    BlockLabels, ClientMetrics, DiscoveryFailureLabels, EndpointLabels, FailoverLabels,
    FailureLabels, OriginLabels,
};

/// The `Alt-Used` request header (RFC 7838 section 5).
pub const ALT_USED: http::HeaderName = http::HeaderName::from_static("alt-used");
