//! The bootstrap proposal's two bad windows for round-robin DNS, in
//! network namespaces with a real DNS server (dnsmasq) answering
//! `api-int.c1.test` with two addresses:
//!
//! 1. the reserved load-balancer address is not routable yet (its veth
//!    peer is down: a blackhole) while the bootstrap host serves;
//! 2. then the load balancer serves and the bootstrap host is gone.
//!
//! In each window, new connections through the agent (`--endpoint
//! api-int.c1.test:6443`: every record is an endpoint, health-checked) all
//! succeed; the first one after a change costs at most about the connect
//! timeout, later ones nothing once the health check has seen it. The
//! same run measures `kubectl get --raw /readyz` straight at the name
//! (client-go's dialer walks the addresses in order) and a watch-like
//! stream through the agent (`--close-on-down`) moving off the bootstrap
//! host; the figures are printed for BENCHMARKS.md (the assertions are on
//! outcomes, not speed).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use apiway_test_support::peers::{require_binary, StandinProcess};
use apiway_test_support::process::{command_in, ChildProcess, Launcher};

use crate::agent_support::{AgentProcess, Netns};
use crate::support::process::APIWAY;
use crate::support::Pki;

const NAME: &str = "api-int.c1.test";
const LB: &str = "10.77.1.2";
const BOOTSTRAP: &str = "10.77.2.2";

/// `/etc/netns/NS/resolv.conf`, which `ip netns exec` bind-mounts over
/// `/etc/resolv.conf`; removed on drop.
struct Resolv(std::path::PathBuf);

impl Resolv {
    fn new(ns: &Netns) -> Result<Resolv> {
        let dir = Path::new("/etc/netns").join(ns.name());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )?;
        Ok(Resolv(dir))
    }
}

impl Drop for Resolv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dnsmasq(ns: &Netns) -> Result<ChildProcess> {
    let program = require_binary("dnsmasq")?;
    let mut command = command_in(Some(ns.name()), program);
    command.args([
        "--keep-in-foreground",
        "--no-resolv",
        "--no-hosts",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--port=53",
        "--user=root",
        "--log-queries",
        "--log-facility=-",
        "--local-ttl=1",
    ]);
    command.arg(format!("--host-record={NAME},{LB}"));
    command.arg(format!("--host-record={NAME},{BOOTSTRAP}"));
    Launcher::new(command).log_name("dnsmasq.log").spawn()
}

/// `kubectl get --raw /readyz` at the name: wall time and success.
async fn kubectl(ns: &Netns, kubeconfig: &Path) -> (Duration, bool) {
    let started = Instant::now();
    let out = tokio::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "kubectl", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["get", "--raw", "/readyz"])
        .kill_on_drop(true)
        .output();
    let ok = matches!(tokio::time::timeout(Duration::from_secs(40), out).await, Ok(Ok(o)) if o.status.success());
    (started.elapsed(), ok)
}

/// A new HTTPS connection through the agent: time to first byte (curl's
/// `time_starttransfer`) and success.
async fn through_agent(ns: &Netns, agent: SocketAddr, pki: &Pki) -> (Duration, bool) {
    let out = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{time_starttransfer}",
            "--max-time",
            "20",
            "--resolve",
        ])
        .arg(format!(
            "kubernetes.default:{}:{}",
            agent.port(),
            agent.ip()
        ))
        .arg("--cacert")
        .arg(&pki.ca_pem)
        .arg(format!(
            "https://kubernetes.default:{}/readyz",
            agent.port()
        ))
        .kill_on_drop(true)
        .output()
        .await;
    let Ok(out) = out else {
        return (Duration::ZERO, false);
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let ok = parts.next() == Some("200");
    let ttfb = parts
        .next()
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(0.0);
    (Duration::from_secs_f64(ttfb), ok)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn summary(samples: &[Duration]) -> String {
    let mut s = samples.to_vec();
    s.sort();
    format!(
        "first {} · median {} · max {}",
        ms(samples[0]),
        ms(s[s.len() / 2]),
        ms(s[s.len() - 1])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_rides_out_round_robin_dns_in_both_bootstrap_windows() -> Result<()> {
    require_binary("kubectl")?;
    let pki = Pki::new()?;
    let node = Netns::new()?;
    let lb = Netns::new()?;
    let boot = Netns::new()?;
    node.link_to(
        &lb,
        ("rr-lb", "10.77.1.1/24"),
        ("rr-peer", &format!("{LB}/24")),
    )?;
    node.link_to(
        &boot,
        ("rr-boot", "10.77.2.1/24"),
        ("rr-peer", &format!("{BOOTSTRAP}/24")),
    )?;
    // Permanent neighbour entries: with the peer down, packets are sent
    // and silently lost (as to a cloud address not programmed yet),
    // instead of failing fast on ARP.
    for (peer_ns, ip, dev) in [(&lb, LB, "rr-lb"), (&boot, BOOTSTRAP, "rr-boot")] {
        let link = peer_ns.ip(&["-o", "link", "show", "dev", "rr-peer"])?;
        let mac = link
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .ok_or_else(|| anyhow::anyhow!("no MAC in {link}"))?
            .to_owned();
        node.ip(&[
            "neigh",
            "replace",
            ip,
            "lladdr",
            &mac,
            "dev",
            dev,
            "nud",
            "permanent",
        ])?;
    }
    let _resolv = Resolv::new(&node)?;
    let dns = dnsmasq(&node)?;
    crate::support::eventually("dnsmasq answering", Duration::from_secs(5), || async {
        let out = tokio::process::Command::new("ip")
            .args(["netns", "exec", node.name(), "getent", "ahostsv4", NAME])
            .output()
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(LB) && text.contains(BOOTSTRAP) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await?;

    let cert = pki.ca.issue_server(
        &[NAME, "kubernetes.default"],
        &[LB.parse()?, BOOTSTRAP.parse()?],
    )?;
    let apiway = Path::new(APIWAY);
    let _lb_api = StandinProcess::start(
        apiway,
        "lb",
        SocketAddr::new(LB.parse()?, 6443),
        &cert,
        Some(lb.name()),
    )
    .await?;
    let _boot_api = StandinProcess::start(
        apiway,
        "bootstrap",
        SocketAddr::new(BOOTSTRAP.parse()?, 6443),
        &cert,
        Some(boot.name()),
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        apiway_test_support::peers::kubeconfig_text_for(&format!("{NAME}:6443"), &pki.ca_pem, "x"),
    )?;

    // Window 1: the reserved load-balancer address is not routable yet.
    lb.ip(&["link", "set", "rr-peer", "down"])?;
    let ca = pki.ca_pem.to_string_lossy().into_owned();
    let agent = AgentProcess::start(
        Some(&node),
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            &format!("{NAME}:6443"),
            "--ca",
            &ca,
            "--health-check-interval",
            "500ms",
            "--connect-timeout",
            "2s",
            "--dns-refresh",
            "1s",
            "--close-on-down",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    let addr = agent.addr();
    let mut agent_w1 = Vec::new();
    for _ in 0..6 {
        let (t, ok) = through_agent(&node, addr, &pki).await;
        ensure!(ok, "window 1: a connection through the agent failed");
        agent_w1.push(t);
    }
    let mut kubectl_w1 = Vec::new();
    let mut kubectl_w1_failed = 0;
    for _ in 0..3 {
        let (t, ok) = kubectl(&node, &kubeconfig).await;
        kubectl_w1_failed += usize::from(!ok);
        kubectl_w1.push(t);
    }

    // A long-lived connection through the agent (to the bootstrap host,
    // the only one up), as a kubelet's watch holds, for window 2.
    // (openssl s_client: a TLS session through the agent, idle like a
    // quiet watch; it exits when the connection is closed.)
    let mut held = command_in(Some(node.name()), "sh");
    held.args([
        "-c",
        &format!(
            "sleep 600 | (openssl s_client -quiet -connect 127.0.0.1:{} -servername kubernetes.default -CAfile {} >/dev/null 2>&1; echo closed)",
            addr.port(),
            ca
        ),
    ]);
    let mut held = Launcher::new(held).log_name("held.log").spawn()?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Window 2: the load balancer serves, the bootstrap host is gone.
    lb.ip(&["link", "set", "rr-peer", "up"])?;
    boot.ip(&["link", "set", "rr-peer", "down"])?;
    let switched = Instant::now();
    // The held connection is closed once the health check sees the
    // bootstrap host gone (--close-on-down), so the client reconnects:
    // that is how long a watch takes to move.
    let closed = tokio::spawn(async move {
        let seen = held
            .wait_for_line("the held connection closed", Duration::from_secs(30), |l| {
                l.contains("closed")
            })
            .await;
        seen.map(|_| switched.elapsed()).ok()
    });
    let mut agent_w2 = Vec::new();
    for _ in 0..6 {
        let (t, ok) = through_agent(&node, addr, &pki).await;
        ensure!(ok, "window 2: a connection through the agent failed");
        agent_w2.push(t);
    }
    let mut kubectl_w2 = Vec::new();
    let mut kubectl_w2_failed = 0;
    for _ in 0..3 {
        let (t, ok) = kubectl(&node, &kubeconfig).await;
        kubectl_w2_failed += usize::from(!ok);
        kubectl_w2.push(t);
    }
    let closed = closed.await?;
    let moved = match closed {
        Some(d) => {
            let (_, ok) = through_agent(&node, addr, &pki).await;
            ensure!(ok, "the reconnect after the move failed");
            ms(d)
        }
        None => "not within 30 s".into(),
    };

    println!(
        "round-robin DNS ({NAME} -> {LB} and {BOOTSTRAP}), new connections' time to first byte:"
    );
    println!(
        "  window 1 (LB not routable): agent {} | kubectl {} ({} of 3 failed)",
        summary(&agent_w1),
        summary(&kubectl_w1),
        kubectl_w1_failed
    );
    println!(
        "  window 2 (bootstrap gone):   agent {} | kubectl {} ({} of 3 failed)",
        summary(&agent_w2),
        summary(&kubectl_w2),
        kubectl_w2_failed
    );
    println!("  a held connection through the agent was closed {moved} after the bootstrap host went (then the next connection worked)");
    // Outcomes: the agent never failed a connection (asserted above), and
    // once its health check has seen a change no connection waits for a
    // dead address (well under the 2 s connect timeout).
    for (window, samples) in [("1", &agent_w1), ("2", &agent_w2)] {
        let later = &samples[2..];
        if later.iter().any(|t| *t >= Duration::from_secs(2)) {
            bail!("window {window}: a connection after the health check still waited for the dead address: {samples:?}");
        }
    }
    drop(dns);
    Ok(())
}
