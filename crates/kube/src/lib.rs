//! Kubernetes sources for apiway's roles, through kube-rs. Each feeds a
//! seam of `apiway-core` (which knows nothing of kube-rs), so a role can be
//! fed from Kubernetes, a file or a test alike.
//!
//! - [`node`]: the watch of the Node the process runs on, for KEP-3836
//!   draining ([`apiway_core::node`]).
//! - [`token_review`]: who a bearer token belongs to (the tunnel server).
//! - [`gateway_api`]: the gateway's configuration from a Gateway API
//!   Gateway and its TLSRoutes, and their status.

pub mod gateway_api;
pub mod node;
pub mod token_review;

use std::path::Path;

use anyhow::Context as _;

/// The kube-rs configuration from `kubeconfig`, or from the in-cluster
/// service account when there is none; errors name `--kubeconfig`.
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::incluster().context(
            "no --kubeconfig given and not running in a cluster (in-cluster service account not found)",
        )?,
    })
}

/// A kube-rs client from [`config`].
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(config(kubeconfig).await?).context("building the Kubernetes client")
}
