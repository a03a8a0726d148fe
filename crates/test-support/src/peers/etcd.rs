//! A single-member etcd that requires client certificates: a real Go TLS and
//! HTTP/2 (gRPC) server to test against.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::process::Signal;
use tokio::time::Instant;

use super::{free_port, require_binary};
use crate::process::{ChildProcess, Launcher};
use apiway_standin::client::https_get_with_config;
use apiway_standin::pki::{self, Ca, Issued};

/// How long etcd gets to report healthy.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `etcd` with `--client-cert-auth`; killed on drop.
///
/// Clients connect to `https://127.0.0.1:PORT` ([`client_addr`](Self::client_addr));
/// the peer (raft) port is plain HTTP on another free port. Data and log
/// (`etcd.log`) live in [`dir`](Self::dir).
pub struct Etcd {
    process: ChildProcess,
    client_addr: SocketAddr,
    ca_path: PathBuf,
    probe: Issued,
    next_file: AtomicU64,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("pid", &self.pid())
            .field("client_addr", &self.client_addr)
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// Starts etcd serving `server_cert` (which `ca` signed; it must be valid
    /// for IP 127.0.0.1) and accepting only client certificates signed by
    /// `client_ca`. Returns once `/health` answers `true`.
    ///
    /// etcd's gRPC gateway (the `/v3/...` JSON API) dials etcd itself using
    /// `server_cert` as a client certificate, so for that API issue it with
    /// [`Ca::issue_peer`] from `client_ca`. `etcdctl` (gRPC) and `/health` work
    /// with a plain [`Ca::issue_server`] certificate (checked with etcd 3.4).
    pub async fn start_mtls(ca: &Ca, server_cert: &Issued, client_ca: &Ca) -> Result<Etcd> {
        let binary = require_binary("etcd")?;
        let dir = tempfile::Builder::new()
            .prefix("apiway-etcd-")
            .tempdir()
            .context("creating a temporary directory for etcd")?;
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, ca.cert_pem())?;
        let client_ca_path = dir.path().join("client-ca.crt");
        std::fs::write(&client_ca_path, client_ca.cert_pem())?;
        let (cert_path, key_path) = server_cert.write(dir.path(), "server")?;

        let client_port = free_port()?;
        let mut peer_port = free_port()?;
        while peer_port == client_port {
            peer_port = free_port()?;
        }
        let client_url = format!("https://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");

        let mut command = Command::new(binary);
        command
            .arg("--name=apiway-test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=apiway-test={peer_url}"))
            .arg("--initial-cluster-state=new")
            .arg(format!("--cert-file={}", cert_path.display()))
            .arg(format!("--key-file={}", key_path.display()))
            .arg("--client-cert-auth")
            .arg(format!("--trusted-ca-file={}", client_ca_path.display()))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr");
        // Inherited ETCD_* variables would override the flags above.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD") {
                command.env_remove(key);
            }
        }
        let process = Launcher::new(command)
            .dir(dir)
            .log_name("etcd.log")
            .spawn()?;
        let etcd = Etcd {
            process,
            client_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, client_port)),
            ca_path,
            probe: client_ca.issue_client("apiway-etcd-probe", &[])?,
            next_file: AtomicU64::new(0),
        };
        etcd.wait_healthy(ca).await
    }

    async fn wait_healthy(mut self, ca: &Ca) -> Result<Etcd> {
        // No ALPN: this is a plain HTTP/1.1 request to etcd's HTTP handler.
        let config = pki::client_config(ca, Some(&self.probe), &[])?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            self.process.ensure_running()?;
            let attempt = tokio::time::timeout(
                Duration::from_secs(2),
                https_get_with_config(
                    self.client_addr,
                    "127.0.0.1",
                    "/health",
                    config.clone(),
                    false,
                ),
            )
            .await;
            let last_error = match attempt {
                Ok(Ok(r)) if r.status == 200 && r.body.contains("true") => return Ok(self),
                Ok(Ok(r)) => format!("{} {}", r.status, r.body),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "timed out".to_string(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "etcd did not become healthy within {START_TIMEOUT:?} (last: {last_error}); log:\n{}",
                    self.process.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `etcdctl` (API v3) against this etcd, trusting its CA, with
    /// `client_cert` if given, and returns its output whatever the exit
    /// status. Dial timeout 2 s, command timeout 5 s.
    pub async fn etcdctl(&self, client_cert: Option<&Issued>, args: &[&str]) -> Result<Output> {
        let binary = require_binary("etcdctl")?;
        let mut command = tokio::process::Command::new(binary);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.client_url()))
            .arg(format!("--cacert={}", self.ca_path.display()))
            .arg("--dial-timeout=2s")
            .arg("--command-timeout=5s");
        if let Some(cert) = client_cert {
            let stem = format!("etcdctl-{}", self.next_file.fetch_add(1, Ordering::Relaxed));
            let (cert_path, key_path) = cert.write(self.process.dir(), &stem)?;
            command
                .arg(format!("--cert={}", cert_path.display()))
                .arg(format!("--key={}", key_path.display()));
        }
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("running etcdctl")
    }

    /// Stops etcd (SIGTERM, then SIGKILL after 5 s) and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        self.process
            .stop(Signal::TERM, Duration::from_secs(5))
            .await?;
        Ok(())
    }

    /// The client address (127.0.0.1 and a free port).
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// `https://127.0.0.1:PORT`.
    pub fn client_url(&self) -> String {
        format!("https://{}", self.client_addr)
    }

    /// A client certificate etcd accepts (issued by `client_ca` at start).
    pub fn probe_client(&self) -> &Issued {
        &self.probe
    }

    /// The etcd process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The temporary directory holding data, certificates and the log.
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// etcd's log (stderr, zap JSON lines).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }
}
