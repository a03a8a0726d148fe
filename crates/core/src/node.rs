//! Node awareness (KEP-3836): `/healthz` fails while the Node this process
//! runs on is being deleted or is tainted for scale-down, so the load
//! balancer in front stops sending *new* connections while established ones
//! finish.
//!
//! The seam: a Kubernetes source (`apiway-kube`'s Node watch, or a test)
//! sends [`NodeEvent`]s into the [`NodeFeed`] the runtime takes
//! ([`RunOptions::node`](crate::runtime::RunOptions::node)); the runtime
//! judges each with [`NodePolicy`] and sets the admin endpoint's verdict.
//! Core knows nothing of kube-rs.
//!
//! Rules:
//! - ineligible while the Node has a `deletionTimestamp`, a taint with key
//!   [`AUTOSCALER_TAINT`] (any value, any effect) or one of the extra keys
//!   (`--drain-on-taint`), or is gone (deleted, or not found by a list);
//! - a watch or list error keeps the last state (the API server being away
//!   must not fail every health check at once); errors are counted, and
//!   logged once when they start and once when they stop;
//! - until the first event the role counts as eligible (it cannot know
//!   better, and a fresh node is not being drained);
//! - nothing here touches established connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::admin::{Health, NodeView};

/// The taint the cluster autoscaler puts on a node it is about to delete.
pub const AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// What a Kubernetes source saw of the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// The Node as it is now.
    Observed(NodeFacts),
    /// The Node was deleted, or a list did not find it.
    Missing,
    /// A watch or list failed (the source retries on its own).
    Error(String),
}

/// What of a Node decides its eligibility.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Whether it has a `deletionTimestamp`.
    pub deleting: bool,
    /// The keys of its taints.
    pub taint_keys: Vec<String>,
}

/// The receiving end the runtime follows.
pub type NodeFeed = mpsc::Receiver<NodeEvent>;

/// A sender for a source and the feed for the runtime.
pub fn feed() -> (mpsc::Sender<NodeEvent>, NodeFeed) {
    mpsc::channel(64)
}

/// What a node-aware role follows: the feed and the policy that judges it.
#[derive(Debug)]
pub struct NodeWatch {
    /// Events from the Kubernetes source.
    pub feed: NodeFeed,
    /// Which facts drain.
    pub policy: NodePolicy,
}

/// Which Node facts make it ineligible.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePolicy {
    /// Taint keys that drain besides [`AUTOSCALER_TAINT`].
    pub extra_taints: Vec<String>,
}

impl NodePolicy {
    /// Why `facts` make the Node ineligible, if they do.
    pub fn reason(&self, facts: &NodeFacts) -> Option<String> {
        if facts.deleting {
            return Some("the Node is being deleted (deletionTimestamp is set)".into());
        }
        facts
            .taint_keys
            .iter()
            .find(|k| *k == AUTOSCALER_TAINT || self.extra_taints.contains(k))
            .map(|k| format!("the Node is tainted {k}"))
    }
}

/// The node metrics: eligibility and the age of the last event (computed
/// at each scrape), and watch errors.
#[derive(Clone, Debug)]
pub struct NodeMetrics {
    /// `apiway_node_watch_errors_total`.
    pub watch_errors: Counter,
}

#[derive(Debug)]
struct NodeCollector {
    health: Arc<Health>,
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(node) = self.health.node() else {
            return Ok(());
        };
        let eligible = ConstGauge::new(i64::from(node.eligible));
        let metric = encoder.encode_descriptor(
            "node_eligible",
            "Whether /healthz lets new connections come here as far as the Node goes (1) or not (0, KEP-3836)",
            None,
            eligible.metric_type(),
        )?;
        eligible.encode(metric)?;
        if let Some(last) = node.last_event {
            let age = SystemTime::now()
                .duration_since(last)
                .unwrap_or_default()
                .as_secs_f64();
            let age = ConstGauge::new(age);
            let metric = encoder.encode_descriptor(
                "node_last_event_age_seconds",
                "Seconds since the last event about this Node (a list or a watch event)",
                None,
                age.metric_type(),
            )?;
            age.encode(metric)?;
        }
        Ok(())
    }
}

impl NodeMetrics {
    /// Registers the node metrics of the role whose verdicts `health` holds.
    pub fn register(registry: &mut Registry, health: Arc<Health>) -> NodeMetrics {
        let watch_errors = Counter::default();
        registry.register(
            "node_watch_errors",
            "Failed lists and watches of this Node (the last state is kept)",
            watch_errors.clone(),
        );
        registry.register_collector(Box::new(NodeCollector { health }));
        NodeMetrics { watch_errors }
    }
}

/// Follows `feed` until it ends or `stop` fires, keeping `health`'s Node
/// verdict current.
pub async fn follow(
    mut feed: NodeFeed,
    policy: NodePolicy,
    health: Arc<Health>,
    metrics: NodeMetrics,
    stop: CancellationToken,
) {
    health.set_node(NodeView {
        eligible: true,
        reason: None,
        last_event: None,
    });
    let failing = AtomicU64::new(0);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = feed.recv() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let reason = match event {
            NodeEvent::Error(error) => {
                metrics.watch_errors.inc();
                if failing.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(%error, "node watch failed; keeping the last Node state while it retries");
                }
                continue;
            }
            NodeEvent::Observed(facts) => policy.reason(&facts),
            NodeEvent::Missing => Some("the Node is gone (deleted or not found)".into()),
        };
        let errors = failing.swap(0, Ordering::Relaxed);
        if errors > 0 {
            tracing::info!(errors, "node watch works again");
        }
        let before = health.node();
        let view = NodeView {
            eligible: reason.is_none(),
            reason,
            last_event: Some(SystemTime::now()),
        };
        if before.as_ref().map(|b| (&b.eligible, &b.reason)) != Some((&view.eligible, &view.reason))
        {
            match &view.reason {
                Some(reason) => tracing::warn!(
                    %reason,
                    "node not eligible: /healthz fails so the load balancer sends no new connections; established ones continue"
                ),
                None => tracing::info!("node eligible: /healthz passes"),
            }
        }
        health.set_node(view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(deleting: bool, taints: &[&str]) -> NodeFacts {
        NodeFacts {
            deleting,
            taint_keys: taints.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn policy() {
        let p = NodePolicy {
            extra_taints: vec!["karpenter.sh/disrupted".into()],
        };
        assert_eq!(p.reason(&facts(false, &[])), None);
        assert_eq!(
            p.reason(&facts(false, &["node.kubernetes.io/unschedulable"])),
            None
        );
        assert!(p.reason(&facts(false, &[AUTOSCALER_TAINT])).is_some());
        assert!(p
            .reason(&facts(false, &["karpenter.sh/disrupted"]))
            .is_some());
        assert!(p.reason(&facts(true, &[])).unwrap().contains("deletion"));
        assert!(NodePolicy::default()
            .reason(&facts(false, &["karpenter.sh/disrupted"]))
            .is_none());
    }

    #[tokio::test]
    async fn errors_keep_the_last_state() {
        let health = Health::new();
        let mut registry = Registry::default();
        let metrics = NodeMetrics::register(&mut registry, health.clone());
        let (tx, rx) = feed();
        let stop = CancellationToken::new();
        let task = tokio::spawn(follow(
            rx,
            NodePolicy::default(),
            health.clone(),
            metrics.clone(),
            stop.clone(),
        ));
        tx.send(NodeEvent::Observed(facts(false, &[AUTOSCALER_TAINT])))
            .await
            .unwrap();
        tx.send(NodeEvent::Error("connection refused".into()))
            .await
            .unwrap();
        tx.send(NodeEvent::Error("connection refused".into()))
            .await
            .unwrap();
        drop(tx);
        task.await.unwrap();
        let node = health.node().unwrap();
        assert!(!node.eligible, "the tainted state holds through errors");
        assert_eq!(metrics.watch_errors.get(), 2);
        let text = crate::metrics::render(&registry);
        assert!(text.contains("node_eligible 0"), "{text}");
        assert!(text.contains("node_last_event_age_seconds"), "{text}");
    }
}
