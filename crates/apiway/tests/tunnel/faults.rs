//! Faults: a tunnel server killed or stopped under an agent, and many
//! short connections that must leave nothing behind on either side.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::proc_memory;
use rustix::process::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tunnel_support::{tunnel_agent, tunnel_server, Behaviour, Destination, Role, TunnelPki};

/// One echo round trip through `local`.
async fn echo_once(local: SocketAddr) -> Result<()> {
    let mut s = TcpStream::connect(local).await?;
    s.write_all(b"ping").await?;
    let mut buf = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(15), s.read_exact(&mut buf))
        .await
        .context("no echo")??;
    ensure!(&buf == b"ping");
    Ok(())
}

async fn two_servers(pki: &TunnelPki, echo: &Destination) -> Result<(Role, Role)> {
    let allow = ["--allowed-destination".to_owned(), echo.addr.to_string()];
    Ok((
        tunnel_server(pki, &allow).await?,
        tunnel_server(pki, &allow).await?,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_hands_new_connections_to_the_other_at_once() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let (mut a, b) = two_servers(&pki, &echo).await?;
    let (ta, tb) = (a.listener("tunnel"), b.listener("tunnel"));
    let agent = tunnel_agent(&pki, "node-1", &[ta, tb], &[echo.addr.to_string()], &[]).await?;
    let local = agent.listener(">");
    agent.wait_tunnels(&[ta, tb], 1.0).await?;
    for _ in 0..10 {
        echo_once(local).await?;
    }
    // New streams are spread over both warm connections (round robin).
    for server in [&a, &b] {
        let ok = server
            .metrics()
            .await?
            .count("apiway_tunnel_dials_total", &[("result", "ok")]);
        ensure!(
            (3.0..=7.0).contains(&ok),
            "one server dialled {ok} of 10 connections"
        );
    }

    a.process.signal(Signal::KILL)?;
    a.process.wait_exit(Duration::from_secs(5)).await?;
    // Every new connection works, the first one included.
    let started = Instant::now();
    for i in 0..20 {
        echo_once(local)
            .await
            .with_context(|| format!("connection {i} after the kill"))?;
    }
    let took = started.elapsed();
    ensure!(
        took < Duration::from_secs(5),
        "20 connections after the kill took {took:?}"
    );
    agent.wait_tunnels(&[ta], 0.0).await?;
    let m = b.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= 20.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_found_dead_by_ping() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let (a, b) = two_servers(&pki, &echo).await?;
    let (ta, tb) = (a.listener("tunnel"), b.listener("tunnel"));
    let fast_ping = [
        "--tunnel-keepalive-interval".to_owned(),
        "500ms".to_owned(),
        "--tunnel-keepalive-timeout".to_owned(),
        "500ms".to_owned(),
        "--dial-timeout".to_owned(),
        "2s".to_owned(),
    ];
    let agent = tunnel_agent(
        &pki,
        "node-1",
        &[ta, tb],
        &[echo.addr.to_string()],
        &fast_ping,
    )
    .await?;
    let local = agent.listener(">");
    agent.wait_tunnels(&[ta, tb], 1.0).await?;
    a.process.signal(Signal::STOP)?;
    let stopped = Instant::now();
    // The hung server's connection is declared dead by PING...
    agent.wait_tunnels(&[ta], 0.0).await?;
    let detected = stopped.elapsed();
    // ...and connections go through the other one.
    for _ in 0..10 {
        echo_once(local).await?;
    }
    a.process.signal(Signal::CONT)?;
    ensure!(
        detected < Duration::from_secs(4),
        "PING took {detected:?} to find the stopped server"
    );
    Ok(())
}

fn open_fds(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

fn threads(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/task"))?.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_short_connections_leave_nothing_behind() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &["--allowed-destination".into(), echo.addr.to_string()],
    )
    .await?;
    let agent = tunnel_agent(
        &pki,
        "node-1",
        &[server.listener("tunnel")],
        &[echo.addr.to_string()],
        &[],
    )
    .await?;
    let local = agent.listener(">");
    let pids = [server.process.pid(), agent.process.pid()];
    // Warm up, then the baseline.
    for _ in 0..200 {
        echo_once(local).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut base = Vec::new();
    for pid in pids {
        base.push((open_fds(pid)?, threads(pid)?, proc_memory(pid)?.rss_kb));
    }

    const TOTAL: usize = 100_000;
    const CONCURRENT: usize = 64;
    let mut tasks = Vec::new();
    for w in 0..CONCURRENT {
        tasks.push(tokio::spawn(async move {
            for _ in (w..TOTAL).step_by(CONCURRENT) {
                echo_once(local).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    server
        .wait_metric(
            "apiway_tunnel_open_streams",
            &[],
            Duration::from_secs(10),
            |v| v == 0.0,
        )
        .await?;
    agent
        .wait_metric(
            "apiway_tunnel_open_streams",
            &[],
            Duration::from_secs(10),
            |v| v == 0.0,
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (pid, (fds, th, rss)) in pids.into_iter().zip(base) {
        let (fds2, th2, rss2) = (open_fds(pid)?, threads(pid)?, proc_memory(pid)?.rss_kb);
        ensure!(
            fds2 <= fds + 4,
            "pid {pid}: {fds} open files before, {fds2} after"
        );
        ensure!(th2 <= th, "pid {pid}: {th} threads before, {th2} after");
        // Allocator caches may keep some: bounded, not per connection
        // (100,000 leaked streams would be hundreds of MiB).
        ensure!(
            rss2 <= rss + 32 * 1024,
            "pid {pid}: {rss} KiB resident before, {rss2} KiB after"
        );
    }
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= TOTAL as f64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_finishes_open_streams_and_new_ones_go_elsewhere() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let allow = ["--allowed-destination".to_owned(), echo.addr.to_string()];
    let mut a = tunnel_server(
        &pki,
        &[allow.to_vec(), vec!["--drain-delay".into(), "1s".into()]].concat(),
    )
    .await?;
    // B's port is known before B runs, so the first connection must use A.
    let b_addr = SocketAddr::from(([127, 0, 0, 1], apiway_test_support::peers::free_port()?));
    let ta = a.listener("tunnel");
    let agent = tunnel_agent(&pki, "node-1", &[ta, b_addr], &[echo.addr.to_string()], &[]).await?;
    let local = agent.listener(">");
    let mut long = TcpStream::connect(local).await?;
    let mut buf = [0u8; 4];
    long.write_all(b"one!").await?;
    long.read_exact(&mut buf).await?;
    let b = tunnel_server(
        &pki,
        &[allow.to_vec(), vec!["--listen".into(), b_addr.to_string()]].concat(),
    )
    .await?;
    agent.wait_tunnels(&[b_addr], 1.0).await?;

    a.process.signal(Signal::TERM)?;
    // During the drain delay /healthz fails, so a load balancer stops
    // sending agents here.
    crate::support::eventually("/healthz 503", Duration::from_secs(2), || async {
        match crate::support::http_get_plain(a.admin, "/healthz").await {
            Ok((503, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    // After it, GOAWAY: new connections go to B at once...
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..10 {
        echo_once(local).await?;
    }
    let m = b.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= 10.0);
    // ...while the open one keeps working through A.
    long.write_all(b"two!").await?;
    long.read_exact(&mut buf).await?;
    ensure!(&buf == b"two!");
    ensure!(a.process.is_running(), "A exited with a stream open");
    drop(long);
    let status = a.process.wait_exit(Duration::from_secs(10)).await?;
    ensure!(status.success(), "A exited with {status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_listens_before_any_server_is_up_and_a_connection_waits_for_one() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let later = SocketAddr::from(([127, 0, 0, 1], apiway_test_support::peers::free_port()?));
    // The agent starts (ready file written, listening) with no server up.
    let agent = tunnel_agent(&pki, "node-1", &[later], &[echo.addr.to_string()], &[]).await?;
    let local = agent.listener(">");
    let client = tokio::spawn(echo_once(local));
    tokio::time::sleep(Duration::from_millis(700)).await;
    ensure!(
        !client.is_finished(),
        "the connection ended before any server was up"
    );
    let allow = [
        "--allowed-destination".to_owned(),
        echo.addr.to_string(),
        "--listen".to_owned(),
        later.to_string(),
    ];
    let _server = tunnel_server(&pki, &allow).await?;
    tokio::time::timeout(Duration::from_secs(10), client)
        .await
        .context("the waiting connection never went through")???;
    agent.wait_tunnels(&[later], 1.0).await?;
    Ok(())
}
