//! Lists and watches pods through apiway-client, printing each watch event
//! with the API server endpoint in use, so a failover can be watched
//! happen (stop the endpoint in use and see the watch carry on).
//!
//! Run it against the cluster of your kubeconfig, with the API servers'
//! own addresses as alternatives to the load balancer:
//!
//! ```text
//! cargo run -p apiway-client --features kube --example watch_pods -- \
//!     --kubeconfig ~/.kube/config --alternative-hosts 10.0.0.11,10.0.0.12 \
//!     --transport h2 --namespace default
//! ```
//!
//! `--transport h2` (the default) sends kube's requests through the
//! client's HTTP/2 connections (`Client::kube_client`); `--transport http1`
//! uses kube's own HTTP/1.1 stack with the client choosing where each
//! connection goes (`Client::http1_kube_client`), which also runs exec
//! credential plugins. Without `--kubeconfig`, the config is inferred
//! (`KUBECONFIG`, `~/.kube/config`, or the in-cluster service account).
//! Alternatives are also learned from `Alt-Svc` response headers.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use apiway_client::{Client, ClientConfig};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;

/// How kube's requests reach the API server.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Transport {
    /// Through the client's HTTP/2 connections.
    H2,
    /// kube's own HTTP/1.1 stack over the client's dialer.
    Http1,
}

/// Lists and watches pods through apiway-client.
#[derive(Debug, clap::Parser)]
struct Args {
    /// h2 or http1.
    #[arg(long, value_enum, default_value = "h2")]
    transport: Transport,
    /// kubeconfig file [default: inferred].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Comma-separated API server endpoints (host, host:port) to fail over
    /// between [default: none; learned from Alt-Svc].
    #[arg(long, default_value = "")]
    alternative_hosts: String,
    /// Namespace to watch [default: the kubeconfig's; all with --all-namespaces].
    #[arg(long)]
    namespace: Option<String>,
    /// Watch pods in every namespace.
    #[arg(long)]
    all_namespaces: bool,
    /// Exit after this many events [default: run until stopped].
    #[arg(long)]
    max_events: Option<usize>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = <Args as clap::Parser>::parse();
    let kube_config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let config = match args.transport {
        Transport::H2 => ClientConfig::from_kube_config(&kube_config)?,
        // kube does TLS and auth on this path; the client config only
        // needs the origin (its TLS settings go unused).
        Transport::Http1 => ClientConfig::new(
            &kube_config.cluster_url.to_string(),
            Arc::new(kube_config.rustls_client_config()?),
        )?,
    }
    .with_alternative_hosts(&args.alternative_hosts)?;
    let client = Client::new(config)?;
    let kube = match args.transport {
        Transport::H2 => client.kube_client(&kube_config.default_namespace),
        Transport::Http1 => client.http1_kube_client(&kube_config)?,
    };
    let pods: Api<Pod> = if args.all_namespaces {
        Api::all(kube)
    } else {
        let namespace = args
            .namespace
            .unwrap_or_else(|| kube_config.default_namespace.clone());
        Api::namespaced(kube, &namespace)
    };

    // The watcher starts a failed watch again (after a back-off), from
    // the last resourceVersion it saw; its errors are printed, not fatal.
    let mut events =
        std::pin::pin!(watcher::watcher(pods, watcher::Config::default()).default_backoff());
    let mut seen = 0;
    while let Some(event) = events.next().await {
        let endpoint = client.endpoint_in_use().unwrap_or_else(|| "-".into());
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                println!("error      {e} (the watch starts again)");
                continue;
            }
        };
        let (kind, pod) = match &event {
            Event::Init => ("init", None),
            Event::InitApply(pod) => ("listed", Some(pod)),
            Event::InitDone => ("listed all", None),
            Event::Apply(pod) => ("applied", Some(pod)),
            Event::Delete(pod) => ("deleted", Some(pod)),
        };
        let name = pod
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or(""),
                    p.metadata.name.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        println!("{kind:<10} {name:<40} via {endpoint}");
        seen += 1;
        if args.max_events.is_some_and(|max| seen >= max) {
            break;
        }
    }
    Ok(())
}
