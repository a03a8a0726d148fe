//! `--config` with hot reload, flags on top of the file, a rejected reload
//! that keeps the running config, and the drain on SIGTERM.

use std::time::Duration;

use anyhow::{ensure, Result};
use rustix::process::Signal;

use crate::agent_support::{answered_by, AgentProcess, API_NAMES};
use crate::support::Pki;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_list_reloads_and_a_bad_file_is_refused() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("a", API_NAMES, false).await?;
    let b = pki.standin("b", API_NAMES, false).await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agent.yaml");
    let write = |text: String| -> Result<()> {
        // Renamed over the old file, as Kubernetes updates a ConfigMap.
        let next = dir.path().join("agent.yaml.next");
        std::fs::write(&next, text)?;
        std::fs::rename(&next, &config)?;
        Ok(())
    };
    write(format!(
        "endpoints: ['{}']\nreload_interval: 100ms\nhealth_check: {{kind: tcp, interval: 100ms}}\n",
        a.addr()
    ))?;
    let config_arg = config.to_string_lossy().into_owned();
    // --listen and --admin come from flags, the endpoints from the file.
    let mut agent = AgentProcess::start(
        None,
        &[
            "--config",
            &config_arg,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    ensure!(answered_by(None, agent.addr(), &pki).await? == "a");

    write(format!(
        "endpoints: ['{}']\nreload_interval: 100ms\nhealth_check: {{kind: tcp, interval: 100ms}}\n",
        b.addr()
    ))?;
    agent
        .wait_metric(
            "apiway_config_reloads_total",
            &[("result", "success")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;
    for _ in 0..3 {
        ensure!(answered_by(None, agent.addr(), &pki).await? == "b");
    }

    // A typo and a field that needs a restart: both refused, b still serves.
    write("endpoints: ['127.0.0.1:1']\nbogus: 1\n".to_string())?;
    agent
        .wait_metric(
            "apiway_config_reloads_total",
            &[("result", "error")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;
    write(format!(
        "gateways: ['{}']\nupstream: proxy\nreload_interval: 100ms\n",
        a.addr()
    ))?;
    agent
        .wait_for_line("the rejected mode change", Duration::from_secs(5), |l| {
            l.contains("config reload rejected") && l.contains("`upstream` cannot change")
        })
        .await?;
    ensure!(answered_by(None, agent.addr(), &pki).await? == "b");

    // SIGTERM: /healthz fails at once while the listener still accepts
    // during the drain delay (5 s by default).
    agent.signal(Signal::TERM)?;
    crate::support::eventually("/healthz 503", Duration::from_secs(3), || async {
        match agent.admin_get("/healthz").await {
            Ok((503, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    ensure!(answered_by(None, agent.addr(), &pki).await? == "b");
    agent.signal(Signal::TERM)?;
    ensure!(agent.wait_exit(Duration::from_secs(10)).await?.success());
    Ok(())
}
