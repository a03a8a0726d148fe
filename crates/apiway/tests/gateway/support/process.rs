//! The real `apiway gateway` binary as a child process: its config file in a
//! temporary directory, its log captured line by line, its bound addresses
//! read from that log, killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rustix::process::{kill_process, Pid, Signal};
use tempfile::TempDir;

use super::metrics::Metrics;

/// The binary under test.
pub const APIWAY: &str = env!("CARGO_BIN_EXE_apiway");

/// How long the gateway gets to bind its listeners and admin endpoint.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `apiway gateway --config FILE`.
///
/// Every config must have an `admin:` section: its "admin endpoint" log line
/// comes after every listener is bound, which is how [`start`](Self::start)
/// knows the gateway is up and learns the addresses (configs use port 0).
pub struct GatewayProcess {
    process: LoggedChild,
    config: PathBuf,
    admin: SocketAddr,
    listeners: Vec<(String, SocketAddr)>,
    // Last, so the directory outlives the process.
    dir: TempDir,
}

impl GatewayProcess {
    /// Writes `config_yaml` to a fresh directory and starts the gateway on it.
    pub async fn start(config_yaml: &str) -> Result<GatewayProcess> {
        GatewayProcess::start_in(None, config_yaml).await
    }

    /// [`start`](Self::start), inside network namespace `netns` when given
    /// (`ip netns exec`).
    pub async fn start_in(netns: Option<&str>, config_yaml: &str) -> Result<GatewayProcess> {
        let dir = tempfile::Builder::new()
            .prefix("apiway-gateway-test-")
            .tempdir()
            .context("creating a temporary directory")?;
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, config_yaml)?;
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, APIWAY]);
                c
            }
            None => Command::new(APIWAY),
        };
        command.arg("gateway").arg("--config").arg(&config);
        let mut gateway = GatewayProcess {
            process: LoggedChild::spawn(command, "gateway")?,
            config,
            admin: SocketAddr::from(([0, 0, 0, 0], 0)),
            listeners: Vec::new(),
            dir,
        };
        let admin_line = gateway
            .wait_for_log("the admin endpoint log line", START_TIMEOUT, |l| {
                l.contains("admin endpoint")
            })
            .await?;
        gateway.admin = field(&admin_line, "address")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| anyhow!("no address in {admin_line:?}"))?;
        for line in gateway.log_lines() {
            if line.contains(" listening ") {
                if let (Some(name), Some(addr)) =
                    (field(&line, "listener"), field(&line, "address"))
                {
                    gateway.listeners.push((name.to_string(), addr.parse()?));
                }
            }
        }
        Ok(gateway)
    }

    /// The bound address of listener `name`.
    pub fn listener(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.listeners))
    }

    /// The bound address of the listener named `public`.
    pub fn addr(&self) -> SocketAddr {
        self.listener("public")
    }

    /// The admin endpoint's bound address.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// Replaces the config file the way Kubernetes updates a mounted
    /// ConfigMap: a new file renamed over the old one.
    pub fn write_config(&self, config_yaml: &str) -> Result<()> {
        let next = self.dir.path().join("gateway.yaml.next");
        std::fs::write(&next, config_yaml)?;
        std::fs::rename(&next, &self.config)?;
        Ok(())
    }

    /// Sends `signal` to the gateway.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        self.process.signal(signal)
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process.wait_exit(timeout).await
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Every stderr line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.process.log_lines()
    }

    /// Waits for a stderr line matching `pred` and returns it.
    pub async fn wait_for_log(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        self.process.wait_for_line(what, timeout, pred).await
    }

    /// `GET path` on the admin endpoint: status code and body.
    pub async fn admin_get(&self, path: &str) -> Result<(u16, String)> {
        super::http_get_plain(self.admin(), path).await
    }

    /// The current `/metrics`.
    pub async fn metrics(&self) -> Result<Metrics> {
        let (status, body) = self.admin_get("/metrics").await?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        Ok(Metrics::new(body))
    }

    /// Waits until the metric series `name{labels}` satisfies `pred`;
    /// returns its value.
    pub async fn wait_metric(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        timeout: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> Result<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            let metrics = self.metrics().await?;
            let value = metrics.value(name, labels);
            if let Some(v) = value.filter(|v| pred(*v)) {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name}{labels:?} is {value:?} after {timeout:?}; metrics:\n{}",
                    metrics.matching("apiway_")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (up to 5 s) until the series `name{labels}` equals `expected`:
    /// a counter the gateway bumps just after the test saw its effect.
    pub async fn wait_count(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        expected: f64,
    ) -> Result<()> {
        self.wait_metric(name, labels, Duration::from_secs(5), |v| v == expected)
            .await
            .map(drop)
    }
}

/// A child `apiway ROLE` process whose stderr is captured line by line;
/// killed on drop, when its log is printed (test output is shown only for
/// failing tests, and the log then helps).
pub struct LoggedChild {
    child: Child,
    role: &'static str,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl LoggedChild {
    /// Spawns `command` with stdin and stdout closed, plain-text logs at
    /// the default level, and stderr captured.
    pub fn spawn(mut command: Command, role: &'static str) -> Result<LoggedChild> {
        let mut child = command
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting apiway {role}"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stderr.take().map(|stderr| {
            let sink = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    lock(&sink).push(line);
                }
            })
        });
        Ok(LoggedChild {
            child,
            role,
            log,
            reader,
        })
    }

    /// Every stderr line so far.
    pub fn log_lines(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    /// Waits until the log as a whole satisfies `pred`.
    pub async fn wait_for_log(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[String]) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&lock(&self.log)) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                self.drain_log();
                bail!(
                    "the {} exited ({status}) before {what}; log:\n{}",
                    self.role,
                    self.log_lines().join("\n")
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "no {what} within {timeout:?}; log:\n{}",
                    self.log_lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for one line matching `pred` and returns it.
    pub async fn wait_for_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        self.wait_for_log(what, timeout, |lines| lines.iter().any(|l| pred(l)))
            .await?;
        self.log_lines()
            .into_iter()
            .find(|l| pred(l))
            .ok_or_else(|| anyhow!("{what} vanished"))
    }

    /// Waits for the process to exit; its log is complete then.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                self.drain_log();
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "the {} did not exit within {timeout:?}; log:\n{}",
                    self.role,
                    self.log_lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = i32::try_from(self.child.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| anyhow!("bad pid"))?;
        kill_process(pid, signal).with_context(|| format!("signalling the {}", self.role))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Once the process exited: waits for the reader to take the last
    /// lines from the pipe (it ends at the pipe's end of file).
    fn drain_log(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!(
            "--- apiway {} log ---\n{}",
            self.role,
            self.log_lines().join("\n")
        );
    }
}

/// The value of `key=value` in a text log line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
