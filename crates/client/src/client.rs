//! The client: picks an endpoint with core's [`EndpointChoice`], keeps one
//! HTTP/2 connection per endpoint, moves a request on when that is safe
//! (core's [`failover::attempt`]), and learns alternatives from the
//! answers.

mod probe;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use apiway_core::endpoint::choice::{Block, ChoicePolicy, EndpointChoice, Failure, Listed};
use apiway_core::endpoint::failover::{self, Pool, Reached};
use apiway_core::endpoint::{is_local_ip, Address, Host};
use bytes::Bytes;
use http::header::{AUTHORIZATION, HOST};
use http::{HeaderValue, Method, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use rustls_pki_types::ServerName;

use crate::config::ClientConfig;
use crate::connect::{Body, Dialer, Target};
use crate::discovery_task::DiscoveryTask;
use crate::error::{Attempt, Error};
use crate::learn::{self, Learned};
use crate::metrics::{
    BlockLabels, DiscoveryFailureLabels, EndpointLabels, FailoverLabels, FailureLabels,
    OriginLabels,
};
pub use probe::{ProbeReport, Stage};

/// How many times [`Client::fetch`] sends a GET or HEAD again after its
/// response body broke off.
pub const BODY_RETRIES: usize = 2;

/// An HTTPS (HTTP/2) client for one API server origin that fails over
/// between the origin's endpoints. Cheap to clone; clones share endpoints,
/// connections and blocks.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: ClientConfig,
    /// The EndpointSlice discovery task's switch.
    pub(crate) discovery: DiscoveryTask,
    dialer: Dialer,
    origin_target: Target,
    alternative_name: ServerName<'static>,
    /// The `origin` metric label.
    origin_label: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    choice: EndpointChoice<Address>,
    connections: HashMap<Address, SendRequest<Body>>,
}

/// What the client knows about one endpoint, for diagnostics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointStatus {
    /// `host:port`.
    pub address: String,
    /// Whether it is the origin (which is also listed when an alternative
    /// names it).
    pub origin: bool,
    /// Whether its address is on a local interface.
    pub local: bool,
    /// The block on it, if any.
    pub blocked: Option<Block>,
    /// Whether it answered last and is still used.
    pub in_use: bool,
}

impl Client {
    /// A client for `config`. Makes no connection yet. With
    /// [`ClientConfig::endpoint_slice_discovery`], discovery starts now
    /// when called inside a tokio runtime, else at the first request.
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let origin_host = match (&config.origin_server_name, &config.origin.host) {
            (Some(name), _) => name.clone(),
            (None, Host::Ip(ip)) => ip.to_string(),
            (None, Host::Name(name)) => name.clone(),
        };
        let origin_target = Target {
            server_name: server_name(&origin_host)?,
            authority: authority(&config.origin)?,
            alt_used: None,
        };
        let alternative_name = server_name(&config.alternative_server_name)?;
        let origin_label = config.origin.to_string();
        let mut choice = EndpointChoice::new(
            config.origin.clone(),
            ChoicePolicy {
                block_period: config.block_period,
            },
        );
        choice.set_static(
            config
                .alternative_hosts
                .iter()
                .map(|a| Listed::new(a.clone(), is_local(a)))
                .collect(),
        );
        let dialer = Dialer::new(&config);
        let client = Client {
            inner: Arc::new(Inner {
                config,
                discovery: DiscoveryTask::new(),
                dialer,
                origin_target,
                alternative_name,
                origin_label,
                state: Mutex::new(State {
                    choice,
                    connections: HashMap::new(),
                }),
            }),
        };
        client.start_discovery();
        Ok(client)
    }

    /// The client behind `weak`, if a clone is still alive.
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<Client> {
        weak.upgrade().map(|inner| Client { inner })
    }

    /// `GET path` (path and query, e.g. `/api/v1/pods?limit=10`).
    pub async fn get(&self, path: &str) -> Result<Response<Incoming>, Error> {
        let request = Request::get(path)
            .body(Bytes::new())
            .map_err(|e| Error::InvalidRequest(e.to_string()))?;
        self.send(request).await
    }

    /// Sends `request` to the best endpoint, moving on to the next one when
    /// the request was never sent or is a GET or HEAD. The URI's path and
    /// query are used; its scheme and authority are replaced by the chosen
    /// endpoint's. A `Host` header is dropped (HTTP/2 carries
    /// `:authority`), and so are request extensions.
    ///
    /// A response of any status is returned as is; only failures to get
    /// one move the request.
    pub async fn send(&self, request: Request<Bytes>) -> Result<Response<Incoming>, Error> {
        self.send_to(request, None)
            .await
            .map(|(response, _)| response)
    }

    /// Like [`send`](Self::send), and reads the whole response body. A GET
    /// or HEAD whose body breaks off (the server died mid-response) blocks
    /// that endpoint and is sent again, to the next endpoint, up to
    /// [`BODY_RETRIES`] times; other methods return [`Error::Body`].
    ///
    /// For anything but a watch or a very large list, this is the call to
    /// use: a request fails only when no endpoint can answer it whole.
    pub async fn fetch(&self, request: Request<Bytes>) -> Result<Response<Bytes>, Error> {
        let (parts, body) = request.into_parts();
        let repeatable = parts.method == Method::GET || parts.method == Method::HEAD;
        let mut retries = 0;
        loop {
            let mut again = Request::new(body.clone());
            *again.method_mut() = parts.method.clone();
            *again.uri_mut() = parts.uri.clone();
            *again.headers_mut() = parts.headers.clone();
            let (response, key) = self.send_to(again, (retries > 0).then_some("body")).await?;
            let (head, incoming) = response.into_parts();
            match incoming.collect().await {
                Ok(collected) => return Ok(Response::from_parts(head, collected.to_bytes())),
                Err(error) => {
                    self.fail_body(&key, &format!("response body broke off: {error}"));
                    if !repeatable || retries >= BODY_RETRIES {
                        return Err(Error::Body {
                            endpoint: key.to_string(),
                            source: error,
                        });
                    }
                    retries += 1;
                }
            }
        }
    }

    /// [`send`](Self::send), also returning the endpoint that answered;
    /// `moved`: the kind of failure of an earlier attempt of the same
    /// request (`body` when its response broke off), if any.
    pub(crate) async fn send_to(
        &self,
        request: Request<Bytes>,
        moved: Option<&'static str>,
    ) -> Result<(Response<Incoming>, Address), Error> {
        self.start_discovery();
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .ok_or_else(|| Error::InvalidRequest(format!("`{}` has no path", parts.uri)))?;
        parts.headers.remove(HOST);
        if let Some(credentials) = &self.inner.config.credentials {
            if !parts.headers.contains_key(AUTHORIZATION) {
                if let Some(value) = credentials
                    .authorization()
                    .await
                    .map_err(Error::Credentials)?
                {
                    parts.headers.insert(AUTHORIZATION, value);
                }
            }
        }
        for (name, value) in &self.inner.config.headers {
            if !parts.headers.contains_key(name) {
                parts.headers.insert(name.clone(), value.clone());
            }
        }
        let repeatable = parts.method == Method::GET || parts.method == Method::HEAD;
        let redialed = AtomicBool::new(false);
        let (parts, body, path, redialed) = (&parts, &body, &path, &redialed);
        let reached = failover::attempt(self, |key| async move {
            self.attempt(key, parts, body, path, repeatable, redialed)
                .await
        })
        .await;
        match reached {
            Ok(Reached {
                value: Ok((response, key)),
                failures,
            }) => {
                let failed_over = failures.last().map(|a| a.kind).or(moved);
                self.succeeded(&key, &response, failed_over);
                Ok((response, key))
            }
            Ok(Reached { value: Err(e), .. }) => Err(e),
            Err(attempts) => Err(Error::Unreachable { attempts }),
        }
    }

    /// One attempt of a request on `key`: `Break` with the response, or
    /// with an error that must not move on (the request may have been
    /// sent); `Continue` with the failure when the next endpoint may take
    /// it.
    async fn attempt(
        &self,
        key: Address,
        parts: &http::request::Parts,
        body: &Bytes,
        path: &http::uri::PathAndQuery,
        repeatable: bool,
        redialed: &AtomicBool,
    ) -> ControlFlow<Result<(Response<Incoming>, Address), Error>, Attempt> {
        // The origin is dialed as a plain client would, even when an
        // alternative names it.
        let alternative = key != self.inner.config.origin;
        let target = match self.target(&key, alternative) {
            Ok(target) => target,
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        let uri = Uri::builder()
            .scheme("https")
            .authority(target.authority.clone())
            .path_and_query(path.clone())
            .build();
        let uri = match uri {
            Ok(uri) => uri,
            Err(e) => return ControlFlow::Break(Err(Error::InvalidRequest(e.to_string()))),
        };
        loop {
            let (mut sender, reused) = match self.connection(&key, &target, alternative).await {
                Ok(connection) => connection,
                Err(e) => {
                    return ControlFlow::Continue(self.fail(&key, e.failure, e.kind, &e.reason))
                }
            };
            let mut outgoing = Request::new(Body::new(body.clone()));
            *outgoing.method_mut() = parts.method.clone();
            *outgoing.uri_mut() = uri.clone();
            *outgoing.headers_mut() = parts.headers.clone();
            if let Some(alt_used) = &target.alt_used {
                outgoing
                    .headers_mut()
                    .insert(crate::ALT_USED, alt_used.clone());
            }
            match sender.try_send_request(outgoing).await {
                Ok(response) => return ControlFlow::Break(Ok((response, key))),
                Err(mut e) => {
                    let never_sent = e.take_message().is_some();
                    let error = e.into_error();
                    if never_sent && reused && !redialed.swap(true, Ordering::Relaxed) {
                        // An open connection that went away while idle
                        // (GOAWAY, idle close) says nothing about the
                        // endpoint: dial it again, once per request.
                        self.state().connections.remove(&key);
                        continue;
                    }
                    let reason = error.to_string();
                    let attempt = self.fail(&key, Failure::Network, "request", &reason);
                    if !(never_sent || repeatable) {
                        return ControlFlow::Break(Err(Error::MaybeSent {
                            method: parts.method.clone(),
                            endpoint: key.to_string(),
                            source: error,
                        }));
                    }
                    return ControlFlow::Continue(attempt);
                }
            }
        }
    }

    /// The endpoint in use, `host:port`, once one has answered.
    pub fn endpoint_in_use(&self) -> Option<String> {
        self.state().choice.in_use().map(Address::to_string)
    }

    /// Every endpoint the client knows (the origin first), with its state.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        let now = Instant::now();
        let mut state = self.state();
        state.choice.expire(now);
        let choice = &state.choice;
        let origin = choice.origin().clone();
        let mut out = vec![EndpointStatus {
            address: origin.to_string(),
            origin: true,
            local: is_local(&origin),
            blocked: choice.block(&origin, now),
            in_use: choice.in_use() == Some(&origin),
        }];
        for listed in choice.alternatives() {
            if listed.key == origin {
                continue;
            }
            out.push(EndpointStatus {
                address: listed.key.to_string(),
                origin: false,
                local: listed.local,
                blocked: choice.block(&listed.key, now),
                in_use: choice.in_use() == Some(&listed.key),
            });
        }
        out
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.inner.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The client's settings (the kube connector reads them).
    #[cfg(feature = "kube")]
    pub(crate) fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn target(&self, key: &Address, alternative: bool) -> Result<Target, Error> {
        if !alternative {
            return Ok(self.inner.origin_target.clone());
        }
        let name = &self.inner.config.alternative_server_name;
        let authority = if key.port == 443 {
            name.clone()
        } else {
            format!("{name}:{}", key.port)
        };
        Ok(Target {
            server_name: self.inner.alternative_name.clone(),
            authority: authority
                .parse()
                .map_err(|_| Error::InvalidServerName { name: name.clone() })?,
            alt_used: HeaderValue::from_str(&key.to_string()).ok(),
        })
    }

    /// The open connection to `key` (and `true`), or a new one, checked
    /// first when `alternative` (and `false`).
    async fn connection(
        &self,
        key: &Address,
        target: &Target,
        alternative: bool,
    ) -> Result<(SendRequest<Body>, bool), crate::connect::ConnectError> {
        {
            let mut state = self.state();
            if let Some(sender) = state.connections.get(key) {
                if !sender.is_closed() {
                    return Ok((sender.clone(), true));
                }
                state.connections.remove(key);
            }
        }
        let sender = self.inner.dialer.connect(key, target, alternative).await?;
        self.state().connections.insert(key.clone(), sender.clone());
        tracing::debug!(endpoint = %key, alternative, "connected");
        Ok((sender, false))
    }

    /// The [`ClientMetrics`](crate::ClientMetrics) this client reports to.
    pub fn metrics(&self) -> &crate::ClientMetrics {
        &self.inner.config.metrics
    }

    fn endpoint_labels(&self, key: &Address) -> EndpointLabels {
        EndpointLabels {
            origin: self.inner.origin_label.clone(),
            endpoint: key.to_string(),
        }
    }

    /// Records that `key` failed (`kind` is the metric's reason label):
    /// drops its connection and blocks it; returns the [`Attempt`].
    pub(crate) fn fail(
        &self,
        key: &Address,
        failure: Failure,
        kind: &'static str,
        reason: &str,
    ) -> Attempt {
        let (block, was_in_use) = {
            let mut state = self.state();
            // A DNS name is resolved again on the next dial.
            state.connections.remove(key);
            let was_in_use = state.choice.in_use() == Some(key);
            (
                state.choice.record_failure(key, failure, Instant::now()),
                was_in_use,
            )
        };
        let metrics = &self.inner.config.metrics;
        let labels = self.endpoint_labels(key);
        metrics
            .failures
            .get_or_create(&FailureLabels {
                origin: labels.origin.clone(),
                endpoint: labels.endpoint.clone(),
                reason: kind,
            })
            .inc();
        metrics
            .blocks
            .get_or_create(&BlockLabels {
                origin: labels.origin.clone(),
                endpoint: labels.endpoint.clone(),
                block: match block {
                    Block::Forever => "permanent",
                    Block::Until(_) => "period",
                },
            })
            .inc();
        let until = match block {
            Block::Forever => f64::INFINITY,
            Block::Until(at) => unix_seconds(at),
        };
        metrics.blocked_until.get_or_create(&labels).set(until);
        if was_in_use {
            metrics.in_use.get_or_create(&labels).set(0);
        }
        tracing::warn!(endpoint = %key, ?failure, ?block, "API server endpoint failed: {reason}");
        Attempt {
            endpoint: key.to_string(),
            failure,
            kind,
            reason: reason.to_owned(),
        }
    }

    fn succeeded(
        &self,
        key: &Address,
        response: &Response<Incoming>,
        failed_over: Option<&'static str>,
    ) {
        self.record_success(key, failed_over);
        self.learn_alternatives(response.headers());
    }

    /// Records that `key` answered (after an attempt elsewhere that failed
    /// this way, when `failed_over`): it becomes the endpoint in use.
    pub(crate) fn record_success(&self, key: &Address, failed_over: Option<&'static str>) {
        let metrics = &self.inner.config.metrics;
        if let Some(reason) = failed_over {
            metrics
                .failovers
                .get_or_create(&FailoverLabels {
                    origin: self.inner.origin_label.clone(),
                    endpoint: key.to_string(),
                    reason,
                })
                .inc();
        }
        let mut state = self.state();
        if state.choice.in_use() != Some(key) {
            tracing::info!(endpoint = %key, "API server endpoint in use");
            if let Some(previous) = state.choice.in_use() {
                metrics
                    .in_use
                    .get_or_create(&self.endpoint_labels(previous))
                    .set(0);
            }
            metrics
                .in_use
                .get_or_create(&self.endpoint_labels(key))
                .set(1);
        }
        let now = Instant::now();
        let was_blocked = state.choice.is_blocked(key, now);
        state.choice.record_success(key);
        if was_blocked && !state.choice.is_blocked(key, now) {
            metrics
                .blocked_until
                .get_or_create(&self.endpoint_labels(key))
                .set(0.0);
        }
    }

    /// Learns alternatives from the `Alt-Svc` header of a response, if
    /// learning is on and the header is there.
    pub(crate) fn learn_alternatives(&self, headers: &http::HeaderMap) {
        if !self.inner.config.learn_alt_svc || !headers.contains_key(http::header::ALT_SVC) {
            return;
        }
        let now = Instant::now();
        let mut state = self.state();
        let previous = known_locality(&state.choice);
        let learned = learn::from_headers(
            headers,
            &self.inner.config.origin,
            now,
            self.inner.config.max_age,
            &|a| previous.get(a).copied(),
        );
        if let Learned::Replace(listed) = learned {
            state.choice.set_learned(listed);
            state.forget_unlisted();
        }
    }

    /// A response body from `key` broke off: block it like any network
    /// failure.
    pub(crate) fn fail_body(&self, key: &Address, reason: &str) {
        self.fail(key, Failure::Network, "body", reason);
    }

    /// Replaces the discovered alternatives; returns how many there are.
    pub(crate) fn set_discovered(&self, addresses: Vec<Address>) -> usize {
        let mut state = self.state();
        let previous = known_locality(&state.choice);
        let listed: Vec<Listed<Address>> = addresses
            .into_iter()
            .map(|a| {
                let local = previous.get(&a).copied().unwrap_or_else(|| is_local(&a));
                Listed::new(a, local)
            })
            .collect();
        let count = listed.len();
        tracing::debug!(count, "discovered API server endpoints");
        let addresses: Vec<Address> = listed.iter().map(|l| l.key.clone()).collect();
        self.inner.discovery.discovered.send_if_modified(|current| {
            let changed = *current != addresses;
            *current = addresses;
            changed
        });
        state.choice.set_discovered(listed);
        state.forget_unlisted();
        drop(state);
        self.inner
            .config
            .metrics
            .discovered
            .get_or_create(&self.origin_labels())
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        count
    }

    /// The endpoints EndpointSlice discovery lists now, and each change:
    /// for a program that feeds them to an endpoint set of its own (the
    /// agent's `--discover-endpoints`). Empty until the first list, and
    /// again once discovery has failed for [`ClientConfig::max_age`](crate::ClientConfig::max_age).
    pub fn discovered(&self) -> tokio::sync::watch::Receiver<Vec<Address>> {
        self.inner.discovery.discovered.subscribe()
    }

    /// How many alternatives discovery lists now.
    pub(crate) fn discovered_count(&self) -> usize {
        self.state().choice.discovered().len()
    }

    /// Counts a failed discovery `stage` (`list` or `watch`).
    pub(crate) fn discovery_failed(&self, stage: &'static str) {
        self.inner
            .config
            .metrics
            .discovery_failures
            .get_or_create(&DiscoveryFailureLabels {
                origin: self.inner.origin_label.clone(),
                stage,
            })
            .inc();
    }

    fn origin_labels(&self) -> OriginLabels {
        OriginLabels {
            origin: self.inner.origin_label.clone(),
        }
    }
}

/// The client's endpoints as a failover pool: the choice at `now`, once
/// expired alternatives are gone.
impl Pool for Client {
    type Endpoint = Address;

    fn next(&self, now: Instant, tried: &[Address]) -> Option<Address> {
        let mut state = self.state();
        state.choice.expire(now);
        state.choice.pick(now, tried)
    }
}

impl State {
    /// Forgets what belongs to endpoints no longer listed, so a churning
    /// list cannot grow the maps without bound.
    fn forget_unlisted(&mut self) {
        let State {
            choice,
            connections,
        } = self;
        connections.retain(|key, _| key == choice.origin() || choice.is_listed(key));
    }
}

/// The locality of every listed alternative, so a relisted address costs
/// no interface lookup.
fn known_locality(choice: &EndpointChoice<Address>) -> HashMap<Address, bool> {
    choice
        .alternatives()
        .into_iter()
        .map(|l| (l.key.clone(), l.local))
        .collect()
}

/// `at` as Unix seconds, for a timestamp gauge.
fn unix_seconds(at: Instant) -> f64 {
    let from_now = at.saturating_duration_since(Instant::now());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now + from_now).as_secs_f64()
}

fn is_local(address: &Address) -> bool {
    match address.host {
        Host::Ip(ip) => is_local_ip(ip),
        Host::Name(_) => false,
    }
}

fn server_name(name: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(name.to_owned()).map_err(|_| Error::InvalidServerName {
        name: name.to_owned(),
    })
}

fn authority(address: &Address) -> Result<http::uri::Authority, Error> {
    let text = if address.port == 443 {
        match &address.host {
            Host::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    } else {
        address.to_string()
    };
    text.parse().map_err(|_| Error::InvalidOrigin {
        origin: address.to_string(),
        reason: "cannot be an HTTP authority".into(),
    })
}
