//! The active endpoint dies (SIGKILL: resets, closed port) or hangs
//! (SIGSTOP: the kernel still accepts, nothing answers). Stand-ins run as
//! separate `apiway standin` processes so they can be signalled.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};

use crate::agent_support::{answered_by, standin_process, AgentProcess};
use crate::support::{Pki, LOCALHOST};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_endpoint_is_failed_over_without_a_failed_request() -> Result<()> {
    let pki = Pki::new()?;
    let mut standins = Vec::new();
    for name in ["s1", "s2", "s3"] {
        standins.push(standin_process(&pki, name, LOCALHOST, None).await?);
    }
    let addrs: Vec<String> = standins.iter().map(|s| s.addr().to_string()).collect();
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &addrs[0],
            "--endpoint",
            &addrs[1],
            "--endpoint",
            &addrs[2],
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    let active = answered_by(None, agent.addr(), &pki).await?;
    let victim = standins
        .iter_mut()
        .find(|s| s.name() == active)
        .expect("the answer names a stand-in");
    let victim_addr = victim.addr().to_string();
    victim.kill();
    // Straight after the kill, before any health check could notice: the
    // dial to the dead endpoint is refused and the same client connection
    // moves on.
    for i in 0..10 {
        let who = answered_by(None, agent.addr(), &pki).await?;
        ensure!(who != active, "request {i} answered by the killed {who}");
    }
    let m = agent.metrics().await?;
    ensure!(m.count("apiway_listener_unavailable_total", &[]) == 0.0);
    ensure!(
        m.count(
            "apiway_backend_connect_failures_total",
            &[("backend", &victim_addr)]
        ) >= 1.0
    );
    agent
        .wait_metric(
            "apiway_backend_healthy",
            &[("backend", &victim_addr)],
            Duration::from_secs(5),
            |v| v == 0.0,
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_endpoint_is_abandoned_within_the_health_check_time() -> Result<()> {
    let pki = Pki::new()?;
    let mut standins = Vec::new();
    for name in ["h1", "h2", "h3"] {
        standins.push(standin_process(&pki, name, LOCALHOST, None).await?);
    }
    let addrs: Vec<String> = standins.iter().map(|s| s.addr().to_string()).collect();
    // Defaults: https:/readyz every 1s, 1s timeout, down after one failure.
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &addrs[0],
            "--endpoint",
            &addrs[1],
            "--endpoint",
            &addrs[2],
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    let active = answered_by(None, agent.addr(), &pki).await?;
    let victim = standins
        .iter()
        .find(|s| s.name() == active)
        .expect("the answer names a stand-in");
    let victim_addr = victim.addr().to_string();
    victim.hang()?;
    let hung_at = Instant::now();
    // Requests time out on the hung endpoint until the health check takes
    // it out; then they go elsewhere. Bounded: at most 8 s of tries.
    let recovered = loop {
        match answered_by(None, agent.addr(), &pki).await {
            Ok(who) if who != active => break hung_at.elapsed(),
            Ok(who) => bail!("the hung {who} answered"),
            Err(_) if hung_at.elapsed() < Duration::from_secs(8) => continue,
            Err(e) => bail!("no recovery within 8 s: {e}"),
        }
    };
    ensure!(
        recovered < Duration::from_secs(4),
        "took {recovered:?} to move off the hung endpoint"
    );
    let m = agent.metrics().await?;
    ensure!(m.value("apiway_backend_healthy", &[("backend", &victim_addr)]) == Some(0.0));
    for i in 0..5 {
        let who = answered_by(None, agent.addr(), &pki).await?;
        ensure!(
            who != active,
            "request {i} after recovery answered by {who}"
        );
    }
    // SIGCONT: the endpoint comes back.
    victim.resume()?;
    agent
        .wait_metric(
            "apiway_backend_healthy",
            &[("backend", &victim_addr)],
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_on_down_ends_connections_to_a_hung_endpoint() -> Result<()> {
    let pki = Pki::new()?;
    let mut standins = Vec::new();
    for name in ["c1", "c2"] {
        standins.push(standin_process(&pki, name, LOCALHOST, None).await?);
    }
    let addrs: Vec<String> = standins.iter().map(|s| s.addr().to_string()).collect();
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &addrs[0],
            "--endpoint",
            &addrs[1],
            "--close-on-down",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    // A long-lived connection (a watch, say): the agent dials at accept.
    let mut held = tokio::net::TcpStream::connect(agent.addr()).await?;
    let holder =
        crate::support::eventually("the relayed connection", Duration::from_secs(5), || async {
            let m = agent.metrics().await.map_err(|e| e.to_string())?;
            addrs
                .iter()
                .position(|a| {
                    m.value("apiway_backend_active_connections", &[("backend", a)]) == Some(1.0)
                })
                .ok_or_else(|| m.matching("apiway_backend_active_connections"))
        })
        .await?;
    standins[holder].hang()?;
    let hung_at = Instant::now();
    let (_, closed) = crate::support::read_until_closed(&mut held, Duration::from_secs(6)).await;
    ensure!(
        closed != crate::support::Closed::StillOpen,
        "the connection to the hung endpoint stayed open"
    );
    ensure!(
        hung_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        hung_at.elapsed()
    );
    // The client reconnects and reaches the other endpoint.
    let who = answered_by(None, agent.addr(), &pki).await?;
    ensure!(who == standins[1 - holder].name(), "{who}");
    standins[holder].resume()?;
    Ok(())
}
