//! The agent role: owned addresses, listeners, and the upstream endpoint
//! set with its health checker and DNS resolver. The lifecycle (admin,
//! reload, drain, signals) is core's role runtime.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiway_core::admin::Health;
use apiway_core::config::Common;
use apiway_core::endpoint::EndpointSet;
use apiway_core::listener::{self, Slots};
use apiway_core::metrics::BackendMetrics;
use apiway_core::runtime::{Role, RoleContext};
use apiway_core::sync::lock;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::address::LocalAddresses;
use crate::config::{self, AgentSettings, Snapshot};
use crate::metrics::{AgentMetrics, ListenerHandles};
use crate::upstream::Upstream;

/// The agent role.
pub struct Agent {
    upstream: Arc<Upstream>,
    listeners: Vec<(String, SocketAddr, Arc<Slots>)>,
    addresses: Mutex<Option<LocalAddresses>>,
    /// Stops the DNS resolver of the current endpoint template.
    resolver: Mutex<CancellationToken>,
    running: Mutex<Snapshot>,
    stop: CancellationToken,
}

impl Role for Agent {
    const NAME: &'static str = "agent";
    type Spec = AgentSettings;
    type Snapshot = Snapshot;

    fn validate(spec: AgentSettings) -> Result<Snapshot, String> {
        config::build(spec)
    }

    fn common(snapshot: &Snapshot) -> Common {
        snapshot.common
    }

    fn fixed(snapshot: &Snapshot) -> Vec<(&'static str, String)> {
        vec![
            ("listen", format!("{:?}", snapshot.listen)),
            (
                "bind_address / interface / keep_address",
                format!("{:?}", snapshot.addresses),
            ),
            ("upstream", format!("{:?}", snapshot.upstream.mode)),
            ("target", format!("{:?}", snapshot.targets)),
            ("discover_endpoints", format!("{:?}", snapshot.discovery)),
        ]
    }

    fn max_connections(snapshot: &Snapshot) -> Option<u64> {
        Some((snapshot.max_connections as u64).saturating_mul(snapshot.listen.len() as u64))
    }

    /// Adds the addresses, binds every listener and starts health checks
    /// and DNS resolution. On error nothing stays behind (added addresses
    /// are removed).
    fn start(
        snapshot: Snapshot,
        context: &RoleContext,
        registry: &mut Registry,
    ) -> anyhow::Result<Arc<Agent>> {
        let mut addresses = LocalAddresses::add(&snapshot.addresses)?;
        let mut sockets = Vec::new();
        let every = snapshot
            .listen
            .iter()
            .map(|a| (*a, None))
            .chain(snapshot.targets.iter().map(|(a, d)| (*a, Some(d.clone()))));
        for (addr, destination) in every {
            let addr = &addr;
            match listener::bind(*addr) {
                Ok(socket) => sockets.push((*addr, destination, socket)),
                Err(e) => {
                    addresses.release(&[]);
                    let owned = snapshot.addresses.addresses.contains(&addr.ip());
                    return Err(if !owned && e.to_string().contains("no local interface") {
                        anyhow::anyhow!(
                            "--listen {e}; add --bind-address {} to have the agent add it",
                            addr.ip()
                        )
                    } else {
                        anyhow::anyhow!("--listen {e}")
                    });
                }
            }
        }

        let metrics = AgentMetrics::default();
        metrics.register(registry);
        let backend_metrics = BackendMetrics::default();
        backend_metrics.register(registry);

        let spec = snapshot.upstream.clone();
        let set = EndpointSet::new(spec.set_name(), &spec.set, backend_metrics);
        let stop = context.stop.clone();
        // The checker reads the set's members every round, so it serves
        // every later membership and settings change too.
        apiway_core::health::spawn_checker(&set, stop.child_token());
        let resolver = stop.child_token();
        apiway_core::health::spawn_resolver(
            &set,
            spec.set.clone(),
            spec.dns_refresh,
            resolver.clone(),
        );
        let tunnel = match &spec.tunnel {
            Some(settings) => {
                let metrics = apiway_tunnel::metrics::TunnelMetrics::default();
                metrics.register(registry);
                let client = apiway_tunnel::client::TunnelClient::new(
                    set.clone(),
                    settings.clone(),
                    metrics,
                );
                client.keep_warm(stop.child_token());
                Some(client)
            }
            None => None,
        };
        let upstream = Arc::new(Upstream::new(spec, set, tunnel));
        let mut listeners = Vec::new();
        for (configured, destination, socket) in sockets {
            let local = socket.local_addr()?;
            let slots = Slots::new(snapshot.max_connections);
            slots.set_when_full(snapshot.when_full);
            let handles = Arc::new(ListenerHandles::new(&local.to_string(), &metrics));
            match &destination {
                Some(d) => {
                    tracing::info!(address = %local, destination = %d, "listening; connections go through the tunnel")
                }
                None => {
                    tracing::info!(address = %local, upstream = ?snapshot.upstream.mode, "listening")
                }
            }
            // A target listener's name carries its destination, so that
            // several on port 0 stay apart in the ready file.
            let name = match &destination {
                Some(d) => format!("{configured}>{d}"),
                None => configured.to_string(),
            };
            let destination: Option<Arc<str>> = destination.map(Into::into);
            let upstream = upstream.clone();
            let rejected = handles.clone();
            tokio::spawn(listener::accept_loop(
                socket,
                slots.clone(),
                context.drain.clone(),
                stop.child_token(),
                move |peer| {
                    rejected.rejected.inc();
                    tracing::debug!(%peer, listener = %rejected.name, "max_connections reached; closed");
                },
                move |stream, peer, slot| {
                    crate::upstream::serve(
                        upstream.clone(),
                        destination.clone(),
                        handles.clone(),
                        stream,
                        peer,
                        slot,
                    )
                },
            ));
            listeners.push((name, local, slots));
        }
        if let (Some(spec), Some((_, first, _))) = (&snapshot.discovery, listeners.first()) {
            let metrics = apiway_client::ClientMetrics::default();
            metrics.register(registry);
            tokio::spawn(crate::discovery::run(
                spec.clone(),
                upstream.set(),
                crate::discovery::through(*first),
                metrics,
                stop.child_token(),
            ));
        }
        let agent = Arc::new(Agent {
            upstream,
            listeners,
            addresses: Mutex::new(Some(addresses)),
            resolver: Mutex::new(resolver),
            running: Mutex::new(snapshot),
            stop,
        });
        agent.spawn_readiness(context.health.clone());
        Ok(agent)
    }

    /// Applies a changed configuration: the endpoint list, health check,
    /// timeouts and limits. What needs a restart is listed in `fixed`.
    fn apply(self: &Arc<Self>, next: Snapshot) -> Result<(), String> {
        let mut running = lock(&self.running);
        if next.upstream.set != running.upstream.set
            || next.upstream.dns_refresh != running.upstream.dns_refresh
        {
            let set = self.upstream.set();
            let mut resolver = lock(&self.resolver);
            resolver.cancel();
            *resolver = self.stop.child_token();
            if next.upstream.set.names().next().is_none() {
                set.apply(&next.upstream.set);
            } else {
                // The resolver applies the expanded set once names resolve;
                // until then the current members keep serving.
                apiway_core::health::spawn_resolver(
                    &set,
                    next.upstream.set.clone(),
                    next.upstream.dns_refresh,
                    resolver.clone(),
                );
            }
        }
        for (_, _, slots) in &self.listeners {
            slots.set_max(next.max_connections);
            slots.set_when_full(next.when_full);
        }
        if let (Some(client), Some(settings)) = (self.upstream.tunnel(), &next.upstream.tunnel) {
            client.set_settings(settings.clone());
        }
        self.upstream.replace_spec(next.upstream.clone());
        *running = next;
        Ok(())
    }

    fn listeners(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .map(|(name, local, _)| (name.clone(), *local))
            .collect()
    }

    /// Removes the owned addresses.
    fn stopped(&self) {
        if let Some(mut addresses) = lock(&self.addresses).take() {
            let listened: Vec<SocketAddr> = self.listeners.iter().map(|(_, l, _)| *l).collect();
            addresses.release(&listened);
        }
    }
}

impl Agent {
    /// `/readyz` follows whether any endpoint (or gateway) is available.
    fn spawn_readiness(self: &Arc<Self>, health: Arc<Health>) {
        let set = self.upstream.set();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let mut was = None;
            loop {
                let ready = set.members().endpoints.iter().any(|e| e.is_available());
                health.set_ready(ready);
                if was != Some(ready) {
                    if ready {
                        tracing::info!(upstream = set.name(), "an endpoint is available; ready");
                    } else {
                        tracing::warn!(upstream = set.name(), "no endpoint is available; /readyz fails (connections still try every endpoint)");
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

    /// The bound listener addresses.
    pub fn listener_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(_, a, _)| *a).collect()
    }

    /// The upstream endpoint set (for tests and status displays).
    pub fn endpoint_set(&self) -> Arc<EndpointSet> {
        self.upstream.set()
    }
}
