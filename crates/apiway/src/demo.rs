//! `apiway demo`: a whole topology on loopback, narrated.
//!
//! Two clusters of stand-in API servers (A with two replicas, B with one
//! that requires a client certificate) behind one gateway listener that
//! routes by SNI without terminating TLS. It sends requests, shows which
//! backend answered, sends pods' requests through a node agent and the
//! gateway's PROXY-protocol listener (routed by original destination),
//! stops one backend, shows the health check ejecting it and traffic
//! carrying on, sends a request through the node-to-control-plane tunnel
//! (and sees a disallowed destination refused), then exits.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use apiway_core::runtime::Running;
use apiway_gateway::Gateway;
use apiway_standin::{https_get, Ca, StandinConfig, StandinServer};

const A: &str = "api.a.example.com";
const B: &str = "api.b.example.com";

/// `apiway demo` flags.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// After the narration, keep the gateway and the stand-ins running,
    /// write the CA, a client certificate and a kubeconfig, print curl and
    /// kubectl commands to try, and stay up until Ctrl-C or SIGTERM.
    #[arg(long)]
    keep_running: bool,
    /// Where --keep-running writes its files [default: a new directory
    /// under the system's temporary directory].
    #[arg(long, value_name = "DIR", requires = "keep_running")]
    dir: Option<std::path::PathBuf>,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let loopback = "127.0.0.1:0".parse()?;
    let ca = Ca::new("apiway demo CA")?;
    let cert_a = ca.issue_server(&[A, "kubernetes.default"], &[])?;
    let cert_b = ca.issue_server(&[B, "kubernetes.default"], &[])?;
    let client = ca.issue_client("demo-admin", &["system:masters"])?;

    let a1 = StandinServer::start(StandinConfig::new(
        "cluster-a/apiserver-1",
        loopback,
        cert_a.clone(),
    ))
    .await?;
    let a2 = StandinServer::start(StandinConfig::new(
        "cluster-a/apiserver-2",
        loopback,
        cert_a,
    ))
    .await?;
    let b1 = StandinServer::start(
        StandinConfig::new("cluster-b/apiserver-1", loopback, cert_b).with_client_ca(&ca),
    )
    .await?;
    println!("stand-in API servers (real TLS, HTTP/1.1 + HTTP/2):");
    for s in [&a1, &a2, &b1] {
        println!("  {:<24} {}", s.name(), s.addr());
    }

    // Each cluster's "ClusterIP" for the in-cluster path: the same port on
    // two loopback addresses, as `kubernetes.default.svc` is 10.x.y.1:443 in
    // every cluster.
    let (cluster_ip_a, cluster_ip_b) = cluster_ips()?;
    let config = format!(
        r#"admin:
  address: 127.0.0.1:0
listeners:
  - name: public
    address: 127.0.0.1:0
    kind: tls
  - name: in-cluster
    address: 127.0.0.4:0
    kind: proxy
    trusted_sources: ["127.0.0.0/8"]
routes:
  - name: cluster-a
    hostnames: ["{A}", "*.a.internal.example.com"]
    destinations: ["{cluster_ip_a}"]
    backends:
      - address: {a1}
      - address: {a2}
    health_check: {{ kind: https, path: /readyz, interval: 300ms }}
  - name: cluster-b
    hostnames: ["{B}"]
    destinations: ["{cluster_ip_b}"]
    backends:
      - address: {b1}
    health_check: {{ kind: tcp, interval: 300ms }}
default_route: reject
drain: {{ delay: 0s, grace_period: 1s }}
"#,
        a1 = a1.addr(),
        a2 = a2.addr(),
        b1 = b1.addr()
    );
    println!("\ngateway config:\n{}", indent(&config));
    let snapshot = apiway_gateway::config::parse(&config).map_err(anyhow::Error::msg)?;
    let running = Running::<Gateway>::start(snapshot).await?;
    let gateway = running.role();
    let admin = running
        .admin_addr()
        .context("the admin endpoint did not start")?;
    let gw = gateway
        .listener_addr("public")
        .context("the public listener did not start")?;
    println!("gateway listening on {gw}, admin on http://{admin}/metrics\n");

    println!("1. requests routed by SNI (the gateway never decrypts):");
    for (i, http2) in [false, true, false, true].into_iter().enumerate() {
        let r = https_get(gw, A, "/api", &ca, None, http2).await?;
        println!(
            "   #{} SNI {A:<20} {} -> {} answered {}",
            i + 1,
            if http2 { "HTTP/2  " } else { "HTTP/1.1" },
            r.standin().unwrap_or("?"),
            r.status
        );
    }
    let r = https_get(gw, B, "/api", &ca, Some(&client), true).await?;
    let cn = r
        .json()
        .ok()
        .and_then(|j| j["client_cn"].as_str().map(str::to_owned));
    println!(
        "   #5 SNI {B:<20} HTTP/2   -> {} answered {}; it saw client certificate CN={}",
        r.standin().unwrap_or("?"),
        r.status,
        cn.as_deref().unwrap_or("none")
    );
    match https_get(gw, "api.unknown.example.com", "/api", &ca, None, false).await {
        Ok(r) => bail!("an unknown SNI was routed (answered {})", r.status),
        Err(e) => println!(
            "   #6 SNI api.unknown.example.com     -> refused: {}",
            root_cause(&e)
        ),
    }

    println!(
        "\n2. the in-cluster path: pods connect to their cluster's ClusterIP; the node agent\n   \
         forwards with a PROXY v2 header and the gateway routes on the original destination"
    );
    let in_cluster = gateway
        .listener_addr("in-cluster")
        .context("the in-cluster listener did not start")?;
    let settings = apiway_agent::config::AgentSettings {
        listen: vec![cluster_ip_a.to_string(), cluster_ip_b.to_string()],
        upstream: Some(apiway_agent::config::UpstreamMode::Proxy),
        gateways: vec![in_cluster.to_string()],
        drain: apiway_core::config::DrainSection {
            delay: Some(Duration::ZERO),
            grace_period: Some(Duration::from_secs(1)),
        },
        ..Default::default()
    };
    let snapshot = apiway_agent::config::build(settings).map_err(anyhow::Error::msg)?;
    let agent = Running::<apiway_agent::Agent>::start(snapshot).await?;
    println!(
        "   agent listening on {cluster_ip_a} and {cluster_ip_b}, forwarding to the gateway's {in_cluster}"
    );
    for (i, (cluster_ip, client_cert)) in [(cluster_ip_a, None), (cluster_ip_b, Some(&client))]
        .into_iter()
        .enumerate()
    {
        // Same server name for both, as in every cluster.
        let r = https_get(
            cluster_ip,
            "kubernetes.default",
            "/api",
            &ca,
            client_cert,
            i == 1,
        )
        .await?;
        println!(
            "   #{} pod -> {cluster_ip} (SNI kubernetes.default) -> agent -> gateway -> {} answered {}",
            i + 1,
            r.standin().unwrap_or("?"),
            r.status
        );
    }
    agent.shutdown(std::future::ready(())).await;

    println!(
        "\n3. stopping {} (its port closes, like a crashed API server)",
        a1.name()
    );
    let stopped_name = a1.name().to_string();
    let stopped_addr = a1.addr().to_string();
    let stopped_at = Instant::now();
    a1.shutdown().await;
    let set = gateway
        .endpoint_set("cluster-a")
        .context("route cluster-a is missing")?;
    // No traffic meanwhile: it is the active health check that finds out.
    loop {
        let members = set.members();
        let down = members
            .endpoints
            .iter()
            .find(|e| e.name() == stopped_addr)
            .is_some_and(|e| !e.is_up());
        if down {
            break;
        }
        if stopped_at.elapsed() > Duration::from_secs(10) {
            bail!("the health check did not eject {stopped_name} within 10s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "   the health check (GET /readyz every 300ms, down after 2 failures) ejected it after {} ms",
        stopped_at.elapsed().as_millis()
    );
    let mut failed = 0;
    for i in 0..6 {
        match https_get(gw, A, "/api", &ca, None, i % 2 == 1).await {
            Ok(r) => {
                println!(
                    "   SNI {A} -> {} answered {}",
                    r.standin().unwrap_or("?"),
                    r.status
                );
                if r.standin() == Some(stopped_name.as_str()) {
                    bail!("a stopped backend answered");
                }
            }
            Err(e) => {
                failed += 1;
                println!("   SNI {A} -> failed: {}", root_cause(&e));
            }
        }
    }

    println!("\n4. metrics (http://{admin}/metrics):");
    let metrics = fetch_metrics(admin).await?;
    for line in metrics.lines().filter(|l| {
        l.starts_with("apiway_backend_healthy")
            || l.starts_with("apiway_route_connections_total")
            || l.starts_with("apiway_listener_no_route_total")
    }) {
        println!("   {line}");
    }
    if failed > 0 {
        bail!("{failed} requests failed while a backend was down");
    }
    tunnel(&ca, a2.addr(), b1.addr()).await?;
    if args.keep_running {
        let dir = match args.dir {
            Some(d) => {
                std::fs::create_dir_all(&d).with_context(|| format!("--dir {}", d.display()))?;
                d
            }
            None => tempfile::Builder::new()
                .prefix("apiway-demo-")
                .tempdir()?
                .keep(),
        };
        keep_running(&dir, &ca, &client, gw, admin).await?;
    }
    running.shutdown(std::future::ready(())).await;
    drop((a2, b1));
    println!("\ndemo finished: no request failed while a backend went down.");
    Ok(())
}

/// Writes what curl and kubectl need, prints commands, and waits for
/// Ctrl-C or SIGTERM. The kubeconfig is written last (renamed into place):
/// once it exists, everything it names answers.
async fn keep_running(
    dir: &std::path::Path,
    ca: &Ca,
    client: &apiway_standin::pki::Issued,
    gw: std::net::SocketAddr,
    admin: std::net::SocketAddr,
) -> Result<()> {
    let ca_pem = dir.join("ca.pem");
    std::fs::write(&ca_pem, ca.cert_pem())?;
    let (cert, key) = client.write(dir, "demo-admin")?;
    let kubeconfig = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: cluster-a\nclusters:\n\
         - name: cluster-a\n  cluster:\n    server: https://{gw}\n    tls-server-name: {A}\n    certificate-authority: {ca}\n\
         - name: cluster-b\n  cluster:\n    server: https://{gw}\n    tls-server-name: {B}\n    certificate-authority: {ca}\n\
         users:\n- name: demo-admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
         contexts:\n- name: cluster-a\n  context: {{cluster: cluster-a, user: demo-admin}}\n\
         - name: cluster-b\n  context: {{cluster: cluster-b, user: demo-admin}}\n",
        ca = ca_pem.display(),
        cert = cert.display(),
        key = key.display(),
    );
    let partial = dir.join("kubeconfig.partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, &kubeconfig)?;
    let port = gw.port();
    println!(
        "\nstill running; try (both clusters answer through one gateway port, routed by SNI):\n\
         \n  curl --cacert {ca} --resolve {A}:{port}:127.0.0.1 https://{A}:{port}/version\
         \n  curl --cacert {ca} --cert {cert} --key {key} --resolve {B}:{port}:127.0.0.1 https://{B}:{port}/api\
         \n  kubectl --kubeconfig {kc} --context cluster-a version\
         \n  kubectl --kubeconfig {kc} --context cluster-b version\
         \n  curl http://{admin}/metrics\
         \n\nfiles in {dir}; Ctrl-C to stop.",
        ca = ca_pem.display(),
        cert = cert.display(),
        key = key.display(),
        kc = kubeconfig.display(),
        dir = dir.display(),
    );
    apiway_core::drain::termination_signal().await;
    println!("stopping.");
    Ok(())
}

/// Step 5, the node-to-control-plane tunnel: an agent on an "isolated
/// node" reaches cluster A's API server only through a tunnel server,
/// which dials what it allows and nothing else.
async fn tunnel(ca: &Ca, allowed: std::net::SocketAddr, other: std::net::SocketAddr) -> Result<()> {
    use apiway_agent::config::{AgentSettings, UpstreamMode};
    use apiway_tunnel::config::{DestinationEntry, ServerSettings};
    println!("\n5. the node-to-control-plane tunnel (KEP-2025, konnectivity-client's protocol):");
    let dir = tempfile::Builder::new()
        .prefix("apiway-demo-tunnel-")
        .tempdir()?;
    let ca_pem = dir.path().join("ca.pem");
    std::fs::write(&ca_pem, ca.cert_pem())?;
    let (cert, key) = ca
        .issue_server(&["localhost"], &[[127, 0, 0, 1].into()])?
        .write(dir.path(), "tunnel-server")?;
    let (agent_cert, agent_key) = ca
        .issue_client("node-1", &[])?
        .write(dir.path(), "node-1")?;
    let server = apiway_tunnel::config::build(ServerSettings {
        listen: Some("127.0.0.1:0".into()),
        cert_file: Some(cert),
        key_file: Some(key),
        client_ca_file: Some(ca_pem.clone()),
        allowed_destinations: vec![DestinationEntry::Address(allowed.to_string())],
        ..ServerSettings::default()
    })
    .map_err(anyhow::Error::msg)?;
    let server = Running::<apiway_tunnel::server::TunnelServer>::start(server).await?;
    let tunnel = apiway_core::runtime::Role::listeners(server.role().as_ref())[0].1;
    let agent = apiway_agent::config::build(AgentSettings {
        upstream: Some(UpstreamMode::Tunnel),
        target: vec![format!("0:{allowed}"), format!("0:{other}")],
        tunnel_servers: vec![tunnel.to_string()],
        tunnel_ca: Some(ca_pem),
        tunnel_cert: Some(agent_cert),
        tunnel_key: Some(agent_key),
        dial_timeout: Some(Duration::from_secs(1)),
        ..AgentSettings::default()
    })
    .map_err(anyhow::Error::msg)?;
    let agent = Running::<apiway_agent::Agent>::start(agent).await?;
    let locals = agent.role().listener_addrs();
    println!("   tunnel server on {tunnel} allows {allowed} only; agent node-1 listens on {} (-> {allowed}) and {} (-> {other})", locals[0], locals[1]);
    for http2 in [false, true] {
        let r = https_get(locals[0], A, "/api", ca, None, http2).await?;
        println!(
            "   through the tunnel ({}) -> {} answered {}",
            if http2 { "HTTP/2" } else { "HTTP/1.1" },
            r.standin().unwrap_or("?"),
            r.status
        );
    }
    match https_get(locals[1], B, "/api", ca, None, false).await {
        Ok(r) => bail!(
            "the tunnel server dialed a destination it does not allow ({})",
            r.status
        ),
        Err(e) => println!(
            "   to {other} -> refused by the tunnel server: {}",
            root_cause(&e)
        ),
    }
    agent.shutdown(std::future::ready(())).await;
    server.shutdown(std::future::ready(())).await;
    Ok(())
}

/// Two "ClusterIPs": one free port on 127.0.0.2 that is free on 127.0.0.3
/// too (every 127/8 address is loopback on Linux).
fn cluster_ips() -> Result<(std::net::SocketAddr, std::net::SocketAddr)> {
    for _ in 0..20 {
        let a = std::net::TcpListener::bind("127.0.0.2:0").context("binding 127.0.0.2")?;
        let port = a.local_addr()?.port();
        let b_addr = std::net::SocketAddr::from(([127, 0, 0, 3], port));
        if std::net::TcpListener::bind(b_addr).is_ok() {
            return Ok((a.local_addr()?, b_addr));
        }
    }
    bail!("no port free on both 127.0.0.2 and 127.0.0.3")
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

fn root_cause(e: &anyhow::Error) -> String {
    e.root_cause().to_string()
}

async fn fetch_metrics(admin: std::net::SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
