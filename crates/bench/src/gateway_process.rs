//! The apiway gateway (or agent) as a child process, the way a user runs
//! it, through test-support's launcher; its addresses come from its ready
//! file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use apiway_test_support::process::{ChildProcess, Launcher};
use rustix::process::Signal;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long the gateway gets to start or to apply a reload.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A running `apiway gateway --config FILE`, killed (SIGKILL to its process
/// group) on drop.
pub struct GatewayProcess {
    process: ChildProcess,
    config: PathBuf,
    admin: SocketAddr,
}

/// What one reload took.
#[derive(Clone, Copy, Debug)]
pub struct AppliedReload {
    /// `apiway_config_last_apply_seconds` after the reload: parse, validate
    /// and apply, as the gateway measures it.
    pub apply: Duration,
    /// From SIGHUP until `/metrics` showed the new reload count.
    pub observed: Duration,
}

impl GatewayProcess {
    /// Writes `config_text`, starts the gateway with `worker_threads` tokio
    /// workers, and waits until `listen` accepts and `/metrics` answers on
    /// `admin`. Returns the process and how long that took.
    pub async fn start(
        binary: &Path,
        config_text: &str,
        listen: SocketAddr,
        admin: SocketAddr,
        worker_threads: usize,
    ) -> Result<(GatewayProcess, Duration)> {
        GatewayProcess::start_with_args(binary, config_text, &[], listen, admin, worker_threads)
            .await
    }

    /// [`start`](Self::start) with more flags after `--config FILE`.
    pub async fn start_with_args(
        binary: &Path,
        config_text: &str,
        extra: &[&str],
        listen: SocketAddr,
        admin: SocketAddr,
        worker_threads: usize,
    ) -> Result<(GatewayProcess, Duration)> {
        let dir = tempdir()?;
        let config = dir.path().join("gateway.yaml");
        std::fs::write(&config, config_text)
            .with_context(|| format!("writing {}", config.display()))?;
        let mut args: Vec<std::ffi::OsString> =
            vec!["gateway".into(), "--config".into(), config.clone().into()];
        args.extend(extra.iter().map(|a| a.into()));
        GatewayProcess::launch(binary, args, dir, config, listen, admin, worker_threads).await
    }

    /// Starts `apiway agent` in `direct` mode on `listen`, forwarding to the
    /// one `endpoint` with no health check (a plain per-node forwarder),
    /// with the same waits as [`start`](Self::start). Only the relay
    /// scenarios use it; it has no config file to reload.
    pub async fn start_agent(
        binary: &Path,
        listen: SocketAddr,
        endpoint: SocketAddr,
        admin: SocketAddr,
        worker_threads: usize,
    ) -> Result<(GatewayProcess, Duration)> {
        let dir = tempdir()?;
        let config = dir.path().join("no-config");
        let args = [
            "agent",
            "--listen",
            &listen.to_string(),
            "--endpoint",
            &endpoint.to_string(),
            "--health-check",
            "none",
            "--admin",
            &admin.to_string(),
        ]
        .iter()
        .map(|a| a.into())
        .collect();
        GatewayProcess::launch(binary, args, dir, config, listen, admin, worker_threads).await
    }

    async fn launch(
        binary: &Path,
        args: Vec<std::ffi::OsString>,
        dir: TempDir,
        config: PathBuf,
        listen: SocketAddr,
        admin: SocketAddr,
        worker_threads: usize,
    ) -> Result<(GatewayProcess, Duration)> {
        if !binary.is_file() {
            bail!(
                "the apiway binary {} does not exist: build it with `cargo build --release -p apiway` or pass --apiway PATH",
                binary.display()
            );
        }
        let mut command = Command::new(binary);
        command
            .args(&args)
            .env("TOKIO_WORKER_THREADS", worker_threads.to_string());
        let started = Instant::now();
        // No deadline: a benchmark run takes as long as it takes.
        let mut process = Launcher::new(command)
            .dir(dir)
            .log_name("apiway.log")
            .deadline(None)
            .ready_file()
            .spawn()?;
        let report = process.wait_for_ready_file(TIMEOUT).await?;
        if report.admin != Some(admin) || !report.listeners.values().any(|a| *a == listen) {
            bail!("apiway was to serve {listen} and admin {admin}, but reports {report:?}");
        }
        let mut gateway = GatewayProcess {
            process,
            config,
            admin,
        };
        // Its admin endpoint is bound; it answers once the accept task runs.
        let deadline = started + TIMEOUT;
        while gateway.metrics().await.is_err() {
            gateway.ensure_running()?;
            if Instant::now() >= deadline {
                bail!(
                    "apiway did not serve /metrics within {TIMEOUT:?}; log:\n{}",
                    gateway.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = started.elapsed();
        // The SIGHUP handler is installed by a task spawned right after the
        // admin endpoint; give it a moment so a reload signal cannot kill
        // the process.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok((gateway, took))
    }

    /// The admin endpoint.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Replaces the config file (write and rename), sends SIGHUP and waits
    /// until `/metrics` counts one more reload. A rejected config is an
    /// error quoting the log.
    pub async fn reload(&mut self, config_text: &str) -> Result<AppliedReload> {
        let before = self.metrics().await?;
        let candidate = self.process.dir().join("gateway.next.yaml");
        std::fs::write(&candidate, config_text)
            .with_context(|| format!("writing {}", candidate.display()))?;
        std::fs::rename(&candidate, &self.config)
            .with_context(|| format!("installing {}", self.config.display()))?;
        let sent = Instant::now();
        self.process
            .signal(Signal::HUP)
            .context("sending SIGHUP to the gateway")?;
        loop {
            self.ensure_running()?;
            let now = self.metrics().await?;
            if now.reload_errors > before.reload_errors {
                bail!(
                    "the gateway rejected the new config; log:\n{}",
                    self.log_tail()
                );
            }
            if now.reload_successes > before.reload_successes {
                return Ok(AppliedReload {
                    apply: Duration::from_secs_f64(now.last_apply_seconds.max(0.0)),
                    observed: sent.elapsed(),
                });
            }
            if sent.elapsed() >= TIMEOUT {
                bail!(
                    "the gateway did not apply a reload within {TIMEOUT:?}; log:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Scrapes `/metrics` on the admin endpoint.
    pub async fn metrics(&self) -> Result<GatewayMetrics> {
        let text = http_get(self.admin, "/metrics").await?;
        Ok(GatewayMetrics::parse(&text))
    }

    /// Fails, quoting the log, if the gateway has exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        self.process.ensure_running()
    }

    /// The last lines of the gateway's log.
    pub fn log_tail(&self) -> String {
        let text = self.process.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The figures the bench reads from the gateway's `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatewayMetrics {
    /// `apiway_config_reloads_total{result="success"}`.
    pub reload_successes: u64,
    /// `apiway_config_reloads_total{result="error"}`.
    pub reload_errors: u64,
    /// `apiway_config_last_apply_seconds`.
    pub last_apply_seconds: f64,
    /// `apiway_listener_rejected_total`, all listeners: connections closed
    /// at once because `max_connections` were open.
    pub listener_rejected: u64,
}

impl GatewayMetrics {
    fn parse(text: &str) -> GatewayMetrics {
        let mut metrics = GatewayMetrics::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            match name.trim() {
                "apiway_config_reloads_total{result=\"success\"}" => {
                    metrics.reload_successes = value as u64
                }
                "apiway_config_reloads_total{result=\"error\"}" => {
                    metrics.reload_errors = value as u64
                }
                "apiway_config_last_apply_seconds" => metrics.last_apply_seconds = value,
                name if name.starts_with("apiway_listener_rejected_total{") => {
                    metrics.listener_rejected += value as u64
                }
                _ => {}
            }
        }
        metrics
    }
}

/// A minimal HTTP/1.1 GET; returns the body of a 200 answer.
async fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path} timed out"))?
        .with_context(|| format!("GET http://{addr}{path}"))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("GET http://{addr}{path}: no HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "GET http://{addr}{path}: {}",
            head.lines().next().unwrap_or_default()
        );
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(dechunk(body));
    }
    Ok(body.to_string())
}

/// Joins the chunks of a chunked body (enough for a metrics page).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

fn tempdir() -> Result<TempDir> {
    tempfile::Builder::new()
        .prefix("apiway-bench-")
        .tempdir()
        .context("creating a temporary directory for apiway")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reload_metrics() {
        let text = "# HELP x\napiway_config_reloads_total{result=\"success\"} 3\napiway_config_reloads_total{result=\"error\"} 1\napiway_config_last_apply_seconds 0.0125\napiway_listener_rejected_total{listener=\"bench\"} 7\n";
        let m = GatewayMetrics::parse(text);
        assert_eq!(m.listener_rejected, 7);
        assert_eq!(m.reload_successes, 3);
        assert_eq!(m.reload_errors, 1);
        assert!((m.last_apply_seconds - 0.0125).abs() < 1e-12);
    }

    #[test]
    fn joins_chunks() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
