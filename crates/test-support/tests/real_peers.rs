//! The stand-in and the launchers against real third-party programs: curl,
//! openssl s_client, HAProxy, nginx and etcd (over mutual TLS).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::pki::{Ca, Issued};
use apiway_standin::{https_get, StandinConfig, StandinServer};
use apiway_test_support::peers::{
    free_port, proc_memory, require_binary, Etcd, Haproxy, Nginx, NGINX_STREAM_MODULE,
};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// Two stand-ins, `api-a` and `api-b`, each with its own name, both
/// requiring client certificates from `ca`.
struct Backends {
    ca: Ca,
    client: Issued,
    a: StandinServer,
    b: StandinServer,
}

impl Backends {
    async fn start() -> Result<Backends> {
        let ca = Ca::new("test ca")?;
        let client = ca.issue_client("alice", &["system:masters"])?;
        let mut servers = Vec::new();
        for (name, host) in [("api-a", "api.a.example"), ("api-b", "api.b.example")] {
            let cert = ca.issue_server(&[host], &[LOCALHOST])?;
            let config = StandinConfig::new(name, any_port(), cert).with_client_ca(&ca);
            servers.push(StandinServer::start(config).await?);
        }
        let b = servers.pop().context("two servers")?;
        let a = servers.pop().context("two servers")?;
        Ok(Backends { ca, client, a, b })
    }

    /// GETs `/whoami` through `addr` with `sni`, returning the JSON fields
    /// (server, client_cn, sni).
    async fn whoami(&self, addr: SocketAddr, sni: &str) -> Result<(String, String, String)> {
        let r = https_get(addr, sni, "/whoami", &self.ca, Some(&self.client), true).await?;
        ensure!(r.status == 200, "status {}", r.status);
        let json = r.json()?;
        let field = |k: &str| json[k].as_str().unwrap_or_default().to_string();
        Ok((field("server"), field("client_cn"), field("sni")))
    }
}

async fn run(command: &mut Command, stdin: &[u8]) -> Result<Output> {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).await?;
        // Keep stdin open briefly: s_client stops reading the server when
        // stdin closes before the answer arrives.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(input);
        });
    }
    tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .context("command timed out")?
        .context("waiting for command")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn curl(ca: &Path, port: u16, extra: &[&str], path: &str) -> Result<Command> {
    let mut command = Command::new(require_binary("curl")?);
    command
        .arg("-sS")
        .arg("--max-time")
        .arg("10")
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("api.a.example:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://api.a.example:{port}{path}"));
    Ok(command)
}

#[tokio::test]
async fn curl_over_http1_and_http2() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("test ca")?;
    let (ca_crt, _) = ca.write(dir.path(), "ca")?;
    let cert = ca.issue_server(&["api.a.example"], &[LOCALHOST])?;
    let server = StandinServer::start(
        StandinConfig::new("api-a", any_port(), cert).with_alt_svc("h2=\":7443\""),
    )
    .await?;
    let port = server.addr().port();

    for (flag, version) in [("--http1.1", "HTTP/1.1"), ("--http2", "HTTP/2.0")] {
        let out = run(
            &mut curl(&ca_crt, port, &[flag, "-i"], "/report?watch=1")?,
            b"",
        )
        .await?;
        let stdout = text(&out.stdout);
        ensure!(out.status.success(), "curl {flag}: {}", text(&out.stderr));
        assert!(stdout.contains("x-apiway-standin: api-a"), "{stdout}");
        assert!(
            stdout.to_lowercase().contains("alt-svc: h2=\":7443\""),
            "{stdout}"
        );
        let body = stdout.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(body).context("curl body")?;
        assert_eq!(json["server"], "api-a");
        assert_eq!(json["version"], version);
        assert_eq!(json["sni"], "api.a.example");
        assert_eq!(json["path"], "/report");
    }

    // /echo streams a POST body back; /stream sends exactly N bytes.
    let echo = run(
        &mut curl(&ca_crt, port, &["--http2", "--data-binary", "@-"], "/echo")?,
        b"hello through TLS",
    )
    .await?;
    assert_eq!(text(&echo.stdout), "hello through TLS");
    let stream = run(
        &mut curl(
            &ca_crt,
            port,
            &[
                "--http1.1",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
            ],
            "/stream?bytes=3000000",
        )?,
        b"",
    )
    .await?;
    assert_eq!(text(&stream.stdout), "200 3000000");

    // kubectl-style /version and a flipped /readyz.
    let version = run(&mut curl(&ca_crt, port, &[], "/version")?, b"").await?;
    assert!(text(&version.stdout).contains("\"gitVersion\":\"v1.31.0-apiway-standin\""));
    server.set_ready(false);
    let readyz = run(
        &mut curl(&ca_crt, port, &["-w", " %{http_code}"], "/readyz")?,
        b"",
    )
    .await?;
    assert!(
        text(&readyz.stdout).ends_with(" 503"),
        "{}",
        text(&readyz.stdout)
    );
    Ok(())
}

#[tokio::test]
async fn openssl_s_client_needs_a_client_certificate() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let backends = Backends::start().await?;
    let (ca_crt, _) = backends.ca.write(dir.path(), "ca")?;
    let (client_crt, client_key) = backends.client.write(dir.path(), "alice")?;
    let request = b"GET /whoami HTTP/1.1\r\nHost: api.a.example\r\nConnection: close\r\n\r\n";
    let s_client = |with_cert: bool| -> Result<Command> {
        let mut command = Command::new(require_binary("openssl")?);
        command
            .arg("s_client")
            .arg("-connect")
            .arg(backends.a.addr().to_string())
            .arg("-servername")
            .arg("api.a.example")
            .arg("-CAfile")
            .arg(&ca_crt)
            .arg("-verify_return_error")
            .arg("-alpn")
            .arg("http/1.1")
            .arg("-quiet");
        if with_cert {
            command
                .arg("-cert")
                .arg(&client_crt)
                .arg("-key")
                .arg(&client_key);
        }
        Ok(command)
    };

    let ok = run(&mut s_client(true)?, request).await?;
    let stdout = text(&ok.stdout);
    assert!(
        stdout.starts_with("HTTP/1.1 200"),
        "{stdout}\n{}",
        text(&ok.stderr)
    );
    assert!(stdout.contains("\"client_cn\":\"alice\""), "{stdout}");
    assert!(stdout.contains("\"server\":\"api-a\""), "{stdout}");

    let rejected = run(&mut s_client(false)?, request).await?;
    let stdout = text(&rejected.stdout);
    let stderr = text(&rejected.stderr);
    assert!(
        !stdout.contains("HTTP/1.1"),
        "served without a certificate: {stdout}"
    );
    assert!(stderr.contains("certificate required"), "{stderr}");
    assert_eq!(backends.a.requests_served(), 1);
    Ok(())
}

#[tokio::test]
async fn haproxy_routes_by_sni_and_passes_tls_through() -> Result<()> {
    let backends = Backends::start().await?;
    let port = free_port()?;
    let config = |first: SocketAddr, second: SocketAddr| {
        format!(
            "global\n  log stderr format raw local0 info\n\
             defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             frontend tls\n  bind 127.0.0.1:{port}\n\
             \x20 tcp-request inspect-delay 2s\n\
             \x20 tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
             \x20 use_backend a if {{ req.ssl_sni -i api.a.example }}\n\
             \x20 default_backend b\n\
             backend a\n  server a {first}\n\
             backend b\n  server b {second}\n"
        )
    };
    let mut haproxy = Haproxy::start(&config(backends.a.addr(), backends.b.addr())).await?;
    let front = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    assert!(!haproxy.worker_pids().is_empty());

    let a = backends.whoami(front, "api.a.example").await?;
    assert_eq!(a, ("api-a".into(), "alice".into(), "api.a.example".into()));
    let b = backends.whoami(front, "api.b.example").await?;
    assert_eq!(b, ("api-b".into(), "alice".into(), "api.b.example".into()));

    // Reload with backend a pointing at api-b: api.a.example now fails
    // certificate verification (the passthrough keeps api-b's certificate).
    haproxy
        .reload(&config(backends.b.addr(), backends.b.addr()))
        .await?;
    assert!(backends.whoami(front, "api.a.example").await.is_err());
    assert_eq!(backends.whoami(front, "api.b.example").await?.0, "api-b");

    // A broken config is refused and the running one stays.
    assert!(haproxy
        .reload("frontend x\n  bind nonsense\n")
        .await
        .is_err());
    assert_eq!(backends.whoami(front, "api.b.example").await?.0, "api-b");
    haproxy.stop().await?;
    assert!(tokio::net::TcpStream::connect(front).await.is_err());
    Ok(())
}

#[tokio::test]
async fn nginx_stream_routes_by_sni_with_ssl_preread() -> Result<()> {
    let backends = Backends::start().await?;
    let port = free_port()?;
    let config = |first: SocketAddr, second: SocketAddr| {
        format!(
            "load_module {NGINX_STREAM_MODULE};\n\
             worker_processes 1;\n\
             events {{ worker_connections 64; }}\n\
             stream {{\n\
             \x20 map $ssl_preread_server_name $backend {{\n\
             \x20   api.a.example {first};\n\
             \x20   default {second};\n\
             \x20 }}\n\
             \x20 server {{\n\
             \x20   listen 127.0.0.1:{port};\n\
             \x20   ssl_preread on;\n\
             \x20   proxy_pass $backend;\n\
             \x20 }}\n\
             }}\n"
        )
    };
    let mut nginx = Nginx::start(&config(backends.a.addr(), backends.b.addr())).await?;
    let front = SocketAddr::from((Ipv4Addr::LOCALHOST, port));

    let a = backends.whoami(front, "api.a.example").await?;
    assert_eq!(a, ("api-a".into(), "alice".into(), "api.a.example".into()));
    assert_eq!(backends.whoami(front, "api.b.example").await?.0, "api-b");

    let pids = nginx.pids();
    assert!(pids.len() >= 2, "master and a worker: {pids:?}");
    let memory = nginx.memory()?;
    assert!(
        memory.pss_kb > 0 && memory.rss_kb >= memory.pss_kb,
        "{memory:?}"
    );
    assert!(proc_memory(nginx.master_pid())?.rss_kb > 0);

    // Reload: everything goes to api-b now; a bad config is refused.
    nginx
        .reload(&config(backends.b.addr(), backends.b.addr()))
        .await?;
    assert_eq!(backends.whoami(front, "api.b.example").await?.0, "api-b");
    assert!(backends.whoami(front, "api.a.example").await.is_err());
    assert!(nginx.reload("stream { nonsense; }").await.is_err());
    assert_eq!(backends.whoami(front, "api.b.example").await?.0, "api-b");
    drop(nginx);
    assert!(tokio::net::TcpStream::connect(front).await.is_err());
    Ok(())
}

#[tokio::test]
async fn etcd_over_mutual_tls() -> Result<()> {
    let ca = Ca::new("etcd ca")?;
    let server = ca.issue_peer(&["localhost"], &[LOCALHOST])?;
    let etcd = Etcd::start_mtls(&ca, &server, &ca).await?;
    let client = ca.issue_client("apiway", &[])?;

    let put = etcd
        .etcdctl(Some(&client), &["put", "/apiway/k", "v1"])
        .await?;
    ensure!(put.status.success(), "put: {}", text(&put.stderr));
    assert_eq!(text(&put.stdout).trim(), "OK");
    let get = etcd.etcdctl(Some(&client), &["get", "/apiway/k"]).await?;
    assert_eq!(
        text(&get.stdout).lines().collect::<Vec<_>>(),
        ["/apiway/k", "v1"]
    );

    let without = etcd.etcdctl(None, &["get", "/apiway/k"]).await?;
    assert!(
        !without.status.success(),
        "served without a client certificate"
    );
    assert!(!text(&without.stdout).contains("v1"));

    // Our own client speaks to etcd's HTTP endpoint with a certificate, and
    // is refused without one.
    let health = https_get(
        etcd.client_addr(),
        "127.0.0.1",
        "/health",
        &ca,
        Some(&client),
        false,
    )
    .await?;
    assert!(
        health.body.contains("\"health\":\"true\""),
        "{}",
        health.body
    );
    assert!(
        https_get(etcd.client_addr(), "127.0.0.1", "/health", &ca, None, false)
            .await
            .is_err()
    );
    etcd.stop().await?;
    Ok(())
}
