//! The role runtime: the lifecycle every long-running role shares, so that a
//! role is its data path plus a little wiring.
//!
//! [`run`] loads every [`Source`] once, merges and validates the fragments
//! ([`Role::validate`]), starts the role, serves the admin endpoint, writes
//! the ready file, then applies each later change (file edits, SIGHUP) and on
//! SIGTERM drains (`/healthz` fails, listeners accept for the drain delay,
//! connections get the grace period; a second signal skips the waits).
//! [`check`] does the loading and validation only (`--check`).
//!
//! One reload rule for every role: a new configuration that changes a field
//! that needs a restart ([`Role::fixed`], plus `admin.address`) is refused
//! whole, with one line naming those fields; any other valid configuration
//! is applied. A configuration that does not validate never replaces the
//! running one, and established connections are never reset by a reload.
//!
//! Exit codes, through the binary: 0 after a clean stop, 1 when the
//! configuration is invalid or something cannot start (a listener cannot
//! bind, the admin endpoint cannot bind), 2 for a command-line error.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::admin::{AdminServer, Health};
use crate::config::source::{Merge, Source, SourceEvent, SourceSender};
use crate::config::Common;
use crate::drain::Drain;
use crate::node::{NodeMetrics, NodeWatch};
use crate::reload::ReloadMetrics;
use crate::sync::lock;

pub use crate::ready::ReadyReport;

/// A long-running role (gateway, agent, tunnel server): its data path, and
/// how a snapshot is validated and applied.
pub trait Role: Send + Sync + Sized + 'static {
    /// The role's name in logs (`gateway`).
    const NAME: &'static str;
    /// The merged, typed configuration sources produce.
    type Spec: Merge + Clone + Send + 'static;
    /// A validated configuration, ready to apply.
    type Snapshot: Send + 'static;

    /// Validates a spec into a snapshot. Pure: no sockets, no changes; the
    /// error is one line naming the field and the fix.
    fn validate(spec: Self::Spec) -> Result<Self::Snapshot, String>;

    /// The shared sections of a snapshot.
    fn common(snapshot: &Self::Snapshot) -> Common;

    /// The fields that cannot change while the role runs, each with its
    /// value: a reload that changes one is refused.
    fn fixed(snapshot: &Self::Snapshot) -> Vec<(&'static str, String)> {
        let _ = snapshot;
        Vec::new()
    }

    /// Binds listeners and starts the data path; registers the role's
    /// metrics in `registry`. On error nothing stays behind.
    fn start(
        snapshot: Self::Snapshot,
        context: &RoleContext,
        registry: &mut Registry,
    ) -> anyhow::Result<Arc<Self>>;

    /// Applies a new snapshot; an error leaves the running one in place.
    /// The runtime never calls it twice at once ([`Running::apply`] holds a
    /// lock), so a role needs no lock of its own for that.
    fn apply(self: &Arc<Self>, snapshot: Self::Snapshot) -> Result<(), String>;

    /// Every listener's name and bound address.
    fn listeners(&self) -> Vec<(String, SocketAddr)>;

    /// Called once after the drain, when every connection is closed: give
    /// back what the role holds outside the process (addresses it added).
    fn stopped(&self) {}

    /// How many relayed connections the snapshot's limits allow in all,
    /// for the open-file check at start; `None` to skip it.
    fn max_connections(snapshot: &Self::Snapshot) -> Option<u64> {
        let _ = snapshot;
        None
    }
}

/// What the runtime gives a role: the verdicts the admin endpoint serves,
/// the connection drain, and the stop signal for its background tasks.
#[derive(Clone, Debug)]
pub struct RoleContext {
    /// `/healthz`, `/livez`, `/readyz`.
    pub health: Arc<Health>,
    /// Tracks connections through a shutdown.
    pub drain: Drain,
    /// Fires when the role stops; background tasks end with it.
    pub stop: CancellationToken,
}

impl RoleContext {
    fn new() -> RoleContext {
        RoleContext {
            health: Health::new(),
            drain: Drain::new(),
            stop: CancellationToken::new(),
        }
    }
}

struct Applied {
    common: Common,
    fixed: Vec<(&'static str, String)>,
}

/// A started role with its admin endpoint: what [`run`] drives, and what
/// embedders (the demo, tests) hold.
pub struct Running<R: Role> {
    role: Arc<R>,
    context: RoleContext,
    admin: Option<SocketAddr>,
    applied: Mutex<Applied>,
    /// Serializes `apply`.
    applying: tokio::sync::Mutex<()>,
    reload_metrics: ReloadMetrics,
}

impl<R: Role> Running<R> {
    /// Starts the role with `snapshot` and serves the admin endpoint its
    /// common section names.
    pub async fn start(snapshot: R::Snapshot) -> anyhow::Result<Running<R>> {
        Self::start_with(snapshot, None).await
    }

    /// [`start`](Self::start), node-aware when `node` is given: `/healthz`
    /// follows the Node the feed reports on (see [`crate::node`]).
    pub async fn start_with(
        snapshot: R::Snapshot,
        node: Option<NodeWatch>,
    ) -> anyhow::Result<Running<R>> {
        Self::start_in(snapshot, node, Registry::with_prefix("apiway")).await
    }

    /// [`start_with`](Self::start_with) into `registry`, which may hold
    /// metrics already (those of the configuration sources).
    pub async fn start_in(
        snapshot: R::Snapshot,
        node: Option<NodeWatch>,
        mut registry: Registry,
    ) -> anyhow::Result<Running<R>> {
        let common = R::common(&snapshot);
        let fixed = R::fixed(&snapshot);
        let context = RoleContext::new();
        let reload_metrics = ReloadMetrics::default();
        reload_metrics.register(&mut registry);
        let role = R::start(snapshot, &context, &mut registry)?;
        if let Some(NodeWatch { feed, policy }) = node {
            let metrics = NodeMetrics::register(&mut registry, context.health.clone());
            tokio::spawn(crate::node::follow(
                feed,
                policy,
                context.health.clone(),
                metrics,
                context.stop.clone(),
            ));
        }
        context.health.mark_updated();
        context.health.set_live(true);
        let admin = match common.admin {
            None => None,
            Some(addr) => {
                let admin_metrics = AdminServer::register_metrics(&mut registry);
                let served = async {
                    let server = AdminServer::bind(
                        addr,
                        common.admin_max_connections,
                        context.health.clone(),
                        Arc::new(registry),
                        admin_metrics,
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("admin.address: {e}"))?;
                    let bound = server.local_addr()?;
                    tokio::spawn(server.serve(context.stop.clone()));
                    anyhow::Ok(bound)
                };
                match served.await {
                    Ok(bound) => {
                        tracing::info!(address = %bound, "admin endpoint: /healthz /livez /readyz /metrics");
                        Some(bound)
                    }
                    Err(e) => {
                        context.stop.cancel();
                        role.stopped();
                        return Err(e);
                    }
                }
            }
        };
        Ok(Running {
            role,
            context,
            admin,
            applied: Mutex::new(Applied { common, fixed }),
            applying: tokio::sync::Mutex::new(()),
            reload_metrics,
        })
    }

    /// The role.
    pub fn role(&self) -> &Arc<R> {
        &self.role
    }

    /// The admin endpoint's bound address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// The verdicts the admin endpoint serves.
    pub fn health(&self) -> &Arc<Health> {
        &self.context.health
    }

    /// Reload counters.
    pub fn reload_metrics(&self) -> &ReloadMetrics {
        &self.reload_metrics
    }

    /// The shared sections in force.
    pub fn common(&self) -> Common {
        lock(&self.applied).common
    }

    /// What the ready file says: the pid, the admin endpoint and every
    /// listener's bound address.
    pub fn ready_report(&self) -> ReadyReport {
        ReadyReport {
            admin: self.admin,
            listeners: self.role.listeners().into_iter().collect(),
            ..ReadyReport::for_this_process()
        }
    }

    /// Applies a validated snapshot under the one reload rule: a change to a
    /// field that needs a restart refuses the whole snapshot.
    pub async fn apply(&self, snapshot: R::Snapshot) -> Result<Common, String> {
        let _serial = self.applying.lock().await;
        let common = R::common(&snapshot);
        let fixed = R::fixed(&snapshot);
        {
            let applied = lock(&self.applied);
            let mut changed: Vec<&str> = Vec::new();
            if common.admin != applied.common.admin {
                changed.push("admin.address");
            }
            for (name, value) in &fixed {
                let before = applied.fixed.iter().find(|(n, _)| n == name);
                if before.map(|(_, v)| v) != Some(value) {
                    changed.push(name);
                }
            }
            if !changed.is_empty() {
                let names = changed
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(format!(
                    "{names} cannot change while the {} runs; restart it to apply (nothing of this config was applied)",
                    R::NAME
                ));
            }
        }
        self.role.apply(snapshot)?;
        self.context.health.mark_updated();
        *lock(&self.applied) = Applied { common, fixed };
        Ok(common)
    }

    /// Drains and stops: `/healthz` fails at once, listeners accept for the
    /// drain delay, then connections get the grace period. `hurry` (a second
    /// signal) skips the waits.
    pub async fn shutdown(&self, hurry: impl Future<Output = ()>) {
        let timing = self.common().drain;
        self.context
            .drain
            .run(&self.context.health, timing, hurry)
            .await;
        self.context.stop.cancel();
        self.role.stopped();
    }
}

/// Options of [`run`] that are not configuration.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// Write a [`ReadyReport`] here once everything is bound.
    pub ready_file: Option<PathBuf>,
    /// Node awareness (KEP-3836): the feed of a Node watch and what drains.
    pub node: Option<NodeWatch>,
    /// Run on a blocking thread after each reload, applied or refused,
    /// once what it replaced is dropped: the binary gives freed memory back
    /// to the system here (the allocator keeps it otherwise, so a process
    /// that once held a 10,000-route config would stay that size).
    pub after_reload: Option<fn()>,
}

/// The sources of a role, running.
struct Feeds<F> {
    labels: Vec<(String, bool)>,
    rx: mpsc::Receiver<SourceEvent<F>>,
    latest: Vec<Option<F>>,
    /// Whether each source has synced.
    synced: Vec<bool>,
    poll: watch::Sender<Duration>,
    resync: watch::Sender<u64>,
    stop: CancellationToken,
}

impl<F: Merge + Clone + Send + 'static> Feeds<F> {
    fn start(sources: Vec<Box<dyn Source<F>>>, registry: &mut Registry) -> Feeds<F> {
        let (tx, rx) = mpsc::channel(16);
        let (poll, poll_rx) = watch::channel(crate::config::sections::DEFAULT_RELOAD_INTERVAL);
        let (resync, resync_rx) = watch::channel(0u64);
        let stop = CancellationToken::new();
        let mut labels = Vec::new();
        for (index, source) in sources.into_iter().enumerate() {
            labels.push((source.label(), source.is_static()));
            source.register_metrics(registry);
            let out = SourceSender::new(
                index,
                tx.clone(),
                poll_rx.clone(),
                resync_rx.clone(),
                stop.clone(),
            );
            tokio::spawn(source.run(out));
        }
        let latest = labels.iter().map(|_| None).collect();
        Feeds {
            synced: labels.iter().map(|_| false).collect(),
            labels,
            rx,
            latest,
            poll,
            resync,
            stop,
        }
    }

    /// `error` as the user sees it: prefixed with the one changing source
    /// (the file) when there is exactly one.
    fn name_source(&self, index: Option<usize>, error: String) -> String {
        let label = match index {
            Some(i) => self.labels.get(i).filter(|(_, fixed)| !fixed),
            None => {
                let mut changing = self.labels.iter().filter(|(_, fixed)| !fixed);
                match (changing.next(), changing.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            }
        };
        match label {
            Some((label, _)) => format!("{label}: {error}"),
            None => error,
        }
    }

    /// Waits for every source's first fragment; the first error ends it.
    async fn first(&mut self) -> Result<(), String> {
        while self.latest.iter().any(Option::is_none) {
            let Some(event) = self.rx.recv().await else {
                return Err("a configuration source stopped before it said anything".into());
            };
            let index = event.index;
            self.synced[index] = event.synced;
            match event.fragment {
                Ok(f) => self.latest[index] = Some(f),
                Err(e) => return Err(self.name_source(Some(index), e)),
            }
        }
        Ok(())
    }

    /// The fragments merged in source order. With one source its fragment
    /// is taken as it is: nothing is cloned, and nothing is kept beside the
    /// snapshot built from it (a 10,000-route file would otherwise live
    /// twice in memory), since its next fragment replaces it whole.
    fn merged(&mut self) -> Result<F, String> {
        if let [only] = self.latest.as_mut_slice() {
            return only
                .take()
                .ok_or_else(|| "no configuration source".to_owned());
        }
        let mut merged: Option<F> = None;
        for fragment in self.latest.iter().flatten() {
            merged = Some(match merged {
                None => fragment.clone(),
                Some(m) => m.merge(fragment.clone())?,
            });
        }
        merged.ok_or_else(|| "no configuration source".to_owned())
    }

    fn all_synced(&self) -> bool {
        self.synced.iter().all(|s| *s)
    }
}

/// Validates what `sources` say without starting anything (`--check`). The
/// error is the problem as the user sees it.
pub async fn check<R: Role>(sources: Vec<Box<dyn Source<R::Spec>>>) -> Result<(), String> {
    let mut feeds = Feeds::start(sources, &mut Registry::default());
    let result = async {
        feeds.first().await?;
        let spec = feeds.merged().map_err(|e| feeds.name_source(None, e))?;
        R::validate(spec).map_err(|e| feeds.name_source(None, e))?;
        Ok(())
    }
    .await;
    feeds.stop.cancel();
    result
}

/// Runs a role from `sources` until SIGTERM or SIGINT: start, admin, ready
/// file, reloads, drain. See the module documentation for the rules.
pub async fn run<R: Role>(
    sources: Vec<Box<dyn Source<R::Spec>>>,
    options: RunOptions,
) -> anyhow::Result<()> {
    let mut registry = Registry::with_prefix("apiway");
    let mut feeds = Feeds::start(sources, &mut registry);
    let termination = crate::drain::first_termination();
    tokio::pin!(termination);
    let started = async {
        feeds.first().await?;
        let spec = feeds.merged().map_err(|e| feeds.name_source(None, e))?;
        R::validate(spec).map_err(|e| feeds.name_source(None, e))
    }
    .await;
    let snapshot = match started {
        Ok(s) => s,
        Err(e) => {
            feeds.stop.cancel();
            return Err(anyhow::anyhow!(e));
        }
    };
    let open_files = crate::limits::raise_nofile();
    if let Some(warning) = R::max_connections(&snapshot)
        .and_then(|connections| crate::limits::shortfall(connections, open_files))
    {
        tracing::warn!("{warning}");
    }
    let running = match Running::<R>::start_in(snapshot, options.node, registry).await {
        Ok(r) => r,
        Err(e) => {
            feeds.stop.cancel();
            return Err(e);
        }
    };
    feeds.poll.send_replace(running.common().reload_interval);
    running.health().set_synced(feeds.all_synced());
    if let Some(path) = &options.ready_file {
        if let Err(e) = running.ready_report().write(path) {
            running.shutdown(std::future::ready(())).await;
            feeds.stop.cancel();
            return Err(anyhow::anyhow!("--ready-file: {e}"));
        }
    }
    let hangups = spawn_hangup_forwarder(feeds.resync.clone(), feeds.stop.clone());

    let hurry = loop {
        tokio::select! {
            hurry = &mut termination => break hurry,
            Some(event) = feeds.rx.recv() => {
                reload(&running, &mut feeds, event, options.ready_file.as_deref()).await;
                if let Some(after) = options.after_reload {
                    drop(tokio::task::spawn_blocking(after));
                }
            }
        }
    };
    running.shutdown(hurry).await;
    feeds.stop.cancel();
    hangups.abort();
    tracing::info!("stopped");
    Ok(())
}

async fn reload<R: Role>(
    running: &Running<R>,
    feeds: &mut Feeds<R::Spec>,
    event: SourceEvent<R::Spec>,
    ready_file: Option<&std::path::Path>,
) {
    let started = std::time::Instant::now();
    let label = feeds
        .labels
        .get(event.index)
        .map(|(l, _)| l.clone())
        .unwrap_or_default();
    let trigger = event.trigger;
    feeds.synced[event.index] = feeds.synced[event.index] || event.synced;
    running.health().set_synced(feeds.all_synced());
    let result = async {
        let fragment = event.fragment?;
        let previous = feeds.latest[event.index].replace(fragment);
        let validated = feeds.merged().and_then(R::validate);
        let applied = match validated {
            Ok(snapshot) => running.apply(snapshot).await,
            Err(e) => Err(e),
        };
        if applied.is_err() {
            // What runs is still built from the previous fragment.
            feeds.latest[event.index] = previous;
        }
        applied
    }
    .await;
    let took = started.elapsed() + event.took;
    match result {
        Ok(common) => {
            running.reload_metrics.record(true, took);
            feeds.poll.send_replace(common.reload_interval);
            tracing::info!(source = %label, took = ?took, trigger = trigger.as_str(), "config reloaded");
            // Listeners may have come or gone: the ready file says what is
            // bound now.
            if let Some(path) = ready_file {
                if let Err(e) = running.ready_report().write(path) {
                    tracing::warn!("--ready-file: {e}");
                }
            }
        }
        Err(e) => {
            running.reload_metrics.record(false, took);
            tracing::error!(source = %label, trigger = trigger.as_str(), "config reload rejected, keeping the running config: {e}");
        }
    }
}

/// Turns each SIGHUP into a resync of every source.
fn spawn_hangup_forwarder(
    resync: watch::Sender<u64>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hup.recv() => match got {
                    Some(()) => resync.send_modify(|n| *n = n.wrapping_add(1)),
                    None => return,
                },
            }
        }
    })
}
