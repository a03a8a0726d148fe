//! The same ClientHello, re-cut into 100-byte TLS records, sent to HAProxy
//! 2.6 routing on `req.ssl_sni` and to apiway.
//!
//! HAProxy 2.6 (`smp_fetch_ssl_hello_sni`, src/payload.c) reads the first
//! record header, then parses the handshake message as if it continued
//! contiguously in the buffer: the headers of records 2, 3... are read as
//! message bytes. Whether it finds the server name then depends on where
//! the record boundaries fall among the extensions. For openssl's captured
//! hello it does not, and the connection goes to the default backend. (A
//! fresh rustls hello is no good here: rustls shuffles its extensions, so
//! HAProxy's answer changes from run to run.) apiway reassembles records.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::{free_port, Haproxy};
use apiway_wire::sni::refragment;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::backend::Recorded;
use crate::support::{captured_hello, GatewayProcess, Recorder};

const NAME: &str = "api.a.example.com";

/// Sends `bytes` to `addr` and keeps the connection open until a backend
/// recorded it.
async fn send(addr: SocketAddr, bytes: &[u8]) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(bytes).await?;
    Ok(stream)
}

/// Which of the two recorders got the next connection.
async fn landed(
    cluster: &mut Recorder,
    fallback: &mut Recorder,
) -> Result<(&'static str, Recorded)> {
    tokio::select! {
        r = cluster.next(Duration::from_secs(5)) => Ok(("cluster", r?)),
        r = fallback.next(Duration::from_secs(5)) => Ok(("fallback", r?)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_misroutes_a_hello_split_across_records_and_apiway_does_not() -> Result<()> {
    // openssl s_client's hello for api.a.example.com, as captured.
    let hello = captured_hello("openssl-sni.bin")?;
    let recut = refragment(&hello, 100)?;

    let mut ha_cluster = Recorder::start().await?;
    let mut ha_fallback = Recorder::start().await?;
    let port = free_port()?;
    let haproxy = Haproxy::start(&format!(
        r#"
global
    maxconn 100
defaults
    mode tcp
    log stderr format raw local0 info
    option tcplog
    timeout connect 2s
    timeout client 10s
    timeout server 10s
frontend tls
    bind 127.0.0.1:{port}
    tcp-request inspect-delay 2s
    tcp-request content accept if {{ req.ssl_hello_type 1 }}
    use_backend cluster_a if {{ req.ssl_sni -i {NAME} }}
    default_backend fallback
backend cluster_a
    server a {cluster}
backend fallback
    server f {fallback}
"#,
        cluster = ha_cluster.addr(),
        fallback = ha_fallback.addr()
    ))
    .await?;
    let ha = SocketAddr::from(([127, 0, 0, 1], port));

    let mut gw_cluster = Recorder::start().await?;
    let mut gw_fallback = Recorder::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [{NAME}]
    backends: [{{address: {}}}]
  - name: fallback
    backends: [{{address: {}}}]
default_route: fallback
"#,
        gw_cluster.addr(),
        gw_fallback.addr()
    ))
    .await?;

    let haproxy_log = || std::fs::read_to_string(haproxy.log_path()).unwrap_or_default();
    // Control: the hello in one record is routed right by both.
    for (proxy, cluster, fallback) in [
        (ha, &mut ha_cluster, &mut ha_fallback),
        (gateway.addr(), &mut gw_cluster, &mut gw_fallback),
    ] {
        let _conn = send(proxy, &hello).await?;
        let (to, got) = landed(cluster, fallback).await?;
        ensure!(
            to == "cluster" && got.bytes == hello,
            "one-record hello via {proxy} went to {to}; HAProxy log:\n{}",
            haproxy_log()
        );
    }

    // The same hello in 100-byte records.
    let _conn = send(ha, &recut).await?;
    let (haproxy_to, got) = landed(&mut ha_cluster, &mut ha_fallback).await?;
    ensure!(got.bytes == recut, "HAProxy changed the bytes");
    let _conn = send(gateway.addr(), &recut).await?;
    let (apiway_to, got) = landed(&mut gw_cluster, &mut gw_fallback).await?;
    ensure!(got.bytes == recut, "apiway changed the bytes");
    let sni = got.hello.context("no hello")?.server_name;
    ensure!(sni.as_deref() == Some(NAME));

    ensure!(
        apiway_to == "cluster",
        "apiway sent the re-cut hello to its {apiway_to} backend"
    );
    // What HAProxy 2.6 does with it (observed, and the reason this test
    // exists): no server name found, so the default backend.
    ensure!(
        haproxy_to == "fallback",
        "HAProxy routed the re-cut hello to {haproxy_to}: this version reassembles records"
    );
    drop(haproxy);
    Ok(())
}
