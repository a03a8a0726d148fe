//! HAProxy in master-worker mode, in the foreground.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::process::Signal;

use super::ports::parse_listen_addr;
use super::{process_tree, require_binary};
use crate::process::{ChildProcess, Launcher};

/// How long HAProxy gets to start listening or to reload.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `haproxy -W -db -f CFG`; killed (with its workers) on drop.
///
/// The configuration's `bind` lines tell the launcher which ports to wait
/// for; wildcard binds are probed on 127.0.0.1. Logs (stderr) go to
/// `haproxy.log` in [`dir`](Self::dir).
pub struct Haproxy {
    process: ChildProcess,
    binary: PathBuf,
    config: PathBuf,
    listen: Vec<SocketAddr>,
}

impl std::fmt::Debug for Haproxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Haproxy")
            .field("pid", &self.pid())
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Haproxy {
    /// Writes `config_text` to a temporary directory, checks it with
    /// `haproxy -c`, starts HAProxy and waits until every `bind` address
    /// accepts TCP connections.
    pub async fn start(config_text: &str) -> Result<Haproxy> {
        let binary = require_binary("haproxy")?;
        let dir = tempfile::Builder::new()
            .prefix("apiway-haproxy-")
            .tempdir()
            .context("creating a temporary directory for HAProxy")?;
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(&config, config_text)
            .with_context(|| format!("writing {}", config.display()))?;
        check_config(&binary, &config).await?;

        let mut command = Command::new(&binary);
        command.arg("-W").arg("-db").arg("-f").arg(&config);
        let process = Launcher::new(command)
            .dir(dir)
            .log_name("haproxy.log")
            .spawn()?;
        let mut haproxy = Haproxy {
            process,
            binary,
            config,
            listen: bind_addrs(config_text),
        };
        let listen = haproxy.listen.clone();
        haproxy
            .process
            .wait_for_ports(&listen, START_TIMEOUT)
            .await?;
        Ok(haproxy)
    }

    /// Replaces the configuration and reloads (SIGUSR2 to the master): new
    /// workers take the listeners, old ones finish their connections. Returns
    /// when a new worker runs and the new `bind` addresses accept. A config
    /// that `haproxy -c` rejects is not installed.
    pub async fn reload(&mut self, config_text: &str) -> Result<()> {
        let candidate = self.process.dir().join("haproxy.next.cfg");
        std::fs::write(&candidate, config_text)
            .with_context(|| format!("writing {}", candidate.display()))?;
        check_config(&self.binary, &candidate).await?;
        std::fs::rename(&candidate, &self.config)
            .with_context(|| format!("installing {}", self.config.display()))?;

        let old_workers = self.worker_pids();
        self.process.signal(Signal::USR2)?;
        self.process
            .wait_for_handover(&old_workers, START_TIMEOUT)
            .await?;
        self.listen = bind_addrs(config_text);
        let listen = self.listen.clone();
        self.process.wait_for_ports(&listen, START_TIMEOUT).await
    }

    /// Stops HAProxy (SIGTERM, then SIGKILL after 5 s) and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        self.process
            .stop(Signal::TERM, Duration::from_secs(5))
            .await?;
        Ok(())
    }

    /// The master process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The worker process ids (all descendants of the master).
    pub fn worker_pids(&self) -> Vec<u32> {
        process_tree(self.pid()).into_iter().skip(1).collect()
    }

    /// Addresses from the configuration's `bind` lines.
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listen
    }

    /// The temporary directory holding the config and the log.
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// HAProxy's stdout/stderr.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }
}

async fn check_config(binary: &Path, config: &Path) -> Result<()> {
    let output = tokio::process::Command::new(binary)
        .arg("-c")
        .arg("-f")
        .arg(config)
        .output()
        .await
        .context("running haproxy -c")?;
    if !output.status.success() {
        bail!(
            "haproxy -c rejected the configuration:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Addresses of `bind` lines (`bind ADDR[,ADDR...] [options]`); `ipv4@` and
/// `ipv6@` prefixes are understood, Unix sockets are skipped.
fn bind_addrs(config: &str) -> Vec<SocketAddr> {
    config
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("bind") => words.next(),
                _ => None,
            }
        })
        .flat_map(|list| list.split(','))
        .map(|addr| addr.trim_start_matches("ipv4@").trim_start_matches("ipv6@"))
        .filter_map(parse_listen_addr)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_bind_addresses() {
        let config = "frontend a\n  bind 127.0.0.1:1000,ipv4@127.0.0.1:1001 ssl crt x\n  bind unix@/x\n  bind :1002\nbackend b\n  server s 127.0.0.1:9\n";
        let ports: Vec<u16> = bind_addrs(config).iter().map(|a| a.port()).collect();
        assert_eq!(ports, [1000, 1001, 1002]);
    }
}
