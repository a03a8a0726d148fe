//! nginx in the foreground with its prefix in a temporary directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::process::Signal;

use super::ports::parse_listen_addr;
use super::{proc_memory, process_tree, require_binary, ProcMemory};
use crate::process::{ChildProcess, Launcher};

/// How long nginx gets to start listening or to reload.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Debian's dynamic stream module. nginx only loads it when told, so a
/// configuration using `stream {}` starts with
/// `load_module /usr/lib/nginx/modules/ngx_stream_module.so;`.
pub const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// A running `nginx -p DIR/ -c DIR/nginx.conf -g 'daemon off; pid ...;'`;
/// master and workers are killed on drop.
///
/// The prefix, `nginx.pid` and `error.log` live in [`dir`](Self::dir). The
/// configuration must not set `daemon` or `pid` itself. The launcher waits
/// for every `listen` address (wildcards probed on 127.0.0.1).
///
/// Debian builds nginx with absolute default paths (`/var/log/nginx/`,
/// `/var/lib/nginx/`), so an `http {}` block should set `access_log` and the
/// `*_temp_path`s into the prefix, or nginx writes outside the temporary
/// directory.
pub struct Nginx {
    process: ChildProcess,
    binary: PathBuf,
    config: PathBuf,
    listen: Vec<SocketAddr>,
}

impl std::fmt::Debug for Nginx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nginx")
            .field("master", &self.master_pid())
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Nginx {
    /// Writes `config_text` into a fresh prefix directory, checks it with
    /// `nginx -t`, starts nginx and waits until every `listen` address
    /// accepts TCP connections.
    pub async fn start(config_text: &str) -> Result<Nginx> {
        let binary = require_binary("nginx")?;
        let dir = tempfile::Builder::new()
            .prefix("apiway-nginx-")
            .tempdir()
            .context("creating a temporary directory for nginx")?;
        // Workers of a root master run as `nobody`; let them into the prefix
        // (for temp files and logs they reopen).
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::create_dir(dir.path().join("logs"))?;
        let config = dir.path().join("nginx.conf");
        std::fs::write(&config, config_text)
            .with_context(|| format!("writing {}", config.display()))?;

        let nginx_args = NginxArgs::new(dir.path(), &config);
        nginx_args.check(&binary).await?;
        let mut command = Command::new(&binary);
        command.args(nginx_args.args());
        let process = Launcher::new(command)
            .dir(dir)
            .log_name("error.log")
            .spawn()?;
        let mut nginx = Nginx {
            process,
            binary,
            config,
            listen: listen_addrs(config_text),
        };
        let listen = nginx.listen.clone();
        nginx.process.wait_for_ports(&listen, START_TIMEOUT).await?;
        Ok(nginx)
    }

    /// Replaces the configuration and reloads (SIGHUP to the master): new
    /// workers start, old ones finish their connections. Returns when a new
    /// worker runs and the new `listen` addresses accept. A config that
    /// `nginx -t` rejects is not installed.
    pub async fn reload(&mut self, config_text: &str) -> Result<()> {
        let candidate = self.process.dir().join("nginx.next.conf");
        std::fs::write(&candidate, config_text)
            .with_context(|| format!("writing {}", candidate.display()))?;
        NginxArgs::new(self.process.dir(), &candidate)
            .check(&self.binary)
            .await?;
        std::fs::rename(&candidate, &self.config)
            .with_context(|| format!("installing {}", self.config.display()))?;

        let old_workers = self.worker_pids();
        self.process.signal(Signal::HUP)?;
        self.process
            .wait_for_handover(&old_workers, START_TIMEOUT)
            .await?;
        self.listen = listen_addrs(config_text);
        let listen = self.listen.clone();
        self.process.wait_for_ports(&listen, START_TIMEOUT).await
    }

    /// Stops nginx (SIGTERM, then SIGKILL after 5 s) and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        self.process
            .stop(Signal::TERM, Duration::from_secs(5))
            .await?;
        Ok(())
    }

    /// The master process id.
    pub fn master_pid(&self) -> u32 {
        self.process.pid()
    }

    /// Worker (and cache manager) process ids.
    pub fn worker_pids(&self) -> Vec<u32> {
        process_tree(self.master_pid())
            .into_iter()
            .skip(1)
            .collect()
    }

    /// Master first, then every other nginx process.
    pub fn pids(&self) -> Vec<u32> {
        process_tree(self.master_pid())
    }

    /// Memory of the master and all workers added up (PSS is the figure
    /// that does not double-count shared pages).
    pub fn memory(&self) -> Result<ProcMemory> {
        self.pids()
            .into_iter()
            .map(proc_memory)
            .try_fold(ProcMemory::default(), |sum, m| Ok(sum + m?))
    }

    /// Addresses from the configuration's `listen` lines.
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listen
    }

    /// The prefix directory (config, pid file, logs).
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// nginx's error log (startup errors and stderr included).
    pub fn error_log_path(&self) -> &Path {
        self.process.log_path()
    }
}

/// The command line shared by `nginx -t` and the real start.
struct NginxArgs {
    prefix: String,
    config: PathBuf,
    error_log: PathBuf,
    globals: String,
}

impl NginxArgs {
    fn new(dir: &Path, config: &Path) -> Self {
        NginxArgs {
            // nginx concatenates the prefix with relative paths as is.
            prefix: format!("{}/", dir.display()),
            config: config.to_path_buf(),
            error_log: dir.join("error.log"),
            globals: format!("daemon off; pid {}/nginx.pid;", dir.display()),
        }
    }

    fn args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "-p".into(),
            self.prefix.clone().into(),
            "-c".into(),
            self.config.clone().into(),
            "-e".into(),
            self.error_log.clone().into(),
            "-g".into(),
            self.globals.clone().into(),
        ]
    }

    async fn check(&self, binary: &Path) -> Result<()> {
        let output = tokio::process::Command::new(binary)
            .arg("-t")
            .arg("-q")
            .args(self.args())
            .output()
            .await
            .context("running nginx -t")?;
        if !output.status.success() {
            bail!(
                "nginx -t rejected the configuration:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

/// Addresses of `listen ADDR [options];` lines.
fn listen_addrs(config: &str) -> Vec<SocketAddr> {
    config
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("listen") => words.next(),
                _ => None,
            }
        })
        .map(|addr| addr.trim_end_matches(';'))
        .filter_map(parse_listen_addr)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_listen_addresses() {
        let config = "stream {\n server {\n  listen 127.0.0.1:2000;\n  listen 2001 proxy_protocol;\n  listen unix:/x;\n }\n}\n";
        let ports: Vec<u16> = listen_addrs(config).iter().map(|a| a.port()).collect();
        assert_eq!(ports, [2000, 2001]);
    }
}
