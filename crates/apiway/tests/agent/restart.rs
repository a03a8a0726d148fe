//! Seamless restarts: the next gateway or agent process binds the same
//! address while the old one drains (SO_REUSEPORT), so a stream of new
//! connections through the restart sees no refusal. In a network namespace
//! with `net.ipv4.tcp_migrate_req=1`, where the kernel moves connections
//! queued at the closing listener to the new one (see the README).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rustix::process::Signal;

use crate::agent_support::{standin_process_at, AgentProcess, Netns};
use crate::support::{GatewayProcess, Pki};

/// New HTTPS connections (one `curl` each) to `kubernetes.default:PORT`
/// at `ip` inside `ns`, one after another, until stopped; each outcome is
/// a line of the output file: the HTTP code, then curl's exit code.
struct Load {
    out: PathBuf,
    stop: PathBuf,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Load {
    fn start(ns: &Netns, to: SocketAddr, ca: &Path) -> Result<Load> {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("outcomes");
        let stop = dir.path().join("stop");
        let script = format!(
            "while [ ! -e {stop} ]; do \
               code=$(curl -sS -o /dev/null -w '%{{http_code}}' --max-time 5 \
                 --resolve kubernetes.default:{port}:{ip} --cacert {ca} \
                 https://kubernetes.default:{port}/version 2>>{out}.err); \
               echo \"$code $?\" >> {out}; \
             done",
            stop = stop.display(),
            out = out.display(),
            port = to.port(),
            ip = to.ip(),
            ca = ca.display(),
        );
        let child = tokio::process::Command::new("ip")
            .args(["netns", "exec", ns.name(), "bash", "-c", &script])
            .kill_on_drop(true)
            .spawn()
            .context("starting the connection loop")?;
        Ok(Load {
            out,
            stop,
            child,
            _dir: dir,
        })
    }

    /// (answered 200, anything else) so far, and the failures' lines.
    fn outcomes(&self) -> (usize, Vec<String>) {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let mut ok = 0;
        let mut failed = Vec::new();
        for line in text.lines() {
            if line == "200 0" {
                ok += 1;
            } else {
                failed.push(line.to_owned());
            }
        }
        (ok, failed)
    }

    /// Waits until `more` further connections have succeeded.
    async fn wait_for(&self, more: usize) -> Result<()> {
        let start = self.outcomes().0;
        let began = Instant::now();
        while self.outcomes().0 < start + more {
            ensure!(
                began.elapsed() < Duration::from_secs(30),
                "the connection loop stalled: {:?}",
                self.outcomes()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Stops the loop; fails if any connection failed.
    async fn finish(mut self) -> Result<usize> {
        std::fs::write(&self.stop, "")?;
        tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await??;
        let (ok, failed) = self.outcomes();
        let errors =
            std::fs::read_to_string(format!("{}.err", self.out.display())).unwrap_or_default();
        ensure!(
            failed.is_empty(),
            "{} of {} connections failed through the restart: {failed:?}; curl said: {errors}",
            failed.len(),
            ok + failed.len()
        );
        Ok(ok)
    }
}

/// A namespace whose kernel moves queued connections of a closing
/// listener to another listener of the same port.
fn restart_netns() -> Result<Netns> {
    let ns = Netns::new()?;
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "sysctl", "-qw"])
        .arg("net.ipv4.tcp_migrate_req=1")
        .output()?;
    ensure!(
        out.status.success(),
        "sysctl net.ipv4.tcp_migrate_req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_restarted_under_new_connections_refuses_none() -> Result<()> {
    let pki = Pki::new()?;
    let ns = restart_netns()?;
    let lo: IpAddr = "127.0.0.1".parse()?;
    let api = standin_process_at(&pki, "api", SocketAddr::new(lo, 0), Some(&ns)).await?;
    let listen = SocketAddr::new(lo, 8443);
    let config = format!(
        "admin: {{address: 127.0.0.1:0}}\n\
         drain: {{delay: 1s, grace_period: 5s}}\n\
         listeners: [{{name: public, address: {listen}, kind: tls}}]\n\
         routes:\n  - name: api\n    hostnames: [kubernetes.default]\n    backends: [{{address: {}}}]\n",
        api.addr()
    );
    let mut old = GatewayProcess::start_in(Some(ns.name()), &config).await?;
    let load = Load::start(&ns, listen, &pki.ca_pem)?;
    load.wait_for(20).await?;

    // The next process binds the same address while the old one runs...
    let _new = GatewayProcess::start_in(Some(ns.name()), &config)
        .await
        .context("the new gateway could not bind next to the old one")?;
    load.wait_for(20).await?;
    // ...and the old one drains and exits.
    old.signal(Signal::TERM)?;
    old.wait_exit(Duration::from_secs(15)).await?;
    load.wait_for(20).await?;
    let ok = load.finish().await?;
    ensure!(ok >= 60);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_under_new_connections_refuses_none_and_keeps_its_address() -> Result<()>
{
    let pki = Pki::new()?;
    let ns = restart_netns()?;
    let lo: IpAddr = "127.0.0.1".parse()?;
    let api = standin_process_at(&pki, "api", SocketAddr::new(lo, 0), Some(&ns)).await?;
    let endpoint = api.addr().to_string();
    let args = [
        "--upstream",
        "direct",
        "--endpoint",
        &endpoint,
        "--bind-address",
        "10.0.0.1",
        "--interface",
        "lo",
        "--listen",
        "10.0.0.1:6443",
        "--drain-delay",
        "1s",
        "--grace-period",
        "5s",
    ];
    let listen: SocketAddr = "10.0.0.1:6443".parse()?;
    let mut old = AgentProcess::start(Some(&ns), &args).await?;
    let load = Load::start(&ns, listen, &pki.ca_pem)?;
    load.wait_for(20).await?;

    let _new = AgentProcess::start(Some(&ns), &args)
        .await
        .context("the new agent could not bind next to the old one")?;
    load.wait_for(20).await?;
    old.signal(Signal::TERM)?;
    old.wait_exit(Duration::from_secs(15)).await?;
    // The old agent left the address to the new one, which still answers.
    ensure!(
        ns.addresses("lo")?.contains("10.0.0.1"),
        "the old agent removed the address the new one listens on"
    );
    load.wait_for(20).await?;
    let ok = load.finish().await?;
    ensure!(ok >= 60);
    Ok(())
}
