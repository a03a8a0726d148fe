//! apiway-client against real stand-in API servers on loopback (127.0.0.1
//! to 127.0.0.4), over real TLS and HTTP/2.
//!
//! The origin ("the load balancer") is a stand-in on 127.0.0.1 whose
//! certificate names `127.0.0.1`; the alternatives are stand-ins on
//! 127.0.0.2-4 whose certificates name only `kubernetes.default`, so an
//! answer from one proves the client used that name. Every address is on
//! `lo`, so every alternative counts as local and the list order decides
//! among them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_advertise::{alt_svc_value, AdvertisedEndpoint};
use apiway_client::{Address, Block, Client, ClientConfig, Error, Stage};
use apiway_standin::pki::{self, ALPN_H2};
use apiway_standin::{Ca, Issued, StandinConfig, StandinServer};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{bounded, get_report, gets_across, metrics_text, sample};

mod support;

struct Pki {
    /// Valid for `kubernetes.default` and 127.0.0.1.
    good: Issued,
    tls: Arc<rustls::ClientConfig>,
}

fn pki() -> Result<Pki> {
    let ca = Ca::new("apiway-client test CA")?;
    let good = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
    let tls = pki::client_config(&ca, None, &[])?;
    Ok(Pki { good, tls })
}

async fn standin(
    name: &str,
    ip: &str,
    cert: &Issued,
    alt_svc: Option<&str>,
) -> Result<StandinServer> {
    let listen: SocketAddr = format!("{ip}:0").parse()?;
    let mut config = StandinConfig::new(name, listen, cert.clone());
    if let Some(value) = alt_svc {
        config = config.with_alt_svc(value);
    }
    StandinServer::start(config).await
}

/// The `Alt-Svc` value listing `servers`, rendered by the server-side
/// function the library offers.
fn h2_alternatives(servers: &[&StandinServer], max_age: Duration) -> Result<String> {
    let endpoints = servers
        .iter()
        .map(|s| {
            Ok(AdvertisedEndpoint {
                address: Address::parse(&s.addr().to_string()).map_err(anyhow::Error::msg)?,
                ready: true,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    Ok(alt_svc_value(&endpoints, client, max_age, |_, _| true))
}

fn client_for(origin: &StandinServer, pki: &Pki, alternatives: &str) -> Result<Client> {
    let mut config = ClientConfig::new(&format!("https://{}", origin.addr()), pki.tls.clone())?
        .with_alternative_hosts(alternatives)?;
    config.block_period = Duration::from_secs(20);
    Ok(Client::new(config)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_alternatives_behaves_like_a_plain_client() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let origin = standin("lb", "127.0.0.1", &pki.good, None).await?;
        let addr = origin.addr();
        let config = ClientConfig::new(&format!("https://{addr}"), pki.tls.clone())?
            .with_bearer_token("t0ken")?;
        let client = Client::new(config)?;
        for _ in 0..3 {
            let report = get_report(&client, "/api/v1/pods?limit=1").await?;
            ensure!(report["server"] == "lb", "{report}");
            ensure!(report["authority"] == addr.to_string(), "{report}");
            ensure!(
                report["alt_used"].is_null(),
                "no Alt-Used to the origin: {report}"
            );
            ensure!(report["alpn"] == "h2", "{report}");
            ensure!(report["query"] == "limit=1", "{report}");
            ensure!(report["authorization"] == "Bearer t0ken", "{report}");
        }
        ensure!(client.endpoints().len() == 1, "{:?}", client.endpoints());

        // The origin goes away: one attempt, one error naming it.
        origin.shutdown().await;
        match client.get("/x").await {
            Err(Error::Unreachable { attempts }) => {
                ensure!(attempts.len() == 1, "{attempts:?}");
                ensure!(attempts[0].endpoint == addr.to_string(), "{attempts:?}");
            }
            other => anyhow::bail!("expected Unreachable, got {other:?}"),
        }
        // It comes back: used again at once, its block notwithstanding.
        let _origin =
            StandinServer::start(StandinConfig::new("lb2", addr, pki.good.clone())).await?;
        let report = get_report(&client, "/x").await?;
        ensure!(report["server"] == "lb2", "{report}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learns_alt_svc_and_fails_over_without_a_failed_get() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let a = standin("a", "127.0.0.2", &pki.good, None).await?;
        let b = standin("b", "127.0.0.3", &pki.good, None).await?;
        let c = standin("c", "127.0.0.4", &pki.good, None).await?;
        let a_addr = a.addr();
        let alt_svc = h2_alternatives(&[&a, &b, &c], Duration::from_secs(600))?;
        let origin = standin("lb", "127.0.0.1", &pki.good, Some(&alt_svc)).await?;
        let client = client_for(&origin, &pki, "")?;

        let first = get_report(&client, "/first").await?;
        ensure!(
            first["server"] == "lb",
            "no alternatives known yet: {first}"
        );
        let second = get_report(&client, "/second").await?;
        ensure!(second["server"] == "a", "{second}");
        ensure!(second["sni"] == "kubernetes.default", "{second}");
        ensure!(
            second["authority"] == format!("kubernetes.default:{}", a_addr.port()),
            "{second}"
        );
        ensure!(second["alt_used"] == a_addr.to_string(), "{second}");
        ensure!(client.endpoint_in_use() == Some(a_addr.to_string()));

        // A stream of GETs; `a` is killed in the middle of it.
        let servers = gets_across(&client, 200, 50, a.shutdown()).await?;
        ensure!(servers.len() == 200, "every GET succeeded");
        let switch = servers
            .iter()
            .position(|s| s != "a")
            .context("never left `a`")?;
        ensure!(switch >= 50, "left `a` before it was killed: {servers:?}");
        ensure!(
            servers[switch..].iter().all(|s| s == "b"),
            "after the kill, `b` (next in order) and only `b` (sticky): {servers:?}"
        );
        let a_status = client
            .endpoints()
            .into_iter()
            .find(|e| e.address == a_addr.to_string())
            .context("a listed")?;
        ensure!(
            matches!(a_status.blocked, Some(Block::Until(_))),
            "a network error blocks for the block period: {a_status:?}"
        );
        ensure!(c.requests_served() == 0, "c never needed");

        let text = metrics_text(&client)?;
        let origin_label = origin.addr().to_string();
        let ep = |addr: SocketAddr| format!("origin=\"{origin_label}\",endpoint=\"{addr}\"");
        ensure!(
            sample(&text, "client_endpoint_in_use", &ep(b.addr())) == Some(1.0),
            "{text}"
        );
        ensure!(
            sample(&text, "client_endpoint_in_use", &ep(a_addr)) == Some(0.0),
            "{text}"
        );
        // One failover to `b`, labelled with how the attempt on `a` failed:
        // refused (`connect`) or reset with the GET sent (`request`).
        let failovers: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("client_failovers_total{{{},reason=", ep(b.addr()))))
            .collect();
        ensure!(
            failovers.len() == 1
                && failovers[0].ends_with(" 1")
                && (failovers[0].contains("reason=\"connect\"")
                    || failovers[0].contains("reason=\"request\"")),
            "{text}"
        );
        ensure!(
            sample(
                &text,
                "client_endpoint_blocks_total",
                &format!("{},block=\"period\"", ep(a_addr))
            ) == Some(1.0),
            "{text}"
        );
        let a_failures: f64 = ["connect", "request", "body"]
            .iter()
            .filter_map(|r| {
                sample(
                    &text,
                    "client_endpoint_failures_total",
                    &format!("{},reason=\"{r}\"", ep(a_addr)),
                )
            })
            .sum();
        ensure!(a_failures == 1.0, "{text}");
        ensure!(
            origin.requests_served() == 1,
            "the origin only answered the first GET"
        );
        Ok(())
    })
    .await
}

/// Stand-ins of every kind an alternative can be, and an origin.
struct Mixed {
    /// On 127.0.0.2, with a certificate from a CA the client does not
    /// trust.
    bad: StandinServer,
    /// On 127.0.0.3, its /readyz answering 503.
    unready: StandinServer,
    /// On 127.0.0.4, healthy.
    good: StandinServer,
    /// The origin on 127.0.0.1.
    origin: StandinServer,
}

async fn mixed(pki: &Pki) -> Result<Mixed> {
    let other_ca = Ca::new("some other CA")?;
    let wrong = other_ca.issue_server(&["kubernetes.default"], &[])?;
    let bad = standin("bad", "127.0.0.2", &wrong, None).await?;
    let unready = standin("unready", "127.0.0.3", &pki.good, None).await?;
    unready.set_ready(false);
    let good = standin("good", "127.0.0.4", &pki.good, None).await?;
    let origin = standin("lb", "127.0.0.1", &pki.good, None).await?;
    Ok(Mixed {
        bad,
        unready,
        good,
        origin,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_certificate_blocks_for_good_and_unready_is_skipped() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let Mixed {
            bad,
            unready,
            good,
            origin,
        } = mixed(&pki).await?;
        let mut config = ClientConfig::new(&format!("https://{}", origin.addr()), pki.tls.clone())?
            .with_alternative_hosts(&format!(
                "{}, {}, {}",
                bad.addr(),
                unready.addr(),
                good.addr()
            ))?;
        config.block_period = Duration::from_millis(300);
        let client = Client::new(config)?;

        let report = get_report(&client, "/x").await?;
        ensure!(report["server"] == "good", "{report}");
        ensure!(
            bad.requests_served() == 0,
            "TLS failed, nothing sent to `bad`"
        );
        let text = metrics_text(&client)?;
        let origin_label = origin.addr().to_string();
        let ep = |addr: SocketAddr| format!("origin=\"{origin_label}\",endpoint=\"{addr}\"");
        for (addr, reason, block) in [
            (bad.addr(), "certificate", "permanent"),
            (unready.addr(), "not_ready", "period"),
        ] {
            let failures = format!("{},reason=\"{reason}\"", ep(addr));
            ensure!(
                sample(&text, "client_endpoint_failures_total", &failures) == Some(1.0),
                "{text}"
            );
            let blocks = format!("{},block=\"{block}\"", ep(addr));
            ensure!(
                sample(&text, "client_endpoint_blocks_total", &blocks) == Some(1.0),
                "{text}"
            );
        }
        let until = |addr| sample(&text, "client_endpoint_blocked_until_seconds", &ep(addr));
        ensure!(until(bad.addr()) == Some(f64::INFINITY), "{text}");
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        ensure!(
            until(unready.addr()).is_some_and(|t| t > unix_now && t < unix_now + 1.0),
            "blocked for the 300 ms block period: {text}"
        );
        ensure!(
            unready.requests_served() == 1,
            "only the /readyz check reached `unready`"
        );
        let status = |addr: SocketAddr| {
            client
                .endpoints()
                .into_iter()
                .find(|e| e.address == addr.to_string())
        };
        ensure!(
            status(bad.addr()).and_then(|s| s.blocked) == Some(Block::Forever),
            "{:?}",
            client.endpoints()
        );
        ensure!(
            matches!(
                status(unready.addr()).and_then(|s| s.blocked),
                Some(Block::Until(_))
            ),
            "{:?}",
            client.endpoints()
        );

        // Past the block period: `good` stays in use (sticky), `bad` stays
        // blocked, and once `good` is gone, the recovered `unready` is
        // checked again and used, never `bad`.
        tokio::time::sleep(Duration::from_millis(400)).await;
        ensure!(get_report(&client, "/y").await?["server"] == "good");
        ensure!(status(bad.addr()).and_then(|s| s.blocked) == Some(Block::Forever));
        unready.set_ready(true);
        good.shutdown().await;
        ensure!(get_report(&client, "/z").await?["server"] == "unready");
        ensure!(bad.requests_served() == 0);
        ensure!(origin.requests_served() == 0, "the origin was never needed");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_alternatives_expire_and_are_relisted() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let a = standin("a", "127.0.0.2", &pki.good, None).await?;
        // `ma` says an hour; the client's maximum age (1 s here) wins.
        let alt_svc = h2_alternatives(&[&a], Duration::from_secs(3600))?;
        let origin = standin("lb", "127.0.0.1", &pki.good, Some(&alt_svc)).await?;
        let mut config = ClientConfig::new(&format!("https://{}", origin.addr()), pki.tls.clone())?;
        config.max_age = Duration::from_secs(1);
        let client = Client::new(config)?;

        let mut servers = Vec::new();
        for _ in 0..2 {
            servers.push(get_report(&client, "/x").await?["server"].clone());
        }
        ensure!(client.endpoints().len() == 2, "{:?}", client.endpoints());
        tokio::time::sleep(Duration::from_millis(1100)).await;
        ensure!(
            client.endpoints().len() == 1,
            "expired: {:?}",
            client.endpoints()
        );
        for _ in 0..2 {
            servers.push(get_report(&client, "/x").await?["server"].clone());
        }
        ensure!(servers == ["lb", "a", "lb", "a"], "{servers:?}");
        Ok(())
    })
    .await
}

/// A server that answers `/readyz` and, for any other request, reads it
/// whole and then drops the connection with a TCP reset, without
/// answering. Returns its address and the count of such requests.
async fn resetting_server(ip: &str, cert: &Issued) -> Result<(SocketAddr, Arc<AtomicUsize>)> {
    let tls = tokio_rustls::TlsAcceptor::from(pki::server_config(cert, None, &[ALPN_H2])?);
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0")).await?;
    let addr = listener.local_addr()?;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            let seen = counter.clone();
            tokio::spawn(async move {
                let _ = tcp.set_zero_linger();
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let (kill, mut killed) = tokio::sync::mpsc::channel::<()>(1);
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let kill = kill.clone();
                    let seen = seen.clone();
                    async move {
                        if req.uri().path() == "/readyz" {
                            return Ok::<_, hyper::Error>(http::Response::new(Full::new(
                                Bytes::from_static(b"ok"),
                            )));
                        }
                        let _ = req.into_body().collect().await;
                        seen.fetch_add(1, Ordering::SeqCst);
                        let _ = kill.send(()).await;
                        std::future::pending().await
                    }
                });
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    _ = killed.recv() => {}
                }
            });
        }
    });
    Ok((addr, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_may_have_arrived_is_not_repeated_a_get_is() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let (resetter, seen) = resetting_server("127.0.0.2", &pki.good).await?;
        let good = standin("good", "127.0.0.3", &pki.good, None).await?;
        let origin = standin("lb", "127.0.0.1", &pki.good, None).await?;
        let alternatives = format!("{resetter}, {}", good.addr());

        // GET: reset after the server read it, repeated on `good`.
        let client = client_for(&origin, &pki, &alternatives)?;
        let report = get_report(&client, "/get").await?;
        ensure!(report["server"] == "good", "{report}");
        ensure!(
            seen.load(Ordering::SeqCst) == 1,
            "the GET reached the resetter first"
        );

        // POST with a fresh client (no blocks): the resetter reads it, the
        // client returns MaybeSent and sends it nowhere else.
        let client = client_for(&origin, &pki, &alternatives)?;
        let good_before = good.requests_served();
        let post = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(Bytes::from_static(b"{\"kind\":\"ConfigMap\"}"))?;
        match client.send(post).await {
            Err(Error::MaybeSent {
                method, endpoint, ..
            }) => {
                ensure!(method == http::Method::POST);
                ensure!(endpoint == resetter.to_string(), "{endpoint}");
            }
            other => anyhow::bail!("expected MaybeSent, got {other:?}"),
        }
        ensure!(
            seen.load(Ordering::SeqCst) == 2,
            "the POST reached the resetter once"
        );
        ensure!(
            good.requests_served() == good_before,
            "the POST was not repeated on `good`"
        );
        ensure!(origin.requests_served() == 0, "nor on the origin");

        // A POST that was never sent (the endpoint refuses connections)
        // moves on.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.4:0")?;
            l.local_addr()?
        };
        let mut config = ClientConfig::new(&format!("https://{}", origin.addr()), pki.tls.clone())?
            .with_alternative_hosts(&format!("{closed}, {}", good.addr()))?;
        config.connect_timeout = Duration::from_secs(1);
        let client = Client::new(config)?;
        let post = http::Request::post("/echo").body(Bytes::from_static(b"once"))?;
        let response = client.send(post).await?;
        ensure!(response.status() == 200);
        let body = response.into_body().collect().await?.to_bytes();
        ensure!(body.as_ref() == b"once", "{body:?}");
        let blocked = client
            .endpoints()
            .into_iter()
            .find(|e| e.address == closed.to_string())
            .and_then(|e| e.blocked);
        ensure!(matches!(blocked, Some(Block::Until(_))), "{blocked:?}");
        Ok(())
    })
    .await
}

/// A TCP forwarder in front of `backend` that can be frozen: from then on
/// it moves no byte either way and new connections are accepted and held
/// silent, as a SIGSTOPped server would behave.
async fn freezable_forwarder(
    ip: &str,
    backend: SocketAddr,
) -> Result<(SocketAddr, tokio::sync::watch::Sender<bool>)> {
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0")).await?;
    let addr = listener.local_addr()?;
    let (freeze, frozen) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut frozen = frozen.clone();
            tokio::spawn(async move {
                let already = *frozen.borrow();
                if already {
                    std::future::pending::<()>().await;
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    _ = async { frozen.wait_for(|f| *f).await.map(|_| ()) } => {
                        // Hold both sockets open and silent.
                        std::future::pending::<()>().await;
                    }
                }
            });
        }
    });
    Ok((addr, freeze))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_endpoint_is_left_within_the_keepalive_without_a_failed_get() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let a = standin("a", "127.0.0.2", &pki.good, None).await?;
        let (hangable, freeze) = freezable_forwarder("127.0.0.2", a.addr()).await?;
        let b = standin("b", "127.0.0.3", &pki.good, None).await?;
        let origin = standin("lb", "127.0.0.1", &pki.good, None).await?;
        let mut config = ClientConfig::new(&format!("https://{}", origin.addr()), pki.tls.clone())?
            .with_alternative_hosts(&format!("{hangable}, {}", b.addr()))?;
        // Not shorter: on a loaded machine a PING answer can take a few hundred
        // milliseconds, and a healthy endpoint must not be left.
        let keepalive = Duration::from_secs(1);
        config.keepalive = keepalive;
        config.check_timeout = Duration::from_secs(1);
        let client = Client::new(config)?;

        let mut servers = Vec::new();
        let mut slowest = Duration::ZERO;
        for i in 0..60 {
            if i == 20 {
                freeze.send(true)?;
            }
            let started = std::time::Instant::now();
            let report = get_report(&client, &format!("/hang/{i}")).await?;
            slowest = slowest.max(started.elapsed());
            servers.push(report["server"].as_str().unwrap_or("?").to_owned());
        }
        ensure!(
            servers[..20].iter().all(|s| s == "a") && servers[20..].iter().all(|s| s == "b"),
            "{servers:?}"
        );
        eprintln!("slowest GET across the hang: {slowest:?}");
        // A PING unanswered for `keepalive` closes the connection; the GET
        // then moves on. Allow the interval, the timeout and slack for a
        // busy machine; TCP alone would take minutes.
        ensure!(
            slowest < keepalive * 2 + Duration::from_millis(1500),
            "the GET caught in the hang took {slowest:?}"
        );
        let blocked = client
            .endpoints()
            .into_iter()
            .find(|e| e.address == hangable.to_string())
            .and_then(|e| e.blocked);
        ensure!(matches!(blocked, Some(Block::Until(_))), "{blocked:?}");
        ensure!(origin.requests_served() == 0);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gets_all_succeed_across_a_kill() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let a = standin("a", "127.0.0.2", &pki.good, None).await?;
        let b = standin("b", "127.0.0.3", &pki.good, None).await?;
        let origin = standin("lb", "127.0.0.1", &pki.good, None).await?;
        let client = client_for(&origin, &pki, &format!("{}, {}", a.addr(), b.addr()))?;
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8 {
            let client = client.clone();
            let done = done.clone();
            tasks.spawn(async move {
                let mut servers = Vec::new();
                for i in 0..40 {
                    let report = get_report(&client, &format!("/c/{t}/{i}")).await?;
                    servers.push(report["server"].as_str().unwrap_or("?").to_owned());
                    done.fetch_add(1, Ordering::SeqCst);
                }
                anyhow::Ok(servers)
            });
        }
        while done.load(Ordering::SeqCst) < 80 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        a.shutdown().await;
        let mut total = 0;
        while let Some(servers) = tasks.join_next().await {
            let servers = servers??;
            total += servers.len();
            ensure!(
                servers.last().map(String::as_str) == Some("b"),
                "every task ends on `b`: {servers:?}"
            );
        }
        ensure!(total == 320, "every GET succeeded");
        ensure!(origin.requests_served() == 0);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_each_stage_and_blocks_what_failed() -> Result<()> {
    bounded(async {
        let pki = pki()?;
        let Mixed {
            bad,
            unready,
            good,
            origin,
        } = mixed(&pki).await?;
        // A port nothing listens on: bind one, then close it.
        let closed = std::net::TcpListener::bind("127.0.0.5:0")?.local_addr()?;
        let client = client_for(
            &origin,
            &pki,
            &format!(
                "{}, {}, {}, {closed}",
                bad.addr(),
                unready.addr(),
                good.addr()
            ),
        )?;

        let reports = client.probe().await;
        let by_address = |addr: SocketAddr| {
            reports
                .iter()
                .find(|r| r.address == addr.to_string())
                .with_context(|| format!("{addr} not probed: {reports:?}"))
        };
        ensure!(reports.len() == 5, "{reports:#?}");
        ensure!(reports[0].origin && reports[0].address == origin.addr().to_string());
        let lb = by_address(origin.addr())?;
        ensure!(lb.healthy() && !lb.chosen && lb.blocked.is_none(), "{lb:?}");
        let g = by_address(good.addr())?;
        ensure!(g.healthy() && g.chosen && g.local, "{g:?}");
        let b = by_address(bad.addr())?;
        ensure!(
            b.connect == Stage::Passed
                && matches!(&b.tls, Stage::Failed(r) if r.contains("certificate"))
                && b.readyz == Stage::NotReached
                && b.blocked == Some(Block::Forever),
            "{b:?}"
        );
        let u = by_address(unready.addr())?;
        ensure!(
            u.tls == Stage::Passed
                && matches!(&u.readyz, Stage::Failed(r) if r.contains("503"))
                && matches!(u.blocked, Some(Block::Until(_))),
            "{u:?}"
        );
        let c = by_address(closed)?;
        ensure!(
            matches!(c.connect, Stage::Failed(_))
                && c.tls == Stage::NotReached
                && matches!(c.blocked, Some(Block::Until(_))),
            "{c:?}"
        );
        // The probe's connection to `good` carries the next request, and
        // nothing but the /readyz checks reached the others.
        ensure!(get_report(&client, "/after-probe").await?["server"] == "good");
        ensure!(good.requests_served() == 2, "{}", good.requests_served());
        ensure!(bad.requests_served() == 0 && unready.requests_served() == 1);
        Ok(())
    })
    .await
}
