//! The data path: kubectl and curl through the tunnel to the fixture API,
//! half-close, resets, and large transfers.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::{kubeconfig_text, KubeApiProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

use crate::support::process::APIWAY;
use crate::support::tools::run;
use crate::tunnel_support::{tunnel_agent, tunnel_server, Behaviour, Destination, TunnelPki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_curl_reach_the_api_server_through_the_tunnel() -> Result<()> {
    let api = KubeApiProcess::start(Path::new(APIWAY)).await?;
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &["--allowed-destination".into(), api.addr().to_string()],
    )
    .await?;
    let agent = tunnel_agent(
        &pki,
        "node-1",
        &[server.listener("tunnel")],
        &[api.addr().to_string()],
        &[],
    )
    .await?;
    let local = agent.listener(">");
    ensure!(local != api.addr());

    let kubeconfig = pki.path("kubeconfig");
    std::fs::write(
        &kubeconfig,
        kubeconfig_text(local, api.ca_file(), "fixture"),
    )?;
    let kubectl = |args: &[&str]| {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(&kubeconfig).args(args);
        c
    };
    let ran = run(
        kubectl(&["create", "namespace", "through-the-tunnel"]),
        b"",
        Duration::from_secs(20),
    )
    .await?;
    ensure!(ran.success, "kubectl create failed: {}", ran.stderr);
    let ran = run(
        kubectl(&["get", "namespaces", "-o", "name"]),
        b"",
        Duration::from_secs(20),
    )
    .await?;
    ensure!(ran.success, "kubectl get failed: {}", ran.stderr);
    ensure!(
        ran.stdout.contains("namespace/through-the-tunnel"),
        "kubectl saw {}",
        ran.stdout
    );
    // The object is in the API, not in some cache on the way.
    ensure!(api
        .kubectl(&["get", "namespace", "through-the-tunnel", "-o", "name"])
        .await?
        .contains("through-the-tunnel"));

    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "5", "--cacert"])
        .arg(api.ca_file())
        .arg(format!("https://{local}/version"));
    let ran = run(curl, b"", Duration::from_secs(10)).await?;
    ensure!(ran.success, "curl failed: {}", ran.stderr);
    ensure!(ran.stdout.contains("gitVersion"), "curl got {}", ran.stdout);

    // Both sides count what went through.
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= 3.0);
    ensure!(m.count("apiway_tunnel_connections", &[("peer", "node-1")]) == 1.0);
    ensure!(m.count("apiway_tunnel_bytes_total", &[("direction", "into_tunnel")]) > 0.0);
    ensure!(
        m.count(
            "apiway_tunnel_bytes_total",
            &[("direction", "out_of_tunnel")]
        ) > 0.0
    );
    let server_addr = server.listener("tunnel").to_string();
    let a = agent.metrics().await?;
    ensure!(a.count("apiway_tunnel_connections", &[("peer", &server_addr)]) == 1.0);
    ensure!(a.count("apiway_tunnel_dials_total", &[("result", "ok")]) >= 3.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_resets_and_large_transfers_pass_through() -> Result<()> {
    let after_eof = Destination::start(Behaviour::AfterEof).await?;
    let reset = Destination::start(Behaviour::Reset).await?;
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let mut allowed = Vec::new();
    for d in [&after_eof, &reset, &echo] {
        allowed.push("--allowed-destination".to_owned());
        allowed.push(d.addr.to_string());
    }
    let server = tunnel_server(&pki, &allowed).await?;
    let targets: Vec<String> = [&after_eof, &reset, &echo]
        .iter()
        .map(|d| d.addr.to_string())
        .collect();
    let agent = tunnel_agent(&pki, "node-1", &[server.listener("tunnel")], &targets, &[]).await?;
    let local = |d: &Destination| agent.listener(&format!(">{}", d.addr));

    // Half-close: the request is sent, the send side closed, and the
    // answer still comes back.
    let mut s = TcpStream::connect(local(&after_eof)).await?;
    s.write_all(b"hello").await?;
    s.shutdown().await?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .context("no answer after half-close")??;
    ensure!(
        got == b"got: hello",
        "got {:?}",
        String::from_utf8_lossy(&got)
    );

    // A destination's reset reaches the client as a reset.
    let mut s = TcpStream::connect(local(&reset)).await?;
    s.write_all(b"x").await?;
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .context("the reset did not arrive")?;
    ensure!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "expected a reset, got {r:?}"
    );

    // 32 MiB each way, compared byte for byte.
    let s = TcpStream::connect(local(&echo)).await?;
    let (mut rd, mut wr) = s.into_split();
    let data: Vec<u8> = (0..32 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await?;
        wr.shutdown().await?;
        anyhow::Ok(())
    });
    let mut back = Vec::with_capacity(expect.len());
    tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut back))
        .await
        .context("the echo did not finish")??;
    writer.await??;
    ensure!(
        back.len() == expect.len(),
        "{} of {} bytes",
        back.len(),
        expect.len()
    );
    ensure!(back == expect, "the bytes differ");
    Ok(())
}
