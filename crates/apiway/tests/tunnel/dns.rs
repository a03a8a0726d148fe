//! A destination named by DNS stands for every address it resolves to:
//! two stand-in API servers under one name, in a network namespace whose
//! `/etc/hosts` (mounted by `ip netns exec` from `/etc/netns/NAME/hosts`)
//! gives the name both addresses. Killing the replica in use moves the
//! tunnel's dials to the other without a failed request.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};

use crate::agent_support::{answered_by, standin_process_at, Netns};
use crate::support::Pki;
use crate::tunnel_support::{strings, Role, TunnelPki};

/// `/etc/netns/NAME/`, removed on drop.
struct NetnsEtc(PathBuf);

impl NetnsEtc {
    fn hosts(ns: &Netns, hosts: &str) -> Result<NetnsEtc> {
        let dir = PathBuf::from("/etc/netns").join(ns.name());
        std::fs::create_dir_all(&dir).context("creating /etc/netns/NAME")?;
        let etc = NetnsEtc(dir);
        std::fs::write(etc.0.join("hosts"), hosts)?;
        Ok(etc)
    }
}

impl Drop for NetnsEtc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_named_by_dns_is_every_address_it_resolves_to() -> Result<()> {
    let api_pki = Pki::new()?;
    let pki = TunnelPki::new()?;
    let ns = Netns::new()?;
    let _etc = NetnsEtc::hosts(
        &ns,
        "127.0.0.1 localhost\n127.0.0.2 api.internal\n127.0.0.3 api.internal\n",
    )?;
    let ips: [IpAddr; 2] = ["127.0.0.2".parse()?, "127.0.0.3".parse()?];
    let mut replicas = Vec::new();
    for (name, ip) in ["api-a", "api-b"].into_iter().zip(ips) {
        replicas
            .push(standin_process_at(&api_pki, name, SocketAddr::new(ip, 6443), Some(&ns)).await?);
    }

    let server_args = strings(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        &pki.server_cert.display().to_string(),
        "--key",
        &pki.server_key.display().to_string(),
        "--client-ca",
        &pki.ca_pem.display().to_string(),
        "--allowed-destination",
        "api.internal:6443",
        "--drain-delay",
        "0s",
    ]);
    let server = Role::start_in(Some(ns.name()), "tunnel-server", &server_args).await?;
    let (cert, key) = pki.agent("node-1")?;
    let agent_args = strings(&[
        "--upstream",
        "tunnel",
        "--tunnel-ca",
        &pki.ca_pem.display().to_string(),
        "--tunnel-cert",
        &cert.display().to_string(),
        "--tunnel-key",
        &key.display().to_string(),
        "--tunnel-server",
        &server.listener("tunnel").to_string(),
        "--target",
        "0:api.internal:6443",
        "--drain-delay",
        "0s",
    ]);
    let agent = Role::start_in(Some(ns.name()), "agent", &agent_args).await?;
    let local = agent.listener(">");

    // The name resolves to both replicas: whichever answers first is
    // killed, and the other answers every request that follows.
    let first = answered_by(Some(&ns), local, &api_pki).await?;
    let (gone, other) = if first == "api-a" {
        (0, "api-b")
    } else {
        (1, "api-a")
    };
    replicas[gone].kill();
    for i in 0..10 {
        let by = answered_by(Some(&ns), local, &api_pki)
            .await
            .with_context(|| format!("request {i} after {first} was killed"))?;
        ensure!(by == other, "request {i} was answered by {by}");
    }
    Ok(())
}
