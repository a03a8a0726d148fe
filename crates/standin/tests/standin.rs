//! The stand-in API server and the HTTPS client, through real sockets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use apiway_standin::pki::{self, Ca, Issued};
use apiway_standin::standin::pattern_byte;
use apiway_standin::{https_get, serve_forever, StandinConfig, StandinServer};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn server_cert(ca: &Ca) -> Result<Issued> {
    ca.issue_server(&["api.a.example", "kubernetes.default"], &[LOCALHOST])
}

async fn standin(ca: &Ca, name: &str) -> Result<StandinServer> {
    StandinServer::start(StandinConfig::new(name, any_port(), server_cert(ca)?)).await
}

#[tokio::test]
async fn answers_over_http1_and_http2_with_what_it_saw() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = StandinServer::start(
        StandinConfig::new("api-a", any_port(), server_cert(&ca)?)
            .with_alt_svc("h2=\"127.0.0.2:6443\"; ma=60"),
    )
    .await?;

    for (http2, version, alpn) in [(false, "HTTP/1.1", "http/1.1"), (true, "HTTP/2.0", "h2")] {
        let r = https_get(
            server.addr(),
            "api.a.example",
            "/api/v1/pods?limit=1",
            &ca,
            None,
            http2,
        )
        .await?;
        assert_eq!(r.status, 200);
        assert_eq!(r.standin(), Some("api-a"));
        assert_eq!(r.header("alt-svc"), Some("h2=\"127.0.0.2:6443\"; ma=60"));
        let json = r.json()?;
        assert_eq!(json["server"], "api-a");
        assert_eq!(json["path"], "/api/v1/pods");
        assert_eq!(json["query"], "limit=1");
        assert_eq!(json["method"], "GET");
        assert_eq!(json["version"], version);
        assert_eq!(json["alpn"], alpn);
        assert_eq!(json["sni"], "api.a.example");
        assert!(json["client_cn"].is_null());
    }
    assert_eq!(server.requests_served(), 2);
    Ok(())
}

#[tokio::test]
async fn ip_server_name_sends_no_sni() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;
    let r = https_get(server.addr(), "127.0.0.1", "/whoami", &ca, None, true).await?;
    assert!(r.json()?["sni"].is_null());
    Ok(())
}

#[tokio::test]
async fn health_endpoints_and_readyz_flip() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;
    let get =
        |path: &'static str| https_get(server.addr(), "api.a.example", path, &ca, None, false);

    for path in ["/livez", "/healthz", "/readyz"] {
        let r = get(path).await?;
        assert_eq!((r.status.as_u16(), r.body.as_str()), (200, "ok"), "{path}");
    }
    server.set_ready(false);
    assert_eq!(get("/readyz").await?.status, 503);
    assert_eq!(get("/livez").await?.status, 200);
    server.set_ready(true);
    assert_eq!(get("/readyz").await?.status, 200);

    let version = get("/version").await?.json()?;
    assert_eq!(version["major"], "1");
    assert_eq!(version["gitVersion"], "v1.31.0-apiway-standin");
    Ok(())
}

#[tokio::test]
async fn stream_sends_exactly_n_pattern_bytes() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;
    // The first 128 pattern bytes are ASCII, so the String body holds them as is.
    let r = https_get(
        server.addr(),
        "api.a.example",
        "/stream?bytes=100",
        &ca,
        None,
        true,
    )
    .await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("100"));
    let expected: String = (0..100u64).map(|i| char::from(pattern_byte(i))).collect();
    assert_eq!(r.body, expected);

    let bad = https_get(
        server.addr(),
        "api.a.example",
        "/stream?bytes=x",
        &ca,
        None,
        false,
    )
    .await?;
    assert_eq!(bad.status, 400);
    Ok(())
}

#[tokio::test]
async fn client_certificate_is_required_when_a_client_ca_is_set() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let alice = ca.issue_client("alice", &["system:masters", "devs"])?;
    let server = StandinServer::start(
        StandinConfig::new("api-mtls", any_port(), server_cert(&ca)?).with_client_ca(&ca),
    )
    .await?;

    let r = https_get(
        server.addr(),
        "api.a.example",
        "/whoami",
        &ca,
        Some(&alice),
        true,
    )
    .await?;
    let json = r.json()?;
    assert_eq!(json["client_cn"], "alice");
    assert_eq!(json["client_organizations"][0], "system:masters");
    assert_eq!(json["client_organizations"][1], "devs");

    let without = https_get(server.addr(), "api.a.example", "/whoami", &ca, None, false).await;
    assert!(without.is_err(), "served without a client certificate");

    let other_ca = Ca::new("other ca")?;
    let mallory = other_ca.issue_client("mallory", &[])?;
    let wrong = https_get(
        server.addr(),
        "api.a.example",
        "/",
        &ca,
        Some(&mallory),
        false,
    )
    .await;
    assert!(wrong.is_err(), "served a certificate from another CA");
    assert_eq!(server.requests_served(), 1);
    Ok(())
}

#[tokio::test]
async fn garbage_and_plaintext_are_dropped_quietly() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;

    let mut plain = TcpStream::connect(server.addr()).await?;
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), plain.read(&mut buf))
        .await
        .context("server kept a plaintext connection open")?
        .unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("HTTP/1.1 200"));

    let mut garbage = TcpStream::connect(server.addr()).await?;
    garbage
        .write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0, 1, 2, 3])
        .await?;
    drop(garbage);

    // Still serving, and nothing left open.
    let r = https_get(server.addr(), "api.a.example", "/livez", &ca, None, false).await?;
    assert_eq!(r.status, 200);
    wait_until(|| server.connections_open() == 0).await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_closes_the_port_and_drops_open_connections() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;
    let addr = server.addr();

    // An established TLS connection that has not sent a request yet.
    let config = pki::client_config(&ca, None, &[pki::ALPN_HTTP11])?;
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("api.a.example")?, tcp)
        .await?;
    wait_until(|| server.connections_open() == 1).await?;

    server.shutdown().await;

    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
        .await
        .context("connection still open after shutdown")?;
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "port still open");
    Ok(())
}

#[tokio::test]
async fn from_files_and_serve_forever() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("test ca")?;
    let (crt, key) = server_cert(&ca)?.write(dir.path(), "server")?;
    let (ca_crt, _) = ca.write(dir.path(), "ca")?;
    let port = apiway_test_support::peers::free_port()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let config = StandinConfig::from_files("from-files", addr, &crt, &key, Some(&ca_crt))?;
    let task = tokio::spawn(serve_forever(config));
    apiway_test_support::peers::wait_for_port(addr, Duration::from_secs(5)).await?;

    let bob = ca.issue_client("bob", &[])?;
    let r = https_get(addr, "kubernetes.default", "/x", &ca, Some(&bob), false).await?;
    let json = r.json()?;
    assert_eq!(
        (json["server"].as_str(), json["client_cn"].as_str()),
        (Some("from-files"), Some("bob"))
    );
    task.abort();
    Ok(())
}

#[tokio::test]
async fn prebuilt_config_client() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "api-a").await?;
    let config: Arc<rustls::ClientConfig> = pki::client_config(&ca, None, &[pki::ALPN_H2])?;
    let r =
        apiway_standin::https_get_with_config(server.addr(), "api.a.example", "/", config, true)
            .await?;
    assert_eq!(r.version, http::Version::HTTP_2);
    // A name the certificate does not cover is refused by the client.
    let wrong = https_get(server.addr(), "api.b.example", "/", &ca, None, false).await;
    assert!(wrong.is_err());
    Ok(())
}

async fn wait_until(condition: impl Fn() -> bool) -> Result<()> {
    for _ in 0..250 {
        if condition() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("condition not reached within 5 s")
}

#[tokio::test]
async fn version_with_a_trailing_slash_is_the_version_document() -> Result<()> {
    let ca = Ca::new("test ca")?;
    let server = standin(&ca, "v").await?;
    for path in ["/version", "/version/"] {
        let r = https_get(server.addr(), "kubernetes.default", path, &ca, None, false).await?;
        assert_eq!(r.status, 200, "{path}");
        let json = r.json()?;
        assert!(
            json["gitVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with('v')),
            "{path}: {json}"
        );
    }
    Ok(())
}
