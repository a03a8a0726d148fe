//! `apiway agent --check`: the file and the flags are validated together
//! (one schema, flags over the file), exit 0 when valid, 1 with one line
//! naming the problem when not.

use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::process::Command;

use crate::support::process::APIWAY;

async fn check(file: Option<&str>, flags: &[&str]) -> Result<Output> {
    let dir = tempfile::tempdir()?;
    let mut command = Command::new(APIWAY);
    command.arg("agent").arg("--check").args(flags);
    if let Some(text) = file {
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, text)?;
        command.arg("--config").arg(&path);
    }
    command.env("NO_COLOR", "1").kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(10), command.output())
        .await
        .context("apiway agent --check did not exit")?
        .context("running apiway agent --check")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn check_validates_the_file_and_the_flags_together() -> Result<()> {
    // Flags alone.
    let ok = check(
        None,
        &["--listen", "127.0.0.1:1", "--endpoint", "127.0.0.1:2"],
    )
    .await?;
    ensure!(ok.status.code() == Some(0), "{}", text(&ok));
    ensure!(text(&ok).contains("valid"), "{}", text(&ok));

    // The file lacks what the flags give: together they are valid; the
    // file's shared sections have the gateway's shape.
    let file = "listen: ['127.0.0.1:1']\nadmin: {address: 127.0.0.1:0}\ndrain: {delay: 1s}\nhealth_check: {kind: tcp, fall: 2}\n";
    let ok = check(Some(file), &["--endpoint", "127.0.0.1:2"]).await?;
    ensure!(ok.status.code() == Some(0), "{}", text(&ok));
    let alone = check(Some(file), &[]).await?;
    ensure!(alone.status.code() == Some(1), "{}", text(&alone));
    ensure!(
        text(&alone).contains("--upstream direct needs at least one --endpoint"),
        "{}",
        text(&alone)
    );

    // A bad value in the file names the file and the field, once.
    let bad = check(
        Some("listen: ['127.0.0.1:1']\nendpoints: ['nohost']\n"),
        &[],
    )
    .await?;
    ensure!(bad.status.code() == Some(1), "{}", text(&bad));
    let out = text(&bad);
    ensure!(
        out.contains("agent.yaml") && out.contains("`nohost` has no port"),
        "{out}"
    );
    ensure!(out.trim().lines().count() == 1, "one line: {out}");

    // The old string shape of `admin` is an error, not silently ignored.
    let old = check(
        Some("listen: ['127.0.0.1:1']\nendpoints: ['127.0.0.1:2']\nadmin: 127.0.0.1:9\n"),
        &[],
    )
    .await?;
    ensure!(old.status.code() == Some(1), "{}", text(&old));
    Ok(())
}
