//! `apiway gateway --check`, and a bad config at start: exit codes and one
//! clear line naming the problem.

use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::process::Command;

use crate::support::process::APIWAY;

const GOOD: &str = r#"
admin: {address: 127.0.0.1:0}
listeners: [{name: public, address: 127.0.0.1:0, kind: tls}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com, "*.a.internal.example.com"]
    backends: [{address: 127.0.0.1:7001}, {address: "localhost:7002"}]
    health_check: {kind: https, path: /readyz, interval: 1s}
default_route: reject
"#;

async fn gateway(config_text: &str, check: bool) -> Result<Output> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, config_text)?;
    let mut command = Command::new(APIWAY);
    command
        .arg("gateway")
        .arg("--config")
        .arg(&path)
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    if check {
        command.arg("--check");
    }
    tokio::time::timeout(Duration::from_secs(10), command.output())
        .await
        .context("apiway gateway did not exit")?
        .context("running apiway gateway")
}

/// The non-empty lines of stderr.
fn stderr_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Bad files and the text their one error line must contain.
fn bad_files() -> Vec<(String, &'static str)> {
    vec![
        (
            GOOD.replace(
                "default_route: reject",
                "default_route: reject\nmax_routes: 0",
            ),
            "too many routes: 1, more than max_routes (0)",
        ),
        (
            GOOD.replace("kind: tls}", "kind: tls, max_connections: 0}"),
            "listeners[0] (public).max_connections must be at least 1",
        ),
        (
            GOOD.replace("default_route: reject", "default_route: cluster-x"),
            "default_route: no route is named `cluster-x`",
        ),
        (
            GOOD.replace("127.0.0.1:7001", "127.0.0.1"),
            "routes[0] (cluster-a).backends[0].address",
        ),
        (
            GOOD.replace("interval: 1s", "interval: 1 fortnight"),
            "fortnight",
        ),
        (GOOD.replace("hostnames:", "hostname:"), "hostname"),
        (
            GOOD.replace("api.a.example.com,", "'api.*.example.com',"),
            "routes[0] (cluster-a).hostnames[0]",
        ),
    ]
}

#[tokio::test]
async fn check_accepts_a_good_file_and_names_the_problem_in_a_bad_one() -> Result<()> {
    let ok = gateway(GOOD, true).await?;
    ensure!(ok.status.success(), "{ok:?}");
    ensure!(
        String::from_utf8_lossy(&ok.stdout).contains("valid"),
        "{ok:?}"
    );

    for (text, problem) in bad_files() {
        let out = gateway(&text, true).await?;
        let lines = stderr_lines(&out);
        ensure!(
            !out.status.success(),
            "--check accepted a file with {problem}"
        );
        // A value that does not validate is one line; a file the parser
        // refuses gets the parser's report after it, with the lines around
        // the place, named by the file's path.
        ensure!(
            lines[0].contains(problem) && lines[0].contains("gateway.yaml"),
            "want a first line naming {problem:?} and the file, got {lines:#?}"
        );
        ensure!(
            lines.len() == 1 || lines[1..].iter().any(|l| l.contains("gateway.yaml:")),
            "a multi-line report that does not point into the file: {lines:#?}"
        );
    }

    let mut missing = Command::new(APIWAY);
    missing.args([
        "gateway",
        "--check",
        "--config",
        "/nonexistent/gateway.yaml",
    ]);
    let out = missing.output().await?;
    let lines = stderr_lines(&out);
    ensure!(!out.status.success());
    ensure!(
        lines.len() == 1 && lines[0].contains("/nonexistent/gateway.yaml"),
        "{lines:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn bad_config_at_start_exits_non_zero_naming_the_field() -> Result<()> {
    for (text, problem) in bad_files().into_iter().take(3) {
        let out = gateway(&text, false).await?;
        let lines = stderr_lines(&out);
        ensure!(!out.status.success(), "started with {problem}");
        ensure!(
            lines.iter().filter(|l| l.contains(problem)).count() == 1,
            "want a line naming {problem:?}, got {lines:#?}"
        );
    }

    // A listener address taken by another process.
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?;
    let text = GOOD.replace(
        "address: 127.0.0.1:0, kind: tls",
        &format!("address: {addr}, kind: tls"),
    );
    let out = gateway(&text, false).await?;
    let lines = stderr_lines(&out);
    ensure!(!out.status.success(), "started on a taken address");
    ensure!(
        lines
            .iter()
            .any(|l| l.contains(&addr.to_string()) && l.contains("another process")),
        "want a line naming {addr}, got {lines:#?}"
    );
    Ok(())
}
