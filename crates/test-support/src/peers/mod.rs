//! Launchers for real third-party peers, and helpers around them.
//!
//! Each launcher ([`Haproxy`], [`Nginx`], [`Etcd`]) writes its files into its
//! own temporary directory, starts the program in a new process group, waits
//! until it is actually serving, and returns a guard. Dropping the guard kills
//! the whole process group (SIGKILL) and then removes the directory; until
//! then the directory, with the program's log, can be inspected.
//!
//! A missing program is reported with the Debian package that provides it.

mod etcd;
mod haproxy;
mod kube_api;
mod memory;
mod nginx;
mod ports;
mod procfs;
mod standin_process;

pub use etcd::Etcd;
pub use haproxy::Haproxy;
pub use kube_api::{kubeconfig_text, kubeconfig_text_for, KubeApiProcess};
pub use memory::{proc_memory, ProcMemory};
pub use nginx::{Nginx, NGINX_STREAM_MODULE};
pub use ports::{free_port, wait_for_port};
pub(crate) use procfs::holds_listening_socket;
pub use procfs::process_tree;
pub use standin_process::StandinProcess;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

/// Debian packages that provide the programs these tests drive.
const PACKAGES: &[(&str, &str)] = &[
    ("haproxy", "haproxy"),
    ("nginx", "nginx libnginx-mod-stream"),
    ("etcd", "etcd-server"),
    ("etcdctl", "etcd-client"),
    ("curl", "curl"),
    ("openssl", "openssl"),
    ("iperf3", "iperf3"),
];

/// Runs a short-lived command (curl, kubectl, `apiway --help`) with no
/// input and returns its output, or an error if it has not exited within
/// `timeout` (it is killed then).
pub async fn output_within(
    command: &mut tokio::process::Command,
    timeout: Duration,
) -> Result<Output> {
    command.kill_on_drop(true).stdin(Stdio::null());
    tokio::time::timeout(timeout, command.output())
        .await
        .with_context(|| format!("{command:?} did not exit within {timeout:?}"))?
        .with_context(|| format!("running {command:?}"))
}

/// Finds `program` in `PATH` (and the sbin directories, where Debian puts
/// daemons). If it is missing, the error names the Debian package to install.
pub fn require_binary(program: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let sbin = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(sbin)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| missing_binary(program))
}

fn missing_binary(program: &str) -> anyhow::Error {
    match PACKAGES.iter().find(|(name, _)| *name == program) {
        Some((_, package)) => {
            anyhow!("`{program}` is not installed: run `apt-get install {package}`")
        }
        None => anyhow!("`{program}` is not installed (not found in PATH)"),
    }
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_debian_package() {
        let err = missing_binary("etcd").to_string();
        assert!(err.contains("apt-get install etcd-server"), "{err}");
        assert!(require_binary("apiway-no-such-program").is_err());
    }

    #[test]
    fn finds_sh() {
        assert!(require_binary("sh").is_ok());
    }
}
