//! Hot reload: on file change and on SIGHUP; a bad file never replaces a
//! running config; established connections survive any change.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use apiway_standin::standin::pattern_byte;
use apiway_standin::StandinServer;
use rustix::process::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::tls::{connect, rustls_hello, PendingTls};
use crate::support::{eventually, https, EchoBackend, GatewayProcess, Pki};

const NAMES: &[&str] = &[
    "api.a.example.com",
    "api.b.example.com",
    "api.c.example.com",
];

struct Clusters {
    pki: Pki,
    a: StandinServer,
    b: StandinServer,
    c: StandinServer,
}

impl Clusters {
    async fn start() -> Result<Clusters> {
        let pki = Pki::new()?;
        let a = pki.standin("cluster-a", NAMES, false).await?;
        let b = pki.standin("cluster-b", NAMES, false).await?;
        let c = pki.standin("cluster-c", NAMES, false).await?;
        Ok(Clusters { pki, a, b, c })
    }

    /// api.a -> A, api.b -> B, api.c unrouted.
    fn first_config(&self, reload_interval: &str) -> String {
        format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
reload_interval: {reload_interval}
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    backends: [{{address: {a}}}]
  - name: cluster-b
    hostnames: [api.b.example.com]
    backends: [{{address: {b}}}]
"#,
            a = self.a.addr(),
            b = self.b.addr()
        )
    }

    /// api.b moves to A; a new route sends api.c to C.
    fn second_config(&self, reload_interval: &str) -> String {
        format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
reload_interval: {reload_interval}
routes:
  - name: cluster-a
    hostnames: [api.a.example.com, api.b.example.com]
    backends: [{{address: {a}}}]
  - name: cluster-b
    hostnames: [api.b2.example.com]
    backends: [{{address: {b}}}]
  - name: cluster-c
    hostnames: [api.c.example.com]
    backends: [{{address: {c}}}]
"#,
            a = self.a.addr(),
            b = self.b.addr(),
            c = self.c.addr()
        )
    }
}

/// Which stand-in answers `sni` through the gateway (`Err` text if none).
async fn who(
    gateway: &GatewayProcess,
    pki: &Pki,
    sni: &str,
) -> std::result::Result<String, String> {
    match https(gateway.addr(), sni, "/", pki, true).await {
        Ok(r) => r
            .standin()
            .map(str::to_owned)
            .ok_or_else(|| format!("{r:?}")),
        Err(e) => Err(format!("{e:#}")),
    }
}

async fn expect_routes(
    gateway: &GatewayProcess,
    pki: &Pki,
    want: &[(&str, Option<&str>)],
) -> Result<()> {
    for (sni, cluster) in want {
        let got = who(gateway, pki, sni).await;
        match (cluster, &got) {
            (Some(c), Ok(g)) if c == g => {}
            (None, Err(_)) => {}
            _ => bail!("{sni}: want {cluster:?}, got {got:?}"),
        }
    }
    Ok(())
}

async fn reloads(gateway: &GatewayProcess, result: &str) -> Result<f64> {
    Ok(gateway
        .metrics()
        .await?
        .count("apiway_config_reloads_total", &[("result", result)]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_change_moves_a_hostname_and_adds_a_route() -> Result<()> {
    let t = Clusters::start().await?;
    let gateway = GatewayProcess::start(&t.first_config("200ms")).await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.a.example.com", Some("cluster-a")),
            ("api.b.example.com", Some("cluster-b")),
            ("api.c.example.com", None),
        ],
    )
    .await?;

    gateway.write_config(&t.second_config("200ms"))?;
    let written = Instant::now();
    eventually(
        "api.b and api.c to follow the new file",
        Duration::from_secs(5),
        || async {
            match (
                who(&gateway, &t.pki, "api.b.example.com").await,
                who(&gateway, &t.pki, "api.c.example.com").await,
            ) {
                (Ok(b), Ok(c)) if b == "cluster-a" && c == "cluster-c" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    let took = written.elapsed();
    ensure!(
        took < Duration::from_secs(2),
        "the change took {took:?} to apply"
    );
    expect_routes(
        &gateway,
        &t.pki,
        &[("api.a.example.com", Some("cluster-a"))],
    )
    .await?;
    ensure!(reloads(&gateway, "success").await? == 1.0);
    ensure!(reloads(&gateway, "error").await? == 0.0);
    Ok(())
}

/// One reload rule for every role: a file that changes a field that needs a
/// restart (`admin.address`) is refused whole, with one line naming it, and
/// nothing else in it is applied; the next good file is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_that_needs_a_restart_refuses_the_whole_file() -> Result<()> {
    let t = Clusters::start().await?;
    let mut gateway = GatewayProcess::start(&t.first_config("200ms")).await?;
    let moved = t.second_config("200ms").replace(
        "admin: {address: 127.0.0.1:0}",
        "admin: {address: 127.0.0.2:0}",
    );
    gateway.write_config(&moved)?;
    let line = gateway
        .wait_for_log("the refused reload", Duration::from_secs(5), |l| {
            l.contains("config reload rejected") && l.contains("`admin.address` cannot change")
        })
        .await?;
    ensure!(line.contains("restart"), "{line}");
    ensure!(reloads(&gateway, "error").await? == 1.0);
    ensure!(reloads(&gateway, "success").await? == 0.0);
    // Nothing of the refused file was applied: api.b still goes to B,
    // api.c is still unrouted.
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.b.example.com", Some("cluster-b")),
            ("api.c.example.com", None),
        ],
    )
    .await?;
    // The same change without the restart-only field is applied.
    gateway.write_config(&t.second_config("200ms"))?;
    eventually("the good file applied", Duration::from_secs(5), || async {
        match who(&gateway, &t.pki, "api.c.example.com").await {
            Ok(c) if c == "cluster-c" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    ensure!(reloads(&gateway, "success").await? == 1.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_file_keeps_the_running_config_and_logs_one_line() -> Result<()> {
    let t = Clusters::start().await?;
    let mut gateway = GatewayProcess::start(&t.first_config("200ms")).await?;
    let before = [
        ("api.a.example.com", Some("cluster-a")),
        ("api.b.example.com", Some("cluster-b")),
        ("api.c.example.com", None),
    ];
    expect_routes(&gateway, &t.pki, &before).await?;

    // Two bad files: a value that does not validate, a misspelt field.
    let bad_address = t
        .second_config("200ms")
        .replacen(&t.c.addr().to_string(), "nohost", 1);
    let misspelt = t
        .second_config("200ms")
        .replacen("hostnames:", "hostname:", 1);
    let problems = [
        (
            bad_address,
            "routes[2] (cluster-c).backends[0].address",
            "nohost",
        ),
        (misspelt, "invalid configuration", "hostname"),
    ];
    for (n, (text, place, word)) in problems.iter().enumerate() {
        gateway.write_config(text)?;
        let errors = (n + 1) as f64;
        gateway
            .wait_metric(
                "apiway_config_reloads_total",
                &[("result", "error")],
                Duration::from_secs(5),
                |v| v == errors,
            )
            .await?;
        expect_routes(&gateway, &t.pki, &before).await?;
        let line = gateway
            .wait_for_log("the rejected reload", Duration::from_secs(2), |l| {
                l.contains(" ERROR ") && l.contains(place) && l.contains(word)
            })
            .await?;
        ensure!(line.contains("keeping the running config"), "{line}");
    }

    // A good file still applies; the errors were reported once each.
    gateway.write_config(&t.second_config("200ms"))?;
    gateway
        .wait_metric(
            "apiway_config_reloads_total",
            &[("result", "success")],
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.b.example.com", Some("cluster-a")),
            ("api.c.example.com", Some("cluster-c")),
        ],
    )
    .await?;
    let log = gateway.log_lines();
    let errors: Vec<&String> = log.iter().filter(|l| l.contains(" ERROR ")).collect();
    ensure!(
        errors.len() == 2,
        "want one ERROR line per bad file, got {errors:#?}"
    );
    ensure!(reloads(&gateway, "error").await? == 2.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_without_waiting_for_the_poll() -> Result<()> {
    let t = Clusters::start().await?;
    // The file is polled once an hour: only SIGHUP can apply a change.
    let mut gateway = GatewayProcess::start(&t.first_config("1h")).await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[("api.b.example.com", Some("cluster-b"))],
    )
    .await?;
    gateway.write_config(&t.second_config("1h"))?;
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.b.example.com", Some("cluster-b")),
            ("api.c.example.com", None),
        ],
    )
    .await?;

    gateway.signal(Signal::HUP)?;
    gateway
        .wait_for_log("the SIGHUP reload", Duration::from_secs(5), |l| {
            l.contains("config reloaded") && l.contains("SIGHUP")
        })
        .await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.b.example.com", Some("cluster-a")),
            ("api.c.example.com", Some("cluster-c")),
        ],
    )
    .await?;
    ensure!(reloads(&gateway, "success").await? == 1.0);
    ensure!(gateway.is_running());
    Ok(())
}

/// A route that a reload removes takes its series with it (a controller
/// that renames routes must not grow `/metrics` for ever); the routes that
/// stay keep their counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_route_takes_its_series_with_it() -> Result<()> {
    let t = Clusters::start().await?;
    let first = t.first_config("1h");
    let gateway = GatewayProcess::start(&first).await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[
            ("api.a.example.com", Some("cluster-a")),
            ("api.b.example.com", Some("cluster-b")),
        ],
    )
    .await?;
    let routed = |m: &crate::support::metrics::Metrics, route: &str| {
        m.value("apiway_route_connections_total", &[("route", route)])
    };
    let before = gateway.metrics().await?;
    ensure!(
        routed(&before, "cluster-b") == Some(1.0),
        "{}",
        before.matching("apiway_route")
    );

    // cluster-b is gone; cluster-c is new (with B's backend).
    gateway.write_config(
        &first
            .replace("cluster-b", "cluster-c")
            .replace("api.b.example.com", "api.c.example.com"),
    )?;
    gateway.signal(Signal::HUP)?;
    eventually("the reload", Duration::from_secs(5), || async {
        match reloads(&gateway, "success").await {
            Ok(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    expect_routes(
        &gateway,
        &t.pki,
        &[("api.c.example.com", Some("cluster-b"))],
    )
    .await?;
    let after = gateway.metrics().await?;
    let series = after.matching("apiway_route");
    ensure!(!series.contains("cluster-b"), "{series}");
    ensure!(routed(&after, "cluster-a") == Some(1.0), "{series}");
    ensure!(routed(&after, "cluster-c") == Some(1.0), "{series}");
    Ok(())
}

/// The byte a streaming client sends at `offset` on connection `conn`.
fn stream_byte(conn: usize, offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 9) ^ conn.wrapping_mul(101)) as u8
}

/// A connection through the gateway to an echo backend: sends a hello, then
/// data until `stop`, checking every echoed byte; then half-closes and
/// expects a clean EOF. Returns the bytes echoed back.
async fn echo_stream(
    addr: SocketAddr,
    hello: Vec<u8>,
    conn: usize,
    stop: Arc<AtomicBool>,
) -> Result<usize> {
    let stream = TcpStream::connect(addr).await?;
    let (mut reader, mut writer) = stream.into_split();
    let expected_hello = hello.clone();
    let hello_len = hello.len();
    let write = async move {
        writer.write_all(&hello).await?;
        let mut sent = 0usize;
        let mut chunk = vec![0u8; 8192];
        while !stop.load(Ordering::SeqCst) || sent < 256 * 1024 {
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = stream_byte(conn, sent + i);
            }
            writer.write_all(&chunk).await.context("writing")?;
            sent += chunk.len();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        writer.shutdown().await?;
        anyhow::Ok(sent)
    };
    let read = async move {
        let mut got = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            let n = reader
                .read(&mut buf)
                .await
                .with_context(|| format!("reading after {got} bytes"))?;
            if n == 0 {
                return anyhow::Ok(got);
            }
            for (i, b) in buf[..n].iter().enumerate() {
                let at = got + i;
                let want = match at.checked_sub(expected_hello.len()) {
                    None => expected_hello[at],
                    Some(offset) => stream_byte(conn, offset),
                };
                ensure!(
                    *b == want,
                    "connection {conn}: byte {at} is {b}, want {want}"
                );
            }
            got += n;
        }
    };
    let (sent, got) = tokio::try_join!(write, read)?;
    ensure!(
        got == hello_len + sent,
        "connection {conn}: sent {hello_len} + {sent}, got {got} back"
    );
    Ok(got)
}

/// A TLS connection through the gateway to a stand-in's `/stream`, read
/// slowly until `stop`, then to the end; every byte checked. Blocking.
fn tls_stream(addr: SocketAddr, pending: PendingTls, stop: Arc<AtomicBool>) -> Result<u64> {
    const LEN: u64 = 8 * 1024 * 1024;
    const HELD_BACK: u64 = 1024 * 1024;
    let mut sock = connect(addr)?;
    sock.write_all(&pending.hello)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut conn = pending.into_connection();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(
        format!("GET /stream?bytes={LEN} HTTP/1.1\r\nHost: api.a.example.com\r\n\r\n").as_bytes(),
    )?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte)
            .context("reading the response head")?;
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut offset = 0u64;
    let mut buf = vec![0u8; 65536];
    while offset < LEN {
        let want = usize::try_from(LEN - offset)
            .unwrap_or(buf.len())
            .min(buf.len());
        let n = tls
            .read(&mut buf[..want])
            .with_context(|| format!("reading at offset {offset}"))?;
        ensure!(n > 0, "the stream ended at {offset} of {LEN}");
        for (i, b) in buf[..n].iter().enumerate() {
            let at = offset + i as u64;
            ensure!(*b == pattern_byte(at), "byte {at} is {b}");
        }
        offset += n as u64;
        // Slowly while the reloads go on, and never to the end before they
        // are over: the connection must live through all of them.
        if !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        while !stop.load(Ordering::SeqCst) && offset + HELD_BACK >= LEN {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_reloads_during_traffic_reset_no_connection() -> Result<()> {
    let t = Clusters::start().await?;
    let echo1 = EchoBackend::start().await?;
    let echo2 = EchoBackend::start().await?;
    let config = |revision: usize| {
        let stream_route = match revision % 4 {
            // The route the streams use disappears...
            1 => String::new(),
            // ...comes back with another backend...
            2 => format!("  - name: stream\n    hostnames: [stream.example.com]\n    backends: [{{address: {}}}]\n", echo2.addr()),
            // ...with both, another policy and another name...
            3 => format!(
                "  - name: stream\n    hostnames: [stream2.example.com]\n    policy: round_robin\n    backends: [{{address: {}}}, {{address: {}}}]\n",
                echo2.addr(),
                echo1.addr()
            ),
            _ => format!("  - name: stream\n    hostnames: [stream.example.com]\n    backends: [{{address: {}}}]\n", echo1.addr()),
        };
        // ...and the TLS streams' route changes backends or goes away too.
        let api_route = match revision % 3 {
            1 => String::new(),
            2 => format!(
                "  - name: cluster-a\n    hostnames: [api.a.example.com]\n    backends: [{{address: {}}}, {{address: {}}}]\n",
                t.b.addr(),
                t.a.addr()
            ),
            _ => format!("  - name: cluster-a\n    hostnames: [api.a.example.com]\n    backends: [{{address: {}}}]\n", t.a.addr()),
        };
        format!(
            "# revision {revision}\nadmin: {{address: 127.0.0.1:0}}\nlisteners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]\nreload_interval: 100ms\nroutes:\n{stream_route}{api_route}  - name: cluster-c\n    hostnames: [api.c.example.com]\n    backends: [{{address: {}}}]\n",
            t.c.addr()
        )
    };
    let gateway = GatewayProcess::start(&config(0)).await?;
    let addr = gateway.addr();
    let stop = Arc::new(AtomicBool::new(false));

    let mut echo_conns = Vec::new();
    for conn in 0..4 {
        let hello = rustls_hello(&t.pki, "stream.example.com", false)?.hello;
        echo_conns.push(tokio::spawn(echo_stream(addr, hello, conn, stop.clone())));
    }
    let mut tls_conns = Vec::new();
    for _ in 0..2 {
        let stop = stop.clone();
        let pending = rustls_hello(&t.pki, "api.a.example.com", false)?;
        tls_conns.push(tokio::task::spawn_blocking(move || {
            tls_stream(addr, pending, stop)
        }));
    }
    // Every stream is established (and counted) before the first reload.
    eventually(
        "six streams to reach their backends",
        Duration::from_secs(5),
        || async {
            let (echoed, tls) = (echo1.connections(), t.a.connections_open());
            if echoed == 4 && tls == 2 {
                Ok(())
            } else {
                Err(format!("{echoed} echo and {tls} TLS connections"))
            }
        },
    )
    .await?;

    for revision in 1..=20 {
        gateway.write_config(&config(revision))?;
        gateway
            .wait_metric(
                "apiway_config_reloads_total",
                &[("result", "success")],
                Duration::from_secs(5),
                |v| v == revision as f64,
            )
            .await?;
    }
    // Revision 20: stream.example.com -> echo1 again, api.a -> A and B.
    stop.store(true, Ordering::SeqCst);
    for (conn, task) in echo_conns.into_iter().enumerate() {
        let got = task
            .await?
            .with_context(|| format!("echo connection {conn}"))?;
        ensure!(got > 256 * 1024, "connection {conn} moved only {got} bytes");
    }
    for (conn, task) in tls_conns.into_iter().enumerate() {
        task.await?.with_context(|| format!("TLS stream {conn}"))?;
    }
    ensure!(
        echo1.connections() == 4 && echo2.connections() == 0,
        "streams changed backend"
    );
    ensure!(reloads(&gateway, "error").await? == 0.0);
    // New connections follow the last revision.
    let r = https(addr, "api.c.example.com", "/", &t.pki, true).await?;
    ensure!(r.standin() == Some("cluster-c"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_health_check_clears_the_down_verdicts_it_left() -> Result<()> {
    let t = Clusters::start().await?;
    // Route cluster-a has two replicas, the stand-ins named cluster-a and
    // cluster-b. The first fails its readiness check, the second passes.
    t.a.set_ready(false);
    let config = |health_check: &str| {
        format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
reload_interval: 100ms
routes:
  - name: cluster-a
    hostnames: [api.a.example.com]
    policy: round_robin
    backends: [{{address: {a}}}, {{address: {b}}}]
{health_check}
"#,
            a = t.a.addr(),
            b = t.b.addr()
        )
    };
    let checked = "    health_check: {kind: https, path: /readyz, interval: 200ms}";
    let gateway = GatewayProcess::start(&config(checked)).await?;
    let replica = t.a.addr().to_string();
    let healthy = [("route", "cluster-a"), ("backend", replica.as_str())];
    gateway
        .wait_metric(
            "apiway_backend_healthy",
            &healthy,
            Duration::from_secs(5),
            |v| v == 0.0,
        )
        .await?;

    // The replica is fine again, and the route no longer has a health check:
    // nothing can mark the replica up any more, so nothing may keep it down.
    t.a.set_ready(true);
    gateway.write_config(&config(""))?;
    gateway
        .wait_metric(
            "apiway_config_reloads_total",
            &[("result", "success")],
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let who = who(&gateway, &t.pki, "api.a.example.com")
            .await
            .map_err(anyhow::Error::msg)?;
        answered.insert(who);
    }
    let m = gateway.metrics().await?;
    ensure!(
        answered.contains("cluster-a") && m.value("apiway_backend_healthy", &healthy) == Some(1.0),
        "after the health check was removed, {replica} still counts as down \
         (apiway_backend_healthy {:?}); round robin reached only {answered:?}",
        m.value("apiway_backend_healthy", &healthy)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_reload_interval_takes_effect() -> Result<()> {
    let t = Clusters::start().await?;
    let mut gateway = GatewayProcess::start(&t.first_config("1h")).await?;
    // SIGHUP applies a file that asks for polling every 200ms...
    gateway.write_config(&t.first_config("200ms"))?;
    gateway.signal(Signal::HUP)?;
    gateway
        .wait_for_log("the SIGHUP reload", Duration::from_secs(5), |l| {
            l.contains("config reloaded") && l.contains("SIGHUP")
        })
        .await?;
    // ...so the next change is picked up by polling, without a signal.
    gateway.write_config(&t.second_config("200ms"))?;
    let applied = eventually("the polled change", Duration::from_secs(3), || async {
        match who(&gateway, &t.pki, "api.c.example.com").await {
            Ok(c) if c == "cluster-c" => Ok(()),
            other => Err(format!("api.c.example.com: {other:?}")),
        }
    })
    .await;
    ensure!(
        applied.is_ok(),
        "reload_interval: 200ms was applied by a reload but the file is still polled at the \
         first interval (1h): {applied:?}"
    );
    Ok(())
}
