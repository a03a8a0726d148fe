//! A stand-in API server as a separate `apiway standin` process, so a test
//! or benchmark can kill it (resets) or SIGSTOP it (a hung server), which an
//! in-process server cannot imitate.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::process::Signal;
use tokio::time::Instant;

use super::process::{log_tail, PeerProcess};
use crate::pki::{Ca, Issued};

/// How long the stand-in gets to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The optional parts of an `apiway standin` command line.
struct Launch<'a> {
    client_ca: Option<&'a Ca>,
    netns: Option<&'a str>,
    extra_args: &'a [String],
}

/// A running `apiway standin`, optionally inside a network namespace
/// (`ip netns exec NS`); killed on drop.
pub struct StandinProcess {
    process: PeerProcess,
    name: String,
    addr: SocketAddr,
}

impl std::fmt::Debug for StandinProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandinProcess")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .field("pid", &self.process.pid())
            .finish()
    }
}

impl StandinProcess {
    /// Starts `apiway standin --name NAME --listen ADDR` (port 0 picks one)
    /// with `cert`, inside `netns` when given, and waits until it logs its
    /// bound address.
    pub async fn start(
        apiway: &Path,
        name: &str,
        listen: SocketAddr,
        cert: &Issued,
        netns: Option<&str>,
    ) -> Result<StandinProcess> {
        StandinProcess::start_with_client_ca(apiway, name, listen, cert, None, netns).await
    }

    /// [`start`](Self::start); with `client_ca`, the stand-in requires a
    /// client certificate signed by it (`--client-ca`).
    pub async fn start_with_client_ca(
        apiway: &Path,
        name: &str,
        listen: SocketAddr,
        cert: &Issued,
        client_ca: Option<&Ca>,
        netns: Option<&str>,
    ) -> Result<StandinProcess> {
        let launch = Launch {
            client_ca,
            netns,
            extra_args: &[],
        };
        StandinProcess::launch(apiway, name, listen, cert, launch).await
    }

    /// [`start`](Self::start) on the host, passing `extra_args` to `apiway
    /// standin` (e.g. `--alt-svc VALUE`, `--api-upstream URL`).
    pub async fn start_with_args(
        apiway: &Path,
        listen: SocketAddr,
        cert: &Issued,
        name: &str,
        extra_args: &[String],
    ) -> Result<StandinProcess> {
        let launch = Launch {
            client_ca: None,
            netns: None,
            extra_args,
        };
        StandinProcess::launch(apiway, name, listen, cert, launch).await
    }

    async fn launch(
        apiway: &Path,
        name: &str,
        listen: SocketAddr,
        cert: &Issued,
        launch: Launch<'_>,
    ) -> Result<StandinProcess> {
        let Launch {
            client_ca,
            netns,
            extra_args,
        } = launch;
        let dir = tempfile::Builder::new()
            .prefix("apiway-standin-")
            .tempdir()
            .context("creating a temporary directory for a stand-in")?;
        let (cert_path, key_path) = cert.write(dir.path(), "server")?;
        let client_ca_path = match client_ca {
            Some(ca) => {
                let path = dir.path().join("client-ca.pem");
                std::fs::write(&path, ca.cert_pem()).context("writing the client CA")?;
                Some(path)
            }
            None => None,
        };
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(apiway);
                c
            }
            None => Command::new(apiway),
        };
        command
            .arg("standin")
            .arg("--name")
            .arg(name)
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--cert")
            .arg(&cert_path)
            .arg("--key")
            .arg(&key_path)
            .args(
                client_ca_path
                    .iter()
                    .flat_map(|p| [std::ffi::OsStr::new("--client-ca"), p.as_os_str()]),
            )
            .args(extra_args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info");
        let mut process = PeerProcess::spawn(command, dir, "standin.log")?;
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = loop {
            process.ensure_running()?;
            let log = std::fs::read_to_string(process.log_path()).unwrap_or_default();
            let found = log
                .lines()
                .filter(|l| l.contains("stand-in API server serving"))
                .find_map(|l| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix("addr=")?.parse::<SocketAddr>().ok())
                });
            if let Some(addr) = found {
                break addr;
            }
            if Instant::now() >= deadline {
                bail!(
                    "stand-in {name} did not start within {START_TIMEOUT:?}; log:\n{}",
                    log_tail(process.log_path())
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Ok(StandinProcess {
            process,
            name: name.to_owned(),
            addr,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The name it reports (`x-apiway-standin`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGSTOP: the kernel still completes TCP handshakes (the backlog), but
    /// nothing answers: a hung server.
    pub fn hang(&self) -> Result<()> {
        self.process.signal(Signal::STOP)
    }

    /// SIGCONT after [`hang`](Self::hang).
    pub fn resume(&self) -> Result<()> {
        self.process.signal(Signal::CONT)
    }

    /// SIGKILL: the port closes and open connections are reset.
    pub fn kill(&mut self) {
        self.process.kill_group();
    }
}
