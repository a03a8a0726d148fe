//! `tunnel`: the node-to-control-plane tunnel (`apiway agent --upstream
//! tunnel` → `apiway tunnel-server`) against a direct connection (the
//! limit), OpenSSH's `ssh -L` (one TCP connection carries every forwarded
//! connection), stunnel4 (a TLS connection per forwarded connection) and
//! rathole (crates.io; TLS transport, a control channel plus a TLS data
//! channel per forwarded connection), all in one run on loopback.
//!
//! Each contender forwards local ports to the same destinations: a sink
//! (upload), a source (download), an echo, and a slow reader (100 KiB/s).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use apiway_standin::pki::Ca;
use apiway_test_support::peers::{free_port, proc_memory, process_tree, require_binary};
use apiway_test_support::process::{ChildProcess, Launcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{median, Settings};
use crate::report::ScenarioReport;

/// The contenders of this scenario (not the gateway's lineup).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Way {
    Apiway,
    Direct,
    Ssh,
    Stunnel,
    Rathole,
}

impl Way {
    const ALL: [Way; 5] = [
        Way::Apiway,
        Way::Direct,
        Way::Ssh,
        Way::Stunnel,
        Way::Rathole,
    ];

    fn label(self) -> &'static str {
        match self {
            Way::Apiway => "apiway tunnel",
            Way::Direct => "direct",
            Way::Ssh => "ssh -L",
            Way::Stunnel => "stunnel4",
            Way::Rathole => "rathole",
        }
    }
}

/// The destinations, by role.
#[derive(Clone, Copy, Debug)]
struct Destinations {
    sink: SocketAddr,
    source: SocketAddr,
    echo: SocketAddr,
    slow: SocketAddr,
}

impl Destinations {
    fn all(&self) -> [SocketAddr; 4] {
        [self.sink, self.source, self.echo, self.slow]
    }
}

async fn serve(
    handler: fn(TcpStream) -> futures_util::future::BoxFuture<'static, ()>,
) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(handler(s));
        }
    });
    Ok(addr)
}

async fn start_destinations() -> Result<Destinations> {
    use futures_util::FutureExt;
    Ok(Destinations {
        sink: serve(|mut s| {
            async move {
                let mut buf = vec![0u8; 256 * 1024];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            }
            .boxed()
        })
        .await?,
        source: serve(|mut s| {
            async move {
                let buf = vec![0x5au8; 256 * 1024];
                while s.write_all(&buf).await.is_ok() {}
            }
            .boxed()
        })
        .await?,
        echo: serve(|mut s| {
            async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            .boxed()
        })
        .await?,
        slow: serve(|mut s| {
            async move {
                let mut buf = vec![0u8; 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }
            .boxed()
        })
        .await?,
    })
}

/// A contender's running processes and its local address per destination.
struct Forwarder {
    way: Way,
    local: BTreeMap<SocketAddr, SocketAddr>,
    processes: Vec<ChildProcess>,
}

impl Forwarder {
    fn to(&self, destination: SocketAddr) -> SocketAddr {
        self.local[&destination]
    }

    /// PSS of every process (and their children) in KiB, per process role.
    fn pss_kb(&self) -> Vec<(String, u64)> {
        self.processes
            .iter()
            .map(|p| (p.log_path().display().to_string(), tree_pss_kb(p.pid())))
            .collect()
    }
}

/// PSS of `pid` and its children, in KiB.
fn tree_pss_kb(pid: u32) -> u64 {
    process_tree(pid)
        .into_iter()
        .filter_map(|pid| proc_memory(pid).ok())
        .map(|m| m.pss_kb)
        .sum()
}

fn launch(
    program: &Path,
    args: &[String],
    dir: &Path,
    name: &str,
    ready: bool,
) -> Result<ChildProcess> {
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG");
    let tmp = tempfile::Builder::new().prefix(name).tempdir_in(dir)?;
    let mut l = Launcher::new(command).dir(tmp).log_name("log");
    if ready {
        l = l.ready_file();
    }
    l.spawn()
}

struct Pki {
    ca_pem: PathBuf,
    server: (PathBuf, PathBuf),
    agent: (PathBuf, PathBuf),
}

fn pki(dir: &Path) -> Result<Pki> {
    let ca = Ca::new("bench tunnel CA")?;
    let ca_pem = dir.join("ca.pem");
    std::fs::write(&ca_pem, ca.cert_pem())?;
    let server = ca
        .issue_server(&["localhost"], &[[127, 0, 0, 1].into()])?
        .write(dir, "server")?;
    let agent = ca.issue_client("bench-agent", &[])?.write(dir, "agent")?;
    Ok(Pki {
        ca_pem,
        server,
        agent,
    })
}

/// `apiway tunnel-server` allowing every destination: the process and its
/// tunnel address.
async fn apiway_server(
    apiway: &Path,
    dir: &Path,
    pki: &Pki,
    d: &Destinations,
) -> Result<(ChildProcess, SocketAddr)> {
    let mut args: Vec<String> = vec![
        "tunnel-server".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--cert".into(),
        pki.server.0.display().to_string(),
        "--key".into(),
        pki.server.1.display().to_string(),
        "--client-ca".into(),
        pki.ca_pem.display().to_string(),
        "--max-connections".into(),
        "20000".into(),
    ];
    for a in d.all() {
        args.push("--allowed-destination".into());
        args.push(a.to_string());
    }
    let mut server = launch(apiway, &args, dir, "tunnel-server-", true)?;
    let report = server.wait_for_ready_file(Duration::from_secs(30)).await?;
    let tunnel = *report
        .listeners
        .get("tunnel")
        .context("no tunnel listener")?;
    Ok((server, tunnel))
}

/// `apiway agent --upstream tunnel` through `servers`, a `--target` per
/// destination: the process and its local address per destination.
async fn apiway_agent(
    apiway: &Path,
    dir: &Path,
    pki: &Pki,
    servers: &[SocketAddr],
    destinations: &[SocketAddr],
) -> Result<(ChildProcess, BTreeMap<SocketAddr, SocketAddr>)> {
    let mut args: Vec<String> = vec![
        "agent".into(),
        "--upstream".into(),
        "tunnel".into(),
        "--tunnel-ca".into(),
        pki.ca_pem.display().to_string(),
        "--tunnel-cert".into(),
        pki.agent.0.display().to_string(),
        "--tunnel-key".into(),
        pki.agent.1.display().to_string(),
        "--max-connections".into(),
        "20000".into(),
    ];
    for s in servers {
        args.extend(["--tunnel-server".into(), s.to_string()]);
    }
    for a in destinations {
        args.extend(["--target".into(), format!("0:{a}")]);
    }
    let mut agent = launch(apiway, &args, dir, "tunnel-agent-", true)?;
    let report = agent.wait_for_ready_file(Duration::from_secs(30)).await?;
    let mut local = BTreeMap::new();
    for a in destinations {
        let l = report
            .listeners
            .iter()
            .find(|(name, _)| name.ends_with(&format!(">{a}")))
            .map(|(_, l)| *l)
            .context("no agent listener for a destination")?;
        local.insert(*a, l);
    }
    Ok((agent, local))
}

async fn apiway_tunnel(
    apiway: &Path,
    dir: &Path,
    pki: &Pki,
    d: &Destinations,
) -> Result<Forwarder> {
    let (server, tunnel) = apiway_server(apiway, dir, pki, d).await?;
    let (agent, local) = apiway_agent(apiway, dir, pki, &[tunnel], &d.all()).await?;
    Ok(Forwarder {
        way: Way::Apiway,
        local,
        processes: vec![agent, server],
    })
}

async fn wait_accepting(addrs: impl Iterator<Item = SocketAddr>) -> Result<()> {
    for a in addrs {
        apiway_test_support::peers::wait_for_port(a, Duration::from_secs(10)).await?;
    }
    Ok(())
}

async fn ssh(dir: &Path, d: &Destinations) -> Result<Forwarder> {
    let dir = tempfile::Builder::new()
        .prefix("ssh-")
        .tempdir_in(dir)?
        .keep();
    let keygen = |path: &Path| -> Result<()> {
        let ok = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(path)
            .status()?
            .success();
        if !ok {
            bail!("ssh-keygen failed");
        }
        Ok(())
    };
    keygen(&dir.join("host"))?;
    keygen(&dir.join("client"))?;
    std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys"))?;
    std::fs::create_dir_all("/run/sshd")?;
    let port = free_port()?;
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\n\
             PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {pid}\n\
             AllowTcpForwarding yes\nMaxSessions 100\nMaxStartups 100\n",
            host = dir.join("host").display(),
            keys = dir.join("authorized_keys").display(),
            pid = dir.join("sshd.pid").display(),
        ),
    )?;
    let sshd = launch(
        Path::new("/usr/sbin/sshd"),
        &[
            "-D".into(),
            "-e".into(),
            "-f".into(),
            config.display().to_string(),
        ],
        &dir,
        "sshd-",
        false,
    )?;
    wait_accepting([SocketAddr::from(([127, 0, 0, 1], port))].into_iter()).await?;
    let mut args: Vec<String> = [
        "-N",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "ExitOnForwardFailure=yes",
        "-i",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(dir.join("client").display().to_string());
    args.extend(["-p".into(), port.to_string()]);
    let mut local = BTreeMap::new();
    for a in d.all() {
        let l = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        args.extend(["-L".into(), format!("{}:{}:{}", l.port(), a.ip(), a.port())]);
        local.insert(a, l);
    }
    args.push("root@127.0.0.1".into());
    let client = launch(Path::new("/usr/bin/ssh"), &args, &dir, "ssh-", false)?;
    wait_accepting(local.values().copied()).await?;
    Ok(Forwarder {
        way: Way::Ssh,
        local,
        processes: vec![client, sshd],
    })
}

async fn stunnel(dir: &Path, pki: &Pki, d: &Destinations) -> Result<Forwarder> {
    let dir = tempfile::Builder::new()
        .prefix("stunnel-")
        .tempdir_in(dir)?
        .keep();
    let mut server = String::from("foreground = yes\npid =\n");
    let mut client = String::from("foreground = yes\npid =\nclient = yes\n");
    let mut local = BTreeMap::new();
    for (i, a) in d.all().into_iter().enumerate() {
        let middle = free_port()?;
        let l = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        server.push_str(&format!(
            "[s{i}]\naccept = 127.0.0.1:{middle}\nconnect = {a}\ncert = {}\nkey = {}\n",
            pki.server.0.display(),
            pki.server.1.display()
        ));
        client.push_str(&format!(
            "[c{i}]\naccept = {l}\nconnect = 127.0.0.1:{middle}\nCAfile = {}\nverifyChain = yes\n",
            pki.ca_pem.display()
        ));
        local.insert(a, l);
    }
    std::fs::write(dir.join("server.conf"), server)?;
    std::fs::write(dir.join("client.conf"), client)?;
    let program = Path::new("/usr/bin/stunnel4");
    let s = launch(
        program,
        &[dir.join("server.conf").display().to_string()],
        &dir,
        "stunnel-server-",
        false,
    )?;
    let c = launch(
        program,
        &[dir.join("client.conf").display().to_string()],
        &dir,
        "stunnel-client-",
        false,
    )?;
    wait_accepting(local.values().copied()).await?;
    Ok(Forwarder {
        way: Way::Stunnel,
        local,
        processes: vec![c, s],
    })
}

/// rathole with its TLS transport. rathole forwards towards its client, so
/// its server runs on the node side (the local listeners) and its client on
/// the control-plane side (it dials the destinations). `RATHOLE` names the
/// program [default: `rathole` on PATH, then `~/.cargo/bin/rathole`].
async fn rathole(dir: &Path, pki: &Pki, d: &Destinations) -> Result<Forwarder> {
    let program = match std::env::var_os("RATHOLE") {
        Some(p) => PathBuf::from(p),
        None => require_binary("rathole").or_else(|_| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cargo/bin/rathole"))
                .filter(|p| p.is_file())
                .context(
                    "not installed (cargo install rathole --no-default-features --features server,client,tls)",
                )
        })?,
    };
    let dir = tempfile::Builder::new()
        .prefix("rathole-")
        .tempdir_in(dir)?
        .keep();
    let identity = dir.join("identity.pfx");
    let ok = std::process::Command::new("openssl")
        .args(["pkcs12", "-export", "-passout", "pass:bench", "-in"])
        .arg(&pki.server.0)
        .arg("-inkey")
        .arg(&pki.server.1)
        .arg("-out")
        .arg(&identity)
        .status()?
        .success();
    if !ok {
        bail!("openssl pkcs12 -export failed");
    }
    let control = free_port()?;
    let mut server = format!(
        "[server]\nbind_addr = \"127.0.0.1:{control}\"\n[server.transport]\ntype = \"tls\"\n\
         [server.transport.tls]\npkcs12 = \"{}\"\npkcs12_password = \"bench\"\n",
        identity.display()
    );
    let mut client = format!(
        "[client]\nremote_addr = \"localhost:{control}\"\n[client.transport]\ntype = \"tls\"\n\
         [client.transport.tls]\ntrusted_root = \"{}\"\nhostname = \"localhost\"\n",
        pki.ca_pem.display()
    );
    let mut local = BTreeMap::new();
    for (i, a) in d.all().into_iter().enumerate() {
        let l = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        server.push_str(&format!(
            "[server.services.s{i}]\ntoken = \"bench\"\nbind_addr = \"{l}\"\nnodelay = true\n"
        ));
        client.push_str(&format!(
            "[client.services.s{i}]\ntoken = \"bench\"\nlocal_addr = \"{a}\"\nnodelay = true\n"
        ));
        local.insert(a, l);
    }
    std::fs::write(dir.join("server.toml"), server)?;
    std::fs::write(dir.join("client.toml"), client)?;
    let s = launch(
        &program,
        &[
            "--server".into(),
            dir.join("server.toml").display().to_string(),
        ],
        &dir,
        "rathole-server-",
        false,
    )?;
    wait_accepting([SocketAddr::from(([127, 0, 0, 1], control))].into_iter()).await?;
    let c = launch(
        &program,
        &[
            "--client".into(),
            dir.join("client.toml").display().to_string(),
        ],
        &dir,
        "rathole-client-",
        false,
    )?;
    wait_accepting(local.values().copied()).await?;
    // The service ports may accept before the client's control channels
    // are up: wait for one echo round trip.
    let started = Instant::now();
    loop {
        let attempt = async {
            let mut s = TcpStream::connect(local[&d.echo]).await?;
            s.write_all(b"x").await?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await?;
            anyhow::Ok(())
        };
        match tokio::time::timeout(Duration::from_secs(1), attempt).await {
            Ok(Ok(())) => break,
            _ if started.elapsed() > Duration::from_secs(15) => {
                bail!("rathole did not forward within 15 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Ok(Forwarder {
        way: Way::Rathole,
        local,
        processes: vec![s, c],
    })
}

/// Bytes per second moved through `addr` in `trial`: written to a sink
/// (`upload`) or read from a source.
async fn throughput(addr: SocketAddr, upload: bool, trial: Duration) -> Result<f64> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut buf = vec![0x5au8; 256 * 1024];
    // Warm up a little: the window and the tunnel stream.
    let warm = Instant::now() + Duration::from_millis(200);
    while Instant::now() < warm {
        if upload {
            s.write_all(&buf).await?;
        } else if s.read(&mut buf).await? == 0 {
            bail!("the source closed");
        }
    }
    let started = Instant::now();
    let mut moved = 0u64;
    while started.elapsed() < trial {
        if upload {
            s.write_all(&buf).await?;
            moved += buf.len() as u64;
        } else {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                bail!("the source closed");
            }
            moved += n as u64;
        }
    }
    Ok(moved as f64 / started.elapsed().as_secs_f64())
}

/// 1 KiB round trips on one connection; returns the p99 in µs.
async fn round_trips_p99(addr: SocketAddr, count: usize) -> Result<f64> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let out = vec![7u8; 1024];
    let mut back = vec![0u8; 1024];
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        s.write_all(&out).await?;
        s.read_exact(&mut back).await?;
        times.push(t.elapsed().as_micros() as u32);
    }
    times.sort_unstable();
    Ok(super::quantile(&times, 0.99).unwrap_or(0) as f64)
}

/// Head-of-line: the p99 of 1 KiB round trips alone, and while two other
/// connections of the same forwarder push bulk data to the slow reader.
async fn head_of_line(f: &Forwarder, d: &Destinations) -> Result<(f64, f64)> {
    let alone = round_trips_p99(f.to(d.echo), 500).await?;
    let mut pushers = Vec::new();
    for _ in 0..2 {
        let addr = f.to(d.slow);
        pushers.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                return;
            };
            let buf = vec![1u8; 256 * 1024];
            while s.write_all(&buf).await.is_ok() {}
        }));
    }
    // Let the pushers fill every buffer on the way.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let loaded = tokio::time::timeout(Duration::from_secs(60), round_trips_p99(f.to(d.echo), 500))
        .await
        .map_err(|_| anyhow::anyhow!("round trips stalled behind the bulk connections"))
        .and_then(|r| r);
    for p in pushers {
        p.abort();
    }
    Ok((alone, loaded?))
}

/// New connections per second with 64 workers (connect, 1 byte each way,
/// close), and the time to the first byte back, p50 and p99 in µs.
async fn conn_rate(addr: SocketAddr, trial: Duration) -> Result<(f64, f64, f64)> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + trial;
    let mut workers = Vec::new();
    for _ in 0..64 {
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let mut ttfb = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    continue;
                };
                let mut b = [0u8; 1];
                if s.write_all(b"x").await.is_err() || s.read_exact(&mut b).await.is_err() {
                    continue;
                }
                ttfb.push(t.elapsed().as_micros() as u32);
                done.fetch_add(1, Ordering::Relaxed);
            }
            ttfb
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await?);
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok((
        rate,
        super::quantile(&all, 0.5).unwrap_or(0) as f64,
        super::quantile(&all, 0.99).unwrap_or(0) as f64,
    ))
}

/// PSS per idle connection (bytes) on each side: `n` connections, each
/// after one round trip, held open.
async fn idle_memory(f: &Forwarder, d: &Destinations, n: usize) -> Result<Vec<(String, f64)>> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = f.pss_kb();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(f.to(d.echo)).await?;
        s.write_all(b"x").await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = f.pss_kb();
    drop(held);
    Ok(before
        .into_iter()
        .zip(after)
        .enumerate()
        .map(|(i, ((_, b), (_, a)))| {
            let side = match (f.way, i) {
                (Way::Apiway, 0) => "agent",
                (Way::Apiway, _) => "server",
                (Way::Ssh, 0) => "ssh",
                (Way::Ssh, _) => "sshd",
                (Way::Stunnel, 0) => "client",
                (Way::Stunnel, _) => "server",
                (Way::Rathole, 0) => "node",
                (Way::Rathole, _) => "dialer",
                (Way::Direct, _) => "-",
            };
            (
                side.to_owned(),
                (a.saturating_sub(b) * 1024) as f64 / n as f64,
            )
        })
        .collect())
}

/// Server PSS per connected agent (bytes): `n` agents, each a
/// [`TunnelClient`](apiway_tunnel::client::TunnelClient) keeping its own
/// warm TLS + HTTP/2 connection with PING keepalive as `apiway agent` does,
/// each proven by one dial, then held idle.
async fn memory_per_agent(
    apiway: &Path,
    dir: &Path,
    pki: &Pki,
    d: &Destinations,
    n: usize,
) -> Result<f64> {
    use apiway_core::endpoint::{Address, EndpointSet, EndpointSetSpec, Policy};
    use apiway_tunnel::client::{ClientSettings, TunnelClient};

    let (mut server, tunnel) = apiway_server(apiway, dir, pki, d).await?;
    let pss = || tree_pss_kb(server.pid());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = pss();
    let spec = EndpointSetSpec {
        endpoints: vec![Address::parse(&tunnel.to_string()).map_err(anyhow::Error::msg)?],
        policy: Policy::RoundRobin,
        health_check: None,
        ejection: Default::default(),
    };
    let settings = ClientSettings {
        tls: apiway_core::tls::TlsClientOptions {
            server_name: None,
            ca_file: Some(pki.ca_pem.clone()),
            client_cert: Some(pki.agent.clone()),
        },
        ..ClientSettings::default()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let set = EndpointSet::new("tunnel", &spec, Default::default());
        let client = TunnelClient::new(set, settings.clone(), Default::default());
        client.keep_warm(stop.child_token());
        let mut s = client
            .dial(&d.echo.to_string())
            .await
            .with_context(|| format!("agent {i}: dial"))?;
        s.write_all(b"x").await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        drop(s);
        agents.push(client);
    }
    // Several keepalive rounds, so every connection has settled.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = pss();
    stop.cancel();
    drop(agents);
    server.kill_group();
    Ok((after.saturating_sub(before) * 1024) as f64 / n as f64)
}

/// From SIGKILL of the server in use to the first round trip through the
/// other one, in ms (median of `trials`).
async fn failover_ms(
    apiway: &Path,
    dir: &Path,
    pki: &Pki,
    d: &Destinations,
    trials: usize,
) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for _ in 0..trials {
        // Two servers; the agent knows both, A first.
        let (server_a, a_addr) = apiway_server(apiway, dir, pki, d).await?;
        let (mut server_b, b_addr) = apiway_server(apiway, dir, pki, d).await?;
        let (mut agent, local) =
            apiway_agent(apiway, dir, pki, &[a_addr, b_addr], &[d.echo]).await?;
        let local = local[&d.echo];
        // Both connections up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut s = TcpStream::connect(local).await?;
        s.write_all(b"x").await?;
        let mut buf = [0u8; 1];
        s.read_exact(&mut buf).await?;
        drop(s);
        server_a.signal(rustix::process::Signal::KILL)?;
        let killed = Instant::now();
        loop {
            let ok = async {
                let mut s = TcpStream::connect(local).await?;
                s.write_all(b"x").await?;
                s.read_exact(&mut buf).await?;
                anyhow::Ok(())
            };
            if tokio::time::timeout(Duration::from_secs(2), ok)
                .await
                .is_ok_and(|r| r.is_ok())
            {
                break;
            }
            if killed.elapsed() > Duration::from_secs(30) {
                bail!("no connection through the other server within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        times.push(killed.elapsed().as_secs_f64() * 1000.0);
        agent.kill_group();
        server_b.kill_group();
    }
    Ok(times)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "—".into(),
    }
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let apiway = settings.lineup.apiway.clone();
    let dir = tempfile::Builder::new()
        .prefix("apiway-bench-tunnel-")
        .tempdir()?;
    let d = start_destinations().await?;
    let pki = pki(dir.path())?;
    let trial = settings.trial.min(Duration::from_secs(3));
    let idle_n = if settings.idle_connections >= 5000 {
        5000
    } else {
        1000
    };
    let mut forwarders = vec![
        apiway_tunnel(&apiway, dir.path(), &pki, &d).await?,
        Forwarder {
            way: Way::Direct,
            local: d.all().into_iter().map(|a| (a, a)).collect(),
            processes: Vec::new(),
        },
    ];
    let mut notes = Vec::new();
    match ssh(dir.path(), &d).await {
        Ok(f) => forwarders.push(f),
        Err(e) => notes.push(format!("ssh -L could not run: {e:#}")),
    }
    match stunnel(dir.path(), &pki, &d).await {
        Ok(f) => forwarders.push(f),
        Err(e) => notes.push(format!("stunnel4 could not run: {e:#}")),
    }
    match rathole(dir.path(), &pki, &d).await {
        Ok(f) => forwarders.push(f),
        Err(e) => notes.push(format!("rathole could not run: {e:#}")),
    }

    type Table = BTreeMap<&'static str, BTreeMap<Way, f64>>;
    let mut table: Table = BTreeMap::new();
    let mut put = |metric: &'static str, way: Way, v: f64| {
        table.entry(metric).or_default().insert(way, v);
    };
    let rounds = settings.rounds.max(1);
    let mut up: BTreeMap<Way, Vec<f64>> = BTreeMap::new();
    let mut down: BTreeMap<Way, Vec<f64>> = BTreeMap::new();
    for round in 0..rounds {
        for f in super::rotated(&forwarders.iter().collect::<Vec<_>>(), round) {
            eprintln!("   throughput {} (round {})", f.way.label(), round + 1);
            for (upload, to, into) in [(true, d.sink, &mut up), (false, d.source, &mut down)] {
                match throughput(f.to(to), upload, trial).await {
                    Ok(b) => into.entry(f.way).or_default().push(b * 8.0 / 1e9),
                    Err(e) => notes.push(format!(
                        "throughput ({}), {}: {e:#}",
                        if upload { "up" } else { "down" },
                        f.way.label()
                    )),
                }
            }
        }
    }
    for (way, v) in &up {
        put(
            "1. throughput, one connection, agent → destination (Gbit/s)",
            *way,
            median(v).unwrap_or(0.0),
        );
    }
    for (way, v) in &down {
        put(
            "2. throughput, one connection, destination → agent (Gbit/s)",
            *way,
            median(v).unwrap_or(0.0),
        );
    }
    for f in &forwarders {
        eprintln!("   head-of-line {}", f.way.label());
        match head_of_line(f, &d).await {
            Ok((alone, loaded)) => {
                put("3. 1 KiB round trip p99, alone (µs)", f.way, alone);
                put(
                    "4. 1 KiB round trip p99, next to 2 bulk connections to a slow reader (µs)",
                    f.way,
                    loaded,
                );
            }
            Err(e) => notes.push(format!("head-of-line, {}: {e:#}", f.way.label())),
        }
    }
    for f in &forwarders {
        eprintln!("   conn_rate {}", f.way.label());
        match conn_rate(f.to(d.echo), trial).await {
            Ok((rate, p50, p99)) => {
                put("5. new connections per second, 64 concurrent", f.way, rate);
                put("6. time to first byte p50 (µs)", f.way, p50);
                put("7. time to first byte p99 (µs)", f.way, p99);
            }
            Err(e) => notes.push(format!("conn_rate, {}: {e:#}", f.way.label())),
        }
    }
    let mut memory_lines = Vec::new();
    for f in &forwarders {
        if f.way == Way::Direct {
            continue;
        }
        eprintln!("   idle memory {} ({idle_n} connections)", f.way.label());
        match idle_memory(f, &d, idle_n).await {
            Ok(sides) => {
                let text: Vec<String> = sides
                    .iter()
                    .map(|(side, b)| format!("{side} {:.1} KiB", b / 1024.0))
                    .collect();
                memory_lines.push(format!("| {} | {} |", f.way.label(), text.join(", ")));
            }
            Err(e) => notes.push(format!("idle memory, {}: {e:#}", f.way.label())),
        }
    }
    // The forwarders go first: stunnel and sshd may still be closing
    // thousands of connections.
    for f in &mut forwarders {
        for p in &mut f.processes {
            p.kill_group();
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!("   memory per connected agent (1,000 agents)");
    let per_agent = memory_per_agent(&apiway, dir.path(), &pki, &d, 1000).await;
    eprintln!("   failover");
    let failover = failover_ms(&apiway, dir.path(), &pki, &d, 5).await;

    let mut out = String::from("| metric |");
    for w in Way::ALL {
        out.push_str(&format!(" {} |", w.label()));
    }
    out.push_str(
        " apiway / ssh -L | apiway / stunnel4 | apiway / rathole | apiway / direct |\n|---|",
    );
    for _ in 0..Way::ALL.len() + 4 {
        out.push_str("---:|");
    }
    out.push('\n');
    for (metric, values) in &table {
        let fmt = |w: Way| {
            values
                .get(&w)
                .map(|v| {
                    if *v >= 100.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.2}")
                    }
                })
                .unwrap_or_else(|| "—".into())
        };
        let a = values.get(&Way::Apiway).copied();
        out.push_str(&format!(
            "| {metric} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            fmt(Way::Apiway),
            fmt(Way::Direct),
            fmt(Way::Ssh),
            fmt(Way::Stunnel),
            fmt(Way::Rathole),
            ratio(a, values.get(&Way::Ssh).copied()),
            ratio(a, values.get(&Way::Stunnel).copied()),
            ratio(a, values.get(&Way::Rathole).copied()),
            ratio(a, values.get(&Way::Direct).copied()),
        ));
    }
    let mut report = ScenarioReport::default();
    report.notes.push(out);
    report.notes.push(format!(
        "Memory per idle connection ({idle_n} connections, each after one round trip; PSS growth divided by the count):\n\n| forwarder | per side |\n|---|---|\n{}",
        memory_lines.join("\n")
    ));
    match per_agent {
        Ok(b) => report.notes.push(format!(
            "Tunnel server memory per connected agent (1,000 agents, each with its own TLS + HTTP/2 connection and PING keepalive, each after one dial; PSS growth divided by the count): {:.1} KiB.",
            b / 1024.0
        )),
        Err(e) => report.notes.push(format!("memory per agent: {e:#}")),
    }
    match failover {
        Ok(times) => report.notes.push(format!(
            "Agent moving to the other tunnel server after SIGKILL of the one it used (time to the first round trip through the other), 5 trials: median {:.1} ms, all: {}.",
            median(&times).unwrap_or(0.0),
            super::list(&times, 1)
        )),
        Err(e) => report.notes.push(format!("failover: {e:#}")),
    }
    report.notes.extend(notes);
    Ok(report)
}
