//! The running agent: owned addresses, listeners, the upstream endpoint set
//! with its health checker and DNS resolver, the admin endpoint, reload and
//! drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiway_core::admin::{AdminServer, Health};
use apiway_core::drain::{Drain, DrainTiming};
use apiway_core::endpoint::EndpointSet;
use apiway_core::listener::{self, Slots};
use apiway_core::metrics::BackendMetrics;
use apiway_core::reload::ReloadMetrics;
use apiway_core::sync::lock;
use arc_swap::ArcSwap;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::address::LocalAddresses;
use crate::config::{self, Flags, Snapshot, UpstreamSpec};
use crate::metrics::{AgentMetrics, ListenerHandles};

/// What connections read: the upstream settings and the endpoint set.
pub(crate) struct Shared {
    upstream: ArcSwap<UpstreamSpec>,
    set: Arc<EndpointSet>,
}

impl Shared {
    pub(crate) fn upstream(&self) -> Arc<UpstreamSpec> {
        self.upstream.load_full()
    }

    pub(crate) fn set(&self) -> Arc<EndpointSet> {
        self.set.clone()
    }
}

/// The agent role.
pub struct Agent {
    shared: Arc<Shared>,
    running: Mutex<Snapshot>,
    flags: Flags,
    listeners: Vec<(SocketAddr, Arc<Slots>)>,
    addresses: Mutex<Option<LocalAddresses>>,
    /// Stops the DNS resolver of the current endpoint template.
    resolver: Mutex<CancellationToken>,
    reload_metrics: ReloadMetrics,
    registry: Mutex<Option<Registry>>,
    drain: Drain,
    health: Arc<Health>,
    stop: CancellationToken,
}

impl Agent {
    /// Adds the addresses, binds every listener and starts health checks
    /// and DNS resolution. On error nothing stays behind (added addresses
    /// are removed).
    pub async fn start(snapshot: Snapshot, flags: Flags) -> anyhow::Result<Arc<Agent>> {
        let addresses = LocalAddresses::add(&snapshot.addresses)?;
        let mut sockets = Vec::new();
        for addr in &snapshot.listen {
            let socket = listener::bind(*addr).map_err(|e| {
                let owned = snapshot.addresses.addresses.contains(&addr.ip());
                if !owned && e.to_string().contains("no local interface") {
                    anyhow::anyhow!(
                        "--listen {e}; add --bind-address {} to have the agent add it",
                        addr.ip()
                    )
                } else {
                    anyhow::anyhow!("--listen {e}")
                }
            })?;
            sockets.push(socket);
        }

        let mut registry = Registry::with_prefix("apiway");
        let metrics = AgentMetrics::default();
        metrics.register(&mut registry);
        let backend_metrics = BackendMetrics::default();
        backend_metrics.register(&mut registry);
        let reload_metrics = ReloadMetrics::default();
        reload_metrics.register(&mut registry);

        let upstream = snapshot.upstream.clone();
        let set = EndpointSet::new(upstream.set_name(), &upstream.set, backend_metrics);
        let stop = CancellationToken::new();
        // The checker reads the set's members every round, so it serves
        // every later membership and settings change too.
        apiway_core::health::spawn_checker(&set, stop.child_token());
        let resolver = stop.child_token();
        apiway_core::health::spawn_resolver(
            &set,
            upstream.set.clone(),
            upstream.dns_refresh,
            resolver.clone(),
        );
        let shared = Arc::new(Shared {
            upstream: ArcSwap::from_pointee(upstream),
            set,
        });
        let drain = Drain::new();
        let mut listeners = Vec::new();
        for socket in sockets {
            let local = socket.local_addr()?;
            let slots = Slots::new(snapshot.max_connections);
            let handles = Arc::new(ListenerHandles::new(&local.to_string(), &metrics));
            tracing::info!(address = %local, upstream = ?snapshot.upstream.mode, "listening");
            let shared = shared.clone();
            let rejected = handles.clone();
            tokio::spawn(listener::accept_loop(
                socket,
                slots.clone(),
                drain.clone(),
                stop.child_token(),
                move |peer| {
                    rejected.rejected.inc();
                    tracing::debug!(%peer, listener = %rejected.name, "max_connections reached; closed");
                },
                move |stream, peer, slot| {
                    crate::upstream::serve(shared.clone(), handles.clone(), stream, peer, slot)
                },
            ));
            listeners.push((local, slots));
        }
        let health = Health::new();
        let agent = Arc::new(Agent {
            shared,
            running: Mutex::new(snapshot),
            flags,
            listeners,
            addresses: Mutex::new(Some(addresses)),
            resolver: Mutex::new(resolver),
            reload_metrics,
            registry: Mutex::new(Some(registry)),
            drain,
            health,
            stop,
        });
        agent.health.set_live(true);
        agent.spawn_readiness();
        Ok(agent)
    }

    /// `/readyz` follows whether any endpoint (or gateway) is available.
    fn spawn_readiness(self: &Arc<Self>) {
        let shared = self.shared.clone();
        let health = self.health.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let mut was = None;
            loop {
                let ready = shared
                    .set
                    .members()
                    .endpoints
                    .iter()
                    .any(|e| e.is_available());
                health.set_ready(ready);
                if was != Some(ready) {
                    if ready {
                        tracing::info!(
                            upstream = shared.set.name(),
                            "an endpoint is available; ready"
                        );
                    } else {
                        tracing::warn!(upstream = shared.set.name(), "no endpoint is available; /readyz fails (connections still try every endpoint)");
                    }
                    was = Some(ready);
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        });
    }

    /// Binds and serves the admin endpoint; returns the bound address.
    pub async fn serve_admin(self: &Arc<Self>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let mut registry = lock(&self.registry)
            .take()
            .ok_or_else(|| anyhow::anyhow!("the admin endpoint is already served"))?;
        let admin_metrics = AdminServer::register_metrics(&mut registry);
        let server =
            AdminServer::bind(addr, self.health.clone(), Arc::new(registry), admin_metrics)
                .await
                .map_err(|e| anyhow::anyhow!("--admin {e}"))?;
        let bound = server.local_addr()?;
        tokio::spawn(server.serve(self.stop.clone()));
        Ok(bound)
    }

    /// The bound listener addresses.
    pub fn listener_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(a, _)| *a).collect()
    }

    /// The upstream endpoint set (for tests and status displays).
    pub fn endpoint_set(&self) -> Arc<EndpointSet> {
        self.shared.set.clone()
    }

    /// Applies a changed configuration file (flags still apply on top).
    /// Listeners, addresses, the upstream mode and the admin address are
    /// fixed while running; a file that changes them is rejected whole.
    pub fn reload(&self, text: &str) -> Result<Duration, String> {
        let file = config::parse_file(text)?;
        let next = config::build(file, &self.flags)?;
        let mut running = lock(&self.running);
        for (what, same) in [
            ("listen", next.listen == running.listen),
            (
                "bind_address / interface / keep_address",
                next.addresses == running.addresses,
            ),
            ("upstream", next.upstream.mode == running.upstream.mode),
            ("admin", next.admin == running.admin),
        ] {
            if !same {
                return Err(format!(
                    "`{what}` cannot change while the agent runs; restart it to apply"
                ));
            }
        }
        if next.upstream.set != running.upstream.set
            || next.upstream.dns_refresh != running.upstream.dns_refresh
        {
            let set = &self.shared.set;
            let mut resolver = lock(&self.resolver);
            resolver.cancel();
            *resolver = self.stop.child_token();
            if next.upstream.set.names().next().is_none() {
                set.apply(&next.upstream.set);
            } else {
                // The resolver applies the expanded set once names resolve;
                // until then the current members keep serving.
                apiway_core::health::spawn_resolver(
                    set,
                    next.upstream.set.clone(),
                    next.upstream.dns_refresh,
                    resolver.clone(),
                );
            }
        }
        for (_, slots) in &self.listeners {
            slots.set_max(next.max_connections);
        }
        self.shared.upstream.store(Arc::new(next.upstream.clone()));
        let interval = next.reload_interval;
        *running = next;
        Ok(interval)
    }

    /// Drains, stops, and removes the owned addresses. `hurry` (a second
    /// signal) skips the waits.
    pub async fn shutdown(&self, hurry: impl std::future::Future<Output = ()>) {
        let timing: DrainTiming = lock(&self.running).drain;
        self.drain.run(&self.health, timing, hurry).await;
        self.stop.cancel();
        if let Some(mut addresses) = lock(&self.addresses).take() {
            addresses.release();
        }
    }

    /// Runs the agent until SIGTERM/SIGINT: hot reload of `config` (on
    /// change and SIGHUP) when given, graceful drain on exit.
    pub async fn run(
        config_path: Option<PathBuf>,
        flags: Flags,
        ready_file: Option<PathBuf>,
    ) -> anyhow::Result<()> {
        let text = match &config_path {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--config: cannot read {}: {e}", path.display()))?,
            None => String::new(),
        };
        let at = |e: String| match &config_path {
            Some(p) => anyhow::anyhow!("{}: {e}", p.display()),
            None => anyhow::anyhow!("{e}"),
        };
        let file = config::parse_file(&text).map_err(at)?;
        let snapshot = config::build(file, &flags).map_err(at)?;
        let admin = snapshot.admin;
        let reload_interval = snapshot.reload_interval;
        let configured = snapshot.listen.clone();
        let agent = Agent::start(snapshot, flags).await?;
        let mut report = apiway_core::ready::ReadyReport::for_this_process();
        if let Some(addr) = admin {
            match agent.serve_admin(addr).await {
                Ok(bound) => {
                    report.admin = Some(bound);
                    tracing::info!(address = %bound, "admin endpoint: /healthz /livez /readyz /metrics")
                }
                Err(e) => {
                    agent.stop.cancel();
                    if let Some(mut a) = lock(&agent.addresses).take() {
                        a.release();
                    }
                    return Err(e);
                }
            }
        }
        if let Some(path) = ready_file {
            // Listeners are bound in the configured order.
            let bound = agent.listener_addrs();
            report.listeners = configured
                .iter()
                .map(|c| c.to_string())
                .zip(bound)
                .collect();
            report.write(&path)?;
        }
        let reloader = config_path.map(|path| {
            let agent = agent.clone();
            tokio::spawn(apiway_core::reload::watch(
                path,
                text,
                reload_interval,
                agent.stop.clone(),
                agent.reload_metrics.clone(),
                move |new| agent.reload(new),
            ))
        });
        let hurry = apiway_core::drain::first_termination().await;
        agent.shutdown(hurry).await;
        if let Some(r) = reloader {
            r.abort();
        }
        tracing::info!("stopped");
        Ok(())
    }
}
