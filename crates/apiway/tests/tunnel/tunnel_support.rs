//! Certificates for a tunnel, the tunnel server and agent processes, and
//! small destinations (echo, echo-after-EOF, reset).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use apiway_standin::pki::Ca;
use apiway_test_support::process::{command_in, ChildProcess};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::metrics::Metrics;
use crate::support::process::{launch_in, APIWAY, START_TIMEOUT};
use crate::support::LOCALHOST;

/// One CA for the tunnel: the server's certificate and the agents'.
pub struct TunnelPki {
    pub ca: Ca,
    pub ca_pem: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    dir: TempDir,
}

impl TunnelPki {
    pub fn new() -> Result<TunnelPki> {
        let dir = tempfile::Builder::new()
            .prefix("apiway-tunnel-pki-")
            .tempdir()?;
        let ca = Ca::new("tunnel test CA")?;
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.cert_pem())?;
        let server = ca.issue_server(&["localhost", "tunnel.internal"], &[LOCALHOST])?;
        let (server_cert, server_key) = server.write(dir.path(), "server")?;
        Ok(TunnelPki {
            ca,
            ca_pem,
            server_cert,
            server_key,
            dir,
        })
    }

    /// An agent certificate with subject CN `name`: (cert, key).
    pub fn agent(&self, name: &str) -> Result<(PathBuf, PathBuf)> {
        self.ca
            .issue_client(name, &[])?
            .write(self.dir.path(), name)
    }

    /// An agent certificate that expired in 2021.
    pub fn expired_agent(&self, name: &str) -> Result<(PathBuf, PathBuf)> {
        self.ca
            .issue_expired_client(name)?
            .write(self.dir.path(), &format!("{name}-expired"))
    }

    /// A file in the PKI directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A running `apiway ROLE ARGS` with its ready report.
pub struct Role {
    pub process: ChildProcess,
    pub admin: SocketAddr,
    pub listeners: Vec<(String, SocketAddr)>,
}

impl Role {
    /// Starts `apiway ROLE ARGS --admin 127.0.0.1:0` and waits for its ready
    /// file.
    pub async fn start(role: &str, args: &[String]) -> Result<Role> {
        Role::start_in(None, role, args).await
    }

    /// [`start`](Self::start) inside the network namespace `netns`.
    pub async fn start_in(netns: Option<&str>, role: &str, args: &[String]) -> Result<Role> {
        let mut command = command_in(netns, APIWAY);
        command
            .arg(role)
            .args(args)
            .args(["--admin", "127.0.0.1:0"]);
        let dir = tempfile::Builder::new()
            .prefix("apiway-tunnel-test-")
            .tempdir()?;
        let mut process = launch_in(command, dir)?;
        let report = process.wait_for_ready_file(START_TIMEOUT).await?;
        Ok(Role {
            process,
            admin: report.admin.context("no admin address in the ready file")?,
            listeners: report.listeners.into_iter().collect(),
        })
    }

    /// The listener whose name contains `part`.
    pub fn listener(&self, part: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(n, _)| n.contains(part))
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no listener named like {part}: {:?}", self.listeners))
    }

    pub async fn metrics(&self) -> Result<Metrics> {
        let (status, body) = crate::support::http_get_plain(self.admin, "/metrics").await?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        Ok(Metrics::new(body))
    }

    /// Waits until `name{labels}` satisfies `pred`; returns the value.
    pub async fn wait_metric(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        timeout: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> Result<f64> {
        crate::support::eventually(&format!("{name}{labels:?}"), timeout, || async {
            let m = self.metrics().await.map_err(|e| e.to_string())?;
            let v = m.count(name, labels);
            if pred(v) {
                Ok(v)
            } else {
                Err(format!("{v}"))
            }
        })
        .await
    }
}

impl Role {
    /// Waits until the agent has `up` connections to each of `servers`.
    pub async fn wait_tunnels(&self, servers: &[SocketAddr], up: f64) -> Result<()> {
        for server in servers {
            self.wait_metric(
                "apiway_tunnel_connections",
                &[("peer", &server.to_string())],
                Duration::from_secs(5),
                |v| v == up,
            )
            .await?;
        }
        Ok(())
    }
}

/// Owned command-line arguments.
pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `apiway tunnel-server` with the PKI's certificate and client CA, on a
/// free port, plus `extra`.
pub async fn tunnel_server(pki: &TunnelPki, extra: &[String]) -> Result<Role> {
    let mut args: Vec<String> = vec![
        "--cert".into(),
        pki.server_cert.display().to_string(),
        "--key".into(),
        pki.server_key.display().to_string(),
        "--client-ca".into(),
        pki.ca_pem.display().to_string(),
    ];
    if !extra.iter().any(|a| a == "--drain-delay") {
        args.extend(["--drain-delay".to_owned(), "0s".to_owned()]);
    }
    if !extra.iter().any(|a| a == "--listen") {
        args.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    }
    args.extend(extra.iter().cloned());
    Role::start("tunnel-server", &args).await
}

/// `apiway agent --upstream tunnel` through `servers` as agent `name`, with
/// one listener on a free port per destination in `targets`.
pub async fn tunnel_agent(
    pki: &TunnelPki,
    name: &str,
    servers: &[SocketAddr],
    targets: &[String],
    extra: &[String],
) -> Result<Role> {
    let (cert, key) = pki.agent(name)?;
    tunnel_agent_with(pki, (cert, key), servers, targets, extra).await
}

/// [`tunnel_agent`] with a given certificate and key.
pub async fn tunnel_agent_with(
    pki: &TunnelPki,
    (cert, key): (PathBuf, PathBuf),
    servers: &[SocketAddr],
    targets: &[String],
    extra: &[String],
) -> Result<Role> {
    let mut args: Vec<String> = vec![
        "--upstream".into(),
        "tunnel".into(),
        "--tunnel-ca".into(),
        pki.ca_pem.display().to_string(),
        "--tunnel-cert".into(),
        cert.display().to_string(),
        "--tunnel-key".into(),
        key.display().to_string(),
        "--drain-delay".into(),
        "0s".into(),
    ];
    for s in servers {
        args.push("--tunnel-server".into());
        args.push(s.to_string());
    }
    for t in targets {
        args.push("--target".into());
        args.push(format!("0:{t}"));
    }
    args.extend(extra.iter().cloned());
    Role::start("agent", &args).await
}

/// A TCP destination: echoes what it reads (`Echo`), reads to EOF and then
/// answers with what it read (`AfterEof`), or resets every connection
/// after its first read (`Reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Echo,
    AfterEof,
    Reset,
}

pub struct Destination {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Destination {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Destination {
    pub async fn start(behaviour: Behaviour) -> Result<Destination> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    match behaviour {
                        Behaviour::Echo => loop {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if s.write_all(&buf[..n]).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        },
                        Behaviour::AfterEof => {
                            let mut all = Vec::new();
                            if s.read_to_end(&mut all).await.is_ok() {
                                let _ = s.write_all(b"got: ").await;
                                let _ = s.write_all(&all).await;
                            }
                        }
                        Behaviour::Reset => {
                            let _ = s.read(&mut buf).await;
                            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                            drop(s);
                        }
                    }
                });
            }
        });
        Ok(Destination { addr, task })
    }
}
