//! etcd over mutual TLS through the gateway: a real Go TLS + HTTP/2 (gRPC)
//! server and client, routed by the SNI etcdctl sends.
//!
//! etcdctl sends its endpoint's host name as SNI. Without control over DNS
//! the one name that resolves to 127.0.0.1 here is `localhost` (`*.localhost`
//! does not), so the etcd route is `hostnames: [localhost]` and etcd's
//! certificate names `localhost`. No default route: only the SNI can route.

use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_test_support::peers::{require_binary, Etcd};
use tokio::process::Command;

use crate::support::tools::{run, Ran};
use crate::support::{GatewayProcess, Pki, LOCALHOST};

async fn etcdctl(pki: &Pki, endpoint: &str, client_cert: bool, args: &[&str]) -> Result<Ran> {
    let mut command = Command::new(require_binary("etcdctl")?);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ETCD") {
            command.env_remove(key);
        }
    }
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg(format!("--cacert={}", pki.ca_pem.display()))
        .arg("--dial-timeout=2s");
    // Without a certificate the request can only fail; gRPC retries until
    // the command timeout, so keep that short.
    command.arg(if client_cert {
        "--command-timeout=5s"
    } else {
        "--command-timeout=1s"
    });
    if client_cert {
        command
            .arg(format!("--cert={}", pki.client_cert.display()))
            .arg(format!("--key={}", pki.client_key.display()));
    }
    command.args(args);
    run(command, b"", Duration::from_secs(15)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_put_and_get_over_mutual_tls_through_the_gateway() -> Result<()> {
    let pki = Pki::new()?;
    let server_cert = pki.ca.issue_peer(&["localhost"], &[LOCALHOST])?;
    let etcd = Etcd::start_mtls(&pki.ca, &server_cert, &pki.ca).await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: etcd
    hostnames: [localhost]
    backends: [{{address: {}}}]
default_route: reject
"#,
        etcd.client_addr()
    ))
    .await?;
    let endpoint = format!("https://localhost:{}", gateway.addr().port());

    let put = etcdctl(
        &pki,
        &endpoint,
        true,
        &["put", "/apiway/test", "passthrough-works"],
    )
    .await?;
    ensure!(
        put.success && put.stdout.trim() == "OK",
        "etcdctl put: {put:?}"
    );
    let get = etcdctl(&pki, &endpoint, true, &["get", "/apiway/test"]).await?;
    ensure!(get.success, "etcdctl get: {get:?}");
    let lines: Vec<&str> = get.stdout.lines().collect();
    ensure!(
        lines == ["/apiway/test", "passthrough-works"],
        "etcdctl get printed {lines:?}"
    );

    // The value is really in etcd: read it directly, bypassing the gateway.
    let direct = etcd
        .etcdctl(
            Some(etcd.probe_client()),
            &["get", "/apiway/test", "--print-value-only"],
        )
        .await?;
    ensure!(String::from_utf8_lossy(&direct.stdout).trim() == "passthrough-works");

    // It went through the gateway, routed by SNI (no default route).
    let m = gateway.metrics().await?;
    ensure!(
        m.count("apiway_route_connections_total", &[("route", "etcd")]) >= 2.0,
        "{}",
        m.matching("apiway_route")
    );
    ensure!(m.count("apiway_listener_no_route_total", &[("reason", "no_sni")]) == 0.0);

    // etcd, not the gateway, checks client certificates.
    let anonymous = etcdctl(&pki, &endpoint, false, &["get", "/apiway/test"]).await?;
    ensure!(
        !anonymous.success,
        "etcd answered a client without a certificate: {anonymous:?}"
    );
    Ok(())
}
