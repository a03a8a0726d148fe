//! The agent is node-aware through the same runtime as the gateway
//! (KEP-3836): `kubectl taint` of its Node fails its `/healthz`.

use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_test_support::peers::KubeApiProcess;

use crate::agent_support::AgentProcess;
use crate::support::eventually;
use crate::support::process::APIWAY;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_drains_with_its_node() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply("apiVersion: v1\nkind: Node\nmetadata: {name: worker-1}\n")
        .await?;
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            "127.0.0.1:9",
            "--admin",
            "127.0.0.1:0",
            "--node-name",
            "worker-1",
            "--kubeconfig",
            &kubeconfig,
        ],
    )
    .await?;
    let healthz = |want: u16, eligible: bool| {
        let agent = &agent;
        async move {
            let (status, body) = agent
                .admin_get("/healthz")
                .await
                .map_err(|e| e.to_string())?;
            let body: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            if status == want && body["nodeEligible"] == eligible {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        }
    };
    eventually("eligible", Duration::from_secs(5), || healthz(200, true)).await?;
    kube.kubectl(&[
        "taint",
        "nodes",
        "worker-1",
        "ToBeDeletedByClusterAutoscaler=x:NoExecute",
    ])
    .await?;
    eventually("not eligible", Duration::from_secs(1), || {
        healthz(503, false)
    })
    .await?;
    ensure!(agent.admin_get("/livez").await?.0 == 200);
    kube.kubectl(&["delete", "node", "worker-1"]).await?;
    eventually("still not eligible: gone", Duration::from_secs(1), || {
        healthz(503, false)
    })
    .await?;
    kube.kubectl(&[
        "taint",
        "nodes",
        "worker-1",
        "ToBeDeletedByClusterAutoscaler-",
    ])
    .await
    .err()
    .ok_or_else(|| anyhow::anyhow!("the Node should be gone"))?;
    Ok(())
}
