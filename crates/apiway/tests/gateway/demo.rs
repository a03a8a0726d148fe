//! `apiway demo` runs its whole topology and narrates it.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::process::Command;

use crate::support::process::APIWAY;

#[tokio::test]
async fn demo_shows_both_clusters_answering_and_the_ejection() -> Result<()> {
    let mut command = Command::new(APIWAY);
    command.arg("demo").env("NO_COLOR", "1").kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .context("apiway demo did not finish")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "exit {}:\n{stdout}\n{stderr}",
        out.status
    );

    let (before, after) = stdout
        .split_once("3. stopping")
        .with_context(|| format!("no ejection step:\n{stdout}"))?;
    for answered in [
        "-> cluster-a/apiserver-1 answered 200",
        "-> cluster-a/apiserver-2 answered 200",
        "-> cluster-b/apiserver-1 answered 200",
    ] {
        ensure!(before.contains(answered), "missing {answered:?}:\n{stdout}");
    }
    ensure!(
        before.contains("CN=demo-admin"),
        "cluster B did not see the client certificate:\n{stdout}"
    );
    ensure!(before.contains("api.unknown.example.com") && before.contains("refused"));
    ensure!(
        before.contains("#1 pod -> 127.0.0.2:")
            && before.contains("-> agent -> gateway -> cluster-a/apiserver-")
            && before.contains("#2 pod -> 127.0.0.3:")
            && before.contains("-> agent -> gateway -> cluster-b/apiserver-1 answered 200"),
        "the in-cluster path did not reach each cluster by its ClusterIP:\n{stdout}"
    );
    ensure!(after.contains("ejected it after"), "no ejection:\n{stdout}");
    ensure!(
        after.contains("-> cluster-a/apiserver-2 answered 200")
            && !after.contains("-> cluster-a/apiserver-1 answered")
            && !after.contains("-> failed"),
        "traffic after the ejection:\n{after}"
    );
    ensure!(
        after.contains("apiway_backend_healthy"),
        "no metrics shown:\n{after}"
    );
    ensure!(stdout.contains("demo finished"));
    Ok(())
}

/// `apiway demo --keep-running --dir D` stays up with a kubeconfig that
/// kubectl uses as it is (both clusters through one gateway port, by SNI),
/// and stops on SIGINT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_keeps_running_for_kubectl_until_interrupted() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut command = std::process::Command::new(APIWAY);
    command
        .args(["demo", "--keep-running", "--dir"])
        .arg(dir.path())
        .env("NO_COLOR", "1");
    let mut process = apiway_test_support::process::Launcher::new(command).spawn()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let started = std::time::Instant::now();
    while !kubeconfig.exists() {
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "no kubeconfig after 30 s: {}",
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for context in ["cluster-a", "cluster-b"] {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--context", context, "version", "-o", "json"])
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && text.contains("apiway-standin"),
            "kubectl --context {context} version: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    process.signal(rustix::process::Signal::INT)?;
    let status = process.wait_exit(Duration::from_secs(10)).await?;
    ensure!(status.success(), "exit {status}: {}", process.log_text());
    Ok(())
}
