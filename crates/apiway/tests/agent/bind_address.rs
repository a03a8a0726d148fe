//! `--bind-address`: the agent adds the address it serves to `lo` inside a
//! network namespace the test creates, serves on it, and removes it on
//! exit; the documented command lines start as written; missing
//! CAP_NET_ADMIN and a kernel without `dummy` links give one clear line.

use std::time::Duration;

use anyhow::{ensure, Result};

use crate::agent_support::{answered_by, standin_process, standin_process_at, AgentProcess, Netns};
use crate::support::{Pki, LOCALHOST};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_direct_command_line_owns_its_address() -> Result<()> {
    let pki = Pki::new()?;
    let ns = Netns::new()?;
    // The documented example's first endpoint.
    let _api = standin_process_at(&pki, "api", "127.0.0.1:7001".parse()?, Some(&ns)).await?;
    let mut agent = AgentProcess::start(
        Some(&ns),
        &[
            "--listen",
            "10.1.2.3:443",
            "--bind-address",
            "10.1.2.3",
            "--interface",
            "lo",
            "--upstream",
            "direct",
            "--endpoint",
            "127.0.0.1:7001",
            "--endpoint",
            "api-int.example.com:6443",
            "--health-check",
            "https:/readyz",
            "--admin",
            "127.0.0.1:9902",
        ],
    )
    .await?;
    let shown = ns.addresses("lo")?;
    ensure!(
        shown.contains("inet 10.1.2.3/32") && shown.contains("scope host"),
        "{shown}"
    );
    let addr = "10.1.2.3:443".parse()?;
    for _ in 0..3 {
        ensure!(answered_by(Some(&ns), addr, &pki).await? == "api");
    }
    agent.stop().await?;
    let shown = ns.addresses("lo")?;
    ensure!(!shown.contains("10.1.2.3"), "not removed on exit: {shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_already_present_is_fine_and_keep_address_keeps_it() -> Result<()> {
    let pki = Pki::new()?;
    let ns = Netns::new()?;
    let s = standin_process(&pki, "api", LOCALHOST, Some(&ns)).await?;
    let target = s.addr().to_string();
    ns.ip(&["addr", "add", "10.1.2.3/32", "dev", "lo", "scope", "host"])?;
    let mut agent = AgentProcess::start(
        Some(&ns),
        &[
            "--listen",
            "10.1.2.3:443",
            "--bind-address",
            "10.1.2.3",
            "--interface",
            "lo",
            "--endpoint",
            &target,
            "--keep-address",
        ],
    )
    .await?;
    ensure!(agent
        .log_lines()
        .iter()
        .any(|l| l.contains("address already present")));
    ensure!(answered_by(Some(&ns), "10.1.2.3:443".parse()?, &pki).await? == "api");
    agent.stop().await?;
    ensure!(
        ns.addresses("lo")?.contains("10.1.2.3/32"),
        "--keep-address removed it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_gateway_command_lines_start() -> Result<()> {
    let ns = Netns::new()?;
    ns.ip(&["addr", "add", "10.1.2.3/32", "dev", "lo"])?;
    for line in [
        "--listen 10.1.2.3:443 --upstream proxy --gateway 127.0.0.1:8444",
        "--listen 10.1.2.3:443 --upstream connect --gateway 127.0.0.1:8445",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let mut agent = AgentProcess::start(Some(&ns), &args).await?;
        agent.stop().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_dummy_link_type_says_use_lo() -> Result<()> {
    let ns = Netns::new()?;
    let mut agent = AgentProcess::spawn(
        Some(&ns),
        &[
            "--listen",
            "10.1.2.3:443",
            "--bind-address",
            "10.1.2.3",
            "--endpoint",
            "127.0.0.1:1",
        ],
        &[],
    )?;
    let status = agent.wait_exit(Duration::from_secs(10)).await?;
    ensure!(!status.success());
    let log = agent.log_lines().join("\n");
    if ns.ip(&["link", "add", "awprobe", "type", "dummy"]).is_ok() {
        // This kernel has dummy links after all: the agent created apiway0.
        eprintln!("kernel supports dummy links; skipping the message check");
        return Ok(());
    }
    ensure!(
        log.contains("--interface apiway0") && log.contains("use --interface lo"),
        "{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cap_net_admin_one_line_names_the_flag_and_the_fix() -> Result<()> {
    let ns = Netns::new()?;
    let mut agent = AgentProcess::spawn(
        Some(&ns),
        &[
            "--listen",
            "10.1.2.3:443",
            "--bind-address",
            "10.1.2.3",
            "--interface",
            "lo",
            "--endpoint",
            "127.0.0.1:1",
        ],
        &[
            "setpriv",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-net_admin",
            "--",
        ],
    )?;
    let status = agent.wait_exit(Duration::from_secs(10)).await?;
    ensure!(!status.success());
    let errors: Vec<String> = agent
        .log_lines()
        .into_iter()
        .filter(|l| l.starts_with("error:"))
        .collect();
    ensure!(errors.len() == 1, "{errors:?}");
    ensure!(
        errors[0].contains("--bind-address 10.1.2.3") && errors[0].contains("CAP_NET_ADMIN"),
        "{errors:?}"
    );
    ensure!(!ns.addresses("lo")?.contains("10.1.2.3"));
    Ok(())
}
