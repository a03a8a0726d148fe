//! A reset on one side of a relayed connection is passed on as a reset to
//! the other side (never as a clean end of stream, which a client could
//! take for a complete answer), and counted.

use std::io::ErrorKind;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::agent_support::AgentProcess;

fn reset(s: TcpStream) -> Result<()> {
    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
    drop(s);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_either_side_is_passed_on_and_counted() -> Result<()> {
    // The backend: its first connection answers "partial" and resets; the
    // others report how the client's side ended.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let backend = listener.local_addr()?;
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut s, _)) = listener.accept().await {
            let ended_tx = ended_tx.clone();
            let reset_it = std::mem::take(&mut first);
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                if reset_it {
                    let _ = s.write_all(b"partial").await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = reset(s);
                } else {
                    let end = s.read(&mut buf).await.map_err(|e| e.kind());
                    let _ = ended_tx.send(end);
                }
            });
        }
    });
    let agent = AgentProcess::start(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "direct",
            "--endpoint",
            &backend.to_string(),
            "--health-check",
            "none",
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await?;

    // The backend resets mid-answer: the client sees a reset.
    let mut c = TcpStream::connect(agent.addr()).await?;
    c.write_all(b"hello").await?;
    let mut got = [0u8; 7];
    c.read_exact(&mut got).await?;
    ensure!(&got == b"partial");
    let mut buf = [0u8; 16];
    let end = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .context("the client's connection neither ended nor reset")?;
    ensure!(
        matches!(&end, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "the client saw {end:?} where the backend reset"
    );

    // The client resets: the backend sees a reset.
    let c = TcpStream::connect(agent.addr()).await?;
    let mut c = c;
    c.write_all(b"hello").await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    reset(c)?;
    let end = tokio::time::timeout(Duration::from_secs(5), ended.recv())
        .await
        .context("the backend's connection neither ended nor reset")?
        .context("the backend stopped")?;
    ensure!(
        end == Err(ErrorKind::ConnectionReset),
        "the backend saw {end:?} where the client reset"
    );

    for from in ["backend", "client"] {
        agent
            .wait_metric(
                "apiway_backend_resets_total",
                &[("from", from)],
                Duration::from_secs(5),
                |v| v == 1.0,
            )
            .await?;
    }
    Ok(())
}
