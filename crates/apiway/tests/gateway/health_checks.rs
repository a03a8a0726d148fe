//! Health checks of the backends apiway itself feeds: a backend behind
//! HAProxy's `accept-proxy` (the check sends the route's PROXY header, like
//! HAProxy's `check-send-proxy`), a stand-in that requires client
//! certificates, and nginx requiring a bearer token. Failures name their
//! cause.

use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_test_support::peers::{free_port, Haproxy, Nginx};

use crate::support::{GatewayProcess, Pki};

const NAME: &str = "api.a.example.com";
const CHECKS: &str = "apiway_backend_health_checks_total";

/// Waits for three passed checks of `route`, then insists none failed.
async fn passes(gw: &GatewayProcess, route: &str) -> Result<()> {
    gw.wait_metric(
        CHECKS,
        &[("route", route), ("result", "ok")],
        Duration::from_secs(10),
        |v| v >= 3.0,
    )
    .await?;
    let failed = gw
        .metrics()
        .await?
        .count(CHECKS, &[("route", route), ("result", "failed")]);
    ensure!(failed == 0.0, "route {route}: {failed} failed checks");
    ensure!(
        gw.metrics()
            .await?
            .count("apiway_backend_healthy", &[("route", route)])
            == 1.0,
        "route {route}: backend not healthy"
    );
    Ok(())
}

/// Waits for three failed checks of `route` and a log line that says why.
async fn fails_saying(gw: &GatewayProcess, route: &str, why: &str) -> Result<()> {
    gw.wait_metric(
        CHECKS,
        &[("route", route), ("result", "failed")],
        Duration::from_secs(10),
        |v| v >= 3.0,
    )
    .await?;
    let said = gw
        .log_lines()
        .iter()
        .any(|l| l.contains("health check failed") && l.contains(why));
    ensure!(said, "no health check failure of {route} saying `{why}`");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_send_the_routes_proxy_header_to_an_accept_proxy_backend() -> Result<()> {
    let pki = Pki::new()?;
    let api = pki.standin("behind-haproxy", &[NAME], false).await?;
    let port = free_port()?;
    let _haproxy = Haproxy::start(&format!(
        r#"
global
    maxconn 100
defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
frontend fe
    bind 127.0.0.1:{port} accept-proxy
    default_backend api
backend api
    server s {api}
"#,
        api = api.addr()
    ))
    .await?;
    let ca = pki.ca_pem.display();
    let gw = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: v2
    hostnames: [a.example.com]
    send_proxy_protocol: v2
    backends: [{{address: 127.0.0.1:{port}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}}}
  - name: v1
    hostnames: [b.example.com]
    send_proxy_protocol: v1
    backends: [{{address: 127.0.0.1:{port}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}}}
  - name: without
    hostnames: [c.example.com]
    send_proxy_protocol: v2
    backends: [{{address: 127.0.0.1:{port}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}, send_proxy: none}}
"#
    ))
    .await?;
    passes(&gw, "v2").await?;
    passes(&gw, "v1").await?;
    // The same check without the header is what used to happen: HAProxy
    // drops the connection, and the backend is down.
    gw.wait_metric(
        CHECKS,
        &[("route", "without"), ("result", "failed")],
        Duration::from_secs(10),
        |v| v >= 3.0,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_present_a_client_certificate_and_say_when_one_is_missing() -> Result<()> {
    let pki = Pki::new()?;
    let api = pki.standin("mtls", &[NAME], true).await?;
    let (ca, cert, key) = (
        pki.ca_pem.display(),
        pki.client_cert.display(),
        pki.client_key.display(),
    );
    let gw = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: with-cert
    hostnames: [a.example.com]
    backends: [{{address: {api}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}, client_cert: {cert}, client_key: {key}}}
  - name: without-cert
    hostnames: [b.example.com]
    backends: [{{address: {api}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}}}
"#,
        api = api.addr()
    ))
    .await?;
    passes(&gw, "with-cert").await?;
    fails_saying(&gw, "without-cert", "requires a client certificate").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_send_a_bearer_token_read_from_its_file() -> Result<()> {
    let pki = Pki::new()?;
    let dir = tempfile::tempdir()?;
    let (cert, key) = pki
        .ca
        .issue_server(&[NAME], &[crate::support::LOCALHOST])?
        .write(dir.path(), "nginx")?;
    let port = free_port()?;
    let prefix = dir.path().display();
    let _nginx = Nginx::start(&format!(
        r#"
worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location = /readyz {{
            if ($http_authorization != "Bearer s3cret") {{ return 401; }}
            return 200 "ok";
        }}
    }}
}}
"#,
        cert = cert.display(),
        key = key.display()
    ))
    .await?;
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n")?;
    let wrong = dir.path().join("wrong-token");
    std::fs::write(&wrong, "guess\n")?;
    let ca = pki.ca_pem.display();
    let gw = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: token
    hostnames: [a.example.com]
    backends: [{{address: 127.0.0.1:{port}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}, bearer_token_file: {token}}}
  - name: wrong
    hostnames: [b.example.com]
    backends: [{{address: 127.0.0.1:{port}}}]
    health_check: {{kind: https, interval: 100ms, server_name: {NAME}, ca_file: {ca}, bearer_token_file: {wrong}}}
"#,
        token = token.display(),
        wrong = wrong.display()
    ))
    .await?;
    passes(&gw, "token").await?;
    fails_saying(&gw, "wrong", "the server wants credentials").await?;
    // A rotated token is used by the next check.
    std::fs::write(&wrong, "s3cret\n")?;
    gw.wait_metric(
        "apiway_backend_healthy",
        &[("route", "wrong")],
        Duration::from_secs(10),
        |v| v == 1.0,
    )
    .await?;
    Ok(())
}
