//! A child process in its own process group, with its log in a temporary
//! directory, killed with its whole group on drop.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::procfs::{holds_listening_socket, process_tree};

/// How much of a log an error message quotes.
const LOG_TAIL: usize = 2000;

pub(crate) struct PeerProcess {
    program: String,
    child: Child,
    /// Kills the group if this process dies without running destructors
    /// (SIGKILL, Ctrl-C, abort): it waits for EOF on a pipe only we hold.
    watchdog: Option<Child>,
    log: PathBuf,
    // Declared last so it is removed after the process is killed.
    dir: TempDir,
}

impl PeerProcess {
    /// Starts `command` with stdout and stderr appended to `dir/log_name`,
    /// as the leader of a new process group.
    pub(crate) fn spawn(mut command: Command, dir: TempDir, log_name: &str) -> Result<Self> {
        let program = command.get_program().to_string_lossy().into_owned();
        let log = dir.path().join(log_name);
        // Append: the program may write the same file itself (nginx -e).
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let watchdog = spawn_watchdog(child.id());
        Ok(PeerProcess {
            program,
            child,
            watchdog,
            log,
            dir,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// The end of the log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Fails (quoting the log) if the process has already exited.
    pub(crate) fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited ({status}); log {}:\n{}",
                self.program,
                self.log.display(),
                self.log_tail()
            ),
        }
    }

    /// Waits until every address in `addrs` accepts TCP connections, failing
    /// early (with the log) if the process exits, or after `timeout`.
    pub(crate) async fn wait_for_ports(
        &mut self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut pending: Vec<SocketAddr> = addrs.to_vec();
        loop {
            self.ensure_running()?;
            let mut still = Vec::new();
            for addr in pending {
                let attempt =
                    tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr));
                if !matches!(attempt.await, Ok(Ok(_))) {
                    still.push(addr);
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not listen on {pending:?} within {timeout:?}; log {}:\n{}",
                    self.program,
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// After a reload signal: waits until a worker not in `old_workers` runs
    /// and every old worker has exited or closed its listening sockets (so
    /// new connections reach the new configuration).
    pub(crate) async fn wait_for_handover(
        &mut self,
        old_workers: &[u32],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.ensure_running()?;
            let workers = process_tree(self.pid());
            let workers = workers.get(1..).unwrap_or_default();
            let new_started = workers.iter().any(|pid| !old_workers.contains(pid));
            let old_quiet = old_workers
                .iter()
                .all(|pid| !workers.contains(pid) || !holds_listening_socket(*pid));
            if new_started && old_quiet {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not hand over to new workers within {timeout:?}; log {}:\n{}",
                    self.program,
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` to the process itself (not its group).
    pub(crate) fn signal(&self, signal: Signal) -> Result<()> {
        kill_process(self.raw_pid()?, signal)
            .with_context(|| format!("signalling {} ({})", self.program, self.pid()))
    }

    /// Asks the process to stop with `signal`, waits up to `grace` for it to
    /// exit, then kills the group.
    pub(crate) async fn stop(&mut self, signal: Signal, grace: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        self.signal(signal)?;
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                self.kill_group();
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill_group();
        self.child
            .wait()
            .with_context(|| format!("waiting for {}", self.program))
    }

    /// SIGKILLs the whole process group (children included) and reaps the
    /// leader.
    pub(crate) fn kill_group(&mut self) {
        if let Ok(pid) = self.raw_pid() {
            // ESRCH just means everything is gone already.
            let _ = kill_process_group(pid, Signal::KILL);
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Retire the watchdog before the group id could be reused.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    fn raw_pid(&self) -> Result<Pid> {
        i32::try_from(self.child.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| anyhow!("invalid pid {}", self.child.id()))
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Starts `sh` in its own process group (so a terminal Ctrl-C does not
/// reach it) reading a pipe whose write end only this process holds; when we
/// die the pipe closes and it SIGKILLs the peer's process group. Without it,
/// an interrupted test run would leave daemons holding ports.
fn spawn_watchdog(pgid: u32) -> Option<Child> {
    Command::new("sh")
        .arg("-c")
        .arg("read _ignored; kill -9 -\"$1\" 2>/dev/null")
        .arg("apiway-peer-watchdog")
        .arg(pgid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| tracing::debug!("no watchdog for process group {pgid}: {e}"))
        .ok()
}

pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text
        .char_indices()
        .rev()
        .nth(LOG_TAIL)
        .map_or(0, |(i, _)| i);
    text[start..].to_string()
}
