//! The manifests in deploy/tunnel: the tunnel server's configuration and
//! the agent's flags are what the binary accepts (`--check`), with the
//! certificate paths pointed at test files.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::process::Command;

use crate::support::process::APIWAY;
use crate::support::tools::run;
use crate::tunnel_support::TunnelPki;

fn deploy(file: &str) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/tunnel")
        .join(file);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

async fn check(args: &[String]) -> Result<()> {
    let mut c = Command::new(APIWAY);
    c.args(args).arg("--check");
    let ran = run(c, b"", Duration::from_secs(10)).await?;
    ensure!(
        ran.success && ran.stdout.trim() == "valid",
        "apiway {args:?} --check: {} {}",
        ran.stdout,
        ran.stderr
    );
    Ok(())
}

#[tokio::test]
async fn the_deploy_manifests_hold_a_valid_server_config_and_agent_flags() -> Result<()> {
    let pki = TunnelPki::new()?;
    let (agent_cert, agent_key) = pki.agent("node-1")?;
    let ca = pki.ca_pem.display().to_string();
    let swap = |text: &str| {
        text.replace(
            "/etc/apiway/tls/tls.crt",
            &pki.server_cert.display().to_string(),
        )
        .replace(
            "/etc/apiway/tls/tls.key",
            &pki.server_key.display().to_string(),
        )
        .replace("/etc/apiway/agents-ca/ca.crt", &ca)
        .replace("/etc/apiway/tunnel/ca.crt", &ca)
        .replace(
            "/etc/apiway/tunnel/agent.crt",
            &agent_cert.display().to_string(),
        )
        .replace(
            "/etc/apiway/tunnel/agent.key",
            &agent_key.display().to_string(),
        )
    };

    // The ConfigMap's tunnel-server.yaml.
    let manifests = deploy("tunnel-server.yaml")?;
    let config_map = manifests
        .split("\n---\n")
        .find(|d| d.contains("kind: ConfigMap"))
        .context("no ConfigMap")?;
    let doc: serde_json::Value = apiway_core::config_text::deserialize(config_map)
        .map_err(|e| anyhow::anyhow!("the ConfigMap does not parse: {e}"))?;
    let config = doc["data"]["tunnel-server.yaml"]
        .as_str()
        .context("no tunnel-server.yaml in the ConfigMap")?;
    let file = pki.path("tunnel-server.yaml");
    std::fs::write(&file, swap(config))?;
    check(&[
        "tunnel-server".into(),
        "--config".into(),
        file.display().to_string(),
    ])
    .await?;

    // The static pod's agent arguments.
    let pod = deploy("agent-static-pod.yaml")?;
    let args: Vec<String> = pod
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("- "))
        .skip_while(|l| *l != "agent")
        .take_while(|l| l.starts_with("agent") || l.starts_with("--"))
        .map(|l| swap(l.split("  ").next().unwrap_or(l).trim()))
        .collect();
    ensure!(args.len() > 5 && args[0] == "agent", "args: {args:?}");
    check(&args).await?;

    // The systemd unit's ExecStart.
    let unit = deploy("apiway-agent-tunnel.service")?;
    let exec = unit
        .split("ExecStart=")
        .nth(1)
        .context("no ExecStart")?
        .split("\n\n")
        .next()
        .unwrap_or_default();
    let joined = exec.replace("\\\n", " ");
    let line = joined.lines().next().unwrap_or_default();
    let args: Vec<String> = line.split_whitespace().skip(1).map(swap).collect();
    ensure!(
        args.first().map(String::as_str) == Some("agent"),
        "{args:?}"
    );
    check(&args).await?;
    Ok(())
}
