//! `--upstream connect` against a small CONNECT proxy written here in test
//! code (Debian has no CONNECT-capable peer that fits, and the gateway's
//! own `kind: connect` listener is tested separately): it answers 200 and
//! pipes to the stand-in for allowed targets, 403 otherwise, and records
//! every request line it saw.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::agent_support::{answered_by, curl_api, AgentProcess, API_NAMES};
use crate::support::Pki;

/// The test's CONNECT proxy: every `CONNECT` goes to `target` when its
/// authority is in `allowed`, else gets a 403.
struct ConnectProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    async fn start(target: SocketAddr, allowed: Vec<String>) -> Result<ConnectProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log.clone();
                let allowed = allowed.clone();
                tokio::spawn(async move {
                    let _ = tunnel(client, target, &allowed, &log).await;
                });
            }
        });
        Ok(ConnectProxy { addr, seen, task })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tunnel(
    mut client: TcpStream,
    target: SocketAddr,
    allowed: &[String],
    log: &Mutex<Vec<String>>,
) -> Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        if client.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let line = text.lines().next().unwrap_or_default().to_owned();
    log.lock().map(|mut g| g.push(line.clone())).ok();
    let authority = line.split(' ').nth(1).unwrap_or_default();
    if !line.starts_with("CONNECT ") || !allowed.iter().any(|a| a == authority) {
        client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            .await?;
        return Ok(());
    }
    let mut upstream = TcpStream::connect(target).await?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_to_the_original_destination_and_refuses_cleanly() -> Result<()> {
    let pki = Pki::new()?;
    let api = pki.standin("api", API_NAMES, false).await?;
    let proxy = ConnectProxy::start(api.addr(), vec!["kubernetes.default.svc:443".into()]).await?;
    let gateway = proxy.addr.to_string();
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "connect",
            "--gateway",
            &gateway,
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;
    // The original destination (the agent's listener) is not allowed.
    let refused = curl_api(None, agent.addr(), "/version", &pki, Duration::from_secs(3)).await;
    ensure!(refused.is_err(), "{refused:?}");
    let line = format!("CONNECT {} HTTP/1.1", agent.addr());
    ensure!(proxy.seen() == vec![line.clone()], "{:?}", proxy.seen());
    let mut agent = agent;
    let logged = agent
        .wait_for_line("the refusal", Duration::from_secs(5), |l| {
            l.contains("CONNECT failed") && l.contains("403 Forbidden")
        })
        .await?;
    ensure!(logged.contains(&agent.addr().to_string()), "{logged}");
    agent
        .wait_metric(
            "apiway_listener_connect_failed_total",
            &[],
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;

    // With --connect-authority the tunnel is allowed.
    let named = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "connect",
            "--gateway",
            &gateway,
            "--connect-authority",
            "kubernetes.default.svc:443",
        ],
    )
    .await?;
    for _ in 0..3 {
        ensure!(answered_by(None, named.addr(), &pki).await? == "api");
    }
    ensure!(proxy
        .seen()
        .iter()
        .skip(1)
        .all(|l| l == "CONNECT kubernetes.default.svc:443 HTTP/1.1"));
    Ok(())
}
