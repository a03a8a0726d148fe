//! The access log through the real binary: one JSON line per connection
//! in a file, with what routed it, the route, the backend, bytes and how
//! it ended; a reload switches it to text in another file.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tls::rustls_hello;
use crate::support::{EchoBackend, GatewayProcess, Pki};

const NAME: &str = "api.a.example.com";

/// The lines of `path` once it has at least `n`.
async fn lines_of(path: &Path, n: usize) -> Result<Vec<String>> {
    crate::support::eventually(
        &format!("{n} lines in {}", path.display()),
        Duration::from_secs(5),
        || async {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            if lines.len() >= n {
                Ok(lines)
            } else {
                Err(format!("{} lines", lines.len()))
            }
        },
    )
    .await
}

/// One connection routed by its SNI to the echo backend: the ClientHello
/// goes there and comes back, then the client ends its side and reads to
/// the end, so the relay ends cleanly (a TLS client that closes with
/// unread session tickets would reset instead). The bytes each way.
async fn echoed(gateway: std::net::SocketAddr, pki: &Pki) -> Result<u64> {
    let hello = rustls_hello(pki, NAME, false)?.hello;
    let mut stream = TcpStream::connect(gateway).await?;
    stream.write_all(&hello).await?;
    let mut back = vec![0u8; hello.len()];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut back)).await??;
    ensure!(back == hello, "the echo differs");
    stream.shutdown().await?;
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await??;
    ensure!(rest.is_empty(), "bytes after the echo");
    Ok(hello.len() as u64)
}

fn config(api: std::net::SocketAddr, log: &Path, format: &str) -> String {
    format!(
        "admin: {{address: 127.0.0.1:0}}\n\
         access_log: {{path: {}, format: {format}}}\n\
         listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]\n\
         routes:\n  - name: cluster-a\n    hostnames: [{NAME}]\n    backends: [{{address: {api}}}]\n",
        log.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_gets_one_line_in_json_or_text() -> Result<()> {
    let pki = Pki::new()?;
    let api = EchoBackend::start().await?;
    let dir = tempfile::tempdir()?;
    let json_log = dir.path().join("access.json");
    let gw = GatewayProcess::start(&config(api.addr(), &json_log, "json")).await?;

    let sent = echoed(gw.addr(), &pki).await?;
    let lines = lines_of(&json_log, 1).await?;
    let v: Value = serde_json::from_str(&lines[0]).context("a JSON line")?;
    ensure!(v["listener"] == "public", "{v}");
    ensure!(v["matched"] == NAME, "{v}");
    ensure!(v["route"] == "cluster-a", "{v}");
    ensure!(v["backend"] == api.addr().to_string(), "{v}");
    ensure!(v["end"] == "closed", "{v}");
    ensure!(
        v["bytes_to_backend"].as_u64() == Some(sent) && v["bytes_to_client"].as_u64() == Some(sent),
        "the ClientHello each way ({sent} bytes): {v}"
    );
    ensure!(v["duration_ms"].as_f64().is_some(), "{v}");
    ensure!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");

    // A reload moves it to another file, as text.
    let text_log = dir.path().join("access.log");
    gw.write_config(&config(api.addr(), &text_log, "text"))?;
    gw.wait_count("apiway_config_reloads_total", &[("result", "success")], 1.0)
        .await?;
    let sent = echoed(gw.addr(), &pki).await?;
    let lines = lines_of(&text_log, 1).await?;
    ensure!(
        lines[0].contains(&format!("matched={NAME} route=cluster-a"))
            && lines[0].contains("listener=public")
            && lines[0].contains(&format!("bytes_to_backend={sent} bytes_to_client={sent}"))
            && lines[0].ends_with("end=closed"),
        "{}",
        lines[0]
    );
    // The first file got nothing more.
    ensure!(std::fs::read_to_string(&json_log)?.lines().count() == 1);
    let m = gw.metrics().await?;
    ensure!(m.count("apiway_access_log_dropped_total", &[]) == 0.0);
    Ok(())
}
