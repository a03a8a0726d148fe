//! apiway-client inside a kube-rs program against a plain kube-rs client
//! behind HAProxy with its usual health checks: how long requests fail
//! when the API server in use dies (SIGKILL) or hangs (SIGSTOP), and how
//! many fail.
//!
//! Each trial starts three `apiway standin` processes on 127.0.0.2-4 and
//! HAProxy on 127.0.0.1 in front of them (the "internal load balancer").
//! The plain client is `kube::Client` from a `kube::Config` pointing at
//! HAProxy (kube's own hyper HTTP/1.1 stack and connection pool). The
//! apiway client is `kube::Client` over `apiway_client::Client` with
//! HAProxy as its origin and the three stand-ins as `alternative_hosts`,
//! all its defaults otherwise. Both issue `GET` every 10 ms; see
//! [`super::failover`] for the fault and how recovery is measured.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_standin::pki::{self, Ca};
use apiway_test_support::peers::{free_port, Haproxy, StandinProcess};

use super::failover::{self, Fault, Outcome};
use super::Settings;
use crate::lineup::Contender;
use crate::report::ScenarioReport;

/// Which of apiway-client's kube-rs paths a trial uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `kube::Client` over the client's HTTP/2 service.
    H2,
    /// kube's own HTTP/1.1 stack over the client's dialer.
    Http1,
}

/// Runs kill and hang trials for apiway-client and plain kube-rs through
/// HAProxy, interleaved.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let contenders = failover::apiway_and_haproxy(settings, "client_failover")?;
    let ca = Ca::new("apiway bench CA")?;
    let mut report = failover::run_faults(
        settings,
        "client_failover",
        &contenders,
        (0.5, 3.0),
        async |c, fault, phase| trial(settings, &ca, c, fault, phase, Path::H2).await,
    )
    .await?;
    if contenders.contains(&Contender::Apiway) {
        // The same with kube's own HTTP/1.1 stack over the client's
        // dialer; HAProxy's figures are repeated from the rows above (same
        // run) so each row has its ratio.
        let http1 = failover::run_faults(
            settings,
            "client_failover (HTTP/1.1 connector)",
            &[Contender::Apiway],
            (0.5, 3.0),
            async |c, fault, phase| trial(settings, &ca, c, fault, phase, Path::Http1).await,
        )
        .await?;
        let haproxy: Vec<Option<f64>> = report
            .rows
            .iter()
            .map(|r| r.values.get(&Contender::Haproxy).copied())
            .collect();
        for (mut row, value) in http1.rows.into_iter().zip(haproxy) {
            if let Some(v) = value {
                row.set(Contender::Haproxy, v);
            }
            report.rows.push(row);
        }
        report.notes.extend(http1.notes);
    }
    report.notes.push(format!(
        "client_failover: three `apiway standin` processes on 127.0.0.2-4 behind HAProxy on 127.0.0.1 ({}); a `GET` every {} ms ({} s timeout) from one kube::Client; apiway = kube::Client over apiway-client (origin HAProxy, the stand-ins as alternative_hosts, defaults: 1 s HTTP/2 PING, 20 s block), HAProxy = plain kube::Client from a kube::Config pointing at HAProxy; the HTTP/1.1 connector rows: kube's own stack (Client::http1_kube_client) over apiway-client's dialer, kube's default timeouts; the stand-in that answers at the fault moment is signalled after 1 s (+0, +0.7, +1.4 s in rounds 1 to 3); recovery = fault to the start of the first request after which none failed",
        failover::HAPROXY_CHECKS,
        failover::TICK.as_millis(),
        failover::REQUEST_TIMEOUT.as_secs(),
    ));
    Ok(report)
}

async fn trial(
    settings: &Settings,
    ca: &Ca,
    contender: Contender,
    fault: Fault,
    phase: Duration,
    path: Path,
) -> Result<Outcome> {
    let apiway = settings.lineup.apiway.as_path();
    let cert = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
    let mut standins = Vec::new();
    for i in 2..=4 {
        let listen = SocketAddr::from((Ipv4Addr::new(127, 0, 0, i), 0));
        standins.push(StandinProcess::start(apiway, &format!("s{i}"), listen, &cert, None).await?);
    }
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let _haproxy = Haproxy::start(&failover::haproxy_config(listen, &standins)).await?;
    let origin = format!("https://{listen}");
    let client = match contender {
        Contender::Apiway => {
            let alternatives: Vec<String> = standins.iter().map(|s| s.addr().to_string()).collect();
            apiway_kube(ca, &origin, &alternatives.join(","), path)?
        }
        _ => plain_kube(ca, &origin)?,
    };
    // Let HAProxy's first health checks run.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if let Err(e) = whoami(client.clone()).await {
        bail!(
            "the first request through {} failed: {e:#}",
            contender.label()
        );
    }
    failover::measure(&mut standins, fault, phase, || whoami(client.clone())).await
}

/// A plain `kube::Client` for `origin`, trusting `ca`: kube's own stack.
pub fn plain_kube(ca: &Ca, origin: &str) -> Result<kube::Client> {
    kube::Client::try_from(kube_config(ca, origin)?).context("building the plain kube client")
}

/// The kube config a plain client of `origin` trusting `ca` uses.
fn kube_config(ca: &Ca, origin: &str) -> Result<kube::Config> {
    let mut config = kube::Config::new(origin.parse().context("origin URL")?);
    config.root_cert = Some(vec![ca.cert_der()?.to_vec()]);
    Ok(config)
}

/// A `kube::Client` over apiway-client for `origin` with static
/// `alternatives` (comma-separated), trusting `ca`, on `path`; all
/// defaults else.
pub fn apiway_kube(ca: &Ca, origin: &str, alternatives: &str, path: Path) -> Result<kube::Client> {
    let tls = pki::client_config(ca, None, &[])?;
    let config =
        apiway_client::ClientConfig::new(origin, tls)?.with_alternative_hosts(alternatives)?;
    let client = apiway_client::Client::new(config)?;
    Ok(match path {
        Path::H2 => client.kube_client("default"),
        Path::Http1 => client.http1_kube_client(&kube_config(ca, origin)?)?,
    })
}

/// `GET /apis/bench/whoami` through `client`: the name of the stand-in
/// that answered (stand-ins answer any path with a JSON report).
pub async fn whoami(client: kube::Client) -> Result<String> {
    let request = http::Request::get("/apis/bench/whoami").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let report: serde_json::Value =
        serde_json::from_str(&text).context("the answer is not JSON")?;
    report["server"]
        .as_str()
        .map(str::to_owned)
        .context("the answer names no server")
}
