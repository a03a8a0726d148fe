//! The real `apiway gateway` binary as a child process: its config file in a
//! temporary directory, launched by test-support's one launcher, its bound
//! addresses read from its ready file (`--ready-file`), killed on drop.

use std::net::SocketAddr;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use apiway_test_support::process::{command_in, ChildProcess, Launcher, ReadyReport};
use rustix::process::Signal;

use super::metrics::Metrics;

/// The binary under test.
pub const APIWAY: &str = env!("CARGO_BIN_EXE_apiway");

/// How long a role gets to bind its listeners and admin endpoint.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Launches an `apiway ROLE` command with its files in `dir`: plain-text
/// logs at the default level, `--ready-file`, its log printed when dropped
/// (test output is shown only for failing tests, and the log then helps).
pub fn launch_in(mut command: Command, dir: tempfile::TempDir) -> Result<ChildProcess> {
    command.env("NO_COLOR", "1").env_remove("RUST_LOG");
    Launcher::new(command)
        .dir(dir)
        .log_name("apiway.log")
        .ready_file()
        .echo_log_on_drop()
        .spawn()
}

/// A running `apiway gateway --config FILE`.
pub struct GatewayProcess {
    process: ChildProcess,
    config: std::path::PathBuf,
    report: ReadyReport,
}

impl GatewayProcess {
    /// Writes `config_yaml` to a fresh directory and starts the gateway on it.
    pub async fn start(config_yaml: &str) -> Result<GatewayProcess> {
        GatewayProcess::start_in(None, config_yaml).await
    }

    /// [`start`](Self::start), inside network namespace `netns` when given
    /// (`ip netns exec`).
    pub async fn start_in(netns: Option<&str>, config_yaml: &str) -> Result<GatewayProcess> {
        GatewayProcess::start_with_args(netns, config_yaml, &[]).await
    }

    /// [`start_in`](Self::start_in) with more flags (`--node-name n1`).
    pub async fn start_with_args(
        netns: Option<&str>,
        config_yaml: &str,
        args: &[&str],
    ) -> Result<GatewayProcess> {
        let dir = tempfile::Builder::new()
            .prefix("apiway-gateway-test-")
            .tempdir()
            .context("creating a temporary directory")?;
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, config_yaml)?;
        let mut command = command_in(netns, APIWAY);
        command
            .arg("gateway")
            .arg("--config")
            .arg(&config)
            .args(args);
        let mut process = launch_in(command, dir)?;
        let report = process.wait_for_ready_file(START_TIMEOUT).await?;
        Ok(GatewayProcess {
            process,
            config,
            report,
        })
    }

    /// The bound address of listener `name`.
    pub fn listener(&self, name: &str) -> SocketAddr {
        self.report
            .listener(name)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.report.listeners))
    }

    /// The bound address of listener `name` as the ready file says now.
    pub fn current_listener(&self, name: &str) -> Option<SocketAddr> {
        self.process.current_report().ok()?.listener(name)
    }

    /// The bound address of the listener named `public`.
    pub fn addr(&self) -> SocketAddr {
        self.listener("public")
    }

    /// The admin endpoint's bound address (every test config has one).
    pub fn admin(&self) -> SocketAddr {
        self.report
            .admin
            .unwrap_or_else(|| panic!("no admin endpoint in {:?}", self.report))
    }

    /// Replaces the config file the way Kubernetes updates a mounted
    /// ConfigMap: a new file renamed over the old one.
    pub fn write_config(&self, config_yaml: &str) -> Result<()> {
        let next = self.process.dir().join("gateway.yaml.next");
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
