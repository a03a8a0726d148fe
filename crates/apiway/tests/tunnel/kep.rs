//! KEP-2025's test plan in network namespaces: a "master" namespace holds
//! the API server (the fixture Kubernetes API behind a stand-in) and the
//! tunnel server; a "node" namespace, joined by a veth pair, has an
//! nftables firewall that lets through only the tunnel server's port. In
//! the node, kubectl and curl reach the API server at the agent's bind
//! address through the tunnel, and a direct connection provably fails.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_test_support::peers::StandinProcess;
use tokio::process::Command;

use crate::agent_support::{curl_api, Netns, API_NAMES};
use crate::support::process::APIWAY;
use crate::support::tools::run;
use crate::support::Pki;
use crate::tunnel_support::{strings, Role, TunnelPki};

const MASTER: &str = "10.89.0.2";
const NODE: &str = "10.89.0.1";
/// Where the agent answers on the node (the kubelet's `server:`).
const AGENT_IP: &str = "10.0.0.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_node_reaches_the_api_server_only_through_the_tunnel() -> Result<()> {
    let api_pki = Pki::new()?;
    let pki = TunnelPki::new()?;
    let node = Netns::new()?;
    let master = Netns::new()?;
    node.link_to(
        &master,
        ("awnode", &format!("{NODE}/24")),
        ("awmaster", &format!("{MASTER}/24")),
    )?;
    let master_ip: IpAddr = MASTER.parse()?;

    // Master: the API server and the tunnel server.
    let cert = api_pki
        .ca
        .issue_server(API_NAMES, &[master_ip, AGENT_IP.parse()?])?;
    let api = StandinProcess::start_with_args(
        Path::new(APIWAY),
        "master-api",
        SocketAddr::new(master_ip, 0),
        &cert,
        None,
        &["--kubernetes-api"],
        Some(master.name()),
    )
    .await?;
    let server_cert = pki.ca.issue_server(&["tunnel.internal"], &[master_ip])?;
    let (scert, skey) = server_cert.write(&pki.path(""), "master-tunnel")?;
    let args = strings(&[
        "--listen",
        &format!("{MASTER}:0"),
        "--cert",
        &scert.display().to_string(),
        "--key",
        &skey.display().to_string(),
        "--client-ca",
        &pki.ca_pem.display().to_string(),
        "--allowed-destination",
        &api.addr().to_string(),
    ]);
    let server = Role::start_in(Some(master.name()), "tunnel-server", &args).await?;
    let tunnel = server.listener("tunnel");

    // Before the firewall the node reaches the API server directly, so
    // what fails later fails because of the firewall.
    let open = curl_api(
        Some(&node),
        api.addr(),
        "/version",
        &api_pki,
        Duration::from_secs(5),
    )
    .await?;
    ensure!(open.status_line.contains(" 200"));

    // Node: only the tunnel server's port gets out.
    let rules = format!(
        "table inet kep {{
  chain out {{
    type filter hook output priority 0; policy drop;
    oif lo accept
    ct state established,related accept
    ip daddr {MASTER} tcp dport {port} accept
  }}
}}
",
        port = tunnel.port()
    );
    let rules_file = pki.path("kep.nft");
    std::fs::write(&rules_file, rules)?;
    let ran = run(
        {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", node.name(), "nft", "-f"])
                .arg(&rules_file);
            c
        },
        b"",
        Duration::from_secs(10),
    )
    .await?;
    ensure!(ran.success, "nft: {}", ran.stderr);

    // The agent owns 10.0.0.1 on the node's lo and forwards 6443 there.
    let (acert, akey) = pki.agent("node-1")?;
    let args = strings(&[
        "--bind-address",
        AGENT_IP,
        "--interface",
        "lo",
        "--target",
        &format!("6443:{}", api.addr()),
        "--upstream",
        "tunnel",
        "--tunnel-server",
        &tunnel.to_string(),
        "--tunnel-ca",
        &pki.ca_pem.display().to_string(),
        "--tunnel-cert",
        &acert.display().to_string(),
        "--tunnel-key",
        &akey.display().to_string(),
    ]);
    let agent = Role::start_in(Some(node.name()), "agent", &args).await?;
    let local: SocketAddr = format!("{AGENT_IP}:6443").parse()?;
    ensure!(agent.listener(">") == local);

    // curl in the node, through the agent.
    let answer = curl_api(
        Some(&node),
        local,
        "/version",
        &api_pki,
        Duration::from_secs(5),
    )
    .await?;
    ensure!(
        answer.status_line.contains(" 200"),
        "{}",
        answer.status_line
    );
    ensure!(
        answer.standin() == Some("master-api"),
        "{:?}",
        answer.standin()
    );

    // kubectl in the node, through the agent, against the fixture API.
    let kubeconfig = pki.path("node-kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://{local}
    certificate-authority: {ca}
    tls-server-name: kubernetes.default
users:
- name: u
  user: {{token: fixture}}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
",
            ca = api_pki.ca_pem.display()
        ),
    )?;
    let kubectl = |args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", node.name(), "kubectl", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(args);
        c
    };
    let ran = run(
        kubectl(&["create", "namespace", "from-the-node"]),
        b"",
        Duration::from_secs(20),
    )
    .await?;
    ensure!(ran.success, "kubectl create: {}", ran.stderr);
    let ran = run(
        kubectl(&["get", "namespaces", "-o", "name"]),
        b"",
        Duration::from_secs(20),
    )
    .await?;
    ensure!(
        ran.success && ran.stdout.contains("namespace/from-the-node"),
        "kubectl get: {} {}",
        ran.stdout,
        ran.stderr
    );

    // A direct connection from the node to the API server fails (the
    // firewall drops it), while the same address answers in the master.
    let direct = curl_api(
        Some(&node),
        api.addr(),
        "/version",
        &api_pki,
        Duration::from_secs(2),
    )
    .await;
    ensure!(direct.is_err(), "the node reached the API server directly");
    let in_master = curl_api(
        Some(&master),
        api.addr(),
        "/version",
        &api_pki,
        Duration::from_secs(5),
    )
    .await?;
    ensure!(in_master.status_line.contains(" 200"));

    // The server's metrics, read inside the master namespace.
    let ran = run(
        {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", master.name(), "curl", "-sS"])
                .arg(format!("http://{}/metrics", server.admin));
            c
        },
        b"",
        Duration::from_secs(10),
    )
    .await?;
    let m = crate::support::metrics::Metrics::new(ran.stdout);
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= 3.0);
    ensure!(m.count("apiway_tunnel_connections", &[("peer", "node-1")]) == 1.0);
    Ok(())
}
