//! Backends that are down: failover within one client connection, health
//! checks, the alert when nothing is left, and backends named by DNS.

use std::time::Duration;

use anyhow::{ensure, Result};

use crate::support::tls::rustls_hello;
use crate::support::tools::openssl_get;
use crate::support::{closed_port, https, read_until_closed, Closed, GatewayProcess, Pki};

/// A fatal `internal_error` (80) alert record.
const INTERNAL_ERROR: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_backend_is_failed_over_and_marked_unhealthy() -> Result<()> {
    let pki = Pki::new()?;
    let live = pki
        .standin("cluster-a/live", &["api.a.example.com"], false)
        .await?;
    let dead = closed_port()?;
    // Round robin would hand every other connection to the dead backend.
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    policy: round_robin
    backends: [{{address: {dead}}}, {{address: {live}}}]
    health_check: {{kind: tcp, interval: 200ms}}
"#,
        live = live.addr()
    ))
    .await?;

    // Straight away (the dial fails over) and after the health check ran.
    for i in 0..10 {
        let r = https(gateway.addr(), "api.a.example.com", "/", &pki, i % 2 == 0).await?;
        ensure!(
            r.status == 200 && r.standin() == Some("cluster-a/live"),
            "request {i}: {r:?}"
        );
    }
    let dead_label = dead.to_string();
    let live_label = live.addr().to_string();
    let healthy = "apiway_backend_healthy";
    gateway
        .wait_metric(
            healthy,
            &[("route", "cluster-a"), ("backend", &dead_label)],
            Duration::from_secs(5),
            |v| v == 0.0,
        )
        .await?;
    for i in 0..4 {
        let r = https(gateway.addr(), "api.a.example.com", "/", &pki, true).await?;
        ensure!(
            r.standin() == Some("cluster-a/live"),
            "request {i} after the check: {r:?}"
        );
    }
    let m = gateway.metrics().await?;
    ensure!(m.value(healthy, &[("route", "cluster-a"), ("backend", &live_label)]) == Some(1.0));
    ensure!(m.count("apiway_route_unavailable_total", &[("route", "cluster-a")]) == 0.0);
    ensure!(
        m.count(
            "apiway_backend_connections_total",
            &[("backend", &live_label)]
        ) == 14.0
    );
    ensure!(
        m.count(
            "apiway_backend_connections_total",
            &[("backend", &dead_label)]
        ) == 0.0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_with_every_backend_dead_answers_internal_error() -> Result<()> {
    let pki = Pki::new()?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: gone
    hostnames: [gone.example.com]
    backends: [{{address: {}}}, {{address: {}}}]
    connect_timeout: 500ms
"#,
        closed_port()?,
        closed_port()?
    ))
    .await?;

    let ran = openssl_get(gateway.addr(), Some("gone.example.com"), "/", &[]).await?;
    ensure!(
        !ran.success
            && ran.stderr.contains("internal error")
            && ran.stderr.contains("alert number 80"),
        "expected the internal_error alert: {ran:?}"
    );
    let hello = rustls_hello(&pki, "gone.example.com", false)?.hello;
    let mut client = tokio::net::TcpStream::connect(gateway.addr()).await?;
    tokio::io::AsyncWriteExt::write_all(&mut client, &hello).await?;
    let (answer, closed) = read_until_closed(&mut client, Duration::from_secs(5)).await;
    ensure!(
        answer == INTERNAL_ERROR && closed == Closed::Eof,
        "{answer:02x?} {closed:?}"
    );

    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_route_unavailable_total", &[("route", "gone")]) == 2.0);
    ensure!(m.count("apiway_route_connections_total", &[("route", "gone")]) == 2.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_given_by_dns_name_is_resolved_and_reached() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-n", &["api.n.example.com"], false)
        .await?;
    let backend = format!("localhost:{}", standin.addr().port());
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-n
    hostnames: [api.n.example.com]
    backends: [{{address: "{backend}"}}]
    health_check: {{kind: https, path: /readyz, interval: 200ms}}
"#
    ))
    .await?;
    for http2 in [false, true] {
        let r = https(gateway.addr(), "api.n.example.com", "/", &pki, http2).await?;
        ensure!(r.standin() == Some("cluster-n"), "{r:?}");
    }
    // The health check reaches it by name too.
    gateway
        .wait_metric(
            "apiway_backend_health_checks_total",
            &[("backend", &backend), ("result", "ok")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;
    let m = gateway.metrics().await?;
    ensure!(m.value("apiway_backend_healthy", &[("backend", &backend)]) == Some(1.0));
    ensure!(m.count("apiway_backend_connections_total", &[("backend", &backend)]) == 2.0);
    Ok(())
}
