//! Interop: a client generated from the same `.proto` by another gRPC
//! implementation (Python grpcio, Debian's python3-grpcio and
//! python3-grpc-tools) dials through `apiway tunnel-server` as
//! konnectivity-client would: DIAL_REQ, DIAL_RSP, DATA both ways,
//! CLOSE_REQ, CLOSE_RSP, status OK.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::process::Command;

use crate::support::tools::run;
use crate::tunnel_support::{tunnel_server, Behaviour, Destination, TunnelPki};

/// Debian's interpreter: python3-grpcio is installed for it.
const PYTHON: &str = "/usr/bin/python3";

async fn python_dial(
    pki: &TunnelPki,
    server: std::net::SocketAddr,
    destination: &str,
    payload: &str,
) -> Result<serde_json::Value> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (cert, key) = pki.agent("python-agent")?;
    let mut c = Command::new(PYTHON);
    c.arg(here.join("tests/tunnel/konnectivity_client.py"))
        .arg(here.join("../../proto/konnectivity-client.proto"))
        .arg(server.to_string())
        .arg(&pki.ca_pem)
        .arg(cert)
        .arg(key)
        .arg("localhost")
        .arg(destination)
        .arg(payload);
    let ran = run(c, b"", Duration::from_secs(30)).await?;
    ensure!(ran.success, "the grpcio client failed: {}", ran.stderr);
    serde_json::from_str(ran.stdout.trim()).with_context(|| format!("not JSON: {}", ran.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_grpcio_client_dials_through_the_tunnel_server() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &["--allowed-destination".into(), echo.addr.to_string()],
    )
    .await?;
    let tunnel = server.listener("tunnel");

    let r = python_dial(&pki, tunnel, &echo.addr.to_string(), "hello from grpcio").await?;
    ensure!(r["first"] == "DIAL_RSP" && r["random"] == 4242, "{r}");
    ensure!(r["error"] == "", "{r}");
    ensure!(r["echoed"] == "hello from grpcio", "{r}");
    ensure!(r["close"]["connect_id"] == r["connect_id"], "{r}");
    ensure!(r["status"] == "OK", "{r}");

    // A refusal is a DIAL_RSP with the reason, as konnectivity-client
    // expects it.
    let r = python_dial(&pki, tunnel, "127.0.0.1:1", "x").await?;
    ensure!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.1:1 is not allowed")),
        "{r}"
    );
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) == 1.0);
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "refused")]) == 1.0);
    ensure!(m.count("apiway_tunnel_open_streams", &[]) == 0.0);
    Ok(())
}
