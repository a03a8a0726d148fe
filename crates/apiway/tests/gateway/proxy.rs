//! `kind: proxy` listeners: PROXY headers from real senders (HAProxy
//! `send-proxy-v2` with TLVs, nginx stream `proxy_protocol on`), stacked
//! headers, untrusted senders, broken and slow headers, and `tls` listeners
//! taking an optional header; routes sending a header on to a backend that
//! verifies it (HAProxy `accept-proxy`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::StandinServer;
use apiway_test_support::peers::{free_port, Haproxy, Nginx, NGINX_STREAM_MODULE};
use apiway_wire::proxy::{ProxyHeader, RenderOptions, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tls::{connect, expect_server, rustls_hello};
use crate::support::tools::curl;
use crate::support::{
    eventually, read_until_closed, send_raw, Closed, EchoBackend, GatewayProcess, Pki, Recorder,
};

const A: &str = "api.a.example.com";
const B: &str = "api.b.example.com";

/// Two stand-in clusters, each with a certificate for its own name.
struct Clusters {
    pki: Pki,
    a: StandinServer,
    b: StandinServer,
}

impl Clusters {
    async fn start() -> Result<Clusters> {
        let pki = Pki::new()?;
        let a = pki.standin("cluster-a", &[A], false).await?;
        let b = pki.standin("cluster-b", &[B], false).await?;
        Ok(Clusters { pki, a, b })
    }

    /// A gateway whose `proxy` listener `in-cluster` trusts `trusted` and
    /// routes the destinations 127.0.0.1:`port_a` and :`port_b` (the
    /// frontends of the sender under test) to clusters A and B; the
    /// listener and route as the README's example writes them.
    async fn gateway(&self, trusted: &str, port_a: u16, port_b: u16) -> Result<GatewayProcess> {
        GatewayProcess::start(&format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - name: in-cluster
    address: 127.0.0.1:0
    kind: proxy
    trusted_sources: {trusted}
routes:
  - name: cluster-a
    hostnames: ["{A}"]
    destinations: ["127.0.0.1:{port_a}"]
    backends: [{{address: {a}}}]
  - name: cluster-b
    destinations: ["127.0.0.1:{port_b}"]
    backends: [{{address: {b}}}]
"#,
            a = self.a.addr(),
            b = self.b.addr()
        ))
        .await
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// HAProxy in TCP mode: one frontend per `(port, name)` sending to
/// `gateway` with `server_options`, logging client and frontend addresses.
fn haproxy_config(frontends: &[(u16, &str)], gateway: SocketAddr, server_options: &str) -> String {
    let mut config = String::from(
        r#"
global
    maxconn 100
defaults
    mode tcp
    log stderr format raw local0 info
    option tcplog
    log-format "frontend=%ft client=%ci:%cp dst=%fi:%fp"
    timeout connect 2s
    timeout client 10s
    timeout server 10s
"#,
    );
    for (port, name) in frontends {
        config.push_str(&format!(
            r#"
frontend {name}
    bind 127.0.0.1:{port}
    unique-id-format %{{+X}}o%ci:%cp_%fi:%fp_%Ts_%rt
    # Dial the gateway only once the client has spoken (every client here
    # speaks first). The launcher's readiness probe connects and leaves at
    # once; relayed, HAProxy could reset it before its header is read, an
    # `io` header error the tests would see at random.
    tcp-request inspect-delay 2s
    tcp-request content accept if {{ req.len gt 0 }}
    tcp-request content reject
    default_backend to_gateway_{name}
backend to_gateway_{name}
    server gw {gateway} {server_options}
"#
        ));
    }
    config
}

/// HAProxy in front of the gateway's `proxy` listener, sending PROXY v2
/// headers with `server_options`; the running clusters, gateway and HAProxy
/// and HAProxy's two frontend ports.
async fn behind_haproxy(
    server_options: &str,
) -> Result<(Clusters, GatewayProcess, Haproxy, u16, u16)> {
    let c = Clusters::start().await?;
    let (port_a, port_b) = (free_port()?, free_port()?);
    let gateway = c
        .gateway(r#"["127.0.0.0/8", "10.0.0.0/8"]"#, port_a, port_b)
        .await?;
    let haproxy = Haproxy::start(&haproxy_config(
        &[(port_a, "vip_a"), (port_b, "vip_b")],
        gateway.listener("in-cluster"),
        server_options,
    ))
    .await?;
    Ok((c, gateway, haproxy, port_a, port_b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_send_proxy_v2_reaches_the_cluster_named_by_destination() -> Result<()> {
    // No health checks here, so every connection the gateway sees is one of
    // the test's own; the checks have their own test below.
    let (c, gateway, haproxy, port_a, port_b) =
        behind_haproxy("send-proxy-v2 proxy-v2-options authority,crc32c,unique-id").await?;

    for (port, host, cluster) in [(port_a, A, "cluster-a"), (port_b, B, "cluster-b")] {
        for http2 in [false, true] {
            let answer = curl(local(port), host, "/version", &c.pki, http2, &[])
                .await
                .with_context(|| {
                    format!(
                        "HAProxy log:\n{}",
                        std::fs::read_to_string(haproxy.log_path()).unwrap_or_default()
                    )
                })?;
            ensure!(
                answer.status_line.contains("200") && answer.standin() == Some(cluster),
                "{host} via HAProxy :{port}: {answer:?}"
            );
        }
    }
    let metrics = gateway.metrics().await?;
    for route in ["cluster-a", "cluster-b"] {
        // Two curls (HTTP/1.1 and HTTP/2).
        ensure!(
            metrics.count("apiway_route_connections_total", &[("route", route)]) >= 2.0,
            "{}",
            metrics.matching("apiway_route_connections_total")
        );
    }
    ensure!(
        metrics.count(
            "apiway_listener_proxy_header_errors_total",
            &[("listener", "in-cluster")]
        ) == 0.0,
        "{}",
        metrics.matching("apiway_listener_proxy_header")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_local_health_checks_are_served() -> Result<()> {
    // Health checks carry a header too: HAProxy sends LOCAL on them.
    let (_c, gateway, haproxy, _, _) = behind_haproxy(
        "send-proxy-v2 proxy-v2-options authority,crc32c,unique-id check check-send-proxy inter 100ms",
    )
    .await?;
    // LOCAL headers, served with the real endpoints (no route lists the
    // gateway's own address), so closed right after the header, which
    // HAProxy's TCP check counts as up.
    gateway
        .wait_metric(
            "apiway_listener_no_route_total",
            &[("listener", "in-cluster"), ("reason", "local")],
            Duration::from_secs(5),
            |v| v >= 4.0,
        )
        .await?;
    let log = std::fs::read_to_string(haproxy.log_path()).unwrap_or_default();
    ensure!(
        !log.contains("DOWN"),
        "HAProxy marked the gateway down:\n{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_stream_proxy_protocol_v1_reaches_the_cluster_named_by_destination() -> Result<()> {
    let c = Clusters::start().await?;
    let (port_a, port_b) = (free_port()?, free_port()?);
    let gateway = c.gateway(r#"[127.0.0.1]"#, port_a, port_b).await?;
    let gw = gateway.listener("in-cluster");
    let _nginx = Nginx::start(&format!(
        r#"
load_module {NGINX_STREAM_MODULE};
worker_processes 1;
events {{ worker_connections 64; }}
stream {{
    server {{
        listen 127.0.0.1:{port_a};
        proxy_pass {gw};
        proxy_protocol on;
    }}
    server {{
        listen 127.0.0.1:{port_b};
        proxy_pass {gw};
        proxy_protocol on;
    }}
}}
"#
    ))
    .await?;
    for (port, host, cluster) in [(port_a, A, "cluster-a"), (port_b, B, "cluster-b")] {
        let answer = curl(local(port), host, "/version", &c.pki, true, &[]).await?;
        ensure!(
            answer.status_line.contains("200") && answer.standin() == Some(cluster),
            "{host} via nginx :{port}: {answer:?}"
        );
    }
    Ok(())
}

/// A node's agent sends its own header (the pod's address and the
/// ClusterIP it dialed) through a load balancer that adds the outer one:
/// the gateway routes on the inner destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stacked_headers_route_on_the_inner_destination() -> Result<()> {
    let c = Clusters::start().await?;
    let lb_port = free_port()?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: in-cluster, address: 127.0.0.1:0, kind: proxy, trusted_sources: [127.0.0.0/8]}}
routes:
  - name: cluster-a
    destinations: ["10.96.0.1:443"]
    backends: [{{address: {a}}}]
  - name: load-balancer-itself
    destinations: ["127.0.0.1:{lb_port}"]
    backends: [{{address: {b}}}]
"#,
        a = c.a.addr(),
        b = c.b.addr()
    ))
    .await?;
    let _haproxy = Haproxy::start(&haproxy_config(
        &[(lb_port, "lb")],
        gateway.listener("in-cluster"),
        "send-proxy-v2",
    ))
    .await?;

    // The agent's side, blocking: inner header, then a real TLS client.
    let pending = rustls_hello(&c.pki, A, false)?;
    let answer = tokio::task::spawn_blocking(move || -> Result<_> {
        use std::io::Write;
        let mut sock = connect(local(lb_port))?;
        sock.write_all(b"PROXY TCP4 127.0.0.9 10.96.0.1 51000 443\r\n")?;
        sock.write_all(&pending.hello)?;
        pending.finish_get(sock, A, "/api/v1/namespaces")
    })
    .await??;
    expect_server(&answer, "cluster-a")?;
    gateway
        .wait_count(
            "apiway_listener_stacked_proxy_headers_total",
            &[("listener", "in-cluster")],
            1.0,
        )
        .await?;
    // (The route for the load balancer's own address is not asserted on:
    // the launcher's readiness probe of HAProxy's port lands there.)
    ensure!(
        gateway
            .metrics()
            .await?
            .count("apiway_route_connections_total", &[("route", "cluster-a")])
            == 1.0
    );
    Ok(())
}

fn closed(outcome: &(Vec<u8>, Closed)) -> bool {
    outcome.0.is_empty() && outcome.1 != Closed::StillOpen
}

/// Trusting only 10.0.0.0/8, the gateway closes a connection from
/// 127.0.0.1 without reading its (valid) header, on a `proxy` listener and
/// on a `tls` one that requires the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_source_is_closed_without_reading() -> Result<()> {
    let backend = Recorder::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: in-cluster, address: 127.0.0.1:0, kind: proxy, trusted_sources: [10.0.0.0/8]}}
  - {{name: public, address: 127.0.0.2:0, kind: tls, proxy_protocol: required, trusted_sources: [10.0.0.0/8]}}
routes:
  - name: cluster-a
    destinations: ["10.1.2.3:443"]
    backends: [{{address: {}}}]
"#,
        backend.addr()
    ))
    .await?;
    let header = b"PROXY TCP4 10.0.0.5 10.1.2.3 40000 443\r\nhello";
    for listener in ["in-cluster", "public"] {
        let outcome = send_raw(gateway.listener(listener), header).await?;
        ensure!(closed(&outcome), "{listener}: {outcome:?}");
    }
    let metrics = gateway.metrics().await?;
    for listener in ["in-cluster", "public"] {
        let on = [("listener", listener)];
        ensure!(
            metrics.count("apiway_listener_untrusted_sources_total", &on) == 1.0
                && metrics.count("apiway_listener_proxy_header_errors_total", &on) == 0.0
                && metrics.count("apiway_listener_client_hello_errors_total", &on) == 0.0,
            "{listener}:\n{}",
            metrics.matching("apiway_listener")
        );
    }
    ensure!(metrics.count("apiway_route_connections_total", &[("route", "cluster-a")]) == 0.0);
    ensure!(backend.connections() == 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_truncated_and_slow_headers_are_refused_and_counted() -> Result<()> {
    let backend = Recorder::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - name: in-cluster
    address: 127.0.0.1:0
    kind: proxy
    trusted_sources: [127.0.0.0/8]
    proxy_header_timeout: 500ms
routes:
  - name: cluster-a
    destinations: ["10.1.2.3:443"]
    backends: [{{address: {}}}]
"#,
        backend.addr()
    ))
    .await?;
    let addr = gateway.listener("in-cluster");
    let mut corrupted = ProxyHeader::tcp(
        Version::V2,
        "10.0.0.5:40000".parse()?,
        "10.1.2.3:443".parse()?,
    )
    .render(&RenderOptions {
        crc32c: true,
        noop: None,
    })?;
    // Flip a bit of the source address: the checksum no longer matches.
    corrupted[16] ^= 1;
    let cases: [(&str, &[u8]); 5] = [
        ("not_proxy", b"\x16\x03\x01\x00\x05hello"),
        ("malformed", b"PROXY TCP9 1.2.3.4 5.6.7.8 1 2\r\n"),
        ("malformed", b"PROXY TCP4 10.0.0.5 10.1.2.3 40000 443\n"),
        ("bad_checksum", &corrupted),
        (
            "unsupported",
            b"\r\n\r\n\0\r\nQUIT\n\x21\x12\x00\x0c\x0a\x00\x00\x05\x0a\x01\x02\x03\x9c\x40\x01\xbb",
        ),
    ];
    for (reason, bytes) in cases {
        let outcome = send_raw(addr, bytes).await?;
        ensure!(closed(&outcome), "{reason}: {outcome:?}");
    }
    // Truncated: the sender stops half way and closes its side.
    let mut truncated = TcpStream::connect(addr).await?;
    truncated.write_all(b"PROXY TCP4 10.0.0.5 10.1").await?;
    truncated.shutdown().await?;
    let outcome = read_until_closed(&mut truncated, Duration::from_secs(5)).await;
    ensure!(closed(&outcome), "truncated: {outcome:?}");
    // Slow: the sender stops half way and waits.
    let mut slow = TcpStream::connect(addr).await?;
    slow.write_all(b"PROXY TCP4 10.0.0.5 10.1").await?;
    let started = std::time::Instant::now();
    let outcome = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    ensure!(closed(&outcome), "slow: {outcome:?}");
    ensure!(
        started.elapsed() >= Duration::from_millis(400),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );

    let on = |reason| [("listener", "in-cluster"), ("reason", reason)];
    for (reason, expected) in [
        ("not_proxy", 1.0),
        ("malformed", 2.0),
        ("bad_checksum", 1.0),
        ("unsupported", 1.0),
        ("closed", 1.0),
    ] {
        gateway
            .wait_count(
                "apiway_listener_proxy_header_errors_total",
                &on(reason),
                expected,
            )
            .await?;
    }
    gateway
        .wait_count(
            "apiway_listener_proxy_header_timeouts_total",
            &[("listener", "in-cluster")],
            1.0,
        )
        .await?;
    ensure!(backend.connections() == 0);
    Ok(())
}

/// A `tls` listener behind a load balancer that may or may not send a
/// header; the route passes the real client on to a backend HAProxy that
/// requires a v2 header (`accept-proxy`), whose log shows what it learned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_with_optional_header_and_send_proxy_v2_to_haproxy() -> Result<()> {
    let c = Clusters::start().await?;
    let (lb_port, verifier_port) = (free_port()?, free_port()?);
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - name: public
    address: 127.0.0.1:0
    kind: tls
    proxy_protocol: optional
    trusted_sources: [127.0.0.0/8]
routes:
  - name: cluster-a
    hostnames: ["{A}"]
    send_proxy_protocol: v2
    backends: [{{address: 127.0.0.1:{verifier_port}}}]
  - name: cluster-b
    hostnames: ["{B}"]
    backends: [{{address: {b}}}]
"#,
        b = c.b.addr()
    ))
    .await?;
    let gw = gateway.addr();
    let mut config = haproxy_config(&[(lb_port, "lb")], gw, "send-proxy-v2");
    config.push_str(&format!(
        r#"
frontend verifier
    bind 127.0.0.1:{verifier_port} accept-proxy
    default_backend cluster_a
backend cluster_a
    server a {a}
"#,
        a = c.a.addr()
    ));
    let haproxy = Haproxy::start(&config).await?;
    let log = || std::fs::read_to_string(haproxy.log_path()).unwrap_or_default();

    // No header (a direct client), then a header from the load balancer;
    // both reach the cluster named by SNI.
    for (via, host, cluster) in [
        (gw, B, "cluster-b"),
        (local(lb_port), B, "cluster-b"),
        (gw, A, "cluster-a"),
        (local(lb_port), A, "cluster-a"),
    ] {
        let answer = curl(via, host, "/version", &c.pki, false, &[])
            .await
            .with_context(|| format!("HAProxy log:\n{}", log()))?;
        ensure!(
            answer.standin() == Some(cluster),
            "{host} via {via}: {answer:?}"
        );
    }
    // What the verifier learned from the gateway's header for the request
    // that came through the load balancer: the client the load balancer
    // saw, and the load balancer's address as the destination. For the
    // direct request: the client's real address, the gateway as the
    // destination. (HAProxy logs a connection when it ends.)
    eventually(
        "the verifier's log lines",
        Duration::from_secs(5),
        || async {
            let lines = log();
            let lb_client = lines
                .lines()
                .rfind(|l| l.contains("frontend=lb "))
                .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("client=")))
                .ok_or_else(|| format!("no lb line in:\n{lines}"))?
                .to_string();
            let via_lb = format!("frontend=verifier client={lb_client} dst=127.0.0.1:{lb_port}");
            let direct = format!("dst={gw}");
            let verifier = |needle: &str| {
                lines
                    .lines()
                    .any(|l| l.contains("frontend=verifier ") && l.contains(needle))
            };
            if verifier(&via_lb) && verifier(&direct) {
                Ok(())
            } else {
                Err(format!(
                    "want `{via_lb}` and a verifier line with `{direct}` in:\n{lines}"
                ))
            }
        },
    )
    .await?;
    Ok(())
}

/// Opens a connection with a v1 header naming `destination`, sends `ping`
/// and expects it echoed.
async fn echo_via(addr: SocketAddr, destination: &str) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(format!("PROXY TCP4 10.0.0.5 {destination} 40000 443\r\nping").as_bytes())
        .await?;
    let mut got = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(3), stream.read_exact(&mut got))
        .await
        .context("no echo")??;
    ensure!(&got == b"ping", "{got:?}");
    Ok(stream)
}

fn echo_config(trusted: &str, a: SocketAddr, b: SocketAddr, b_destinations: &str) -> String {
    format!(
        r#"
admin: {{address: 127.0.0.1:0}}
reload_interval: 200ms
listeners:
  - {{name: in-cluster, address: 127.0.0.1:0, kind: proxy, trusted_sources: [{trusted}]}}
routes:
  - name: cluster-a
    destinations: ["10.1.2.3:443"]
    backends: [{{address: {a}}}]
  - name: cluster-b
    destinations: [{b_destinations}]
    backends: [{{address: {b}}}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_a_destination_and_narrows_trust_while_a_connection_stays_open() -> Result<()> {
    let (a, b) = (EchoBackend::start().await?, EchoBackend::start().await?);
    let gateway = GatewayProcess::start(&echo_config(
        "127.0.0.0/8",
        a.addr(),
        b.addr(),
        "\"10.1.2.4:443\"",
    ))
    .await?;
    let addr = gateway.listener("in-cluster");
    let mut open = echo_via(addr, "10.1.2.3").await?;

    // 10.9.9.9 is not routed yet: closed, counted.
    let mut refused = TcpStream::connect(addr).await?;
    refused
        .write_all(b"PROXY TCP4 10.0.0.5 10.9.9.9 40000 443\r\nping")
        .await?;
    let outcome = read_until_closed(&mut refused, Duration::from_secs(3)).await;
    ensure!(closed(&outcome), "{outcome:?}");
    gateway
        .wait_metric(
            "apiway_listener_no_route_total",
            &[
                ("listener", "in-cluster"),
                ("reason", "unknown_destination"),
            ],
            Duration::from_secs(2),
            |v| v == 1.0,
        )
        .await?;

    gateway.write_config(&echo_config(
        "127.0.0.0/8",
        a.addr(),
        b.addr(),
        "\"10.1.2.4:443\", \"10.9.9.9:443\"",
    ))?;
    let before = b.connections();
    eventually(
        "10.9.9.9 routed to cluster-b",
        Duration::from_secs(5),
        || async {
            match echo_via(addr, "10.9.9.9").await {
                Ok(_) if b.connections() > before => Ok(()),
                Ok(_) => Err("echoed by another backend".to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?;

    // Trust only 10.0.0.0/8 from now on: new connections from 127.0.0.1
    // are closed unread; the one already open is not touched.
    gateway.write_config(&echo_config(
        "10.0.0.0/8",
        a.addr(),
        b.addr(),
        "\"10.1.2.4:443\", \"10.9.9.9:443\"",
    ))?;
    gateway
        .wait_metric(
            "apiway_config_reloads_total",
            &[("result", "success")],
            Duration::from_secs(5),
            |v| v >= 2.0,
        )
        .await?;
    let outcome = send_raw(addr, b"PROXY TCP4 10.0.0.5 10.1.2.3 40000 443\r\nping").await?;
    ensure!(closed(&outcome), "{outcome:?}");
    ensure!(
        gateway.metrics().await?.count(
            "apiway_listener_untrusted_sources_total",
            &[("listener", "in-cluster")]
        ) == 1.0
    );

    // The connection opened before both reloads still works both ways.
    open.write_all(b"more").await?;
    let mut got = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(3), open.read_exact(&mut got)).await??;
    ensure!(&got == b"more");
    ensure!(
        a.connections() == 1,
        "cluster-a got {} connections",
        a.connections()
    );
    Ok(())
}

fn edge_config(kind: &str, echo: SocketAddr) -> String {
    format!(
        r#"
admin: {{address: 127.0.0.1:0}}
reload_interval: 200ms
listeners:
  - {{name: edge, address: 127.0.0.1:0, {kind}}}
routes:
  - name: echo
    destinations: ["10.1.2.3:443"]
    connect_authorities: ["echo.internal:7"]
    backends: [{{address: {echo}}}]
"#
    )
}

/// A reload that changes a listener's kind keeps its socket: new
/// connections are served the new way, a tunnel opened the old way stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_changes_a_listeners_kind_on_the_same_socket() -> Result<()> {
    let echo = EchoBackend::start().await?;
    let gateway = GatewayProcess::start(&edge_config("kind: connect", echo.addr())).await?;
    let addr = gateway.listener("edge");
    let mut tunnel = TcpStream::connect(addr).await?;
    tunnel
        .write_all(b"CONNECT echo.internal:7 HTTP/1.1\r\n\r\nping")
        .await?;
    let expected = b"HTTP/1.1 200 Connection Established\r\n\r\nping";
    let mut got = vec![0u8; expected.len()];
    tokio::time::timeout(Duration::from_secs(3), tunnel.read_exact(&mut got)).await??;
    ensure!(got == expected, "{:?}", String::from_utf8_lossy(&got));

    gateway.write_config(&edge_config(
        "kind: proxy, trusted_sources: [127.0.0.0/8]",
        echo.addr(),
    ))?;
    // Until the reload lands, the connect listener answers the PROXY line
    // with 405, which `echo_via` reports as an error.
    eventually(
        "the listener to take PROXY headers",
        Duration::from_secs(5),
        || async {
            echo_via(addr, "10.1.2.3")
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        },
    )
    .await?;
    ensure!(gateway.listener("edge") == addr);

    tunnel.write_all(b"more").await?;
    let mut more = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(3), tunnel.read_exact(&mut more)).await??;
    ensure!(&more == b"more");
    Ok(())
}
