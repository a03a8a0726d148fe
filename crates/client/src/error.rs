//! What can go wrong, for a caller to act on.

use apiway_core::endpoint::choice::Failure;

/// One failed attempt of a request on one endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The endpoint, `host:port`.
    pub endpoint: String,
    /// How the endpoint was blocked for it.
    pub failure: Failure,
    /// The kind of failure, as the `reason` label of
    /// `client_endpoint_failures_total` names it (`connect`, `tls`,
    /// `certificate`, `not_ready`, `request`, ...).
    pub kind: &'static str,
    /// What happened, in words.
    pub reason: String,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = apiway_core::endpoint::failover::reason_after(&self.endpoint, &self.reason);
        write!(f, "{}: {reason}", self.endpoint)
    }
}

/// An error from building or using a [`Client`](crate::Client).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The origin is not an `https://host[:port]` URL.
    #[error("origin `{origin}`: {reason}")]
    InvalidOrigin {
        /// The origin as given.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An entry of `alternative_hosts` is not `host`, `host:port` or
    /// `[v6]:port`.
    #[error("alternative_hosts entry `{entry}`: {reason}")]
    InvalidAlternative {
        /// The entry as given.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS server name (the origin's host or the alternative server name)
    /// is neither a DNS name nor an IP address.
    #[error("`{name}` cannot be a TLS server name")]
    InvalidServerName {
        /// The name.
        name: String,
    },
    /// The bearer token holds characters a header cannot carry.
    #[error("the bearer token cannot be sent in an Authorization header")]
    InvalidToken,
    /// A `kube::Config` asks for something the client cannot do (feature
    /// `kube`): the reason names the setting and what to do instead.
    #[error("kube config: {0}")]
    KubeConfig(String),
    /// [`ClientConfig::credentials`](crate::ClientConfig::credentials)
    /// gave no `Authorization` value (an exec credential plugin failed, a
    /// token file cannot be read); the request was not sent.
    #[error("getting credentials: {0}")]
    Credentials(String),
    /// The request cannot be sent as given (its URI has no path, a header
    /// cannot be carried over HTTP/2, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No endpoint could take the request: each was tried (the origin last)
    /// and failed before the request reached a server, or while repeating
    /// it was safe.
    #[error("no API server endpoint could take the request: {}", list(.attempts))]
    Unreachable {
        /// Every attempt, in order.
        attempts: Vec<Attempt>,
    },
    /// The response body broke off after its headers arrived
    /// ([`Client::fetch`](crate::Client::fetch) only): a method other than
    /// GET or HEAD, or a GET that broke off on every retry.
    #[error("the response body from {endpoint} broke off: {source}")]
    Body {
        /// The endpoint that answered.
        endpoint: String,
        /// What hyper reported.
        #[source]
        source: hyper::Error,
    },
    /// EndpointSlice discovery got an answer it cannot use (a status other
    /// than 200, a list that does not parse, no answer in time).
    #[error("EndpointSlice discovery: {0}")]
    Discovery(String),
    /// The connection failed after the request may have reached the
    /// server, and the method is not safe to repeat (anything but GET and
    /// HEAD): it was not sent anywhere else. The caller decides whether to
    /// retry, e.g. after checking whether the change was made.
    #[error("{method} to {endpoint} may have reached the server and was not repeated: {source}")]
    MaybeSent {
        /// The request method.
        method: http::Method,
        /// The endpoint the request was sent to.
        endpoint: String,
        /// What hyper reported.
        #[source]
        source: hyper::Error,
    },
}

fn list(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(Attempt::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
