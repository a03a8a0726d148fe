//! Prefer-local: of two API servers, the one whose address is on this
//! host's interfaces wins, even when it is listed last; it fails over to
//! the remote one. The "remote" server runs in a second network namespace
//! joined to the agent's by a veth pair, so no host network is touched.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{ensure, Result};

use crate::agent_support::{answered_by, standin_process, AgentProcess, Netns};
use crate::support::Pki;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_endpoint_wins_and_fails_over_to_the_remote_one() -> Result<()> {
    let pki = Pki::new()?;
    let node = Netns::new()?;
    let remote_host = Netns::new()?;
    node.link_to(
        &remote_host,
        ("awnode", "10.77.0.1/24"),
        ("awremote", "10.77.0.2/24"),
    )?;

    let local_ip: IpAddr = "10.77.0.1".parse()?;
    let remote_ip: IpAddr = "10.77.0.2".parse()?;
    let mut local = standin_process(&pki, "local", local_ip, Some(&node)).await?;
    let remote = standin_process(&pki, "remote", remote_ip, Some(&remote_host)).await?;
    let (local_addr, remote_addr) = (local.addr().to_string(), remote.addr().to_string());
    let agent = AgentProcess::start(
        Some(&node),
        &[
            "--listen",
            "127.0.0.1:0",
            // The remote endpoint first: order must not matter.
            "--endpoint",
            &remote_addr,
            "--endpoint",
            &local_addr,
            "--health-check-interval",
            "200ms",
        ],
    )
    .await?;
    // Give the probes time to measure both, so the choice is not a tie
    // between unmeasured endpoints: wait for a few rounds in the log-free
    // way, by requests, then assert every request goes local.
    for i in 0..12 {
        let who = answered_by(Some(&node), agent.addr(), &pki).await?;
        ensure!(who == "local", "request {i} answered by {who}");
        if i == 5 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    local.kill();
    for i in 0..5 {
        let who = answered_by(Some(&node), agent.addr(), &pki).await?;
        ensure!(
            who == "remote",
            "request {i} after the local one died: {who}"
        );
    }
    Ok(())
}
