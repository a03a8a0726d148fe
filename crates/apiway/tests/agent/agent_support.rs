//! What only the agent tests need: the agent process (optionally inside a
//! network namespace), namespaces that delete themselves, stand-in
//! processes, and curl run inside a namespace.

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use apiway_test_support::peers::StandinProcess;
use rustix::process::Signal;

use crate::support::metrics::Metrics;
use crate::support::process::{launch_in, APIWAY, START_TIMEOUT};
use crate::support::tools::{run, CurlAnswer};
use crate::support::{Pki, LOCALHOST};
use apiway_test_support::process::{command_in, ChildProcess};

/// The names every stand-in certificate carries: what the agent's health
/// check and clients of `kubernetes.default.svc` ask for.
pub const API_NAMES: &[&str] = &["kubernetes.default", "kubernetes.default.svc"];

/// A running `apiway agent ARGS`; killed on drop.
pub struct AgentProcess {
    process: ChildProcess,
    listeners: Vec<SocketAddr>,
    admin: Option<SocketAddr>,
}

impl AgentProcess {
    /// Starts the agent (inside `netns` when given) and waits until every
    /// `--listen` is bound and, with `--admin`, the admin endpoint serves.
    pub async fn start(netns: Option<&Netns>, args: &[&str]) -> Result<AgentProcess> {
        let mut agent = AgentProcess::spawn(netns, args, &[])?;
        let report = agent.process.wait_for_ready_file(START_TIMEOUT).await?;
        // The report names listeners by their configured ip:port; keep the
        // order of the --listen flags where they name them.
        let flagged: Vec<SocketAddr> = args
            .windows(2)
            .filter(|w| w[0] == "--listen")
            .filter_map(|w| w[1].parse::<SocketAddr>().ok())
            .filter_map(|a| report.listener(&a.to_string()))
            .collect();
        agent.listeners = if flagged.len() == report.listeners.len() {
            flagged
        } else {
            report.listeners.values().copied().collect()
        };
        agent.admin = report.admin;
        Ok(agent)
    }

    /// Starts the agent without waiting; `wrapper` goes before the binary
    /// (e.g. `setpriv ...`).
    pub fn spawn(netns: Option<&Netns>, args: &[&str], wrapper: &[&str]) -> Result<AgentProcess> {
        // `wrapper` (if any) runs the binary, inside the namespace if any.
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = command_in(netns.map(Netns::name), program);
                c.args(rest).arg(APIWAY);
                c
            }
            None => command_in(netns.map(Netns::name), APIWAY),
        };
        command.arg("agent").args(args);
        Ok(AgentProcess {
            process: launch_in(command, temp_dir("apiway-agent-test-")?)?,
            listeners: Vec::new(),
            admin: None,
        })
    }

    /// The first bound listener.
    pub fn addr(&self) -> SocketAddr {
        self.listeners[0]
    }

    /// Every bound listener, in --listen order.
    pub fn listeners(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// Every stderr line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.process.log_lines()
    }

    /// Waits for one line matching `pred` and returns it.
    pub async fn wait_for_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        self.process.wait_for_line(what, timeout, pred).await
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process.wait_exit(timeout).await
    }

    /// Sends `signal` to the agent.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        self.process.signal(signal)
    }

    /// SIGTERM, then SIGTERM again once the drain started (skipping the
    /// drain delay); waits for a clean exit.
    pub async fn stop(&mut self) -> Result<()> {
        self.signal(Signal::TERM)?;
        self.wait_for_line("the shutdown", Duration::from_secs(5), |l| {
            l.contains("shutting down")
        })
        .await?;
        self.signal(Signal::TERM)?;
        let status = self.wait_exit(Duration::from_secs(10)).await?;
        if !status.success() {
            bail!(
                "the agent exited with {status}; log:\n{}",
                self.log_lines().join("\n")
            );
        }
        Ok(())
    }

    /// The current `/metrics` (admin endpoint reachable from the test's
    /// namespace).
    pub async fn metrics(&self) -> Result<Metrics> {
        let admin = self.admin.context("the agent has no --admin")?;
        let (status, body) = crate::support::http_get_plain(admin, "/metrics").await?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        Ok(Metrics::new(body))
    }

    /// `GET path` on the admin endpoint: status and body.
    pub async fn admin_get(&self, path: &str) -> Result<(u16, String)> {
        let admin = self.admin.context("the agent has no --admin")?;
        crate::support::http_get_plain(admin, path).await
    }

    /// Waits until `name{labels}` satisfies `pred`.
    pub async fn wait_metric(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        timeout: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> Result<f64> {
        crate::support::eventually(&format!("{name}{labels:?}"), timeout, || async {
            let m = self.metrics().await.map_err(|e| e.to_string())?;
            match m.value(name, labels) {
                Some(v) if pred(v) => Ok(v),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }
}

/// A network namespace with `lo` up, deleted on drop (also when a test
/// fails), so nothing a test does leaks into the host's network.
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new() -> Result<Netns> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "apiway-test-{:x}{:06x}",
            std::process::id(),
            nanos & 0xff_ffff
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NS ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Joins this namespace to `other` with a veth pair: `here` is this
    /// end's device name and address (`ip/prefix`), `there` the other's.
    /// Device names are at most 15 bytes; the namespaces keep them apart.
    pub fn link_to(&self, other: &Netns, here: (&str, &str), there: (&str, &str)) -> Result<()> {
        self.ip(&[
            "link",
            "add",
            here.0,
            "type",
            "veth",
            "peer",
            "name",
            there.0,
            "netns",
            other.name(),
        ])?;
        self.ip(&["addr", "add", here.1, "dev", here.0])?;
        self.ip(&["link", "set", here.0, "up"])?;
        other.ip(&["addr", "add", there.1, "dev", there.0])?;
        other.ip(&["link", "set", there.0, "up"])?;
        Ok(())
    }

    /// The addresses on `dev` inside the namespace (`ip -o addr show`).
    pub fn addresses(&self, dev: &str) -> Result<String> {
        self.ip(&["-o", "addr", "show", "dev", dev])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// Runs `ip ARGS`; the error carries its stderr.
pub fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts `apiway standin` named `name` on `ip:0` (inside `netns`), with a
/// certificate for [`API_NAMES`] and `ip`.
pub async fn standin_process(
    pki: &Pki,
    name: &str,
    ip: IpAddr,
    netns: Option<&Netns>,
) -> Result<StandinProcess> {
    standin_process_at(pki, name, SocketAddr::new(ip, 0), netns).await
}

/// [`standin_process`] on a fixed address.
pub async fn standin_process_at(
    pki: &Pki,
    name: &str,
    listen: SocketAddr,
    netns: Option<&Netns>,
) -> Result<StandinProcess> {
    let cert = pki.ca.issue_server(API_NAMES, &[listen.ip(), LOCALHOST])?;
    StandinProcess::start(
        std::path::Path::new(APIWAY),
        name,
        listen,
        &cert,
        netns.map(|n| n.name()),
    )
    .await
}

/// `curl https://kubernetes.default:PORT/path` resolved to `addr`, trusting
/// the test CA, from inside `netns` when given; `Err` when curl fails.
pub async fn curl_api(
    netns: Option<&Netns>,
    addr: SocketAddr,
    path: &str,
    pki: &Pki,
    max_time: Duration,
) -> Result<CurlAnswer> {
    let host = "kubernetes.default";
    let port = addr.port();
    let mut command = match netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("ip");
            c.args(["netns", "exec", ns.name(), "curl"]);
            c
        }
        None => tokio::process::Command::new("curl"),
    };
    command
        .args(["-sS", "-i", "--http1.1", "--max-time"])
        .arg(format!("{:.3}", max_time.as_secs_f64()))
        .arg("--resolve")
        .arg(format!("{host}:{port}:{}", addr.ip()))
        .arg("--cacert")
        .arg(&pki.ca_pem)
        .arg(format!("https://{host}:{port}{path}"));
    let ran = run(command, b"", max_time + Duration::from_secs(5)).await?;
    if !ran.success {
        bail!(
            "curl https://{host}:{port}{path} via {addr}: {}",
            ran.stderr.trim()
        );
    }
    let (head, body) = ran
        .stdout
        .split_once("\r\n\r\n")
        .with_context(|| format!("no header end in {:?}", ran.stdout))?;
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Ok(CurlAnswer {
        status_line: status_line.to_string(),
        headers: headers.to_string(),
        body: body.to_string(),
    })
}

/// The stand-in that answered `curl_api`, insisting on a 200.
pub async fn answered_by(netns: Option<&Netns>, addr: SocketAddr, pki: &Pki) -> Result<String> {
    let a = curl_api(netns, addr, "/version", pki, Duration::from_secs(3)).await?;
    if !a.status_line.contains(" 200") {
        bail!("{}: {}", a.status_line, a.body);
    }
    a.standin()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no x-apiway-standin header in {}", a.headers))
}

fn temp_dir(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("creating a temporary directory")
}
