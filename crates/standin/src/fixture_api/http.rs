//! The fixture's HTTP side: paths, query parameters, watches and discovery
//! documents, as a real API server answers them (JSON only).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{
    ApiError, FixtureApi, PatchKind, Resource, Scope, Selector, Write, REMOTE_USER, RESOURCES,
};

/// Response bodies: whole JSON documents or a watch's event stream.
type ResponseBody = BoxBody<Bytes, Infallible>;

/// Largest request body accepted (the real API server's limit is 3 MiB).
const MAX_BODY: usize = 3 << 20;

/// A watch without `timeoutSeconds` ends after this long (the real server
/// picks 30 to 60 minutes).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Events buffered for a slow watcher before the watch waits for it.
const WATCH_BUFFER: usize = 64;

/// A running HTTP server for a [`FixtureApi`]; dropping it stops it and
/// closes its connections.
#[derive(Debug)]
pub struct FixtureServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl FixtureServer {
    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`, for [`StandinConfig::with_api_upstream`](crate::StandinConfig::with_api_upstream).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FixtureApi {
    /// Serves the API over plain HTTP/1.1 at `listen` (port 0 picks one)
    /// until the returned handle is dropped. Must be called inside a tokio
    /// runtime.
    ///
    /// | request | answer |
    /// |---|---|
    /// | `GET /api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}` | discovery documents (`APIVersions`, `APIResourceList`, `APIGroupList`, `APIGroup`) |
    /// | `GET /api/v1/namespaces/{ns}/pods`, `/api/v1/pods` (every namespace), `/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices`, ... | a `...List` with `metadata.resourceVersion`; `labelSelector` and `fieldSelector` filter; `limit` is ignored (everything in one page) |
    /// | the same with `watch=1` or `watch=true` | newline-delimited `{"type","object"}` events, one chunk each: `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` (with `allowWatchBookmarks=true`), `ERROR` (a `410 Expired` `Status`) |
    /// | `GET .../{name}` | the object or `404 NotFound` |
    /// | `POST` on a collection | create, `201`, `409 AlreadyExists` |
    /// | `PUT .../{name}` | replace, `409 Conflict` on a stale `resourceVersion` |
    /// | `DELETE .../{name}` | the deleted object |
    ///
    /// A watch without `resourceVersion` (or with `0`) first sends `ADDED`
    /// for every current object; with one, the changes after it. Objects
    /// that start or stop matching a selector arrive as `ADDED` and
    /// `DELETED`. `timeoutSeconds` ends the watch (default 30 minutes).
    pub async fn serve(&self, listen: SocketAddr) -> Result<FixtureServer> {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("fixture API: binding {listen}"))?;
        let addr = listener.local_addr()?;
        let api = self.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => {
                            let _ = tcp.set_nodelay(true);
                            let api = api.clone();
                            connections.spawn(async move {
                                let service = service_fn(move |req| {
                                    let api = api.clone();
                                    async move { Ok::<_, Infallible>(api.respond(req).await) }
                                });
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(tcp), service)
                                    .await;
                            });
                        }
                        Err(e) => {
                            tracing::warn!("fixture API accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(FixtureServer { addr, task })
    }

    async fn respond(&self, req: Request<Incoming>) -> Response<ResponseBody> {
        match self.route(req).await {
            Ok(response) => response,
            Err(error) => json_response(
                StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                &error.status(),
            ),
        }
    }

    async fn route(&self, req: Request<Incoming>) -> Result<Response<ResponseBody>, ApiError> {
        self.authenticate(req.headers())?;
        let path = req.uri().path().to_owned();
        let query = Query::parse(req.uri().query().unwrap_or(""));
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api"] => return Ok(ok(&api_versions())),
            ["apis"] => return Ok(ok(&group_list())),
            ["apis", group] => {
                return group_document(group)
                    .map(|doc| ok(&doc))
                    .ok_or_else(|| not_found_path(&path))
            }
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(not_found_path(&path)),
        };
        if rest.is_empty() {
            return resource_list(group, version)
                .map(|doc| ok(&doc))
                .ok_or_else(|| not_found_path(&path));
        }
        let (namespace, plural, name, sub) = match rest {
            // A Namespace's own subresource, before the namespaced forms.
            ["namespaces", name, "status"] => (None, "namespaces", Some(*name), Some("status")),
            ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
            ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
            ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
            [plural] => (None, *plural, None, None),
            [plural, name] => (None, *plural, Some(*name), None),
            [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
            _ => return Err(not_found_path(&path)),
        };
        let res = super::resource(group, version, plural).ok_or_else(|| not_found_path(&path))?;
        if !res.namespaced && namespace.is_some() {
            return Err(not_found_path(&path));
        }
        let status = match sub {
            None => false,
            Some("status") if res.status => true,
            Some(_) => return Err(not_found_path(&path)),
        };
        let scope = match (res.status, status) {
            (false, _) => Scope::Whole,
            (true, false) => Scope::Main,
            (true, true) => Scope::Status,
        };
        let namespace_key = namespace.unwrap_or("");
        match (req.method().clone(), name) {
            (Method::POST, None) if res.plural == "tokenreviews" => {
                let review = body_object(req, res, None, None).await?;
                Ok(json_response(
                    StatusCode::CREATED,
                    &self.token_review(review),
                ))
            }
            (_, _) if res.plural == "tokenreviews" => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "TokenReviews are created with POST only",
            )),
            (Method::GET, None) if query.watch => self.watch(res, namespace, &query),
            (Method::GET, None) => {
                self.shared.lists.fetch_add(1, Ordering::SeqCst);
                let (labels, fields) = query.selectors()?;
                let (items, revision) = self.list(res, namespace, &labels, &fields);
                let page = Page::cut(items, revision, &query)?;
                let mut metadata = json!({"resourceVersion": page.revision.to_string()});
                if let Some(token) = &page.next {
                    metadata["continue"] = json!(token);
                    metadata["remainingItemCount"] = json!(page.remaining);
                }
                Ok(ok(&json!({
                    "kind": format!("{}List", res.kind),
                    "apiVersion": res.api_version(),
                    "metadata": metadata,
                    "items": page.items,
                })))
            }
            (Method::GET, Some(name)) => self
                .store()
                .objects
                .get(&super::key(res, namespace_key, name))
                .map(ok)
                .ok_or_else(|| ApiError::not_found(res, name)),
            (Method::POST, None) => {
                let object = body_object(req, res, namespace, None).await?;
                let scope = if scope == Scope::Whole {
                    scope
                } else {
                    Scope::Main
                };
                let created = self.write_in(object, Write::Create, scope, Some(res))?;
                Ok(json_response(StatusCode::CREATED, &created))
            }
            (Method::PUT, Some(name)) => {
                let object = body_object(req, res, namespace, Some(name)).await?;
                self.write_in(object, Write::Replace, scope, Some(res))
                    .map(|o| ok(&o))
            }
            (Method::PATCH, Some(name)) => {
                let content_type = req
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let kind = PatchKind::from_content_type(&content_type).ok_or_else(|| {
                    ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
                        ),
                    )
                })?;
                let body = read_body(req).await?;
                self.patch(res, namespace_key, name, kind, &body, status)
                    .map(|o| ok(&o))
            }
            (Method::DELETE, Some(name)) if !status => {
                self.delete_in(res, namespace_key, name).map(|o| ok(&o))
            }
            (method, _) => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported on {path}"),
            )),
        }
    }

    /// Lets the request in, or answers `401`: see [`FixtureApi::set_tokens`].
    fn authenticate(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        let tokens = self.tokens();
        if tokens.is_empty() || headers.contains_key(REMOTE_USER) {
            return Ok(());
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match bearer {
            Some(token) if tokens.iter().any(|t| t.token == token) => Ok(()),
            _ => Err(ApiError::new(401, "Unauthorized", "Unauthorized")),
        }
    }

    /// The answer to a `TokenReview`: the review with its `status`.
    fn token_review(&self, mut review: Value) -> Value {
        let token = review["spec"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let audiences: Vec<String> = review["spec"]["audiences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        review["status"] = super::tokens::review(&self.tokens(), &token, &audiences);
        review
    }

    fn watch(
        &self,
        res: &'static Resource,
        namespace: Option<&str>,
        query: &Query,
    ) -> Result<Response<ResponseBody>, ApiError> {
        self.shared.watches.fetch_add(1, Ordering::SeqCst);
        let (labels, fields) = query.selectors()?;
        let since = match query.resource_version.as_deref() {
            None | Some("") | Some("0") => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
            ),
        };
        let filter = WatchFilter {
            resource: res,
            namespace: namespace.map(str::to_owned),
            labels,
            fields,
        };
        let timeout = query
            .timeout_seconds
            .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let api = self.clone();
        let bookmarks = query.allow_bookmarks;
        tokio::spawn(async move {
            api.run_watch(filter, since, bookmarks, timeout, tx).await;
        });
        let mut response = Response::new(EventBody { events: rx }.boxed());
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(response)
    }

    /// Sends the watch's events into `tx` until the timeout, the client
    /// leaving, or a `410`.
    async fn run_watch(
        &self,
        filter: WatchFilter,
        since: Option<u64>,
        bookmarks: bool,
        timeout: Duration,
        tx: mpsc::Sender<Bytes>,
    ) {
        let deadline = Instant::now() + timeout;
        let mut changed = self.shared.changed.subscribe();
        // The current objects and their revision are read under one lock,
        // so no change is both listed and sent as an event.
        let (initial, mut position, epoch) = {
            let store = self.store();
            match since {
                Some(since) => (Vec::new(), since, store.epoch),
                None => {
                    let (items, revision) = store.list(
                        filter.resource,
                        filter.namespace.as_deref(),
                        &filter.labels,
                        &filter.fields,
                    );
                    (items, revision, store.epoch)
                }
            }
        };
        for object in initial {
            if !send(&tx, "ADDED", &object).await {
                return;
            }
        }
        let interval = self.shared.bookmark_interval;
        let mut next_bookmark = Instant::now() + interval;
        loop {
            match self.changes_since(position, epoch) {
                Err(gone) => {
                    send(&tx, "ERROR", &gone.status()).await;
                    return;
                }
                Ok((changes, revision)) => {
                    for change in changes {
                        if let Some((kind, object)) = filter.event(&change) {
                            if !send(&tx, kind, &object).await {
                                return;
                            }
                        }
                    }
                    position = revision.max(position);
                }
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = tx.closed() => return,
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tokio::time::sleep_until(next_bookmark), if bookmarks => {
                    let bookmark = json!({
                        "kind": filter.resource.kind,
                        "apiVersion": filter.resource.api_version(),
                        "metadata": {"resourceVersion": position.to_string()},
                    });
                    if !send(&tx, "BOOKMARK", &bookmark).await {
                        return;
                    }
                    next_bookmark = Instant::now() + interval;
                }
            }
        }
    }
}

/// What one watch sees.
struct WatchFilter {
    resource: &'static Resource,
    namespace: Option<String>,
    labels: Selector,
    fields: Selector,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && self.labels.matches_labels(object)
            && self.fields.matches_fields(object)
    }

    /// The event this watch gets for `change`, if any: an object moving
    /// into the selection is `ADDED`, out of it `DELETED`.
    fn event(&self, change: &super::Change) -> Option<(&'static str, Value)> {
        if change.resource.plural != self.resource.plural {
            return None;
        }
        let before = change.before.as_ref().filter(|o| self.matches(o));
        let after = change.after.as_ref().filter(|o| self.matches(o));
        match (before, after) {
            (None, Some(after)) => Some(("ADDED", after.clone())),
            (Some(_), Some(after)) => Some(("MODIFIED", after.clone())),
            (Some(before), None) => {
                let mut gone = change.after.clone().unwrap_or_else(|| before.clone());
                super::set_resource_version(&mut gone, change.revision);
                Some(("DELETED", gone))
            }
            (None, None) => None,
        }
    }
}

/// Sends one event line; `false` when the watcher is gone.
async fn send(tx: &mpsc::Sender<Bytes>, kind: &str, object: &Value) -> bool {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    tx.send(Bytes::from(line)).await.is_ok()
}

/// A watch's response body: each event is one frame, so hyper writes it as
/// one chunk as soon as it is sent.
struct EventBody {
    events: mpsc::Receiver<Bytes>,
}

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.events
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The query parameters the fixture reads.
#[derive(Default)]
struct Query {
    watch: bool,
    resource_version: Option<String>,
    allow_bookmarks: bool,
    timeout_seconds: Option<u64>,
    label_selector: String,
    field_selector: String,
    limit: Option<usize>,
    continue_token: Option<String>,
}

impl Query {
    fn parse(query: &str) -> Query {
        let mut out = Query::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "watch" => out.watch = value == "1" || value == "true",
                "resourceVersion" => out.resource_version = Some(value),
                "allowWatchBookmarks" => out.allow_bookmarks = value == "1" || value == "true",
                "timeoutSeconds" => out.timeout_seconds = value.parse().ok(),
                "labelSelector" => out.label_selector = value,
                "fieldSelector" => out.field_selector = value,
                "limit" => out.limit = value.parse().ok(),
                "continue" => out.continue_token = Some(value),
                _ => {}
            }
        }
        out
    }

    fn selectors(&self) -> Result<(Selector, Selector), ApiError> {
        let labels = Selector::parse(&self.label_selector).map_err(ApiError::bad_request)?;
        let fields = Selector::parse(&self.field_selector).map_err(ApiError::bad_request)?;
        fields.check_fields().map_err(ApiError::bad_request)?;
        Ok((labels, fields))
    }
}

/// Decodes `%XX` escapes and `+` (a space in a query); a malformed escape
/// is kept as is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The request body, at most [`MAX_BODY`] bytes.
async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    Ok(Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?
        .to_bytes())
}

/// One page of a list: `limit` items after the `continue` token's
/// position. Unlike the real API server, later pages show the objects as
/// they are now (not as of the first page's revision), though they carry
/// the first page's `resourceVersion`.
struct Page {
    items: Vec<Value>,
    revision: u64,
    next: Option<String>,
    remaining: usize,
}

impl Page {
    fn cut(items: Vec<Value>, revision: u64, query: &Query) -> Result<Page, ApiError> {
        let position = |o: &Value| {
            (
                o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            )
        };
        let (revision, after) = match query.continue_token.as_deref() {
            None | Some("") => (revision, None),
            Some(token) => {
                let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
                let mut parts = token.splitn(3, '|');
                let rv = parts
                    .next()
                    .and_then(|r| r.parse::<u64>().ok())
                    .ok_or_else(bad)?;
                let ns = parts.next().ok_or_else(bad)?.to_owned();
                let name = parts.next().ok_or_else(bad)?.to_owned();
                (rv, Some((ns, name)))
            }
        };
        let mut rest: Vec<Value> = match &after {
            None => items,
            Some(after) => items.into_iter().filter(|o| position(o) > *after).collect(),
        };
        let limit = query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        if rest.len() <= limit {
            return Ok(Page {
                items: rest,
                revision,
                next: None,
                remaining: 0,
            });
        }
        let remaining = rest.len() - limit;
        rest.truncate(limit);
        let (ns, name) = rest.last().map(position).unwrap_or_default();
        Ok(Page {
            items: rest,
            revision,
            next: Some(format!("{revision}|{ns}|{name}")),
            remaining,
        })
    }
}

/// The request body as an object of `res`, its namespace and name checked
/// against the path (and filled in where missing).
async fn body_object(
    req: Request<Incoming>,
    res: &Resource,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<Value, ApiError> {
    let bytes = read_body(req).await?;
    let mut object: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let Some(fields) = object.as_object_mut() else {
        return Err(ApiError::bad_request("the body is not a JSON object"));
    };
    fields
        .entry("apiVersion")
        .or_insert_with(|| json!(res.api_version()));
    fields.entry("kind").or_insert_with(|| json!(res.kind));
    let meta = fields
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata is not an object"))?;
    for (field, from_path) in [("namespace", namespace), ("name", name)] {
        let Some(from_path) = from_path else { continue };
        match meta.get(field).and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != from_path => {
                return Err(ApiError::bad_request(format!(
                    "metadata.{field} {given:?} does not match the request path ({from_path:?})"
                )))
            }
            _ => {
                meta.insert(field.into(), json!(from_path));
            }
        }
    }
    Ok(object)
}

fn not_found_path(path: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({path})"),
    )
}

fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    })
}

/// The non-core groups, each with its versions, in [`RESOURCES`] order.
fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => versions.push(r.version),
            Some(_) => {}
            None => groups.push((r.group, vec![r.version])),
        }
    }
    groups
}

fn group_json(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

fn group_list() -> Value {
    let groups: Vec<Value> = groups()
        .iter()
        .map(|(g, versions)| group_json(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_document(group: &str) -> Option<Value> {
    groups()
        .iter()
        .find(|(g, _)| *g == group)
        .map(|(g, versions)| {
            let mut doc = group_json(g, versions);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources: Vec<Value> = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let verbs: &[&str] = if r.plural == "tokenreviews" {
            &["create"]
        } else {
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        };
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

fn ok(value: &Value) -> Response<ResponseBody> {
    json_response(StatusCode::OK, value)
}

fn json_response(status: StatusCode, value: &Value) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let q = Query::parse(
            "labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes&watch=1&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=30&fieldSelector=metadata.name%3Da+b",
        );
        assert!(q.watch && q.allow_bookmarks);
        assert_eq!(q.resource_version.as_deref(), Some("12"));
        assert_eq!(q.timeout_seconds, Some(30));
        assert_eq!(q.label_selector, "kubernetes.io/service-name=kubernetes");
        assert_eq!(q.field_selector, "metadata.name=a b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }

    #[test]
    fn discovery_documents_list_every_resource() {
        let core = resource_list("", "v1").expect("core");
        assert_eq!(core["groupVersion"], "v1");
        assert!(core["resources"]
            .as_array()
            .expect("array")
            .iter()
            .any(|r| r["name"] == "pods"));
        let groups = group_list();
        assert_eq!(groups["groups"][0]["name"], "discovery.k8s.io");
        let discovery = resource_list("discovery.k8s.io", "v1").expect("group");
        assert_eq!(discovery["resources"][0]["kind"], "EndpointSlice");
        assert!(resource_list("nope", "v1").is_none());
    }
}
