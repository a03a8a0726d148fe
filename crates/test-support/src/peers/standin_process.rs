//! A stand-in API server as a separate `apiway standin` process, so a test
//! or benchmark can kill it (resets) or SIGSTOP it (a hung server), which an
//! in-process server cannot imitate.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rustix::process::Signal;

use crate::process::{command_in, ChildProcess, Launcher};
use apiway_standin::pki::{Ca, Issued};

/// How long the stand-in gets to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `apiway standin`, optionally inside a network namespace
/// (`ip netns exec NS`); killed on drop.
pub struct StandinProcess {
    process: ChildProcess,
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
    /// with `cert`, inside `netns` when given, and waits until its ready file
    /// reports the bound address.
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
        StandinProcess::start_with_args(apiway, name, listen, cert, client_ca, &[], netns).await
    }

    /// [`start_with_client_ca`](Self::start_with_client_ca) with more
    /// `apiway standin` flags (`--advertise HOST:PORT`, ...).
    pub async fn start_with_args(
        apiway: &Path,
        name: &str,
        listen: SocketAddr,
        cert: &Issued,
        client_ca: Option<&Ca>,
        extra_args: &[&str],
        netns: Option<&str>,
    ) -> Result<StandinProcess> {
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
        let mut command = command_in(netns, apiway);
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
        let mut process = Launcher::new(command)
            .dir(dir)
            .log_name("standin.log")
            .ready_file()
            .spawn()?;
        let report = process
            .wait_for_ready_file(START_TIMEOUT)
            .await
            .with_context(|| format!("starting stand-in {name}"))?;
        let addr = report
            .listener("https")
            .ok_or_else(|| anyhow!("stand-in {name} reported no https listener: {report:?}"))?;
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
