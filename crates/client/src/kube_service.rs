//! The HTTP/2 path for kube-rs (feature `kube`): the [`Client`] as the
//! tower service under a `kube::Client`, so a controller's requests
//! (lists, watches, writes) get the client's endpoint choice, `/readyz`
//! checks, failover and retry rules.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use apiway_client::{Client, ClientConfig};
//!
//! let kube_config = kube::Config::infer().await?;
//! let client = Client::new(ClientConfig::from_kube_config(&kube_config)?)?;
//! let kube = client.kube_client(&kube_config.default_namespace);
//! let version = kube.apiserver_version().await?;
//! println!("{}", version.git_version);
//! # Ok(())
//! # }
//! ```
//!
//! What kube-rs sees is an HTTP/2 connection per endpoint, with PING
//! keepalive: a hung server is left within
//! [`ClientConfig::keepalive`](crate::ClientConfig::keepalive) plus
//! [`ClientConfig::keepalive_timeout`](crate::ClientConfig::keepalive_timeout)
//! of its last answer (1.5 s by default), and a GET
//! (a list, or a watch before its response headers) moves to the next
//! endpoint by itself; a watch whose stream breaks off ends with an error
//! and kube's `watcher` starts it again, on the next endpoint.
//!
//! HTTP/2 cannot carry the HTTP/1.1 upgrades that `exec`, `attach` and
//! `port-forward` use; those do not work through this service.
//! Authentication is the TLS client certificate of
//! [`ClientConfig::tls`](crate::ClientConfig::tls), a fixed token
//! ([`ClientConfig::with_bearer_token`](crate::ClientConfig::with_bearer_token))
//! or [`ClientConfig::credentials`](crate::ClientConfig::credentials): a
//! rotated token file or a kubeconfig's exec credential plugin, as
//! [`ClientConfig::from_kube_config`](crate::ClientConfig::from_kube_config)
//! sets them up.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::{Client, Error};

/// The tower service `kube::Client::new` takes; made by
/// [`Client::kube_service`].
#[derive(Clone, Debug)]
pub struct KubeService {
    client: Client,
}

impl Client {
    /// This client as a service for `kube::Client::new`.
    pub fn kube_service(&self) -> KubeService {
        KubeService {
            client: self.clone(),
        }
    }

    /// A `kube::Client` whose requests go through this client, with
    /// `default_namespace` for namespaced calls.
    pub fn kube_client(&self, default_namespace: &str) -> kube::Client {
        kube::Client::new(self.kube_service(), default_namespace)
    }
}

impl tower_service::Service<http::Request<kube::client::Body>> for KubeService {
    type Response = http::Response<Incoming>;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // Every request picks its own endpoint and connection when called.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // Whole bodies, so a safe request can be sent again elsewhere;
            // kube's request bodies are single JSON documents.
            let body = body
                .collect()
                .await
                .map_err(|e| Error::InvalidRequest(format!("request body: {e}")))?
                .to_bytes();
            client.send(http::Request::from_parts(parts, body)).await
        })
    }
}
