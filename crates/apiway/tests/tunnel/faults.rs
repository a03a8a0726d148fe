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

/// Open files, threads and resident KiB of a process.
#[derive(Clone, Copy, Debug)]
struct Usage {
    fds: usize,
    threads: usize,
    rss_kb: u64,
}

impl Usage {
    fn of(pid: u32) -> Result<Usage> {
        Ok(Usage {
            fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
            threads: std::fs::read_dir(format!("/proc/{pid}/task"))?.count(),
            rss_kb: proc_memory(pid)?.rss_kb,
        })
    }

    /// Waits up to 10 s for `pid` to be back near this baseline: a few
    /// files, no extra thread, and a bounded allocator cache (a leak per
    /// connection over tens of thousands of connections would be hundreds
    /// of MiB).
    async fn ensure_back(self, pid: u32) -> Result<()> {
        let started = Instant::now();
        loop {
            let now = Usage::of(pid)?;
            let problem = if now.fds > self.fds + 4 {
                format!("{} open files before, {} after", self.fds, now.fds)
            } else if now.threads > self.threads {
                format!("{} threads before, {} after", self.threads, now.threads)
            } else if now.rss_kb > self.rss_kb + 32 * 1024 {
                format!(
                    "{} KiB resident before, {} KiB after",
                    self.rss_kb, now.rss_kb
                )
            } else {
                return Ok(());
            };
            if started.elapsed() > Duration::from_secs(10) {
                anyhow::bail!("pid {pid}: {problem}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits until neither `roles` has an open tunnel stream.
async fn streams_closed(roles: &[&Role]) -> Result<()> {
    for r in roles {
        r.wait_metric(
            "apiway_tunnel_open_streams",
            &[],
            Duration::from_secs(10),
            |v| v == 0.0,
        )
        .await?;
    }
    Ok(())
}

/// `count` connections to `local`, 64 at a time, each through `one`.
async fn many<F, Fut>(count: usize, local: SocketAddr, one: F) -> Result<()>
where
    F: Fn(SocketAddr) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    const CONCURRENT: usize = 64;
    let mut tasks = Vec::new();
    for w in 0..CONCURRENT {
        tasks.push(tokio::spawn(async move {
            for _ in (w..count).step_by(CONCURRENT) {
                one(local).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
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
    let base = [Usage::of(pids[0])?, Usage::of(pids[1])?];

    const TOTAL: usize = 100_000;
    many(TOTAL, local, echo_once).await?;
    streams_closed(&[&server, &agent]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (pid, base) in pids.into_iter().zip(base) {
        base.ensure_back(pid).await?;
    }
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= TOTAL as f64);
    Ok(())
}

/// A connection that the tunnel closes without an answer (a refused or
/// failed dial).
async fn closed_without_answer(local: SocketAddr) -> Result<()> {
    let mut s = TcpStream::connect(local).await?;
    // The write may meet the close already.
    let _ = s.write_all(b"ping").await;
    let mut buf = [0u8; 4];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
        Ok(Ok(n)) => anyhow::bail!("{n} bytes came back from a destination that must fail"),
        Err(_) => anyhow::bail!("no close within 10 s"),
    }
}

/// A client that goes away at once, racing the server's dial.
async fn abandoned(local: SocketAddr) -> Result<()> {
    let s = TcpStream::connect(local).await?;
    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
    drop(s);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_refused_and_abandoned_dials_leave_nothing_behind() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    // A port nobody listens on: allowed, so the server dials it and fails.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?
    };
    // Another one, not allowed: refused without a dial.
    let unlisted = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?
    };
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &[
            "--allowed-destination".into(),
            echo.addr.to_string(),
            "--allowed-destination".into(),
            closed.to_string(),
        ],
    )
    .await?;
    let targets = [echo.addr, closed, unlisted].map(|a| a.to_string());
    let agent = tunnel_agent(&pki, "node-1", &[server.listener("tunnel")], &targets, &[]).await?;
    let to = |a: SocketAddr| agent.listener(&format!(">{a}"));
    let pids = [server.process.pid(), agent.process.pid()];
    for _ in 0..200 {
        echo_once(to(echo.addr)).await?;
        closed_without_answer(to(closed)).await?;
        closed_without_answer(to(unlisted)).await?;
    }
    streams_closed(&[&server, &agent]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = [Usage::of(pids[0])?, Usage::of(pids[1])?];

    const EACH: usize = 10_000;
    many(EACH, to(closed), closed_without_answer).await?;
    many(EACH, to(unlisted), closed_without_answer).await?;
    many(EACH, to(echo.addr), abandoned).await?;
    streams_closed(&[&server, &agent]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (pid, base) in pids.into_iter().zip(base) {
        base.ensure_back(pid).await?;
    }
    let m = server.metrics().await?;
    let count = |result| m.count("apiway_tunnel_dials_total", &[("result", result)]);
    ensure!(
        count("failed") >= (EACH + 200) as f64,
        "{} failed dials counted",
        count("failed")
    );
    ensure!(
        count("refused") >= (EACH + 200) as f64,
        "{} refused dials counted",
        count("refused")
    );
    // The tunnel still works.
    echo_once(to(echo.addr)).await?;
    Ok(())
}

/// A destination whose connects hang: a listener with a full accept queue
/// that never accepts (the kernel drops further SYNs). Holds the sockets.
struct Hung {
    addr: SocketAddr,
    _held: (tokio::net::TcpListener, Vec<TcpStream>),
}

impl Hung {
    async fn start() -> Result<Hung> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let listener = socket.listen(0)?;
        let addr = listener.local_addr()?;
        let mut held = Vec::new();
        // Fill the queue: connects complete until it is full, then hang.
        loop {
            match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
                Ok(s) => held.push(s?),
                Err(_) => break,
            }
            ensure!(held.len() < 16, "the accept queue never filled");
        }
        Ok(Hung {
            addr,
            _held: (listener, held),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_whose_client_resets_is_cancelled_on_the_server() -> Result<()> {
    let hung = Hung::start().await?;
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &[
            "--allowed-destination".into(),
            hung.addr.to_string(),
            "--dial-timeout".into(),
            "30s".into(),
        ],
    )
    .await?;
    let agent = tunnel_agent(
        &pki,
        "node-1",
        &[server.listener("tunnel")],
        &[hung.addr.to_string()],
        &["--dial-timeout".into(), "30s".into()],
    )
    .await?;
    let local = agent.listener(">");
    // Warm up the agent's tunnel, then the baseline.
    agent
        .wait_tunnels(&[server.listener("tunnel")], 1.0)
        .await?;
    let base = Usage::of(server.process.pid())?;
    for _ in 0..20 {
        let s = TcpStream::connect(local).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
        drop(s);
    }
    // Every dial is cancelled long before its 30 s timeout...
    server
        .wait_metric(
            "apiway_tunnel_dials_total",
            &[("result", "cancelled")],
            Duration::from_secs(5),
            |v| v == 20.0,
        )
        .await?;
    // ...and leaves nothing behind on the server.
    base.ensure_back(server.process.pid()).await?;
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "timeout")]) == 0.0);
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
