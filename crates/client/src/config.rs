//! How a [`Client`](crate::Client) is set up.

use std::sync::Arc;
use std::time::Duration;

use apiway_core::endpoint::Address;

use crate::error::Error;

/// The TLS server name and `:authority` used on an alternative endpoint:
/// every API server certificate carries it.
pub const DEFAULT_ALTERNATIVE_SERVER_NAME: &str = "kubernetes.default";

/// Settings of a [`Client`](crate::Client); [`ClientConfig::new`] fills in
/// the defaults, the fields can be changed after.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The origin's host and port (`https://host[:port]`, port 443 by
    /// default), as a plain client would dial it.
    pub origin: Address,
    /// The TLS settings: trusted roots and client certificate. ALPN is set
    /// to `h2` by the client whatever this says.
    pub tls: Arc<rustls::ClientConfig>,
    /// TLS server name on the origin (default `None`: the origin's host),
    /// like kubeconfig's `tls-server-name`.
    pub origin_server_name: Option<String>,
    /// Alternatives that are always listed (`alternative_hosts`); they do
    /// not expire.
    pub alternative_hosts: Vec<Address>,
    /// TLS server name and `:authority` on an alternative (default
    /// [`DEFAULT_ALTERNATIVE_SERVER_NAME`]).
    pub alternative_server_name: String,
    /// Learn alternatives from `Alt-Svc` response headers (default true).
    pub learn_alt_svc: bool,
    /// Discover alternatives from the `default/kubernetes` EndpointSlices
    /// (list and watch, see [`crate::discovery`]; default false, since it
    /// needs RBAC to list and watch them).
    pub endpoint_slice_discovery: bool,
    /// How long a network error blocks an endpoint (default 20 s).
    pub block_period: Duration,
    /// Longest time an alternative learned from `Alt-Svc` stays listed,
    /// whatever its `ma` says (default 70 s, the API server's shutdown
    /// delay).
    pub max_age: Duration,
    /// Time for one TCP connect (default 2 s).
    pub connect_timeout: Duration,
    /// Time for the TLS handshake plus, on an alternative, the `/readyz`
    /// check (default 5 s).
    pub check_timeout: Duration,
    /// HTTP/2 PING interval: a PING goes out when nothing was received
    /// for this long, on idle and busy connections (default 1 s; a PING is
    /// a 17-byte frame the server answers without any work).
    pub keepalive: Duration,
    /// How long a PING may go unanswered before the connection is closed
    /// and its requests fail over (default 500 ms, so a hung server is
    /// left within 1.5 s of its last answer; raise it on links whose round
    /// trip comes near it).
    pub keepalive_timeout: Duration,
    /// Where the client counts failures, failovers, blocks and the endpoint
    /// in use (default: fresh families; share one between clients and
    /// register it once).
    pub metrics: crate::ClientMetrics,
    /// Headers added to every request that does not set them itself, e.g.
    /// `Authorization: Bearer <service account token>` (default none).
    pub headers: http::HeaderMap,
    /// Where the `Authorization` header comes from when it changes over
    /// time (an exec credential plugin, a rotated token file; default
    /// none). Asked before each request that has no `Authorization`
    /// header of its own; takes precedence over one in
    /// [`headers`](Self::headers).
    pub credentials: Option<Arc<dyn crate::Credentials>>,
}

impl ClientConfig {
    /// A config for `origin` (`https://host[:port]`; a path is ignored) with
    /// the defaults and no static alternatives.
    pub fn new(origin: &str, tls: Arc<rustls::ClientConfig>) -> Result<ClientConfig, Error> {
        Ok(ClientConfig {
            origin: parse_origin(origin)?,
            tls,
            origin_server_name: None,
            alternative_hosts: Vec::new(),
            alternative_server_name: DEFAULT_ALTERNATIVE_SERVER_NAME.to_owned(),
            learn_alt_svc: true,
            endpoint_slice_discovery: false,
            block_period: Duration::from_secs(20),
            max_age: Duration::from_secs(70),
            connect_timeout: Duration::from_secs(2),
            check_timeout: Duration::from_secs(5),
            keepalive: Duration::from_secs(1),
            keepalive_timeout: Duration::from_millis(500),
            metrics: crate::ClientMetrics::default(),
            headers: http::HeaderMap::new(),
            credentials: None,
        })
    }

    /// Turns on [`endpoint_slice_discovery`](Self::endpoint_slice_discovery).
    pub fn with_endpoint_slice_discovery(mut self) -> ClientConfig {
        self.endpoint_slice_discovery = true;
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request (the
    /// token is marked sensitive, so HTTP/2 never indexes it). For a token
    /// that rotates, set [`credentials`](Self::credentials) to a
    /// [`TokenFile`](crate::TokenFile).
    pub fn with_bearer_token(mut self, token: &str) -> Result<ClientConfig, Error> {
        let value = crate::credentials::bearer(token).ok_or(Error::InvalidToken)?;
        self.headers.insert(http::header::AUTHORIZATION, value);
        Ok(self)
    }

    /// Sets the static alternatives from a comma-separated list of `host`,
    /// `host:port` or `[v6]:port` (a missing port is the origin's), as the
    /// proposal's `alternative_hosts` field. Empty entries are skipped.
    pub fn with_alternative_hosts(mut self, list: &str) -> Result<ClientConfig, Error> {
        let mut hosts = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let address = parse_host_port(entry, self.origin.port).map_err(|reason| {
                Error::InvalidAlternative {
                    entry: entry.to_owned(),
                    reason,
                }
            })?;
            if !hosts.contains(&address) {
                hosts.push(address);
            }
        }
        self.alternative_hosts = hosts;
        Ok(self)
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; `default_port` when none.
pub(crate) fn parse_host_port(text: &str, default_port: u16) -> Result<Address, String> {
    let authority = apiway_wire::authority::Authority::parse_with_default_port(text, default_port)
        .map_err(|e| e.to_string())?;
    // With its port filled in, the text is what the endpoint model reads
    // (the parser's `Display` parses back to the same value).
    Address::parse(&authority.to_string())
}

fn parse_origin(origin: &str) -> Result<Address, Error> {
    let invalid = |reason: &str| Error::InvalidOrigin {
        origin: origin.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = origin
        .parse()
        .map_err(|_| invalid("not a URL; write it as https://host[:port]"))?;
    if uri.scheme_str() != Some("https") {
        return Err(invalid("only https is supported"));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| invalid("has no host; write it as https://host[:port]"))?;
    if authority.as_str().contains('@') {
        return Err(invalid("user information in the URL is not supported"));
    }
    let port = authority.port_u16().unwrap_or(443);
    parse_host_port(authority.host(), port).map_err(|reason| invalid(&reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        )
    }

    #[test]
    fn origin_forms() {
        let c = ClientConfig::new("https://API.example.com", tls()).expect("origin");
        assert_eq!(c.origin.to_string(), "api.example.com:443");
        let c = ClientConfig::new("https://[::1]:6443/", tls()).expect("origin");
        assert_eq!(c.origin.to_string(), "[::1]:6443");
        for bad in ["http://a:1", "a:1", "https://", "https://u@a:1"] {
            assert!(ClientConfig::new(bad, tls()).is_err(), "{bad}");
        }
    }

    #[test]
    fn alternative_hosts_list() {
        let c = ClientConfig::new("https://lb:6443", tls())
            .expect("origin")
            .with_alternative_hosts(
                " 10.0.0.1, 10.0.0.2:7443,,[fd00::1]:6443, [fd00::2], api-1 ,10.0.0.1",
            )
            .expect("list");
        let names: Vec<String> = c.alternative_hosts.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            names,
            [
                "10.0.0.1:6443",
                "10.0.0.2:7443",
                "[fd00::1]:6443",
                "[fd00::2]:6443",
                "api-1:6443"
            ]
        );
        let err = ClientConfig::new("https://lb:6443", tls())
            .expect("origin")
            .with_alternative_hosts("10.0.0.1:x")
            .expect_err("bad port");
        assert!(err.to_string().contains("10.0.0.1:x"), "{err}");
    }
}
