//! The server-side `Alt-Svc` layer and the client together, over real TLS
//! and HTTP/2 on loopback: two origins ("load balancers") on 127.0.0.1 and
//! [::1] share one `Advertiser` whose rules give each client source
//! network different alternatives among stand-ins on 127.0.0.2-4. A client
//! learns exactly what the rules allow for the address it connects from
//! (127.0.0.1 or ::1), and an update of the shared list reaches the next
//! client through either origin.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_advertise::{AdvertisedEndpoint, Advertiser, Reachability, ReachabilityRule};
use apiway_client::{Address, Client, ClientConfig};
use apiway_standin::pki;
use apiway_standin::{Ca, Issued, StandinConfig, StandinServer};

async fn start(
    name: &str,
    listen: &str,
    cert: &Issued,
    advertiser: Option<&Advertiser>,
) -> Result<StandinServer> {
    let mut config = StandinConfig::new(name, listen.parse::<SocketAddr>()?, cert.clone());
    if let Some(advertiser) = advertiser {
        config = config.with_advertiser(advertiser.clone());
    }
    StandinServer::start(config).await
}

/// GETs `/whoami` through `client` and returns which stand-in answered.
async fn answered_by(client: &Client) -> Result<String> {
    let response = client
        .fetch(http::Request::get("/whoami").body(bytes::Bytes::new())?)
        .await
        .context("GET /whoami")?;
    ensure!(response.status() == 200, "status {}", response.status());
    let report: serde_json::Value = serde_json::from_slice(response.body())?;
    Ok(report["server"].as_str().unwrap_or_default().to_owned())
}

/// The alternatives (not the origin) the client has learned.
fn learned(client: &Client) -> BTreeSet<String> {
    client
        .endpoints()
        .into_iter()
        .filter(|e| !e.origin)
        .map(|e| e.address)
        .collect()
}

fn set(servers: &[&StandinServer]) -> BTreeSet<String> {
    servers.iter().map(|s| s.addr().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_learns_what_the_rules_allow_its_source_address() -> Result<()> {
    tokio::time::timeout(Duration::from_secs(60), async {
        let ca = Ca::new("apiway advertise test CA")?;
        let alternative_cert = ca.issue_server(&["kubernetes.default"], &[])?;
        let origin_cert = ca.issue_server(
            &["kubernetes.default"],
            &[
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ],
        )?;
        let a = start("a", "127.0.0.2:0", &alternative_cert, None).await?;
        let b = start("b", "127.0.0.3:0", &alternative_cert, None).await?;
        let c = start("c", "127.0.0.4:0", &alternative_cert, None).await?;
        let endpoint = |s: &StandinServer| AdvertisedEndpoint {
            address: Address::from(s.addr()),
            ready: true,
        };
        let rule = |text: &str| ReachabilityRule::parse(text).map_err(anyhow::Error::msg);
        // 127.0.0.1 reaches a and c; ::1 reaches b; 127.0.0.5 (nobody
        // here) would reach all three.
        let advertiser = Advertiser::new(
            vec![endpoint(&a), endpoint(&b), endpoint(&c)],
            Duration::from_secs(600),
            Reachability::new(vec![
                rule(&format!("127.0.0.1={}", a.addr().ip()))?,
                rule(&format!("127.0.0.1={}", c.addr().ip()))?,
                rule(&format!("::1={}", b.addr().ip()))?,
                rule("127.0.0.5=127.0.0.0/24")?,
            ]),
        );
        let origin4 = start("origin4", "127.0.0.1:0", &origin_cert, Some(&advertiser)).await?;
        let origin6 = start("origin6", "[::1]:0", &origin_cert, Some(&advertiser)).await?;
        let tls = pki::client_config(&ca, None, &[])?;
        let client_of = |origin: &StandinServer| -> Result<Client> {
            let config = ClientConfig::new(&format!("https://{}", origin.addr()), tls.clone())?;
            Ok(Client::new(config)?)
        };

        // Over IPv4 from 127.0.0.1: a and c, never b.
        let client4 = client_of(&origin4)?;
        ensure!(learned(&client4).is_empty());
        ensure!(answered_by(&client4).await? == "origin4");
        ensure!(
            learned(&client4) == set(&[&a, &c]),
            "{:?}",
            learned(&client4)
        );
        for _ in 0..4 {
            let server = answered_by(&client4).await?;
            ensure!(server == "a" || server == "c", "answered by {server}");
        }

        // Over IPv6 from ::1, same advertiser: b only.
        let client6 = client_of(&origin6)?;
        ensure!(answered_by(&client6).await? == "origin6");
        ensure!(learned(&client6) == set(&[&b]), "{:?}", learned(&client6));
        ensure!(answered_by(&client6).await? == "b");
        ensure!(b.requests_served() >= 1 && origin6.requests_served() == 1);

        // An update of the shared list shows in the next response of either
        // origin: a unready leaves c for 127.0.0.1; b unready leaves
        // nothing for ::1, so that client is told `clear`.
        ensure!(advertiser.set_ready(&Address::from(a.addr()), false));
        ensure!(advertiser.set_ready(&Address::from(b.addr()), false));
        let client4 = client_of(&origin4)?;
        ensure!(answered_by(&client4).await? == "origin4");
        ensure!(learned(&client4) == set(&[&c]), "{:?}", learned(&client4));
        ensure!(answered_by(&client4).await? == "c");
        let before = origin6.requests_served();
        ensure!(
            answered_by(&client6).await? == "b",
            "b itself still answers"
        );
        let client6 = client_of(&origin6)?;
        ensure!(answered_by(&client6).await? == "origin6");
        ensure!(learned(&client6).is_empty(), "{:?}", learned(&client6));
        ensure!(answered_by(&client6).await? == "origin6");
        ensure!(origin6.requests_served() == before + 2);
        ensure!(a.requests_served() + c.requests_served() >= 5);
        Ok(())
    })
    .await
    .context("test took longer than its bound")?
}
