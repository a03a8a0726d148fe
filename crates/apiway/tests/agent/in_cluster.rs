//! The whole in-cluster path across two network namespaces joined by a veth
//! pair, as on a real node and seed: in the "node", pods reach their API
//! server at its ClusterIP; the agent owns those addresses (on `lo`) and
//! forwards each connection with a PROXY v2 header to the gateway in the
//! "seed", which routes on the original destination to that cluster's
//! stand-in API server. TLS stays end to end: cluster A's server requires a
//! client certificate and sees the client's own.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::StandinProcess;

use crate::agent_support::{curl_api, AgentProcess, Netns, API_NAMES};
use crate::support::metrics::Metrics;
use crate::support::process::{GatewayProcess, APIWAY};
use crate::support::tools::run;
use crate::support::{Pki, LOCALHOST};

const CLUSTER_A_IP: &str = "10.1.2.3";
const CLUSTER_B_IP: &str = "10.1.2.4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_their_own_cluster_through_agent_and_gateway() -> Result<()> {
    let pki = Pki::new()?;
    let node = Netns::new()?;
    let seed = Netns::new()?;
    node.link_to(
        &seed,
        ("awnode", "10.88.0.1/24"),
        ("awseed", "10.88.0.2/24"),
    )?;

    // Seed: one stand-in per cluster, cluster A's requiring client certs.
    let listen: SocketAddr = SocketAddr::new(LOCALHOST, 0);
    let cert = pki.ca.issue_server(API_NAMES, &[LOCALHOST])?;
    let apiway = Path::new(APIWAY);
    let a = StandinProcess::start_with_client_ca(
        apiway,
        "cluster-a",
        listen,
        &cert,
        Some(&pki.ca),
        Some(seed.name()),
    )
    .await?;
    let b = StandinProcess::start(apiway, "cluster-b", listen, &cert, Some(seed.name())).await?;
    let gateway = GatewayProcess::start_in(
        Some(seed.name()),
        &format!(
            "admin: {{ address: 127.0.0.1:0 }}
listeners:
  - name: in-cluster
    address: 10.88.0.2:0
    kind: proxy
    trusted_sources: [\"10.88.0.0/24\"]
routes:
  - name: cluster-a
    destinations: [\"{CLUSTER_A_IP}:443\"]
    backends: [{{ address: \"{}\" }}]
  - name: cluster-b
    destinations: [\"{CLUSTER_B_IP}:443\"]
    backends: [{{ address: \"{}\" }}]
",
            a.addr(),
            b.addr()
        ),
    )
    .await?;
    let gateway_addr = gateway.listener("in-cluster").to_string();

    // Node: the agent owns both ClusterIPs and forwards to the gateway.
    let agent = AgentProcess::start(
        Some(&node),
        &[
            "--listen",
            &format!("{CLUSTER_A_IP}:443"),
            "--listen",
            &format!("{CLUSTER_B_IP}:443"),
            "--bind-address",
            CLUSTER_A_IP,
            "--bind-address",
            CLUSTER_B_IP,
            "--interface",
            "lo",
            "--upstream",
            "proxy",
            "--gateway",
            &gateway_addr,
        ],
    )
    .await?;
    let on_lo = node.addresses("lo")?;
    ensure!(
        on_lo.contains(&format!("{CLUSTER_A_IP}/32"))
            && on_lo.contains(&format!("{CLUSTER_B_IP}/32")),
        "the agent owns both ClusterIPs on lo: {on_lo}"
    );

    // A pod of cluster A, with its client certificate, as kubectl would.
    let url = "https://kubernetes.default.svc/api?who";
    let mut curl = tokio::process::Command::new("ip");
    curl.args([
        "netns",
        "exec",
        node.name(),
        "curl",
        "-sS",
        "--max-time",
        "5",
    ])
    .arg("--resolve")
    .arg(format!("kubernetes.default.svc:443:{CLUSTER_A_IP}"))
    .arg("--cacert")
    .arg(&pki.ca_pem)
    .arg("--cert")
    .arg(&pki.client_cert)
    .arg("--key")
    .arg(&pki.client_key)
    .arg(url);
    let ran = run(curl, b"", Duration::from_secs(10)).await?;
    ensure!(
        ran.success,
        "curl with a client certificate: {}",
        ran.stderr
    );
    let seen: serde_json::Value =
        serde_json::from_str(&ran.stdout).with_context(|| format!("not JSON: {}", ran.stdout))?;
    ensure!(
        seen["server"] == "cluster-a",
        "answered by {}",
        seen["server"]
    );
    ensure!(
        seen["client_cn"] == "alice",
        "cluster A saw the pod's own certificate: {seen}"
    );
    ensure!(
        seen["sni"] == "kubernetes.default.svc",
        "the pod's TLS reached the API server untouched: {seen}"
    );

    // Without a certificate cluster A refuses: the gateway did not terminate TLS.
    let refused = curl_api(
        Some(&node),
        format!("{CLUSTER_A_IP}:443").parse()?,
        "/version",
        &pki,
        Duration::from_secs(5),
    )
    .await;
    ensure!(
        refused.is_err(),
        "cluster A answered a client without a certificate: {refused:?}"
    );

    // Cluster B, same name, its own ClusterIP.
    let b_answer = curl_api(
        Some(&node),
        format!("{CLUSTER_B_IP}:443").parse()?,
        "/version",
        &pki,
        Duration::from_secs(5),
    )
    .await?;
    ensure!(
        b_answer.standin() == Some("cluster-b"),
        "cluster B's ClusterIP reached {:?}",
        b_answer.standin()
    );

    // The admin endpoint is inside the seed namespace too.
    let mut scrape = tokio::process::Command::new("ip");
    scrape
        .args([
            "netns",
            "exec",
            seed.name(),
            "curl",
            "-sS",
            "--max-time",
            "5",
        ])
        .arg(format!("http://{}/metrics", gateway.admin()));
    let scraped = run(scrape, b"", Duration::from_secs(10)).await?;
    ensure!(scraped.success, "scraping the gateway: {}", scraped.stderr);
    let metrics = Metrics::new(scraped.stdout);
    for route in ["cluster-a", "cluster-b"] {
        ensure!(
            metrics.count("apiway_route_connections_total", &[("route", route)]) >= 1.0,
            "route {route} counted no connection"
        );
    }
    drop(agent);
    Ok(())
}
