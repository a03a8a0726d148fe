//! What a process supervisor sees: the open-file limit raised at start
//! (with a one-line warning when the connection limits need more), and
//! logs without colour codes when stderr is not a terminal.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::process::{Launcher, ReadyReport};

use crate::support::process::APIWAY;

/// `(soft, hard)` of "Max open files" in `/proc/PID/limits`.
fn open_files(pid: u32) -> Result<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .context("no Max open files line")?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    Ok((fields[3].to_owned(), fields[4].to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raises_the_open_file_limit_warns_once_and_logs_without_colour() -> Result<()> {
    // Started the way a supervisor with the classic soft limit would, and
    // with colour not forbidden: only the missing terminal should stop it.
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", "ulimit -Sn 1024 && exec \"$0\" \"$@\""])
        .arg(APIWAY)
        .args([
            "agent",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            "127.0.0.1:9",
            "--max-connections",
            "1000000",
            "--admin",
            "127.0.0.1:0",
        ])
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info");
    let mut process = Launcher::new(command).ready_file().spawn()?;
    let report: ReadyReport = process.wait_for_ready_file(Duration::from_secs(10)).await?;
    let (soft, hard) = open_files(report.pid)?;
    ensure!(
        soft == hard,
        "the soft limit {soft} was not raised to the hard limit {hard}"
    );
    let log = process.log_text();
    ensure!(
        !log.contains('\u{1b}'),
        "colour codes in a log that is not a terminal: {log:?}"
    );
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("RLIMIT_NOFILE"))
        .collect();
    ensure!(
        warnings.len() == 1 && warnings[0].contains("1000000 connections"),
        "one warning naming the limits: {warnings:?}"
    );
    Ok(())
}
