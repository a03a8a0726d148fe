//! Listener limits: the ClientHello timeout and `max_connections`.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::tls::rustls_hello;
use crate::support::{https, read_until_closed, Closed, GatewayProcess, Pki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_client_hello_times_out_while_others_are_served() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-a", &["api.a.example.com"], false)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls, client_hello_timeout: 500ms}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
"#,
        standin.addr()
    ))
    .await?;

    let hello = rustls_hello(&pki, "api.a.example.com", false)?.hello;
    let mut slow = TcpStream::connect(gateway.addr()).await?;
    slow.write_all(&hello[..hello.len() / 2]).await?;
    let stalled_at = Instant::now();

    // Meanwhile other clients are served.
    for http2 in [false, true] {
        let r = https(gateway.addr(), "api.a.example.com", "/", &pki, http2).await?;
        ensure!(r.standin() == Some("cluster-a"), "{r:?}");
    }
    ensure!(
        stalled_at.elapsed() < Duration::from_millis(450),
        "the other requests took too long to prove anything"
    );

    let (answer, closed) = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    let waited = stalled_at.elapsed();
    ensure!(
        answer.is_empty() && closed != Closed::StillOpen,
        "{answer:?} {closed:?}"
    );
    ensure!(
        waited >= Duration::from_millis(450) && waited < Duration::from_millis(2500),
        "closed after {waited:?}, client_hello_timeout is 500ms"
    );
    let m = gateway.metrics().await?;
    ensure!(
        m.count(
            "apiway_listener_client_hello_timeouts_total",
            &[("listener", "public")]
        ) == 1.0
    );
    ensure!(m.count("apiway_route_connections_total", &[("route", "cluster-a")]) == 2.0);
    Ok(())
}

/// A gateway whose listener (`max_connections: 2`, plus `extra` settings)
/// is full: two clients that have not sent their hello hold both slots.
struct Full {
    pki: std::sync::Arc<Pki>,
    gateway: GatewayProcess,
    first: TcpStream,
    _standin: apiway_standin::StandinServer,
    _second: TcpStream,
}

impl Full {
    async fn start(extra: &str) -> Result<Full> {
        let pki = std::sync::Arc::new(Pki::new()?);
        let standin = pki
            .standin("cluster-a", &["api.a.example.com"], false)
            .await?;
        let gateway = GatewayProcess::start(&format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls, max_connections: 2, {extra}client_hello_timeout: 10s}}]
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {}}}]
"#,
            standin.addr()
        ))
        .await?;
        let first = TcpStream::connect(gateway.addr()).await?;
        let second = TcpStream::connect(gateway.addr()).await?;
        gateway
            .wait_metric(
                "apiway_listener_open_connections",
                &[("listener", "public")],
                Duration::from_secs(5),
                |v| v == 2.0,
            )
            .await?;
        Ok(Full {
            pki,
            gateway,
            first,
            _standin: standin,
            _second: second,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_closed_at_once() -> Result<()> {
    let Full {
        pki,
        gateway,
        first,
        _standin,
        _second,
    } = Full::start("when_full: close, ").await?;
    let open = [("listener", "public")];

    let mut third = TcpStream::connect(gateway.addr()).await?;
    let started = Instant::now();
    let (answer, closed) = read_until_closed(&mut third, Duration::from_secs(5)).await;
    ensure!(
        answer.is_empty() && closed != Closed::StillOpen,
        "{answer:?} {closed:?}"
    );
    ensure!(
        started.elapsed() < Duration::from_millis(500),
        "closed after {:?}",
        started.elapsed()
    );
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_listener_rejected_total", &open) == 1.0);

    // A slot freed is a slot available.
    drop(first);
    gateway
        .wait_metric(
            "apiway_listener_open_connections",
            &open,
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    let r = https(gateway.addr(), "api.a.example.com", "/", &pki, true).await?;
    ensure!(r.standin() == Some("cluster-a"), "{r:?}");
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_listener_rejected_total", &open) == 1.0);
    Ok(())
}

/// `when_full: queue` (the default): at `max_connections` the gateway stops accepting,
/// so a new client waits (its TLS handshake unanswered, not closed) until a
/// slot frees, and is then served; nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_full_queue_makes_new_connections_wait_for_a_slot() -> Result<()> {
    let Full {
        pki,
        gateway,
        first,
        _standin,
        _second,
    } = Full::start("").await?;
    let open = [("listener", "public")];

    let addr = gateway.addr();
    let waiting = tokio::spawn({
        let pki = pki.clone();
        async move { https(addr, "api.a.example.com", "/", &pki, true).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(
        !waiting.is_finished(),
        "the third client was answered or closed while both slots were held: {:?}",
        waiting.await
    );
    drop(first);
    let r = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    ensure!(r.standin() == Some("cluster-a"), "{r:?}");
    let m = gateway.metrics().await?;
    ensure!(m.count("apiway_listener_rejected_total", &open) == 0.0);
    Ok(())
}

/// 1,500 idle connections to the admin endpoint of a gateway that may
/// open 300 files: the admin endpoint keeps at most `admin.max_connections`
/// (the rest are closed at once and counted), so proxied connections still
/// work, and the admin endpoint answers again once they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_cannot_starve_the_data_path() -> anyhow::Result<()> {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let echo = crate::support::EchoBackend::start().await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "admin: {{address: 127.0.0.1:0, max_connections: 16}}\nlisteners:\n  - {{name: public, address: 127.0.0.1:0, kind: tls, max_connections: 100}}\nroutes:\n  - name: a\n    hostnames: [api.a.example.com]\n    backends: [{{address: \"{}\"}}]\n    health_check: {{kind: none}}\n",
            echo.addr()
        ),
    )?;
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", "ulimit -n 300 && exec \"$0\" \"$@\""])
        .arg(crate::support::process::APIWAY)
        .arg("gateway")
        .arg("--config")
        .arg(&config)
        .env("NO_COLOR", "1");
    let mut process = apiway_test_support::process::Launcher::new(command)
        .ready_file()
        .echo_log_on_drop()
        .spawn()?;
    let report = process.wait_for_ready_file(Duration::from_secs(10)).await?;
    let admin = report.admin.ok_or_else(|| anyhow::anyhow!("no admin"))?;
    let public = report
        .listener("public")
        .ok_or_else(|| anyhow::anyhow!("no listener"))?;

    let mut idle = Vec::new();
    for _ in 0..1500 {
        if let Ok(stream) = tokio::net::TcpStream::connect(admin).await {
            idle.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The data path still opens connections (a ClientHello through to the
    // echo backend and back).
    let hello = crate::support::captured_hello("openssl-sni.bin")?;
    for _ in 0..5 {
        let mut s = tokio::net::TcpStream::connect(public).await?;
        s.write_all(&hello).await?;
        let mut back = vec![0; hello.len()];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back)).await??;
        anyhow::ensure!(back == hello, "the relay answered wrong bytes");
    }
    drop(idle);
    let (status, _) = crate::support::eventually(
        "the admin endpoint answers again",
        Duration::from_secs(5),
        || async {
            crate::support::http_get_plain(admin, "/livez")
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await?;
    anyhow::ensure!(status == 200);
    let (_, metrics) = crate::support::http_get_plain(admin, "/metrics").await?;
    let refused = crate::support::metrics::Metrics::new(metrics)
        .count("apiway_admin_connections_refused_total", &[]);
    anyhow::ensure!(refused >= 1000.0, "refused {refused}");
    Ok(())
}

/// A config file over `--max-config-bytes` is refused before it is parsed:
/// at start (exit 1, one line naming the flag) and on reload (counted,
/// the running config stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_files_over_the_size_limit_are_refused_before_parsing() -> Result<()> {
    let small = "admin: {address: 127.0.0.1:0}\nlisteners:\n  - {name: public, address: 127.0.0.1:0, kind: tls}\nroutes: []\n";
    // The same config padded with a comment past the limit: valid YAML.
    let big = format!("{small}# {}\n", "x".repeat(3000));

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("big.yaml");
    std::fs::write(&file, &big)?;
    let out = tokio::process::Command::new(crate::support::process::APIWAY)
        .args(["gateway", "--max-config-bytes", "2000", "--config"])
        .arg(&file)
        .env("NO_COLOR", "1")
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{:?} {stderr}", out.status);
    ensure!(
        stderr.contains("larger than 2000 bytes") && stderr.contains("--max-config-bytes"),
        "{stderr}"
    );

    let gateway =
        GatewayProcess::start_with_args(None, small, &["--max-config-bytes", "2000"]).await?;
    gateway.write_config(&big)?;
    crate::support::eventually(
        "the oversized reload refused",
        Duration::from_secs(5),
        || async {
            let m = gateway.metrics().await.map_err(|e| e.to_string())?;
            match m.value("apiway_config_reloads_total", &[("result", "error")]) {
                Some(v) if v >= 1.0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    ensure!(
        gateway.admin_get("/livez").await?.0 == 200,
        "the running config stays"
    );
    Ok(())
}
