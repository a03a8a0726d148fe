//! Active discovery of the API server's endpoints from the
//! `default/kubernetes` EndpointSlices, so failover works with unmodified
//! API servers (which send no `Alt-Svc`).
//!
//! With [`ClientConfig::endpoint_slice_discovery`](crate::ClientConfig::endpoint_slice_discovery)
//! a background task lists
//! `/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name=kubernetes`
//! **through the client itself** (so discovery fails over like every
//! request), then watches from the list's `resourceVersion` with bookmarks
//! and a [`WATCH_TIMEOUT`], and after each change replaces the client's
//! discovered alternatives:
//!
//! - each endpoint whose `conditions.ready` is not `false` is listed at each
//!   of its addresses of the slice's family (`IPv4` or `IPv6`; `FQDN`
//!   slices are skipped), with the slice's port named `https`, else its
//!   only port (a slice with several ports and none named `https` is
//!   skipped): [`EndpointSlice::ready_addresses`], where the list and the
//!   watch events are decoded, in [`apiway_wire::endpointslice`];
//! - an address on a local interface counts as local, so it is preferred;
//! - every candidate still passes the TLS and `/readyz` check before its
//!   first use, like any alternative.
//!
//! Failures:
//!
//! - a watch that ends (its timeout) is started again at once from the
//!   last `resourceVersion` (one that ends without a single event or
//!   bookmark counts as a failure);
//! - `410 Gone` (the `resourceVersion` is too old, as an `ERROR` event or
//!   as the response status) makes it list again at once;
//! - any other failure (a list or watch that gets no answer, a status
//!   other than 200, a body that breaks off or does not decode, a watch
//!   line over [`endpointslice::MAX_EVENT_LEN`]) is counted
//!   in [`ClientMetrics::discovery_failures`](crate::ClientMetrics::discovery_failures)
//!   and retried after a back-off of 1 s, doubling to 30 s; a watch body
//!   that breaks off also blocks the endpoint that served it, like any
//!   network failure;
//! - while discovery keeps failing, the last list stays in use for
//!   [`ClientConfig::max_age`](crate::ClientConfig::max_age) (70 s) after the
//!   last successful list, watch event or bookmark; then it is dropped, so
//!   stale endpoints do not live forever (the static list, `Alt-Svc` and
//!   the origin remain). The next successful list restores it.
//!
//! The task starts inside the tokio runtime, when the client is made
//! there or at its first request, and ends when the last clone of the
//! [`Client`] is dropped: it holds the client only for the
//! length of one request.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use apiway_core::endpoint::Address;
use apiway_wire::endpointslice::{self, EndpointSlice, EndpointSliceError, WatchEvent};
use bytes::{Bytes, BytesMut};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::{Client, Inner};
use crate::error::Error;

/// The list of the API server Service's EndpointSlices.
pub(crate) const SLICES_PATH: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes";

/// `timeoutSeconds` of each watch: the server ends it after this long and
/// the client starts a new one from the last `resourceVersion`.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(290);

/// Time for a list to be answered and read whole.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// First back-off after a failure; doubles up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The EndpointSlices as last listed or watched.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Slices {
    by_name: BTreeMap<String, EndpointSlice>,
    resource_version: String,
}

impl Slices {
    /// Reads an `EndpointSliceList`.
    pub(crate) fn from_list(body: &[u8]) -> Result<Slices, EndpointSliceError> {
        let list = endpointslice::decode_list(body)?;
        Ok(Slices {
            by_name: list
                .items
                .into_iter()
                .map(|slice| (slice.name.clone(), slice))
                .collect(),
            resource_version: list.resource_version,
        })
    }

    /// Applies one watch event line.
    fn apply(&mut self, line: &[u8]) -> Result<Applied, String> {
        match endpointslice::decode_event(line).map_err(|e| e.to_string())? {
            WatchEvent::Error(status) if status.is_expired() => Ok(Applied::Expired),
            WatchEvent::Error(status) => Err(format!("watch ERROR event: {status}")),
            WatchEvent::Bookmark { resource_version } => {
                self.resource_version = resource_version;
                Ok(Applied::Bookmark)
            }
            WatchEvent::Added(slice) | WatchEvent::Modified(slice) => {
                self.resource_version.clone_from(&slice.resource_version);
                self.by_name.insert(slice.name.clone(), slice);
                Ok(Applied::Changed)
            }
            WatchEvent::Deleted(slice) => {
                self.resource_version = slice.resource_version;
                self.by_name.remove(&slice.name);
                Ok(Applied::Changed)
            }
        }
    }

    /// Every ready endpoint address, slices in name order, each once.
    pub(crate) fn addresses(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        for slice in self.by_name.values() {
            for address in slice.ready_addresses() {
                let address = Address::from(address);
                if !out.contains(&address) {
                    out.push(address);
                }
            }
        }
        out
    }
}

/// What a watch event did.
#[derive(Debug, PartialEq, Eq)]
enum Applied {
    Changed,
    Bookmark,
    /// `410 Gone`: list again.
    Expired,
}

impl Client {
    /// Lists the `default/kubernetes` EndpointSlices once (through this
    /// client, so it fails over like any request), replaces the discovered
    /// alternatives with their ready endpoints, and returns how many there
    /// are. Works whether or not
    /// [`endpoint_slice_discovery`](crate::ClientConfig::endpoint_slice_discovery)
    /// is on; without it, the list stays until the next call.
    pub async fn discover_now(&self) -> Result<usize, Error> {
        let slices = self.list_slices().await?;
        Ok(self.set_discovered(slices.addresses()))
    }

    async fn list_slices(&self) -> Result<Slices, Error> {
        let request = Request::get(SLICES_PATH)
            .body(Bytes::new())
            .map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let response = tokio::time::timeout(LIST_TIMEOUT, self.fetch(request))
            .await
            .map_err(|_| {
                Error::Discovery(format!("the list took longer than {LIST_TIMEOUT:?}"))
            })??;
        if response.status() == StatusCode::NOT_FOUND {
            return Err(Error::Discovery(format!(
                "the server does not serve discovery.k8s.io/v1 EndpointSlices (GET {SLICES_PATH} answered 404)"
            )));
        }
        if response.status() != StatusCode::OK {
            return Err(Error::Discovery(format!(
                "the list answered {}: {}",
                response.status(),
                String::from_utf8_lossy(response.body()).trim()
            )));
        }
        Slices::from_list(response.body()).map_err(|e| Error::Discovery(e.to_string()))
    }

    /// Starts the discovery task if it is configured, not running, and
    /// this is inside a tokio runtime.
    pub(crate) fn start_discovery(&self) {
        let task = &self.inner.discovery;
        if !self.inner.config.endpoint_slice_discovery
            || task.started.load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if task.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let stop = task.stop.subscribe();
        runtime.spawn(run(weak, stop));
    }
}

/// The discovery loop: see the [module docs](self).
async fn run(weak: Weak<Inner>, mut stop: watch::Receiver<()>) {
    let mut backoff = BACKOFF_START;
    let mut last_success = Instant::now();
    let mut slices: Option<Slices> = None;
    loop {
        let Some(client) = Client::upgrade(&weak) else {
            return;
        };
        let outcome = match slices.take() {
            None => tokio::select! {
                listed = client.list_slices() => match listed {
                    Ok(listed) => {
                        client.set_discovered(listed.addresses());
                        slices = Some(listed);
                        Outcome::Progress
                    }
                    Err(e) => Outcome::Failed("list", e.to_string()),
                },
                _ = stop.changed() => return,
            },
            Some(mut current) => {
                let outcome =
                    watch_once(client, &weak, &mut current, &mut stop, &mut last_success).await;
                if !matches!(outcome, Outcome::Expired) {
                    slices = Some(current);
                }
                outcome
            }
        };
        match outcome {
            Outcome::Stopped => return,
            Outcome::Progress => {
                last_success = Instant::now();
                backoff = BACKOFF_START;
            }
            Outcome::Expired => {
                tracing::debug!("EndpointSlice watch expired (410): listing again");
            }
            Outcome::Failed(stage, reason) => {
                tracing::warn!(stage, "EndpointSlice discovery failed: {reason}");
                let Some(client) = Client::upgrade(&weak) else {
                    return;
                };
                client.discovery_failed(stage);
                let max_age = client.inner.config.max_age;
                if last_success.elapsed() >= max_age && client.discovered_count() > 0 {
                    tracing::warn!(
                        ?max_age,
                        "EndpointSlice discovery has failed since {max_age:?}: dropping the discovered endpoints"
                    );
                    client.set_discovered(Vec::new());
                }
                drop(client);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// How one list or watch went.
enum Outcome {
    /// The client is gone.
    Stopped,
    /// A list, or a watch that saw events or bookmarks, and ended cleanly.
    Progress,
    /// `410 Gone`: list again.
    Expired,
    /// `list` or `watch` failed, for this reason.
    Failed(&'static str, String),
}

/// One watch from `slices`' `resourceVersion`, applying its events until it
/// ends. Holds `client` only until the response headers arrive.
async fn watch_once(
    client: Client,
    weak: &Weak<Inner>,
    slices: &mut Slices,
    stop: &mut watch::Receiver<()>,
    last_success: &mut Instant,
) -> Outcome {
    let path = format!(
        "{SLICES_PATH}&watch=1&allowWatchBookmarks=true&timeoutSeconds={}&resourceVersion={}",
        WATCH_TIMEOUT.as_secs(),
        slices.resource_version
    );
    let request = match Request::get(path.as_str()).body(Bytes::new()) {
        Ok(request) => request,
        Err(e) => return Outcome::Failed("watch", e.to_string()),
    };
    let started = tokio::select! {
        started = client.send_to(request, None) => started,
        _ = stop.changed() => return Outcome::Stopped,
    };
    let (response, endpoint) = match started {
        Ok(answered) => answered,
        Err(e) => return Outcome::Failed("watch", e.to_string()),
    };
    drop(client);
    match response.status() {
        StatusCode::OK => {}
        StatusCode::GONE => return Outcome::Expired,
        status => return Outcome::Failed("watch", format!("the watch answered {status}")),
    }
    let mut body = response.into_body();
    let mut pending = BytesMut::new();
    let mut news = false;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = stop.changed() => return Outcome::Stopped,
        };
        let data = match frame {
            // A watch with bookmarks always has news before its timeout;
            // one that ends without any is not working (and must not be
            // restarted in a tight loop).
            None if news => return Outcome::Progress,
            None => return Outcome::Failed("watch", "the watch ended without an event".into()),
            Some(Err(e)) => {
                let reason = format!("the watch broke off: {e}");
                if let Some(client) = Client::upgrade(weak) {
                    client.fail_body(&endpoint, &reason);
                }
                return Outcome::Failed("watch", reason);
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line = pending.split_to(end + 1);
            let line = line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            match slices.apply(line) {
                Ok(Applied::Expired) => return Outcome::Expired,
                Ok(applied) => {
                    news = true;
                    *last_success = Instant::now();
                    if applied == Applied::Changed {
                        let Some(client) = Client::upgrade(weak) else {
                            return Outcome::Stopped;
                        };
                        client.set_discovered(slices.addresses());
                    }
                }
                Err(reason) => return Outcome::Failed("watch", reason),
            }
        }
        // A line's end has not come within the longest line the decoder
        // reads: stop buffering.
        if pending.len() > endpointslice::MAX_EVENT_LEN {
            return Outcome::Failed(
                "watch",
                format!(
                    "a watch event is longer than {} bytes",
                    endpointslice::MAX_EVENT_LEN
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn slice(name: &str, family: &str, endpoints: Value, ports: Value) -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "resourceVersion": "7"},
            "addressType": family,
            "endpoints": endpoints,
            "ports": ports,
        })
    }

    fn shown(addresses: &[Address]) -> Vec<String> {
        addresses.iter().map(Address::to_string).collect()
    }

    #[test]
    fn ready_addresses_of_every_slice_in_name_order_each_once() {
        // Which endpoints and port a slice yields is `apiway_wire`'s rule
        // (`EndpointSlice::ready_addresses`), tested there; here, how the
        // slices add up.
        let list = json!({
            "kind": "EndpointSliceList",
            "metadata": {"resourceVersion": "7"},
            "items": [
                slice("b-v6", "IPv6", json!([{"addresses": ["fd00::1"]}]), json!([{"port": 6443}])),
                slice("a-v4", "IPv4", json!([
                    {"addresses": ["10.0.0.1", "10.0.0.9"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.3"], "conditions": {}},
                    {"addresses": ["not-an-ip"]},
                ]), json!([{"name": "metrics", "port": 9090}, {"name": "https", "port": 6443}])),
                slice("c-fqdn", "FQDN", json!([{"addresses": ["api.example"]}]), json!([{"port": 6443}])),
                slice("d-ambiguous", "IPv4", json!([{"addresses": ["10.0.0.4"]}]),
                    json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}])),
                slice("e-dup", "IPv4", json!([{"addresses": ["10.0.0.1"]}]), json!([{"name": "https", "port": 6443}])),
            ],
        });
        let slices = Slices::from_list(list.to_string().as_bytes()).expect("parses");
        assert_eq!(slices.resource_version, "7");
        assert_eq!(slices.by_name.len(), 5, "FQDN and portless slices are kept");
        assert_eq!(
            shown(&slices.addresses()),
            [
                "10.0.0.1:6443",
                "10.0.0.9:6443",
                "10.0.0.3:6443",
                "[fd00::1]:6443"
            ]
        );
        assert!(Slices::from_list(b"{}").is_err());
        assert!(Slices::from_list(b"not json").is_err());
    }

    #[test]
    fn watch_events_update_the_slices() {
        let mut slices = Slices::default();
        let event = |kind: &str, object: Value| json!({"type": kind, "object": object}).to_string();
        let ready = |rv: &str, ready: bool| {
            let mut s = slice(
                "k",
                "IPv4",
                json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}]),
                json!([{"name": "https", "port": 6443}]),
            );
            s["metadata"]["resourceVersion"] = json!(rv);
            s
        };
        let applied = slices.apply(event("ADDED", ready("8", true)).as_bytes());
        assert_eq!(applied, Ok(Applied::Changed));
        assert_eq!(shown(&slices.addresses()), ["10.0.0.1:6443"]);
        let applied = slices.apply(event("MODIFIED", ready("9", false)).as_bytes());
        assert_eq!(applied, Ok(Applied::Changed));
        assert!(slices.addresses().is_empty());
        assert_eq!(slices.resource_version, "9");
        let bookmark = json!({"kind": "EndpointSlice", "metadata": {"resourceVersion": "12"}});
        assert_eq!(
            slices.apply(event("BOOKMARK", bookmark).as_bytes()),
            Ok(Applied::Bookmark)
        );
        assert_eq!(slices.resource_version, "12");
        let applied = slices.apply(event("DELETED", ready("13", false)).as_bytes());
        assert_eq!(applied, Ok(Applied::Changed));
        assert!(slices.by_name.is_empty());
        let gone = json!({"kind": "Status", "code": 410, "reason": "Expired"});
        assert_eq!(
            slices.apply(event("ERROR", gone).as_bytes()),
            Ok(Applied::Expired)
        );
        let other = json!({"kind": "Status", "code": 500, "message": "boom"});
        assert!(slices.apply(event("ERROR", other).as_bytes()).is_err());
        assert!(slices.apply(b"{").is_err());
    }
}
