//! The fixture Kubernetes API as a real process (`apiway standin
//! --kubernetes-api`), a kubeconfig for it, and `kubectl` against it: what
//! tests of the Kubernetes modes drive, the way a user would on a laptop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_standin::pki::{Ca, Issued};
use tokio::io::AsyncWriteExt;

use super::{require_binary, StandinProcess};

/// How long one kubectl command may take.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `apiway standin --kubernetes-api` (killed on drop) and a
/// kubeconfig that reaches it.
pub struct KubeApiProcess {
    standin: StandinProcess,
    apiway: PathBuf,
    cert: Issued,
    extra_args: Vec<String>,
    kubeconfig: PathBuf,
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for KubeApiProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApiProcess")
            .field("addr", &self.standin.addr())
            .finish_non_exhaustive()
    }
}

impl KubeApiProcess {
    /// Starts one on a free loopback port, every request let in.
    pub async fn start(apiway: &Path) -> Result<KubeApiProcess> {
        KubeApiProcess::start_with(apiway, &[], None).await
    }

    /// Starts one with more `apiway standin` flags (`--token-file F`), its
    /// kubeconfig carrying `token` when given.
    pub async fn start_with(
        apiway: &Path,
        extra_args: &[&str],
        token: Option<&str>,
    ) -> Result<KubeApiProcess> {
        require_binary("kubectl")?;
        let dir = tempfile::Builder::new()
            .prefix("apiway-kube-api-")
            .tempdir()
            .context("creating a temporary directory")?;
        let ca = Ca::new("fixture Kubernetes API CA")?;
        let cert = ca.issue_server(
            &["localhost", "kubernetes.default"],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )?;
        let extra_args: Vec<String> = std::iter::once("--kubernetes-api".to_owned())
            .chain(extra_args.iter().map(|a| a.to_string()))
            .collect();
        let standin = start_standin(
            apiway,
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            &cert,
            &extra_args,
        )
        .await?;
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, ca.cert_pem())?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_text(standin.addr(), &ca_file, token.unwrap_or("fixture")),
        )?;
        Ok(KubeApiProcess {
            standin,
            apiway: apiway.to_owned(),
            cert,
            extra_args,
            kubeconfig,
            ca_file,
            _dir: dir,
        })
    }

    /// The kubeconfig that reaches it.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The CA file its serving certificate chains to.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.standin.addr()
    }

    /// SIGKILL: the API is gone (and with it every object).
    pub fn kill(&mut self) {
        self.standin.kill();
    }

    /// Starts it again at the same address, empty.
    pub async fn restart(&mut self) -> Result<()> {
        self.standin.kill();
        self.standin = start_standin(
            &self.apiway,
            self.standin.addr(),
            &self.cert,
            &self.extra_args,
        )
        .await?;
        Ok(())
    }

    /// Runs `kubectl ARGS` against it; the error carries kubectl's stderr.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.kubectl_with_input(args, None).await
    }

    /// `kubectl ARGS` with `input` on its standard input (`apply -f -`).
    pub async fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String> {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("running kubectl")?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await?;
        }
        let output = tokio::time::timeout(KUBECTL_TIMEOUT, child.wait_with_output())
            .await
            .with_context(|| {
                format!("kubectl {args:?} did not exit within {KUBECTL_TIMEOUT:?}")
            })??;
        if !output.status.success() {
            bail!(
                "kubectl {args:?}: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `kubectl apply --validate=false -f -` of `manifest` (the fixture
    /// serves no OpenAPI documents for client-side validation).
    pub async fn apply(&self, manifest: &str) -> Result<String> {
        self.kubectl_with_input(&["apply", "--validate=false", "-f", "-"], Some(manifest))
            .await
    }
}

async fn start_standin(
    apiway: &Path,
    listen: SocketAddr,
    cert: &Issued,
    extra_args: &[String],
) -> Result<StandinProcess> {
    let args: Vec<&str> = extra_args.iter().map(String::as_str).collect();
    StandinProcess::start_with_args(apiway, "kubernetes-api", listen, cert, None, &args, None).await
}

/// A kubeconfig for the API at `addr` with bearer `token`.
pub fn kubeconfig_text(addr: SocketAddr, ca_file: &Path, token: &str) -> String {
    kubeconfig_text_for(&addr.to_string(), ca_file, token)
}

/// A kubeconfig for the API at `server` (`host:port`) with bearer `token`.
pub fn kubeconfig_text_for(server: &str, ca_file: &Path, token: &str) -> String {
    let addr = server;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\nusers:\n- name: fixture\n  user:\n    token: {token}\ncontexts:\n- name: fixture\n  context: {{cluster: fixture, user: fixture}}\ncurrent-context: fixture\n",
        ca = ca_file.display()
    )
}
