//! The admin endpoint: health verdicts, 404, and metrics that follow traffic.

use std::time::Duration;

use anyhow::{ensure, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tls::rustls_hello;
use crate::support::{https, read_until_closed, Closed, EchoBackend, GatewayProcess, Pki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_answer_and_byte_counters_follow_traffic() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
"#,
        standin.addr()
    ))
    .await?;

    let (status, body) = gateway.admin_get("/readyz").await?;
    ensure!(
        status == 200 && body == "ok\n",
        "/readyz: {status} {body:?}"
    );
    // /livez and /healthz answer in kube-proxy's shape; node-unaware, so
    // without `nodeEligible`.
    for path in ["/livez", "/healthz"] {
        let (status, body) = gateway.admin_get(path).await?;
        let json: serde_json::Value = serde_json::from_str(&body)?;
        ensure!(
            status == 200
                && json["lastUpdated"].is_string()
                && json["currentTime"].is_string()
                && json.get("nodeEligible").is_none(),
            "{path}: {status} {body:?}"
        );
    }
    ensure!(gateway.admin_get("/no-such-path").await?.0 == 404);

    let backend = standin.addr().to_string();
    let to_backend = [
        ("route", "cluster-a"),
        ("backend", backend.as_str()),
        ("direction", "to_backend"),
    ];
    let to_client = [
        ("route", "cluster-a"),
        ("backend", backend.as_str()),
        ("direction", "to_client"),
    ];
    let bytes = "apiway_backend_bytes_total";
    let m = gateway.metrics().await?;
    ensure!(m.count(bytes, &to_backend) == 0.0 && m.count(bytes, &to_client) == 0.0);

    // One request: its handshake and request went to the backend, the
    // server's certificate and answer to the client.
    let r = https(gateway.addr(), "api.a.example.com", "/", &pki, false).await?;
    ensure!(r.status == 200);
    let first = gateway
        .wait_metric(bytes, &to_backend, Duration::from_secs(5), |v| v > 0.0)
        .await?;
    gateway
        .wait_metric(bytes, &to_client, Duration::from_secs(5), |v| v >= 500.0)
        .await?;

    // A 1 MiB download: more to the backend, and over 1 MiB to the client.
    let r = https(
        gateway.addr(),
        "api.a.example.com",
        "/stream?bytes=1048576",
        &pki,
        true,
    )
    .await?;
    ensure!(r.status == 200);
    gateway
        .wait_metric(bytes, &to_backend, Duration::from_secs(5), |v| v > first)
        .await?;
    gateway
        .wait_metric(bytes, &to_client, Duration::from_secs(5), |v| {
            v > 1_048_576.0
        })
        .await?;

    let m = gateway.metrics().await?;
    ensure!(
        m.count(
            "apiway_backend_connections_total",
            &[("backend", backend.as_str())]
        ) == 2.0
    );
    ensure!(m.count("apiway_listener_accepted_total", &[("listener", "public")]) == 2.0);
    ensure!(
        m.count(
            "apiway_admin_requests_total",
            &[("path", "other"), ("code", "404")]
        ) == 1.0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_counters_count_every_byte_relayed_including_the_client_hello() -> Result<()> {
    let pki = Pki::new()?;
    let echo = EchoBackend::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: echo
    hostnames: [echo.example.com]
    backends: [{{address: {}}}]
"#,
        echo.addr()
    ))
    .await?;

    // The client sends a hello and 10000 bytes; the echo sends all back.
    let hello = rustls_hello(&pki, "echo.example.com", false)?.hello;
    let payload = vec![0x5a_u8; 10_000];
    let mut client = TcpStream::connect(gateway.addr()).await?;
    client.write_all(&hello).await?;
    client.write_all(&payload).await?;
    let total = hello.len() + payload.len();
    let mut back = vec![0u8; total];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut back)).await??;
    client.shutdown().await?;
    let (rest, closed) = read_until_closed(&mut client, Duration::from_secs(5)).await;
    ensure!(rest.is_empty() && closed == Closed::Eof);

    let backend = echo.addr().to_string();
    let labels = |direction| {
        [
            ("route", "echo"),
            ("backend", backend.as_str()),
            ("direction", direction),
        ]
    };
    let bytes = "apiway_backend_bytes_total";
    let total = total as f64;
    gateway
        .wait_metric(bytes, &labels("to_client"), Duration::from_secs(2), |v| {
            v == total
        })
        .await?;
    let active = [("route", "echo"), ("backend", backend.as_str())];
    gateway
        .wait_metric(
            "apiway_backend_active_connections",
            &active,
            Duration::from_secs(2),
            |v| v == 0.0,
        )
        .await?;
    // Everything the client sent reached the backend, its ClientHello too.
    gateway
        .wait_metric(bytes, &labels("to_backend"), Duration::from_secs(2), |v| {
            v == total
        })
        .await?;
    Ok(())
}
