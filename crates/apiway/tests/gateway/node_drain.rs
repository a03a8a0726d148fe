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

/// Connections the gateway's `public` listener accepted so far.
async fn accepted(g: &GatewayProcess) -> Result<f64> {
    Ok(g.metrics()
        .await?
        .count("apiway_listener_accepted_total", &[("listener", "public")]))
}

/// One long-lived stream through HAProxy and a gateway to the echo
/// backend: the ClientHello (echoed back), then a chunk now and then.
struct Stream {
    tcp: tokio::net::TcpStream,
}

impl Stream {
    async fn open(addr: std::net::SocketAddr, hello: &[u8]) -> Result<Stream> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.write_all(hello).await?;
        let mut echoed = vec![0; hello.len()];
        tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut echoed))
            .await
            .context("the echo of the hello")??;
        ensure!(echoed == hello);
        Ok(Stream { tcp })
    }

    /// Sends `n` bytes and reads them back.
    async fn round_trip(&mut self, n: usize, seed: u8) -> Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let out: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_add(seed)).collect();
        self.tcp.write_all(&out).await?;
        let mut back = vec![0; n];
        tokio::time::timeout(Duration::from_secs(5), self.tcp.read_exact(&mut back))
            .await
            .context("the echo")??;
        ensure!(back == out, "echo differs");
        Ok(())
    }
}

/// The KEP's end-to-end check: HAProxy health-checks two gateways'
/// `/healthz` (`option httpchk`, `inter 1s fall 2`); tainting the first
/// gateway's Node stops new connections to it within 3 s, while every
/// stream established through it keeps flowing to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_stops_sending_new_connections_and_streams_keep_flowing() -> Result<()> {
    use apiway_test_support::peers::{free_port, Haproxy};
    let hello = crate::support::captured_hello("openssl-sni.bin")?;
    let echo = crate::support::EchoBackend::start().await?;
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(&format!("{}---\n{}", node("n1"), node("n2")))
        .await?;
    let config = |name: &str| {
        format!(
            "admin: {{address: 127.0.0.1:0}}\nlisteners:\n  - {{name: public, address: 127.0.0.1:0, kind: tls}}\nroutes:\n  - name: a\n    hostnames: [api.a.example.com]\n    backends: [{{address: \"{}\"}}]\n    health_check: {{kind: none}}\ndrain: {{delay: 1s}}\n# {name}\n",
            echo.addr()
        )
    };
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let mut gateways = Vec::new();
    for name in ["n1", "n2"] {
        gateways.push(
            GatewayProcess::start_with_args(
                None,
                &config(name),
                &["--node-name", name, "--kubeconfig", &kubeconfig],
            )
            .await?,
        );
    }
    for g in &gateways {
        wait_healthz(g, (200, true), Duration::from_secs(5)).await?;
    }
    let port = free_port()?;
    let _haproxy = Haproxy::start(&format!(
        "global\n    maxconn 1000\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\nfrontend f\n    bind 127.0.0.1:{port}\n    default_backend gateways\nbackend gateways\n    balance roundrobin\n    option httpchk GET /healthz\n    server g1 {g1} check port {a1} inter 1s fall 2 rise 1\n    server g2 {g2} check port {a2} inter 1s fall 2 rise 1\n",
        g1 = gateways[0].listener("public"),
        g2 = gateways[1].listener("public"),
        a1 = gateways[0].admin().port(),
        a2 = gateways[1].admin().port(),
    ))
    .await?;
    let front = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Long-lived streams, spread over both (HAProxy needs a check or two
    // to mark both up).
    let mut streams = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        streams.push(Stream::open(front, &hello).await?);
        let (a, b) = (accepted(&gateways[0]).await?, accepted(&gateways[1]).await?);
        if streams.len() >= 10 && a >= 3.0 && b >= 3.0 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "HAProxy did not spread streams: {a} / {b}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let through_g1 = accepted(&gateways[0]).await?;

    // The Node of the first gateway is about to be deleted.
    kube.kubectl(&[
        "taint",
        "nodes",
        "n1",
        "ToBeDeletedByClusterAutoscaler=1:NoSchedule",
    ])
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g1_before = accepted(&gateways[0]).await?;
    ensure!(gateways[0].admin_get("/livez").await?.0 == 200);
    let mut fresh = Vec::new();
    for _ in 0..20 {
        fresh.push(Stream::open(front, &hello).await?);
    }
    let g1_after = accepted(&gateways[0]).await?;
    ensure!(
        g1_after == g1_before,
        "HAProxy still sent {} new connections to the tainted gateway 3 s after the taint",
        g1_after - g1_before
    );

    // Every established stream keeps flowing (the ones through the first
    // gateway included): 0 broken.
    let mut broken = 0;
    for round in 0..5u8 {
        for s in streams.iter_mut().chain(fresh.iter_mut()) {
            if s.round_trip(4096, round).await.is_err() {
                broken += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(
        broken == 0,
        "{broken} round trips failed on established streams"
    );
    ensure!(through_g1 >= 3.0);
    Ok(())
}
