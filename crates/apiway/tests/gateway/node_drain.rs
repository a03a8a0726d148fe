//! Node draining (KEP-3836) through the real binary, with real kubectl
//! against the fixture Kubernetes API (`apiway standin --kubernetes-api`):
//! `kubectl taint` and `kubectl delete node` turn `/healthz` to 503 with
//! `"nodeEligible": false`, `/livez` stays 200, and an API server outage
//! keeps the last state.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::KubeApiProcess;
use serde_json::Value;

use crate::support::process::APIWAY;
use crate::support::{eventually, GatewayProcess};

/// A Node with a finalizer, so `kubectl delete` leaves it with a
/// `deletionTimestamp` (as a node being drained by a controller has).
pub const NODE: &str =
    "apiVersion: v1\nkind: Node\nmetadata:\n  name: NAME\n  finalizers: [apiway.dev/test-hold]\n";

pub fn node(name: &str) -> String {
    NODE.replace("NAME", name)
}

/// A gateway with an admin endpoint and one TLS listener, watching Node
/// `name` through `kube`.
pub async fn node_aware_gateway(
    kube: &KubeApiProcess,
    name: &str,
    backend: std::net::SocketAddr,
    extra: &[&str],
) -> Result<GatewayProcess> {
    let config = format!(
        "admin: {{address: 127.0.0.1:0}}\nlisteners:\n  - {{name: public, address: 127.0.0.1:0, kind: tls}}\nroutes:\n  - name: a\n    hostnames: [a.example]\n    backends: [{{address: \"{backend}\"}}]\n    health_check: {{kind: none}}\ndefault_route: a\n"
    );
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let mut args = vec!["--node-name", name, "--kubeconfig", &kubeconfig];
    args.extend_from_slice(extra);
    GatewayProcess::start_with_args(None, &config, &args).await
}

/// `/healthz` as (status, nodeEligible, reason).
pub async fn healthz(gateway: &GatewayProcess) -> Result<(u16, Option<bool>, Option<String>)> {
    let (status, body) = gateway.admin_get("/healthz").await?;
    let body: Value =
        serde_json::from_str(&body).with_context(|| format!("/healthz body {body:?}"))?;
    ensure!(
        body["lastUpdated"].is_string() && body["currentTime"].is_string(),
        "{body}"
    );
    Ok((
        status,
        body["nodeEligible"].as_bool(),
        body["reason"].as_str().map(str::to_owned),
    ))
}

async fn wait_healthz(gateway: &GatewayProcess, want: (u16, bool), within: Duration) -> Result<()> {
    eventually(&format!("/healthz {want:?}"), within, || async {
        match healthz(gateway).await {
            Ok((status, Some(eligible), _)) if (status, eligible) == want => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_deletion_and_an_api_outage() -> Result<()> {
    let backend = crate::support::Recorder::start().await?;
    let mut kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(&node("n1")).await?;
    let gateway = node_aware_gateway(
        &kube,
        "n1",
        backend.addr(),
        &["--drain-on-taint", "karpenter.sh/disrupted"],
    )
    .await?;
    wait_healthz(&gateway, (200, true), Duration::from_secs(5)).await?;

    // The autoscaler's taint, any value and effect: 503 within 1 s.
    kube.kubectl(&[
        "taint",
        "nodes",
        "n1",
        "ToBeDeletedByClusterAutoscaler=1700000000:NoSchedule",
    ])
    .await?;
    wait_healthz(&gateway, (503, false), Duration::from_secs(1)).await?;
    let (_, _, reason) = healthz(&gateway).await?;
    ensure!(reason
        .unwrap_or_default()
        .contains("ToBeDeletedByClusterAutoscaler"));
    // /livez keeps its meaning, and says so in kube-proxy's shape.
    let (status, body) = gateway.admin_get("/livez").await?;
    ensure!(status == 200, "/livez {status} {body}");
    let livez: Value = serde_json::from_str(&body)?;
    ensure!(livez["lastUpdated"].is_string() && livez.get("nodeEligible").is_none());

    kube.kubectl(&["taint", "nodes", "n1", "ToBeDeletedByClusterAutoscaler-"])
        .await?;
    wait_healthz(&gateway, (200, true), Duration::from_secs(1)).await?;
    // An extra key given with --drain-on-taint drains too; other taints do not.
    kube.kubectl(&["taint", "nodes", "n1", "example.com/other=x:NoSchedule"])
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(healthz(&gateway).await?.0 == 200);
    kube.kubectl(&["taint", "nodes", "n1", "karpenter.sh/disrupted=:NoSchedule"])
        .await?;
    wait_healthz(&gateway, (503, false), Duration::from_secs(1)).await?;
    kube.kubectl(&["taint", "nodes", "n1", "karpenter.sh/disrupted-"])
        .await?;
    wait_healthz(&gateway, (200, true), Duration::from_secs(1)).await?;

    // The API server goes away: the last state (eligible) holds; the
    // errors are counted.
    kube.kill();
    let metrics = eventually(
        "node watch errors counted",
        Duration::from_secs(10),
        || async {
            let m = gateway.metrics().await.map_err(|e| e.to_string())?;
            match m.value("apiway_node_watch_errors_total", &[]) {
                Some(v) if v >= 1.0 => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    ensure!(metrics.value("apiway_node_eligible", &[]) == Some(1.0));
    ensure!(
        healthz(&gateway).await?.0 == 200,
        "an outage must not fail /healthz"
    );

    // Back (empty, as a fresh API): the Node is not there, then it is.
    kube.restart().await?;
    wait_healthz(&gateway, (503, false), Duration::from_secs(15)).await?;
    kube.apply(&node("n1")).await?;
    wait_healthz(&gateway, (200, true), Duration::from_secs(2)).await?;

    // Deletion of a Node with a finalizer: deletionTimestamp, 503.
    kube.kubectl(&["delete", "node", "n1", "--wait=false"])
        .await?;
    wait_healthz(&gateway, (503, false), Duration::from_secs(1)).await?;
    let (_, _, reason) = healthz(&gateway).await?;
    ensure!(reason.unwrap_or_default().contains("deleted"), "reason");
    ensure!(gateway.admin_get("/livez").await?.0 == 200);

    // The outage keeps this state too.
    kube.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(healthz(&gateway).await?.0 == 503);
    let m = gateway.metrics().await?;
    ensure!(
        m.value("apiway_healthz_total", &[("code", "503")])
            .unwrap_or(0.0)
            >= 1.0
    );
    ensure!(
        m.value("apiway_livez_total", &[("code", "200")])
            .unwrap_or(0.0)
            >= 1.0
    );
    ensure!(m.value("apiway_node_last_event_age_seconds", &[]).is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_unaware_without_a_node_name() -> Result<()> {
    let backend = crate::support::Recorder::start().await?;
    let gateway = GatewayProcess::start(&format!(
        "admin: {{address: 127.0.0.1:0}}\nlisteners:\n  - {{name: public, address: 127.0.0.1:0, kind: tls}}\nroutes:\n  - name: a\n    hostnames: [a.example]\n    backends: [{{address: \"{}\"}}]\n",
        backend.addr()
    ))
    .await?;
    let (status, eligible, _) = healthz(&gateway).await?;
    ensure!(status == 200 && eligible.is_none());
    ensure!(gateway
        .metrics()
        .await?
        .value("apiway_node_eligible", &[])
        .is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_kubeconfig_stops_the_start() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("nope");
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        "listeners:\n  - {name: public, address: 127.0.0.1:0, kind: tls}\nroutes: []\n",
    )?;
    let out = tokio::process::Command::new(APIWAY)
        .args(["gateway", "--config"])
        .arg(&config)
        .args(["--node-name", "n1", "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("NODE_NAME")
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{:?} {stderr}", out.status);
    ensure!(stderr.contains("--kubeconfig"), "{stderr}");
    Ok(())
}
