//! `kind: connect` listeners: curl's `--proxytunnel` reaching stand-in API
//! servers through a CONNECT tunnel, authorities no route lists, requests
//! that are not CONNECT or not HTTP, too large or too slow, and bytes the
//! client sends right behind its request head; a route sending a PROXY
//! v1 header on to nginx (`listen ... proxy_protocol`), which checks it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_test_support::peers::{free_port, Nginx, NGINX_STREAM_MODULE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tools::curl;
use crate::support::{
    closed_port, eventually, read_until_closed, send_raw, Closed, EchoBackend, GatewayProcess, Pki,
};

const A: &str = "api.a.example.com";
const B: &str = "api.b.example.com";

fn responses(code: &str) -> [(&'static str, &str); 2] {
    [("listener", "tunnel"), ("code", code)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_proxytunnel_reaches_the_cluster_named_by_authority() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("cluster-a", &[A], false).await?;
    let b = pki.standin("cluster-b", &[B], false).await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: tunnel, address: 127.0.0.1:0, kind: connect}}
routes:
  - name: cluster-a
    connect_authorities: ["{A}:443", "10.1.2.3:443"]
    backends: [{{address: {a}}}]
  - name: cluster-b
    connect_authorities: ["API.B.example.com:6443"]
    backends: [{{address: {b}}}]
"#,
        a = a.addr(),
        b = b.addr()
    ))
    .await?;
    let proxy = format!("http://{}", gateway.listener("tunnel"));
    // curl sends `CONNECT host:port`; the port is the URL's (the helper
    // puts the address's port in the URL; nothing listens there).
    for (host, port, cluster, http2) in [
        (A, 443, "cluster-a", false),
        (A, 443, "cluster-a", true),
        (B, 6443, "cluster-b", true),
    ] {
        let url_port = SocketAddr::from(([127, 0, 0, 1], port));
        let answer = curl(
            url_port,
            host,
            "/version",
            &pki,
            http2,
            &["-p", "--suppress-connect-headers", "-x", &proxy],
        )
        .await?;
        ensure!(
            answer.standin() == Some(cluster),
            "{host}:{port}: {answer:?}"
        );
    }
    gateway
        .wait_count(
            "apiway_listener_connect_responses_total",
            &responses("200"),
            3.0,
        )
        .await?;
    Ok(())
}

/// A gateway with one `connect` listener named `tunnel` (plus `extra`
/// fields), one route `echo` for `authority` to an echo backend, and one
/// route `dead` for `dead.internal:7` to a port where nothing listens.
async fn echo_gateway(extra: &str, authority: &str) -> Result<(EchoBackend, GatewayProcess)> {
    let echo = EchoBackend::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: tunnel, address: 127.0.0.1:0, kind: connect{extra}}}
routes:
  - name: echo
    connect_authorities: ["{authority}"]
    backends: [{{address: {echo}}}]
  - name: dead
    connect_authorities: ["dead.internal:7"]
    backends: [{{address: {dead}}}]
"#,
        echo = echo.addr(),
        dead = closed_port()?
    ))
    .await?;
    Ok((echo, gateway))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_answer_with_the_right_status_and_close() -> Result<()> {
    let (echo, gateway) = echo_gateway(
        ", request_timeout: 500ms, max_request_bytes: 1024",
        "echo.internal:7",
    )
    .await?;
    let addr = gateway.listener("tunnel");
    let big = format!(
        "CONNECT echo.internal:7 HTTP/1.1\r\nX-Padding: {}\r\n\r\n",
        "x".repeat(2000)
    );
    let cases: [(&str, &[u8]); 7] = [
        ("403", b"CONNECT api.unknown.example.com:443 HTTP/1.1\r\nHost: api.unknown.example.com:443\r\n\r\n"),
        ("400", b"\x16\x03\x01\x00\x05hello"),
        ("400", b"CONNECT echo.internal HTTP/1.1\r\n\r\n"),
        ("405", b"GET / HTTP/1.1\r\nHost: echo.internal:7\r\n\r\n"),
        ("431", big.as_bytes()),
        // Slow: half a request line, then nothing.
        ("408", b"CONNECT echo.in"),
        ("502", b"CONNECT dead.internal:7 HTTP/1.1\r\n\r\n"),
    ];
    for (code, request) in cases {
        let (answer, closed) = send_raw(addr, request).await?;
        let answer = String::from_utf8_lossy(&answer);
        ensure!(
            answer.starts_with(&format!("HTTP/1.1 {code} ")) && answer.ends_with("\r\n\r\n"),
            "{:?}: answered {answer:?}",
            String::from_utf8_lossy(request)
        );
        ensure!(closed != Closed::StillOpen, "{code}: still open");
    }
    let metrics = gateway.metrics().await?;
    for (code, expected) in [
        ("403", 1.0),
        ("400", 2.0),
        ("405", 1.0),
        ("431", 1.0),
        ("408", 1.0),
        ("502", 1.0),
        ("200", 0.0),
    ] {
        ensure!(
            metrics.count("apiway_listener_connect_responses_total", &responses(code)) == expected,
            "code {code}:\n{}",
            metrics.matching("apiway_listener")
        );
    }
    ensure!(
        metrics.count(
            "apiway_listener_no_route_total",
            &[("listener", "tunnel"), ("reason", "unknown_authority")]
        ) == 1.0
    );
    ensure!(metrics.count("apiway_route_unavailable_total", &[("route", "dead")]) == 1.0);
    ensure!(
        echo.connections() == 0,
        "a refused request reached the backend"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_sent_behind_the_request_head_reach_the_backend() -> Result<()> {
    let (_echo, gateway) = echo_gateway("", "Echo.Internal:7").await?;
    let mut client = TcpStream::connect(gateway.listener("tunnel")).await?;
    // One write: the head and the first tunnelled bytes in one segment.
    client
        .write_all(b"CONNECT echo.internal:7 HTTP/1.1\r\nHost: echo.internal:7\r\n\r\nping")
        .await?;
    let expected = b"HTTP/1.1 200 Connection Established\r\n\r\nping";
    let mut got = vec![0u8; expected.len()];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await??;
    ensure!(got == expected, "{:?}", String::from_utf8_lossy(&got));
    client.write_all(b"pong").await?;
    client.shutdown().await?;
    let (rest, closed) = read_until_closed(&mut client, Duration::from_secs(5)).await;
    ensure!(
        rest == b"pong" && closed == Closed::Eof,
        "{rest:?} {closed:?}"
    );
    Ok(())
}

/// The tunnel's backend is nginx requiring a PROXY header; it logs the
/// client and destination the gateway's v1 header gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_proxy_protocol_v1_through_a_tunnel_to_nginx() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("cluster-a", &[A], false).await?;
    let verifier = free_port()?;
    let nginx = Nginx::start(&format!(
        r#"
load_module {NGINX_STREAM_MODULE};
worker_processes 1;
events {{ worker_connections 64; }}
stream {{
    log_format pp "client=$proxy_protocol_addr:$proxy_protocol_port dst=$proxy_protocol_server_addr:$proxy_protocol_server_port";
    server {{
        listen 127.0.0.1:{verifier} proxy_protocol;
        proxy_pass {a};
        access_log logs/pp.log pp;
    }}
}}
"#,
        a = a.addr()
    ))
    .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: tunnel, address: 127.0.0.1:0, kind: connect}}
routes:
  - name: cluster-a
    connect_authorities: ["{A}:443"]
    send_proxy_protocol: v1
    backends: [{{address: 127.0.0.1:{verifier}}}]
"#
    ))
    .await?;
    let tunnel = gateway.listener("tunnel");
    let proxy = format!("http://{tunnel}");
    let url_port = SocketAddr::from(([127, 0, 0, 1], 443));
    let answer = curl(
        url_port,
        A,
        "/api/v1/namespaces",
        &pki,
        false,
        &["-p", "--suppress-connect-headers", "-x", &proxy],
    )
    .await?;
    ensure!(answer.standin() == Some("cluster-a"), "{answer:?}");
    // The stand-in saw nginx; nginx saw, from the header, curl's address
    // and the gateway's listener as the destination. (nginx writes the
    // line when the session ends; the launcher's readiness probe, which
    // sent no header, left a line of dashes before it.)
    let log = nginx.dir().join("logs/pp.log");
    let line = eventually(
        "nginx's access log line",
        Duration::from_secs(5),
        || async {
            std::fs::read_to_string(&log)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find(|l| l.starts_with("client=1"))
                        .map(str::to_owned)
                })
                .ok_or_else(|| "no line yet".to_string())
        },
    )
    .await?;
    ensure!(
        line.starts_with("client=127.0.0.1:") && line.ends_with(&format!("dst={tunnel}")),
        "{line}"
    );
    ensure!(
        !line.starts_with(&format!("client={tunnel}")),
        "the client is curl, not the gateway: {line}"
    );
    Ok(())
}
