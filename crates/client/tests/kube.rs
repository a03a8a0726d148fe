//! A real kube-rs client over apiway-client (feature `kube`), against
//! stand-in API servers on loopback: the endpoint in use is killed between
//! calls and the next call still succeeds.
#![cfg(feature = "kube")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_client::{Client, ClientConfig};
use apiway_standin::pki;
use apiway_standin::{Ca, Issued, StandinConfig, StandinServer};

async fn standin(name: &str, ip: &str, cert: &Issued) -> Result<StandinServer> {
    let listen: SocketAddr = format!("{ip}:0").parse()?;
    StandinServer::start(StandinConfig::new(name, listen, cert.clone())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_fails_over_between_calls() -> Result<()> {
    tokio::time::timeout(Duration::from_secs(60), async {
        let ca = Ca::new("apiway-client kube test CA")?;
        let cert = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
        let a = standin("a", "127.0.0.2", &cert).await?;
        let b = standin("b", "127.0.0.3", &cert).await?;
        let origin = standin("lb", "127.0.0.1", &cert).await?;
        let config = ClientConfig::new(
            &format!("https://{}", origin.addr()),
            pki::client_config(&ca, None, &[])?,
        )?
        .with_alternative_hosts(&format!("{}, {}", a.addr(), b.addr()))?;
        let client = Client::new(config)?;
        let kube = client.kube_client("default");

        let version = kube.apiserver_version().await.context("first call")?;
        ensure!(
            version.git_version == "v1.31.0-apiway-standin",
            "{version:?}"
        );
        ensure!(client.endpoint_in_use() == Some(a.addr().to_string()));
        let a_served = a.requests_served();
        ensure!(a_served == 2, "the /readyz check and the call: {a_served}");

        a.shutdown().await;
        let version = kube
            .apiserver_version()
            .await
            .context("call after the kill")?;
        ensure!(version.major == "1", "{version:?}");
        ensure!(client.endpoint_in_use() == Some(b.addr().to_string()));
        ensure!(origin.requests_served() == 0);
        Ok(())
    })
    .await
    .context("test took longer than its bound")?
}
