//! The watch of one Node (a kube-rs watcher with the field selector
//! `metadata.name=NAME`, so the API server sends nothing about other
//! nodes), turned into [`NodeEvent`]s for the runtime.
//!
//! A relist that does not contain the Node reports it missing; errors are
//! reported and the watcher retries with kube-rs's default back-off (1 s
//! growing to 30 s, with jitter), re-listing after a `410 Gone`.

use apiway_core::node::{NodeEvent, NodeFacts};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What of `node` decides its eligibility.
pub fn facts(node: &Node) -> NodeFacts {
    NodeFacts {
        deleting: node.metadata.deletion_timestamp.is_some(),
        taint_keys: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|taints| taints.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default(),
    }
}

/// Watches the Node `name` until `stop` fires or the receiver is gone,
/// sending what it sees into `tx`.
pub async fn watch(
    client: kube::Client,
    name: String,
    tx: mpsc::Sender<NodeEvent>,
    stop: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(nodes, config).default_backoff();
    futures_util::pin_mut!(stream);
    // Whether the relist in progress has seen the Node.
    let mut seen_in_list = false;
    loop {
        let item = tokio::select! {
            _ = stop.cancelled() => return,
            item = stream.next() => match item {
                Some(item) => item,
                None => return,
            },
        };
        let event = match item {
            Err(e) => Some(NodeEvent::Error(e.to_string())),
            Ok(Event::Init) => {
                seen_in_list = false;
                None
            }
            Ok(Event::InitApply(node)) => {
                seen_in_list = true;
                Some(NodeEvent::Observed(facts(&node)))
            }
            Ok(Event::InitDone) => (!seen_in_list).then_some(NodeEvent::Missing),
            Ok(Event::Apply(node)) => Some(NodeEvent::Observed(facts(&node))),
            Ok(Event::Delete(_)) => Some(NodeEvent::Missing),
        };
        if let Some(event) = event {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    #[test]
    fn facts_of_a_node() {
        let mut node = Node::default();
        assert_eq!(facts(&node), NodeFacts::default());
        node.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "ToBeDeletedByClusterAutoscaler".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        });
        node.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let f = facts(&node);
        assert!(f.deleting);
        assert_eq!(f.taint_keys, ["ToBeDeletedByClusterAutoscaler"]);
    }
}
