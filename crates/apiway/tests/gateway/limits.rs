//! Listener limits: the ClientHello timeout and `max_connections`.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::tls::rustls_hello;
use crate::support::{https, read_until_closed, Closed, GatewayProcess, Pki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_client_hello_times_out_while_others_are_served() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls, client_hello_timeout: 500ms}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
"#,
        standin.addr()
    ))
    .await?;

    let hello = rustls_hello(&pki, "api.a.example.com", false)?.hello;
    let mut slow = TcpStream::connect(gateway.addr()).await?;
    slow.write_all(&hello[..hello.len() / 2]).await?;
    let stalled_at = Instant::now();

    // Meanwhile other clients are served.
    for http2 in [false, true] {
        let r = https(gateway.addr(), "api.a.example.com", "/", &pki, http2).await?;
        ensure!(r.standin() == Some("cluster-a"), "{r:?}");
    }
    ensure!(
        stalled_at.elapsed() < Duration::from_millis(450),
        "the other requests took too long to prove anything"
    );

    let (answer, closed) = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    let waited = stalled_at.elapsed();
    ensure!(
        answer.is_empty() && closed != Closed::StillOpen,
        "{answer:?} {closed:?}"
    );
    ensure!(
        waited >= Duration::from_millis(450) && waited < Duration::from_millis(2500),
        "closed after {waited:?}, client_hello_timeout is 500ms"
    );
    let m = gateway.metrics().await?;
    ensure!(
        m.count(
            "apiway_listener_client_hello_timeouts_total",
            &[("listener", "public")]
        ) == 1.0
    );
    ensure!(m.count("apiway_route_connections_total", &[("route", "cluster-a")]) == 2.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_closed_at_once() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls, max_connections: 2, client_hello_timeout: 10s}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
"#,
        standin.addr()
    ))
    .await?;
    let open = [("listener", "public")];

    // Two clients that have not sent their hello yet hold both slots.
    let first = TcpStream::connect(gateway.addr()).await?;
    let _second = TcpStream::connect(gateway.addr()).await?;
    gateway
        .wait_metric(
            "apiway_listener_open_connections",
            &open,
            Duration::from_secs(5),
            |v| v == 2.0,
        )
        .await?;

    let mut third = TcpStream::connect(gateway.addr()).await?;
    let started = Instant::now();
    let (answer, closed) = read_until_closed(&mut third, Duration::from_secs(5)).await;
    ensure!(
        answer.is_empty() && closed != Closed::StillOpen,
        "{answer:?} {closed:?}"
    );
    ensure!(
        started.elapsed() < Duration::from_millis(500),
        "closed after {:?}",
        started.elapsed()
    );
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_listener_rejected_total", &open) == 1.0);

    // A slot freed is a slot available.
    drop(first);
    gateway
        .wait_metric(
            "apiway_listener_open_connections",
            &open,
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    let r = https(gateway.addr(), "api.a.example.com", "/", &pki, true).await?;
    ensure!(r.standin() == Some("cluster-a"), "{r:?}");
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_listener_rejected_total", &open) == 1.0);
    Ok(())
}
