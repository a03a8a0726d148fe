//! Connections the gateway cannot route: unknown or missing SNI (TLS
//! `unrecognized_name` alert, or the default route), and bytes that are not
//! a ClientHello at all.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::{free_port, require_binary};
use apiway_wire::sni::{parse_client_hello, SniError, DEFAULT_MAX_HELLO_LEN};

use crate::support::tls::rustls_hello;
use crate::support::tools::{answer_json, long_alpn_list, openssl_get, run};
use crate::support::{send_raw, Closed, GatewayProcess, Pki, Recorder};

/// A fatal `unrecognized_name` (112) alert record.
const UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

fn listener_labels(reason: &'static str) -> [(&'static str, &'static str); 2] {
    [("listener", "public"), ("reason", reason)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_missing_sni_get_unrecognized_name_when_rejecting() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
default_route: reject
"#,
        standin.addr()
    ))
    .await?;

    // openssl reports the alert.
    for servername in [Some("api.unknown.example.com"), None] {
        let ran = openssl_get(gateway.addr(), servername, "/", &[]).await?;
        ensure!(
            !ran.success && answer_json(&ran.stdout).is_none(),
            "{ran:?}"
        );
        ensure!(
            ran.stderr.contains("unrecognized name") && ran.stderr.contains("alert number 112"),
            "SNI {servername:?}: expected the unrecognized_name alert: {}",
            ran.stderr
        );
    }

    // On the wire: exactly the 7 alert bytes, then the close.
    let unknown = rustls_hello(&pki, "api.unknown.example.com", false)?.hello;
    let no_sni = rustls_hello(&pki, "127.0.0.1", false)?.hello;
    ensure!(parse_client_hello(&no_sni, DEFAULT_MAX_HELLO_LEN)?
        .server_name
        .is_none());
    for hello in [&unknown, &no_sni] {
        let (answer, closed) = send_raw(gateway.addr(), hello).await?;
        ensure!(answer == UNRECOGNIZED_NAME, "got {answer:02x?}");
        ensure!(closed == Closed::Eof, "{closed:?}");
    }

    let m = gateway.metrics().await?;
    ensure!(
        m.count(
            "apiway_listener_no_route_total",
            &listener_labels("unknown_sni")
        ) == 2.0
    );
    ensure!(m.count("apiway_listener_no_route_total", &listener_labels("no_sni")) == 2.0);
    ensure!(standin.requests_served() == 0 && standin.connections_open() == 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_missing_sni_go_to_the_default_route() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let fallback = pki
        .standin("fallback", &["fallback.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
  - name: fallback
    backends: [{{address: {}}}]
default_route: fallback
"#,
        a.addr(),
        fallback.addr()
    ))
    .await?;
    for (servername, want) in [
        (Some("api.unknown.example.com"), "fallback"),
        (None, "fallback"),
        (Some("api.a.example.com"), "cluster-a"),
    ] {
        let ran = openssl_get(gateway.addr(), servername, "/", &[]).await?;
        let json = answer_json(&ran.stdout).with_context(|| format!("{servername:?}: {ran:?}"))?;
        ensure!(
            json["server"] == want,
            "SNI {servername:?} should reach {want}: {json}"
        );
    }
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_route_connections_total", &[("route", "fallback")]) == 2.0);
    ensure!(
        m.count(
            "apiway_listener_no_route_total",
            &listener_labels("unknown_sni")
        ) == 0.0
    );
    ensure!(m.count("apiway_listener_no_route_total", &listener_labels("no_sni")) == 0.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_garbage_malformed_and_oversized_hellos_are_closed_and_counted() -> Result<()> {
    let pki = Pki::new()?;
    let recorder = Recorder::start().await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: public, address: 127.0.0.1:0, kind: tls}}
  - {{name: small, address: "127.0.0.1:{small}", kind: tls, max_client_hello_bytes: 512}}
routes:
  - name: recorded
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
default_route: recorded
"#,
        recorder.addr(),
        // Two listeners cannot both ask for port 0.
        small = free_port()?
    ))
    .await?;
    let addr = gateway.addr();

    // curl speaking plain HTTP to the TLS port.
    let mut command = tokio::process::Command::new(require_binary("curl")?);
    command
        .args(["-sS", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{}/healthz", addr.port()));
    let ran = run(command, b"", Duration::from_secs(10)).await?;
    ensure!(
        !ran.success && ran.stderr.contains("Empty reply"),
        "curl: {ran:?}"
    );

    // A raw HTTP request and binary garbage: closed with no answer.
    for bytes in [
        &b"GET / HTTP/1.1\r\nHost: api.a.example.com\r\n\r\n"[..],
        &[0x00, 0xff, 0x13, 0x37, 0x42, 0x00, 0x01][..],
    ] {
        let (answer, closed) = send_raw(addr, bytes).await?;
        ensure!(answer.is_empty(), "answered {answer:02x?}");
        ensure!(
            closed != Closed::StillOpen,
            "the gateway kept the connection open"
        );
    }

    // A real hello whose handshake type is no longer ClientHello.
    let mut malformed = rustls_hello(&pki, "api.a.example.com", false)?.hello;
    malformed[5] = 2;
    ensure!(matches!(
        parse_client_hello(&malformed, DEFAULT_MAX_HELLO_LEN),
        Err(SniError::Malformed(_))
    ));
    let (_, closed) = send_raw(addr, &malformed).await?;
    ensure!(
        closed != Closed::StillOpen,
        "the gateway kept the connection open"
    );

    // A ~1.5 KB hello (long ALPN list) on a listener that takes 512 bytes.
    let alpn = long_alpn_list();
    let ran = openssl_get(
        gateway.listener("small"),
        Some("api.a.example.com"),
        "/",
        &["-alpn", &alpn],
    )
    .await?;
    ensure!(
        !ran.success && answer_json(&ran.stdout).is_none(),
        "{ran:?}"
    );

    let m = gateway.metrics().await?;
    let errors = "apiway_listener_client_hello_errors_total";
    let too_large = [("listener", "small"), ("reason", "too_large")];
    ensure!(m.count(errors, &too_large) == 1.0, "{}", m.matching(errors));
    ensure!(
        m.count(errors, &listener_labels("not_tls")) == 3.0,
        "{}",
        m.matching(errors)
    );
    ensure!(
        m.count(errors, &listener_labels("malformed")) == 1.0,
        "{}",
        m.matching(errors)
    );
    // None of it reached the backend, not even through the default route.
    ensure!(recorder.connections() == 0, "the backend got a connection");
    Ok(())
}

/// Refused connections are logged at info level, at most once a second per
/// listener, with how many were held back; every one is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_logged_once_a_second_with_a_count() -> Result<()> {
    let gateway = GatewayProcess::start(
        "admin: {address: 127.0.0.1:0}\n\
         listeners: [{name: public, address: 127.0.0.1:0, kind: tls}]\n",
    )
    .await?;
    let refused_lines = || {
        gateway
            .log_lines()
            .into_iter()
            .filter(|l| l.contains(" INFO ") && l.contains("refused: no usable ClientHello"))
            .collect::<Vec<_>>()
    };
    for _ in 0..200 {
        let (_, closed) = send_raw(gateway.addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
        ensure!(
            closed != Closed::StillOpen,
            "a plain HTTP request was not refused"
        );
    }
    gateway
        .wait_count(
            "apiway_listener_client_hello_errors_total",
            &listener_labels("not_tls"),
            200.0,
        )
        .await?;
    let burst = refused_lines();
    ensure!(
        (1..=3).contains(&burst.len()),
        "{} info lines for 200 refusals in a burst: {burst:#?}",
        burst.len()
    );
    // A second later the next refusal is logged with the count held back.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    send_raw(gateway.addr(), b"GET / HTTP/1.1\r\n\r\n").await?;
    let mut later = refused_lines();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while later.len() <= burst.len() {
        ensure!(
            std::time::Instant::now() < deadline,
            "no info line for a refusal a second after the burst"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        later = refused_lines();
    }
    let last = later.last().context("a line")?;
    let held_back = last
        .split_whitespace()
        .find_map(|w| w.strip_prefix("suppressed="))
        .and_then(|n| n.parse::<u64>().ok())
        .context("a suppressed= count")?;
    ensure!(held_back >= 190, "{last}");
    Ok(())
}
