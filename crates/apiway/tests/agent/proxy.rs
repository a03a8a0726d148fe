//! `--upstream proxy` into a real HAProxy 2.6 `accept-proxy` frontend that
//! routes on the PROXY header's destination (`dst`) and on its AUTHORITY
//! TLV (`fc_pp_authority`): the header the agent renders is what HAProxy
//! understands.

use anyhow::{ensure, Result};
use apiway_test_support::peers::{free_port, Haproxy};

use crate::agent_support::{answered_by, AgentProcess, API_NAMES};
use crate::support::Pki;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routes_on_the_destination_and_the_authority() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("a", API_NAMES, false).await?;
    let b = pki.standin("b", API_NAMES, false).await?;
    let c = pki.standin("c", API_NAMES, false).await?;
    let port = free_port()?;
    let haproxy = Haproxy::start(&format!(
        r#"
defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
frontend from_agents
    bind 127.0.0.1:{port} accept-proxy
    use_backend cluster_c if {{ fc_pp_authority -m str api.c.example.com }}
    use_backend cluster_a if {{ dst 127.0.0.1 }}
    use_backend cluster_b if {{ dst 127.0.0.2 }}
backend cluster_a
    server a {a}
backend cluster_b
    server b {b}
backend cluster_c
    server c {c}
"#,
        a = a.addr(),
        b = b.addr(),
        c = c.addr()
    ))
    .await?;
    let gateway = format!("127.0.0.1:{port}");
    // Two local destinations on one agent: 127.0.0.2 is on lo like 127.0.0.1.
    let by_destination = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.2:0",
            "--upstream",
            "proxy",
            "--gateway",
            &gateway,
        ],
    )
    .await?;
    let by_authority = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "proxy",
            "--gateway",
            &gateway,
            "--authority",
            "api.c.example.com",
        ],
    )
    .await?;
    let [first, second] = by_destination.listeners() else {
        anyhow::bail!("two listeners expected: {:?}", by_destination.listeners());
    };
    ensure!(first.ip().to_string() == "127.0.0.1" && second.ip().to_string() == "127.0.0.2");
    for _ in 0..3 {
        ensure!(answered_by(None, *first, &pki).await? == "a");
        ensure!(answered_by(None, *second, &pki).await? == "b");
        ensure!(answered_by(None, by_authority.addr(), &pki).await? == "c");
    }
    drop(haproxy);
    Ok(())
}
