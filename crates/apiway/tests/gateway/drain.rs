//! Graceful shutdown on SIGTERM: `/healthz` fails at once, new connections
//! are accepted for the drain delay and refused after it, established ones
//! finish, the process exits 0.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use rustix::process::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tls::rustls_hello;
use crate::support::{
    eventually, https, read_until_closed, Closed, EchoBackend, GatewayProcess, Pki,
};

struct Draining {
    pki: Pki,
    _standin: apiway_standin::StandinServer,
    _echo: EchoBackend,
    gateway: GatewayProcess,
}

impl Draining {
    async fn start() -> Result<Draining> {
        let pki = Pki::new()?;
        let standin = pki
            .standin("cluster-a", &["api.a.example.com"], false)
            .await?;
        let echo = EchoBackend::start().await?;
        let gateway = GatewayProcess::start(&format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
  - name: echo
    hostnames: [echo.example.com]
    backends: [{{address: {}}}]
drain: {{delay: 1s, grace_period: 3s}}
"#,
            standin.addr(),
            echo.addr()
        ))
        .await?;
        Ok(Draining {
            pki,
            _standin: standin,
            _echo: echo,
            gateway,
        })
    }

    /// A connection to the echo backend, proven to work.
    async fn echo_connection(&self) -> Result<TcpStream> {
        let hello = rustls_hello(&self.pki, "echo.example.com", false)?.hello;
        let mut stream = TcpStream::connect(self.gateway.addr()).await?;
        stream.write_all(&hello).await?;
        let mut back = vec![0u8; hello.len()];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut back)).await??;
        ensure!(back == hello);
        Ok(stream)
    }
}

async fn ping(stream: &mut TcpStream, text: &[u8]) -> Result<()> {
    stream.write_all(text).await?;
    let mut back = vec![0u8; text.len()];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut back)).await??;
    ensure!(back == text, "echo mismatch");
    Ok(())
}

async fn refused(addr: SocketAddr) -> std::result::Result<(), String> {
    match TcpStream::connect(addr).await {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_when_connections_finish() -> Result<()> {
    let mut d = Draining::start().await?;
    let mut established = d.echo_connection().await?;
    ensure!(d.gateway.admin_get("/healthz").await?.0 == 200);

    d.gateway.signal(Signal::TERM)?;
    let sigterm = Instant::now();
    let gateway = &d.gateway;
    eventually("/healthz to fail", Duration::from_millis(500), || async {
        match gateway.admin_get("/healthz").await {
            Ok((503, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    ensure!(
        d.gateway.admin_get("/livez").await?.0 == 200,
        "/livez must stay 200 while draining"
    );

    // New connections are still served during the drain delay (draining has
    // begun: /healthz said so)...
    let r = https(d.gateway.addr(), "api.a.example.com", "/", &d.pki, true).await?;
    ensure!(r.standin() == Some("cluster-a"));

    // ...and refused after it.
    let addr = d.gateway.addr();
    eventually(
        "new connections to be refused",
        Duration::from_secs(3),
        || refused(addr),
    )
    .await?;
    let refused_after = sigterm.elapsed();
    ensure!(
        refused_after >= Duration::from_millis(900),
        "refused after {refused_after:?}, the delay is 1s"
    );

    // The established connection still works, and holds the process up.
    ping(&mut established, b"still here after the drain delay").await?;
    ensure!(d.gateway.is_running());
    ensure!(d.gateway.admin_get("/healthz").await?.0 == 503);

    // When it finishes, the process exits 0 without waiting for the grace period.
    established.shutdown().await?;
    let (rest, closed) = read_until_closed(&mut established, Duration::from_secs(5)).await;
    ensure!(
        rest.is_empty() && closed == Closed::Eof,
        "{rest:?} {closed:?}"
    );
    let finished = Instant::now();
    let status = d.gateway.wait_exit(Duration::from_secs(5)).await?;
    ensure!(status.success(), "exit status {status}");
    // The grace period would end 4 s after SIGTERM.
    ensure!(
        finished.elapsed() < Duration::from_secs(2)
            && sigterm.elapsed() < Duration::from_millis(3800),
        "exited {:?} after the last connection, {:?} after SIGTERM",
        finished.elapsed(),
        sigterm.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_closes_stragglers_and_exits_zero() -> Result<()> {
    let mut d = Draining::start().await?;
    let mut straggler = d.echo_connection().await?;
    d.gateway.signal(Signal::TERM)?;
    let sigterm = Instant::now();

    let status = d.gateway.wait_exit(Duration::from_secs(10)).await?;
    let exited = sigterm.elapsed();
    ensure!(status.success(), "exit status {status}");
    ensure!(
        exited >= Duration::from_millis(3900) && exited < Duration::from_secs(6),
        "exited {exited:?} after SIGTERM; delay 1s + grace period 3s"
    );
    let (_, closed) = read_until_closed(&mut straggler, Duration::from_secs(2)).await;
    ensure!(closed != Closed::StillOpen, "the straggler was not closed");
    ensure!(
        d.gateway
            .log_lines()
            .iter()
            .any(|l| l.contains("grace period over")),
        "no log line about closing stragglers"
    );
    Ok(())
}

/// Once draining, a reload is not applied: a listener the new file adds is
/// never bound (and so never said to be listening), and no reload counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_while_draining_is_not_applied() -> Result<()> {
    let extra = apiway_test_support::peers::free_port()?;
    let base = "admin: {address: 127.0.0.1:0}\n\
                drain: {delay: 3s, grace_period: 1s}\n\
                listeners:\n  - {name: public, address: 127.0.0.1:0, kind: tls}\n";
    let gateway = GatewayProcess::start(base).await?;
    gateway.signal(Signal::TERM)?;
    eventually("/healthz 503", Duration::from_secs(2), || async {
        match gateway.admin_get("/healthz").await {
            Ok((503, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    gateway.write_config(&format!(
        "{base}  - {{name: late, address: 127.0.0.1:{extra}, kind: tls}}\n"
    ))?;
    gateway.signal(Signal::HUP)?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], extra)))
            .await
            .is_err(),
        "a listener added while draining was bound"
    );
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_config_reloads_total", &[("result", "success")]) == 0.0);
    Ok(())
}
