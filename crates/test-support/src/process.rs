//! The one launcher for child processes in tests and benchmarks: apiway
//! roles and real peers (HAProxy, nginx, etcd) alike.
//!
//! [`Launcher`] starts a command as the leader of a new process group, with
//! stdout and stderr appended to a log file in the process's own temporary
//! directory, and a watchdog that SIGKILLs the group if this process dies
//! without running destructors (SIGKILL, Ctrl-C, abort) or once a deadline
//! passes. [`ChildProcess`] is the running process: it waits for ports or for
//! the ready file (`--ready-file`, [`ReadyReport`]), quotes its log in every
//! error, and on drop kills the whole group and then removes the directory.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
pub use apiway_core::ready::ReadyReport;
use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::peers::{holds_listening_socket, process_tree};

/// How much of a log an error message quotes.
const LOG_TAIL: usize = 4000;

/// The watchdog's deadline unless [`Launcher::deadline`] says otherwise:
/// longer than any test, short enough that a forgotten process goes away.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// The name of the ready file inside the process's directory.
const READY_FILE: &str = "ready.json";

/// A command to run as a [`ChildProcess`].
pub struct Launcher {
    command: Command,
    dir: Option<TempDir>,
    log_name: String,
    deadline: Option<Duration>,
    ready_file: bool,
    echo_log: bool,
}

/// A `Command` for `program`, run inside network namespace `netns` (through
/// `ip netns exec`) when one is given.
pub fn command_in(netns: Option<&str>, program: impl AsRef<OsStr>) -> Command {
    match netns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

impl Launcher {
    /// Launches `command` (arguments, environment and working directory as
    /// set on it; stdin, stdout, stderr and the process group are the
    /// launcher's). `NODE_NAME` is taken out of the environment (a CI
    /// runner in a pod may have it), so a role is node-aware only when a
    /// test says `--node-name`.
    pub fn new(mut command: Command) -> Launcher {
        command.env_remove("NODE_NAME");
        Launcher {
            command,
            dir: None,
            log_name: "output.log".to_owned(),
            deadline: Some(DEFAULT_DEADLINE),
            ready_file: false,
            echo_log: false,
        }
    }

    /// Uses `dir` (where the caller may already have written config files)
    /// as the process's directory; otherwise a fresh one is made.
    pub fn dir(mut self, dir: TempDir) -> Launcher {
        self.dir = Some(dir);
        self
    }

    /// The log file's name inside the directory (`output.log` by default).
    pub fn log_name(mut self, name: &str) -> Launcher {
        self.log_name = name.to_owned();
        self
    }

    /// After `deadline` the watchdog kills the process group; `None` lets it
    /// run until dropped (benchmarks). [`DEFAULT_DEADLINE`] by default.
    pub fn deadline(mut self, deadline: Option<Duration>) -> Launcher {
        self.deadline = deadline;
        self
    }

    /// Appends `--ready-file DIR/ready.json` to the command (apiway's
    /// `gateway`, `agent` and `standin` take it), for
    /// [`ChildProcess::wait_for_ready_file`].
    pub fn ready_file(mut self) -> Launcher {
        self.ready_file = true;
        self
    }

    /// Prints the log to stderr when the process is dropped: test output is
    /// shown only for failing tests, and the log then helps.
    pub fn echo_log_on_drop(mut self) -> Launcher {
        self.echo_log = true;
        self
    }

    /// Starts the process.
    pub fn spawn(mut self) -> Result<ChildProcess> {
        let program = self.command.get_program().to_string_lossy().into_owned();
        let dir = match self.dir.take() {
            Some(dir) => dir,
            None => tempfile::Builder::new()
                .prefix("apiway-process-")
                .tempdir()
                .context("creating a temporary directory")?,
        };
        let log = dir.path().join(&self.log_name);
        let ready_file = self.ready_file.then(|| dir.path().join(READY_FILE));
        if let Some(path) = &ready_file {
            self.command.arg("--ready-file").arg(path);
        }
        // Append: the program may write the same file itself (nginx -e).
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = self
            .command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let watchdog = spawn_watchdog(child.id(), self.deadline);
        Ok(ChildProcess {
            program,
            child,
            watchdog,
            log,
            ready_file,
            echo_log: self.echo_log,
            dir,
        })
    }
}

/// A running child process in its own process group; the group is killed
/// on drop.
pub struct ChildProcess {
    program: String,
    child: Child,
    watchdog: Option<Child>,
    log: PathBuf,
    ready_file: Option<PathBuf>,
    echo_log: bool,
    // Declared last so it is removed after the process is killed.
    dir: TempDir,
}

impl ChildProcess {
    /// The process id (the process group id too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file stdout and stderr go to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every log line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log_text().lines().map(str::to_owned).collect()
    }

    /// The end of the log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Fails (quoting the log) if the process has already exited.
    pub fn ensure_running(&mut self) -> Result<()> {
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
    pub async fn wait_for_ports(&mut self, addrs: &[SocketAddr], timeout: Duration) -> Result<()> {
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

    /// The ready file as it is now (a role rewrites it when listeners come
    /// or go on a reload).
    pub fn current_report(&self) -> Result<ReadyReport> {
        let path = self
            .ready_file
            .clone()
            .ok_or_else(|| anyhow!("{} was launched without --ready-file", self.program))?;
        Ok(ReadyReport::read(&path)?)
    }

    /// Waits until the process has written its ready file (see
    /// [`Launcher::ready_file`]) and returns the report, failing early (with
    /// the log) if the process exits, or after `timeout`.
    pub async fn wait_for_ready_file(&mut self, timeout: Duration) -> Result<ReadyReport> {
        let path = self
            .ready_file
            .clone()
            .ok_or_else(|| anyhow!("{} was launched without --ready-file", self.program))?;
        let deadline = Instant::now() + timeout;
        loop {
            // The file appears whole (it is renamed into place).
            if let Ok(report) = ReadyReport::read(&path) {
                return Ok(report);
            }
            self.ensure_running()?;
            if Instant::now() >= deadline {
                bail!(
                    "{} wrote no ready file within {timeout:?}; log {}:\n{}",
                    self.program,
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the log as a whole satisfies `pred`; for what a user
    /// reads in the log, not for addresses (those are in the ready file).
    pub async fn wait_for_log(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[String]) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.log_lines()) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                // The log is complete now; look once more.
                if pred(&self.log_lines()) {
                    return Ok(());
                }
                bail!(
                    "{} exited ({status}) before {what}; log:\n{}",
                    self.program,
                    self.log_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!("no {what} within {timeout:?}; log:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for one log line matching `pred` and returns it.
    pub async fn wait_for_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        self.wait_for_log(what, timeout, |lines| lines.iter().any(|l| pred(l)))
            .await?;
        self.log_lines()
            .into_iter()
            .find(|l| pred(l))
            .ok_or_else(|| anyhow!("{what} vanished"))
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not exit within {timeout:?}; log:\n{}",
                    self.program,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// After a reload signal: waits until a worker not in `old_workers` runs
    /// and every old worker has exited or closed its listening sockets (so
    /// new connections reach the new configuration).
    pub async fn wait_for_handover(
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
    pub fn signal(&self, signal: Signal) -> Result<()> {
        kill_process(self.raw_pid()?, signal)
            .with_context(|| format!("signalling {} ({})", self.program, self.pid()))
    }

    /// Asks the process to stop with `signal`, waits up to `grace` for it to
    /// exit, then kills the group.
    pub async fn stop(&mut self, signal: Signal, grace: Duration) -> Result<ExitStatus> {
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
    pub fn kill_group(&mut self) {
        if let Ok(pid) = self.raw_pid() {
            // ESRCH just means everything is gone already.
            let _ = kill_process_group(pid, Signal::KILL);
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Retire the watchdog (and its deadline timer, in its group) before
        // the group id could be reused.
        if let Some(mut watchdog) = self.watchdog.take() {
            if let Some(pid) = i32::try_from(watchdog.id()).ok().and_then(Pid::from_raw) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
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

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill_group();
        if self.echo_log {
            eprintln!("--- {} log ---\n{}", self.program, self.log_text());
        }
    }
}

/// Starts `sh` in its own process group (so a terminal Ctrl-C does not
/// reach it) reading a pipe whose write end only this process holds; when we
/// die the pipe closes and it SIGKILLs the child's process group. With a
/// deadline, a timer in the watchdog's group does the same when it passes.
/// Without it, an interrupted test run would leave daemons holding ports.
fn spawn_watchdog(pgid: u32, deadline: Option<Duration>) -> Option<Child> {
    let seconds = deadline.map_or(0, |d| d.as_secs().max(1));
    Command::new("sh")
        .arg("-c")
        .arg(
            "if [ \"$2\" -gt 0 ]; then (sleep \"$2\"; kill -9 -\"$1\" 2>/dev/null) & fi; \
             read _ignored; kill -9 -\"$1\" 2>/dev/null",
        )
        .arg("apiway-process-watchdog")
        .arg(pgid.to_string())
        .arg(seconds.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| tracing::debug!("no watchdog for process group {pgid}: {e}"))
        .ok()
}

/// The last few thousand characters of the file at `path`.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text
        .char_indices()
        .rev()
        .nth(LOG_TAIL)
        .map_or(0, |(i, _)| i);
    text[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn captures_output_and_kills_the_group_on_drop() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo started; sleep 30 & echo child $!; wait"]);
        let mut child = Launcher::new(command).spawn().expect("spawn");
        let line = child
            .wait_for_line("the child's pid", Duration::from_secs(5), |l| {
                l.starts_with("child ")
            })
            .await
            .expect("line");
        let grandchild: i32 = line["child ".len()..].trim().parse().expect("pid");
        assert!(child.log_text().starts_with("started"));
        let dir = child.dir().to_path_buf();
        drop(child);
        assert!(!dir.exists());
        let pid = Pid::from_raw(grandchild).expect("pid");
        // The grandchild was in the group: it is gone (or a zombie of init)
        // once the SIGKILL is delivered, which takes a moment.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!alive(), "{pid:?} survived");
    }

    #[tokio::test]
    async fn the_deadline_kills_the_process() {
        let mut command = Command::new("sleep");
        command.arg("30");
        let mut child = Launcher::new(command)
            .deadline(Some(Duration::from_secs(1)))
            .spawn()
            .expect("spawn");
        let status = child
            .wait_exit(Duration::from_secs(10))
            .await
            .expect("exit");
        assert!(!status.success());
    }

    #[tokio::test]
    async fn reads_the_ready_file() {
        let mut command = Command::new("sh");
        // The last argument is the ready file's path.
        command.args([
            "-c",
            r#"for p; do f=$p; done; printf '{"pid":1,"admin":null,"listeners":{"a":"127.0.0.1:1"}}' > "$f.tmp"; mv "$f.tmp" "$f"; sleep 30"#,
            "sh",
        ]);
        let mut child = Launcher::new(command).ready_file().spawn().expect("spawn");
        let report = child
            .wait_for_ready_file(Duration::from_secs(5))
            .await
            .expect("ready");
        assert_eq!(
            report.listener("a"),
            Some(SocketAddr::from(([127, 0, 0, 1], 1)))
        );
    }

    #[tokio::test]
    async fn an_early_exit_quotes_the_log() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo no such config >&2; exit 3"]);
        let mut child = Launcher::new(command).ready_file().spawn().expect("spawn");
        let err = child
            .wait_for_ready_file(Duration::from_secs(5))
            .await
            .expect_err("exited");
        assert!(format!("{err:#}").contains("no such config"), "{err:#}");
    }
}
