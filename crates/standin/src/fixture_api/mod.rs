//! A fixture Kubernetes API: an in-memory store of objects with list and
//! watch semantics like the real API server's, served over plain HTTP/1.1
//! ([`FixtureApi::serve`]) and mounted by stand-in API servers
//! ([`StandinConfig::with_api_upstream`](crate::StandinConfig::with_api_upstream)),
//! the way kube-apiserver sits in front of etcd: several stand-ins share one
//! store, so killing one breaks a client's connection, not the data.
//!
//! What it keeps, as the real API does:
//!
//! - one global `resourceVersion` counter (decimal, like etcd revisions),
//!   bumped by every change; every object carries the revision of its last
//!   change, every list the revision it was taken at;
//! - a bounded history of changes (the last [`DEFAULT_HISTORY`]), so a watch
//!   can start from a `resourceVersion`; one older than the history gets an
//!   `ERROR` event with a `410 Gone` `Status` (reason `Expired`), as the
//!   real API answers a watch (its HTTP status is 200; the `410` is in the
//!   event). [`FixtureApi::compact`] forgets the history at once, like an
//!   etcd compaction, and ends every open watch that way;
//! - `uid`, `creationTimestamp` and `generation` on create; `generation`
//!   goes up when `spec` changes.
//!
//! The resources are [`RESOURCES`]; adding one is one line there. The
//! HTTP side (paths, query parameters, discovery documents) is described on
//! [`FixtureApi::serve`].

mod http;
mod selector;
pub mod tokens;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::watch;

pub use self::http::FixtureServer;
pub use apiway_wire::kube_patch::{self as patch, PatchKind};
pub use selector::Selector;
pub use tokens::StaticToken;

/// The header a front (the stand-in API server) sets to the user a client
/// certificate it verified names, as kube-apiserver's front proxy does;
/// the fixture lets such a request in without a token.
pub const REMOTE_USER: &str = "x-remote-user";
/// The header carrying that user's groups (the certificate's
/// organizations), one value each.
pub const REMOTE_GROUP: &str = "x-remote-group";

/// How many changes the history keeps by default.
pub const DEFAULT_HISTORY: usize = 1000;

/// How often a watch that asked for bookmarks gets one, by default (the
/// real API server sends them about once a minute; tests want them sooner).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// One kind of object the fixture stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group; empty for the core group (`/api/v1`).
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Plural name, as in paths (`pods`).
    pub plural: &'static str,
    /// Singular name (`pod`).
    pub singular: &'static str,
    /// Kind (`Pod`).
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names kubectl accepts (`po`).
    pub short_names: &'static [&'static str],
    /// Whether it has a `status` subresource: then `.../status` writes
    /// change only `status`, and writes of the object keep the stored
    /// `status`.
    pub status: bool,
}

impl Resource {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The resources the fixture serves; add a line to serve another.
pub const RESOURCES: &[Resource] = &[
    core("pods", "pod", "Pod", true, &["po"], true),
    core("configmaps", "configmap", "ConfigMap", true, &["cm"], false),
    core("services", "service", "Service", true, &["svc"], true),
    core("namespaces", "namespace", "Namespace", false, &["ns"], true),
    core("nodes", "node", "Node", false, &["no"], true),
    core("events", "event", "Event", true, &["ev"], false),
    core("secrets", "secret", "Secret", true, &[], false),
    core(
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        &["sa"],
        false,
    ),
    Resource {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
        status: false,
    },
    Resource {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status: false,
    },
    Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        status: false,
    },
    Resource {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "tokenreviews",
        singular: "tokenreview",
        kind: "TokenReview",
        namespaced: false,
        short_names: &[],
        status: false,
    },
    group(
        "apps",
        "deployments",
        "deployment",
        "Deployment",
        true,
        &["deploy"],
        true,
    ),
    group(
        "apps",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        true,
        &["ds"],
        true,
    ),
    group(
        RBAC,
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
        &[],
        false,
    ),
    group(
        RBAC,
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    group(RBAC, "roles", "role", "Role", true, &[], false),
    group(
        RBAC,
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
        &[],
        false,
    ),
    gateway(
        "gatewayclasses",
        "gatewayclass",
        "GatewayClass",
        "v1",
        false,
        &["gc"],
    ),
    gateway("gateways", "gateway", "Gateway", "v1", true, &["gtw"]),
    gateway("tlsroutes", "tlsroute", "TLSRoute", "v1", true, &[]),
    gateway(
        "referencegrants",
        "referencegrant",
        "ReferenceGrant",
        "v1beta1",
        true,
        &["refgrant"],
    ),
];

/// A resource of `group`/`version`.
#[allow(clippy::too_many_arguments)]
const fn resource_of_group(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
) -> Resource {
    Resource {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        status,
    }
}

/// A core-group (`/api/v1`) resource.
const fn core(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
) -> Resource {
    resource_of_group(
        "",
        "v1",
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        status,
    )
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// A `v1` resource of a named group (what `deploy/` manifests hold, so
/// they apply; the fixture stores them and runs nothing).
const fn group(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
) -> Resource {
    resource_of_group(
        group,
        "v1",
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        status,
    )
}

/// A Gateway API resource (`gateway.networking.k8s.io`); all have a status
/// subresource.
const fn gateway(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    version: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> Resource {
    resource_of_group(
        GATEWAY_GROUP,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        true,
    )
}

/// The Gateway API's group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// An EndpointSlice of the `default/kubernetes` Service (labelled
/// `kubernetes.io/service-name: kubernetes`) with one endpoint at `addr`,
/// port named `https`, as the API server's endpoint reconciler writes it.
pub fn endpoint_slice(name: &str, addr: std::net::SocketAddr, ready: bool) -> Value {
    let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": family,
        "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": ready}}],
        "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}],
    })
}

/// The resource with this plural in `group`/`version`.
pub fn resource(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource a plural names in any group (`pods`, `endpointslices`).
fn resource_by_plural(plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.plural == plural)
}

/// An error the API answers with a `Status` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`,
    /// `BadRequest`, `MethodNotAllowed`).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
        }
    }

    fn not_found(resource: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.plural),
        )
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The `Status` object the API server sends for this error.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// How many requests of each kind the fixture served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixtureStats {
    /// List requests (collections, not watches).
    pub lists: u64,
    /// Watch requests.
    pub watches: u64,
}

/// The identity of a stored object: group, resource, namespace (empty for
/// cluster-scoped), name.
type Key = (&'static str, &'static str, String, String);

/// One change, kept in the history for watches.
#[derive(Clone, Debug)]
struct Change {
    revision: u64,
    resource: &'static Resource,
    before: Option<Value>,
    after: Option<Value>,
}

struct Store {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    history: VecDeque<Change>,
    /// Every change after this revision is in `history`.
    history_floor: u64,
    history_limit: usize,
    /// Bumped by [`FixtureApi::compact`]; a watch that began in an earlier
    /// epoch ends with 410.
    epoch: u64,
    next_uid: u64,
}

struct Shared {
    store: Mutex<Store>,
    /// The latest revision, for waking watches.
    changed: watch::Sender<u64>,
    bookmark_interval: Duration,
    lists: AtomicU64,
    watches: AtomicU64,
    /// Known bearer tokens; empty lets every request in.
    tokens: std::sync::RwLock<Arc<Vec<StaticToken>>>,
}

/// The fixture Kubernetes API: see the [module docs](self). Cheap to
/// clone; clones share the store.
#[derive(Clone)]
pub struct FixtureApi {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FixtureApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureApi")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl Default for FixtureApi {
    fn default() -> Self {
        Self::new()
    }
}

impl FixtureApi {
    /// An empty store with [`DEFAULT_HISTORY`] and
    /// [`DEFAULT_BOOKMARK_INTERVAL`].
    pub fn new() -> Self {
        Self::with_settings(DEFAULT_HISTORY, DEFAULT_BOOKMARK_INTERVAL)
    }

    /// An empty store keeping the last `history` changes, sending watch
    /// bookmarks every `bookmark_interval`.
    pub fn with_settings(history: usize, bookmark_interval: Duration) -> Self {
        let (changed, _) = watch::channel(0);
        FixtureApi {
            shared: Arc::new(Shared {
                store: Mutex::new(Store {
                    objects: BTreeMap::new(),
                    revision: 0,
                    history: VecDeque::new(),
                    history_floor: 0,
                    history_limit: history.max(1),
                    epoch: 0,
                    next_uid: 1,
                }),
                changed,
                bookmark_interval,
                lists: AtomicU64::new(0),
                watches: AtomicU64::new(0),
                tokens: std::sync::RwLock::new(Arc::new(Vec::new())),
            }),
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        match self.shared.store.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Sets the bearer tokens the API knows (see [`tokens`]): with any,
    /// a request needs one of them (or a client certificate the stand-in in
    /// front verified), and `TokenReview`s answer for them; with none,
    /// every request is let in and every review is unauthenticated.
    pub fn set_tokens(&self, tokens: Vec<StaticToken>) {
        let mut slot = match self.shared.tokens.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *slot = Arc::new(tokens);
    }

    pub(crate) fn tokens(&self) -> Arc<Vec<StaticToken>> {
        match self.shared.tokens.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Starts the revision counter at `revision` (an empty store only
    /// changes its numbering): a process started with the time in
    /// milliseconds hands out revisions above every one an earlier run
    /// did, so a client's watch from before a restart gets `410 Gone` and
    /// lists again, as after an etcd compaction (a real API server keeps
    /// its data over a restart; the fixture does not).
    pub fn start_revisions_at(&self, revision: u64) {
        let mut store = self.store();
        if store.revision < revision {
            store.revision = revision;
            store.history_floor = revision;
        }
    }

    /// The latest revision.
    pub fn resource_version(&self) -> u64 {
        self.store().revision
    }

    /// Requests served so far.
    pub fn stats(&self) -> FixtureStats {
        FixtureStats {
            lists: self.shared.lists.load(Ordering::SeqCst),
            watches: self.shared.watches.load(Ordering::SeqCst),
        }
    }

    /// Creates `object` or replaces the stored one of the same name
    /// (whatever its `resourceVersion` says). Returns the stored object.
    pub fn apply(&self, object: Value) -> Result<Value, ApiError> {
        self.write(object, Write::Apply)
    }

    /// Creates `object`; `409 AlreadyExists` if one of that name exists.
    pub fn create(&self, object: Value) -> Result<Value, ApiError> {
        self.write(object, Write::Create)
    }

    /// Replaces the stored object of that name: `404` if there is none,
    /// `409 Conflict` if `object` names a `resourceVersion` other than the
    /// stored one.
    pub fn replace(&self, object: Value) -> Result<Value, ApiError> {
        self.write(object, Write::Replace)
    }

    /// Deletes an object (`resource` is a plural: `pods`,
    /// `endpointslices`); returns it as it was.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let res = resource_by_plural(resource)
            .ok_or_else(|| ApiError::bad_request(format!("unknown resource {resource}")))?;
        self.delete_in(res, namespace, name)
    }

    /// Deletes an object as a `DELETE` request does: one with finalizers
    /// only gets a `deletionTimestamp` (and stays until a write leaves its
    /// finalizers empty); any other is removed. Returns the object as the
    /// answer carries it.
    pub(crate) fn delete_in(
        &self,
        res: &'static Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut store = self.store();
        let key = key(res, namespace, name);
        let stored = store
            .objects
            .get(&key)
            .ok_or_else(|| ApiError::not_found(res, name))?;
        if has_finalizers(stored) {
            if stored["metadata"].get("deletionTimestamp").is_some() {
                return Ok(stored.clone());
            }
            let mut marked = stored.clone();
            if let Some(meta) = marked.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            return Ok(self.commit(store, res, key, marked));
        }
        let before = store.objects.remove(&key).unwrap_or_default();
        Ok(self.commit_removal(store, res, before))
    }

    /// Records the removal of `before` (already taken out of the store).
    fn commit_removal(
        &self,
        mut store: MutexGuard<'_, Store>,
        res: &'static Resource,
        before: Value,
    ) -> Value {
        store.revision += 1;
        let revision = store.revision;
        let mut gone = before.clone();
        set_resource_version(&mut gone, revision);
        store.record(Change {
            revision,
            resource: res,
            before: Some(before),
            after: None,
        });
        drop(store);
        self.shared.changed.send_replace(revision);
        gone
    }

    /// Stores `object` under `key` at a new revision and records the change.
    fn commit(
        &self,
        mut store: MutexGuard<'_, Store>,
        res: &'static Resource,
        key: Key,
        mut object: Value,
    ) -> Value {
        store.revision += 1;
        let revision = store.revision;
        set_resource_version(&mut object, revision);
        let before = store.objects.insert(key, object.clone());
        store.record(Change {
            revision,
            resource: res,
            before,
            after: Some(object.clone()),
        });
        drop(store);
        self.shared.changed.send_replace(revision);
        object
    }

    /// Applies a `PATCH` of `kind` to the stored object (or, with
    /// `status`, to its status only): `404` if there is none, `422` if the
    /// patch does not apply, `409` if it sets a stale `resourceVersion`.
    pub fn patch(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        status: bool,
    ) -> Result<Value, ApiError> {
        if kind == PatchKind::Strategic && resource.group == GATEWAY_GROUP {
            // As for every custom resource on a real API server.
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "strategic merge patch is not supported for custom resources; use a merge or JSON patch",
            ));
        }
        let stored = self
            .store()
            .objects
            .get(&key(resource, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        let patched = patch::apply(kind, &stored, body)
            .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
        let scope = if status { Scope::Status } else { Scope::Main };
        self.write_in(patched, Write::Replace, scope, Some(resource))
    }

    /// The stored object, if any.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let res = resource_by_plural(resource)?;
        self.store()
            .objects
            .get(&key(res, namespace, name))
            .cloned()
    }

    /// The objects of `resource` in `namespace` (every namespace for
    /// `None`) matching both selectors, and the revision of the list.
    pub fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &Selector,
    ) -> (Vec<Value>, u64) {
        self.store().list(resource, namespace, labels, fields)
    }

    /// Forgets the change history (like an etcd compaction): a watch from
    /// any earlier `resourceVersion`, and every watch open now, ends with a
    /// `410 Expired` `ERROR` event, so clients must list again.
    pub fn compact(&self) {
        let mut store = self.store();
        store.history.clear();
        store.history_floor = store.revision;
        store.epoch += 1;
        let revision = store.revision;
        drop(store);
        self.shared.changed.send_replace(revision);
    }

    /// Changes after `since` and the current revision; `410` when some are
    /// no longer in the history or the history was compacted since `epoch`.
    fn changes_since(&self, since: u64, epoch: u64) -> Result<(Vec<Change>, u64), ApiError> {
        let store = self.store();
        if store.epoch != epoch || since < store.history_floor {
            return Err(ApiError::gone(format!(
                "too old resource version: {since} ({})",
                store.history_floor + 1
            )));
        }
        let changes = store
            .history
            .iter()
            .filter(|c| c.revision > since)
            .cloned()
            .collect();
        Ok((changes, store.revision))
    }

    fn write(&self, object: Value, mode: Write) -> Result<Value, ApiError> {
        self.write_in(object, mode, Scope::Whole, None)
    }

    /// Writes `object` (of `expected`, when the path named one) in `mode`,
    /// changing what `scope` allows.
    pub(crate) fn write_in(
        &self,
        mut object: Value,
        mode: Write,
        scope: Scope,
        expected: Option<&'static Resource>,
    ) -> Result<Value, ApiError> {
        let res = resource_of(&object)?;
        if expected.is_some_and(|e| e.group != res.group || e.plural != res.plural) {
            return Err(ApiError::bad_request(format!(
                "the body is a {} of {}, not what the path names",
                res.kind,
                res.api_version()
            )));
        }
        if res.plural == "tokenreviews" {
            return Err(ApiError::bad_request(
                "TokenReviews are created with POST only",
            ));
        }
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("object has no metadata"))?;
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::bad_request("metadata.name is required"))?
            .to_owned();
        let namespace = if res.namespaced {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or("default")
                .to_owned();
            meta.insert("namespace".into(), Value::String(ns.clone()));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        let asked_version = meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned);

        let mut store = self.store();
        let key = key(res, &namespace, &name);
        let before = store.objects.get(&key).cloned();
        match (&mode, &before) {
            (Write::Create, Some(_)) => {
                return Err(ApiError::new(
                    409,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", res.plural),
                ))
            }
            (Write::Replace, None) => return Err(ApiError::not_found(res, &name)),
            (Write::Replace, Some(stored)) => {
                let stored_version = stored["metadata"]["resourceVersion"].as_str();
                if asked_version.is_some() && asked_version.as_deref() != stored_version {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                            res.plural
                        ),
                    ));
                }
            }
            _ => {}
        }
        if res.status {
            match (scope, &before) {
                (Scope::Whole, _) => {}
                // A status write changes the status only.
                (Scope::Status, Some(stored)) => {
                    let status = object.get("status").cloned();
                    object = stored.clone();
                    match status {
                        Some(status) => object["status"] = status,
                        None => {
                            if let Some(fields) = object.as_object_mut() {
                                fields.remove("status");
                            }
                        }
                    }
                }
                (Scope::Status, None) => return Err(ApiError::not_found(res, &name)),
                // A write of the object keeps the stored status; a new
                // object starts without one (a Namespace as `Active`).
                (Scope::Main, Some(stored)) => match stored.get("status") {
                    Some(status) => object["status"] = status.clone(),
                    None => {
                        if let Some(fields) = object.as_object_mut() {
                            fields.remove("status");
                        }
                    }
                },
                (Scope::Main, None) => {
                    if let Some(fields) = object.as_object_mut() {
                        fields.remove("status");
                    }
                    if res.plural == "namespaces" {
                        object["status"] = json!({"phase": "Active"});
                    }
                }
            }
        }
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("object has no metadata"))?;
        match &before {
            Some(stored) => {
                // Set by the server, not by writers; `deletionTimestamp`
                // cannot be set or changed by a write.
                for field in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                ] {
                    match stored["metadata"].get(field) {
                        Some(value) => meta.insert(field.into(), value.clone()),
                        None => meta.remove(field),
                    };
                }
                let generation = stored["metadata"]["generation"].as_u64().unwrap_or(1);
                let spec_changed = object.get("spec") != stored.get("spec");
                let generation = if spec_changed {
                    generation + 1
                } else {
                    generation
                };
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("generation".into(), json!(generation));
                }
            }
            None => {
                let uid = store.next_uid;
                store.next_uid += 1;
                meta.insert(
                    "uid".into(),
                    json!(format!("00000000-0000-4000-8000-{uid:012x}")),
                );
                meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
                meta.remove("deletionTimestamp");
                meta.remove("deletionGracePeriodSeconds");
                meta.insert("generation".into(), json!(1));
            }
        }
        // An object being deleted goes once its last finalizer is removed.
        if object["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&object) {
            store.objects.remove(&key);
            let mut gone = object;
            if let Some(before) = before {
                gone["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"].clone();
            }
            return Ok(self.commit_removal(store, res, gone));
        }
        Ok(self.commit(store, res, key, object))
    }
}

/// How a write treats an existing object.
pub(crate) enum Write {
    Apply,
    Create,
    Replace,
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// All of it (the Rust API, for tests that set up any state).
    Whole,
    /// All but `status`, for resources with a status subresource (a
    /// request to the object's path).
    Main,
    /// `status` only (a request to `.../status`).
    Status,
}

fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Store {
    /// See [`FixtureApi::list`].
    fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &Selector,
    ) -> (Vec<Value>, u64) {
        let items = self
            .objects
            .iter()
            .filter(|((group, plural, ns, _), object)| {
                *group == resource.group
                    && *plural == resource.plural
                    && namespace.is_none_or(|want| want == ns)
                    && labels.matches_labels(object)
                    && fields.matches_fields(object)
            })
            .map(|(_, object)| object.clone())
            .collect();
        (items, self.revision)
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(oldest) = self.history.pop_front() {
                self.history_floor = oldest.revision;
            }
        }
    }
}

fn key(res: &'static Resource, namespace: &str, name: &str) -> Key {
    let namespace = if res.namespaced { namespace } else { "" };
    (res.group, res.plural, namespace.to_owned(), name.to_owned())
}

fn set_resource_version(object: &mut Value, revision: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

/// The resource an object's `apiVersion` and `kind` name.
fn resource_of(object: &Value) -> Result<&'static Resource, ApiError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    RESOURCES
        .iter()
        .find(|r| r.kind == kind && r.api_version() == api_version)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "no resource of kind {kind:?} in {api_version:?} is served"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, app: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": app}]},
        })
    }

    fn pods() -> &'static Resource {
        resource("", "v1", "pods").expect("pods")
    }

    fn version_of(object: &Value) -> u64 {
        object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("resourceVersion")
    }

    #[test]
    fn revisions_count_every_change() {
        let api = FixtureApi::new();
        assert_eq!(api.resource_version(), 0);
        let a = api.apply(pod("a", "web")).expect("apply");
        assert_eq!(version_of(&a), 1);
        assert_eq!(a["metadata"]["generation"], 1);
        let uid = a["metadata"]["uid"].clone();
        assert!(uid.is_string());
        assert!(a["metadata"]["creationTimestamp"].is_string());
        let b = api.apply(pod("b", "db")).expect("apply");
        assert_eq!(version_of(&b), 2);

        // A replace keeps uid and creation time, bumps generation on a
        // spec change only.
        let mut relabeled = pod("a", "web");
        relabeled["metadata"]["labels"]["tier"] = json!("front");
        let a2 = api.apply(relabeled).expect("apply");
        assert_eq!(version_of(&a2), 3);
        assert_eq!(a2["metadata"]["uid"], uid);
        assert_eq!(a2["metadata"]["generation"], 1);
        let a3 = api.apply(pod("a", "web2")).expect("apply");
        assert_eq!(a3["metadata"]["generation"], 2);

        let (items, revision) = api.list(
            pods(),
            Some("ns"),
            &Selector::default(),
            &Selector::default(),
        );
        assert_eq!(items.len(), 2);
        assert_eq!(revision, 4);
        let gone = api.delete("pods", "ns", "b").expect("delete");
        assert_eq!(version_of(&gone), 5);
        assert!(api.get("pods", "ns", "b").is_none());
        assert_eq!(api.delete("pods", "ns", "b").map_err(|e| e.code), Err(404));
    }

    #[test]
    fn create_and_replace_check_existence_and_version() {
        let api = FixtureApi::new();
        let a = api.create(pod("a", "web")).expect("create");
        assert_eq!(
            api.create(pod("a", "web")).map_err(|e| e.reason),
            Err("AlreadyExists")
        );
        assert_eq!(api.replace(pod("zz", "web")).map_err(|e| e.code), Err(404));
        let mut stale = a.clone();
        stale["metadata"]["resourceVersion"] = json!("999");
        assert_eq!(api.replace(stale).map_err(|e| e.reason), Err("Conflict"));
        let replaced = api.replace(a).expect("replace at the stored version");
        assert_eq!(version_of(&replaced), 2);
        let unknown = json!({"apiVersion": "v9", "kind": "Nope", "metadata": {"name": "x"}});
        assert_eq!(api.apply(unknown).map_err(|e| e.code), Err(400));
    }

    #[test]
    fn history_serves_watches_until_it_runs_out() {
        let api = FixtureApi::with_settings(3, DEFAULT_BOOKMARK_INTERVAL);
        for i in 0..5 {
            api.apply(pod(&format!("p{i}"), "web")).expect("apply");
        }
        // Changes 3, 4 and 5 are kept: a watch from 2 on sees them all.
        let (changes, revision) = api.changes_since(2, 0).expect("in history");
        let revisions: Vec<u64> = changes.iter().map(|c| c.revision).collect();
        assert_eq!(revisions, [3, 4, 5]);
        assert_eq!(revision, 5);
        let err = api.changes_since(1, 0).expect_err("change 2 is gone");
        assert_eq!((err.code, err.reason), (410, "Expired"));
        assert_eq!(err.status()["kind"], "Status");
        assert_eq!(err.status()["code"], 410);

        api.compact();
        assert_eq!(api.changes_since(5, 0).map_err(|e| e.code).err(), Some(410));
        let (changes, _) = api.changes_since(5, 1).expect("new epoch, caught up");
        assert!(changes.is_empty());
    }

    #[test]
    fn lists_filter_by_namespace_and_selectors() {
        let api = FixtureApi::new();
        api.apply(pod("a", "web")).expect("apply");
        api.apply(pod("b", "db")).expect("apply");
        let mut other = pod("c", "web");
        other["metadata"]["namespace"] = json!("other");
        api.apply(other).expect("apply");
        let names = |ns: Option<&str>, labels: &str, fields: &str| -> Vec<String> {
            let labels = Selector::parse(labels).expect("labels");
            let fields = Selector::parse(fields).expect("fields");
            api.list(pods(), ns, &labels, &fields)
                .0
                .iter()
                .map(|o| {
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(names(Some("ns"), "", ""), ["a", "b"]);
        assert_eq!(names(None, "", ""), ["a", "b", "c"]);
        assert_eq!(names(None, "app=web", ""), ["a", "c"]);
        assert_eq!(names(None, "app!=web", ""), ["b"]);
        assert_eq!(names(None, "", "metadata.name=c"), ["c"]);
        assert_eq!(
            names(Some("ns"), "app=web", "metadata.name=c"),
            Vec::<String>::new()
        );
    }
}
