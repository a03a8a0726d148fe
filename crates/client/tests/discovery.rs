//! EndpointSlice discovery against stand-in API servers that share one
//! fixture Kubernetes API, over real TLS and HTTP/2.
//!
//! The origin ("the load balancer") is a stand-in on 127.0.0.1 that sends
//! no `Alt-Svc`, and the client has no static list: every alternative it
//! knows comes from the `default/kubernetes` EndpointSlices in the fixture,
//! one slice per stand-in on 127.0.0.2-4 (their ports differ). Every
//! address is on `lo`, so all count as local and the slices' name order
//! decides.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_client::{Client, ClientConfig};
use apiway_standin::fixture_api::endpoint_slice;
use apiway_standin::pki::{self, Ca};
use apiway_standin::{FixtureApi, FixtureServer, StandinConfig, StandinServer};
use serde_json::json;
use support::{bounded, get_report, gets_across, metrics_text, sample};

mod support;

/// What a test runs against.
struct Cluster {
    api: FixtureApi,
    fixture: Option<FixtureServer>,
    origin: StandinServer,
    /// `api-2`, `api-3`, `api-4` on 127.0.0.2-4, each listed by the slice
    /// `kubernetes-N`.
    servers: Vec<StandinServer>,
    tls: Arc<rustls::ClientConfig>,
}

impl Cluster {
    async fn start() -> Result<Cluster> {
        let api = FixtureApi::with_settings(1000, Duration::from_millis(500));
        let fixture = api.serve("127.0.0.1:0".parse()?).await?;
        let ca = Ca::new("discovery test CA")?;
        let cert = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
        let start = |name: &str, ip: &str| -> Result<StandinConfig> {
            Ok(
                StandinConfig::new(name, format!("{ip}:0").parse()?, cert.clone())
                    .with_api_upstream(fixture.url()),
            )
        };
        let origin = StandinServer::start(start("lb", "127.0.0.1")?).await?;
        let mut servers = Vec::new();
        for n in 2..=4 {
            let server =
                StandinServer::start(start(&format!("api-{n}"), &format!("127.0.0.{n}"))?).await?;
            api.apply(endpoint_slice(
                &format!("kubernetes-{n}"),
                server.addr(),
                true,
            ))?;
            servers.push(server);
        }
        // A slice of another Service is not the API server's.
        let mut other = endpoint_slice("other", "127.0.0.9:443".parse()?, true);
        other["metadata"]["labels"]["kubernetes.io/service-name"] = json!("other");
        api.apply(other)?;
        Ok(Cluster {
            api,
            fixture: Some(fixture),
            origin,
            servers,
            tls: pki::client_config(&ca, None, &[])?,
        })
    }

    fn config(&self) -> Result<ClientConfig> {
        Ok(ClientConfig::new(
            &format!("https://{}", self.origin.addr()),
            self.tls.clone(),
        )?)
    }

    /// A client with discovery on, once it lists all three stand-ins;
    /// and their addresses.
    async fn discovering_client(&self) -> Result<(Client, Vec<String>)> {
        let client = Client::new(self.config()?.with_endpoint_slice_discovery())?;
        let all = vec![self.addr(2), self.addr(3), self.addr(4)];
        wait_for_alternatives(&client, &all).await?;
        Ok((client, all))
    }

    fn addr(&self, n: usize) -> String {
        self.servers[n - 2].addr().to_string()
    }
}

/// The addresses of the client's alternatives (not the origin).
fn alternatives(client: &Client) -> Vec<String> {
    client
        .endpoints()
        .into_iter()
        .filter(|e| !e.origin)
        .map(|e| e.address)
        .collect()
}

/// Waits until `client`'s alternatives are `want`.
async fn wait_for_alternatives(client: &Client, want: &[String]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = alternatives(client);
        if now == want {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "alternatives are {now:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `check` holds, polling.
async fn wait_until(what: &str, check: impl Fn() -> bool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovers_the_endpoints_and_uses_one() -> Result<()> {
    bounded(async {
        let cluster = Cluster::start().await?;
        let (client, all) = cluster.discovering_client().await?;
        ensure!(
            client.endpoints().iter().all(|e| e.local),
            "loopback is local: {:?}",
            client.endpoints()
        );

        let report = get_report(&client, "/hello").await?;
        ensure!(report["server"] == "api-2", "first slice, local: {report}");
        ensure!(report["sni"] == "kubernetes.default", "{report}");
        ensure!(report["alt_used"] == cluster.addr(2), "{report}");

        let text = metrics_text(&client)?;
        let origin = format!("origin=\"{}\"", cluster.origin.addr());
        ensure!(
            sample(&text, "client_discovered_endpoints", &origin) == Some(3.0),
            "{text}"
        );
        let api = cluster.api.clone();
        wait_until("it watches after listing", || api.stats().watches >= 1).await?;

        // A slice that appears is picked up by the watch.
        let extra = StandinServer::start(StandinConfig::new(
            "api-5",
            "127.0.0.5:0".parse()?,
            // Any certificate will do: it is only listed, not used.
            Ca::new("other")?.issue_server(&["kubernetes.default"], &[])?,
        ))
        .await?;
        cluster
            .api
            .apply(endpoint_slice("kubernetes-5", extra.addr(), true))?;
        let mut five = all.clone();
        five.push(extra.addr().to_string());
        wait_for_alternatives(&client, &five).await?;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_marked_not_ready_is_dropped_by_the_watch() -> Result<()> {
    bounded(async {
        let cluster = Cluster::start().await?;
        let (client, _) = cluster.discovering_client().await?;
        let lists = cluster.api.stats().lists;

        cluster.api.apply(endpoint_slice(
            "kubernetes-3",
            cluster.servers[1].addr(),
            false,
        ))?;
        wait_for_alternatives(&client, &[cluster.addr(2), cluster.addr(4)]).await?;
        cluster
            .api
            .delete("endpointslices", "default", "kubernetes-2")?;
        wait_for_alternatives(&client, &[cluster.addr(4)]).await?;
        let report = get_report(&client, "/after").await?;
        ensure!(report["server"] == "api-4", "{report}");
        cluster.api.apply(endpoint_slice(
            "kubernetes-3",
            cluster.servers[1].addr(),
            true,
        ))?;
        wait_for_alternatives(&client, &[cluster.addr(3), cluster.addr(4)]).await?;
        ensure!(
            cluster.api.stats().lists == lists,
            "the watch, not a new list, saw each change: {:?}",
            cluster.api.stats()
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_makes_it_list_again() -> Result<()> {
    bounded(async {
        let cluster = Cluster::start().await?;
        let (client, all) = cluster.discovering_client().await?;
        let api = cluster.api.clone();
        let before = api.stats();
        wait_until("a watch is open", || api.stats().watches > 0).await?;

        // The history is gone: the open watch ends with 410, and a change
        // made meanwhile reaches the client through the new list.
        api.compact();
        api.delete("endpointslices", "default", "kubernetes-4")?;
        wait_until("a second list", || api.stats().lists > before.lists).await?;
        wait_for_alternatives(&client, &[cluster.addr(2), cluster.addr(3)]).await?;
        // And it watches again from there.
        api.apply(endpoint_slice(
            "kubernetes-4",
            cluster.servers[2].addr(),
            true,
        ))?;
        wait_for_alternatives(&client, &all).await?;
        let text = metrics_text(&client)?;
        ensure!(
            !text.contains("client_discovery_failures_total{"),
            "a 410 is not a failure: {text}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_endpoint_in_use_loses_no_get_and_discovery_goes_on() -> Result<()> {
    bounded(async {
        let mut cluster = Cluster::start().await?;
        let (client, _) = cluster.discovering_client().await?;
        let first = get_report(&client, "/first").await?;
        ensure!(first["server"] == "api-2", "{first}");

        let (addr_3, addr_4) = (cluster.addr(3), cluster.addr(4));
        let api_2 = cluster.servers.remove(0);
        let api_2_addr = api_2.addr();
        let servers = gets_across(&client, 200, 50, api_2.shutdown()).await?;
        ensure!(servers.len() == 200, "every GET succeeded");
        let switch = servers
            .iter()
            .position(|s| s != "api-2")
            .context("never left api-2")?;
        ensure!(switch >= 50, "left api-2 before it was killed: {servers:?}");
        ensure!(
            servers[switch..].iter().all(|s| s == "api-3"),
            "after the kill, api-3 (next slice) only: {servers:?}"
        );

        // The watch ran through api-2 too; it moves on, and the endpoints
        // controller's update (api-2 not ready) reaches the client.
        cluster
            .api
            .apply(endpoint_slice("kubernetes-2", api_2_addr, false))?;
        wait_for_alternatives(&client, &[addr_3, addr_4]).await?;

        // Dropping the last client ends the task: its watch closes.
        drop(client);
        let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
        wait_until("every connection closed", || {
            a.connections_open() + b.connections_open() + cluster.origin.connections_open() == 0
        })
        .await?;
        drop(cluster.fixture.take());
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_keeps_failing_is_dropped_after_max_age() -> Result<()> {
    bounded(async {
        let mut cluster = Cluster::start().await?;
        let mut config = cluster.config()?.with_endpoint_slice_discovery();
        config.max_age = Duration::from_secs(3);
        let client = Client::new(config)?;
        let all = vec![cluster.addr(2), cluster.addr(3), cluster.addr(4)];
        wait_for_alternatives(&client, &all).await?;

        // The API behind every stand-in goes away: lists and watches fail
        // (502), yet the last list stays for max_age, then goes.
        let lost = tokio::time::Instant::now();
        drop(cluster.fixture.take());
        let origin = format!("origin=\"{}\"", cluster.origin.addr());
        wait_until("a discovery failure", || {
            metrics_text(&client).is_ok_and(|text| {
                text.lines().any(|l| {
                    l.starts_with("client_discovery_failures_total{") && l.contains(&origin)
                })
            })
        })
        .await?;
        ensure!(
            alternatives(&client) == all,
            "kept while younger than max_age"
        );
        wait_for_alternatives(&client, &[]).await?;
        ensure!(
            lost.elapsed() >= Duration::from_secs(2),
            "dropped only after about max_age: {:?}",
            lost.elapsed()
        );
        let report = get_report(&client, "/origin").await?;
        ensure!(report["server"] == "lb", "no alternatives left: {report}");
        let text = metrics_text(&client)?;
        ensure!(
            sample(&text, "client_discovered_endpoints", &origin) == Some(0.0),
            "{text}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_and_discover_now_lists_once() -> Result<()> {
    bounded(async {
        let cluster = Cluster::start().await?;
        let client = Client::new(cluster.config()?)?;
        let report = get_report(&client, "/plain").await?;
        ensure!(report["server"] == "lb", "{report}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        ensure!(
            cluster.api.stats() == Default::default(),
            "no discovery unless asked: {:?}",
            cluster.api.stats()
        );
        ensure!(alternatives(&client).is_empty());

        ensure!(client.discover_now().await? == 3);
        ensure!(cluster.api.stats().lists == 1 && cluster.api.stats().watches == 0);
        let all = vec![cluster.addr(2), cluster.addr(3), cluster.addr(4)];
        ensure!(alternatives(&client) == all, "{:?}", client.endpoints());
        let report = get_report(&client, "/now").await?;
        ensure!(report["server"] == "api-2", "{report}");
        Ok(())
    })
    .await
}
