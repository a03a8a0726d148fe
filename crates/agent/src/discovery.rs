//! `--discover-endpoints`: the API server endpoints from the
//! `default/kubernetes` EndpointSlices join the agent's endpoint set.
//!
//! The discovery itself is the client library's (`apiway-client`'s list
//! and watch loop, see its `discovery` module): one implementation for both.
//! Its client dials the agent's own first listener, so discovery requests
//! go through the agent's endpoint set and fail over like any connection
//! (once it has listed endpoints it may also reach them directly, as its
//! own alternatives). Credentials and the CA come from `--kubeconfig`, or
//! from the in-cluster service account.
//!
//! The configured `--endpoint`s stay in the set as the seed and last
//! resort. While discovery fails the last list stays in use; after the
//! client library's max age (70 s) without a successful list, watch event
//! or bookmark, the discovered endpoints are dropped and the configured
//! ones serve alone.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use apiway_client::{Client, ClientConfig, ClientMetrics};
use apiway_core::endpoint::{Address, EndpointSet};
use tokio_util::sync::CancellationToken;

use crate::config::DiscoverySpec;

/// Where the discovery client dials: the listener, or loopback for a
/// wildcard listener.
pub(crate) fn through(listener: SocketAddr) -> SocketAddr {
    match listener.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, listener.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, listener.port()).into(),
        _ => listener,
    }
}

/// Runs discovery until `stop`, feeding `set`.
pub(crate) async fn run(
    spec: DiscoverySpec,
    set: Arc<EndpointSet>,
    through: SocketAddr,
    metrics: ClientMetrics,
    stop: CancellationToken,
) {
    let client = match client(&spec, through, metrics).await {
        Ok(client) => client,
        Err(e) => {
            tracing::error!("--discover-endpoints: {e:#}; serving the configured endpoints only");
            return;
        }
    };
    tracing::info!(through = %through, "discovering API server endpoints from the default/kubernetes EndpointSlices");
    let mut discovered = client.discovered();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = discovered.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let list: Vec<Address> = discovered.borrow_and_update().clone();
        tracing::info!(count = list.len(), endpoints = ?list.iter().map(Address::to_string).collect::<Vec<_>>(), "discovered endpoints changed");
        set.set_discovered(list);
    }
}

async fn client(
    spec: &DiscoverySpec,
    through: SocketAddr,
    metrics: ClientMetrics,
) -> anyhow::Result<Client> {
    let kube_config = apiway_kube::config(spec.kubeconfig.as_deref()).await?;
    let mut config = ClientConfig::from_kube_config(&kube_config)?;
    config.origin = Address::from(through);
    config.origin_server_name = Some(spec.server_name.clone());
    config.learn_alt_svc = false;
    config.endpoint_slice_discovery = true;
    config.metrics = metrics;
    Ok(Client::new(config)?)
}
