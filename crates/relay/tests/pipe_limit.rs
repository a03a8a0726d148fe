//! When pipes run out (the process-wide limit, or no descriptors left), a
//! splicing relay copies in user space instead, without losing a byte.
//!
//! Its own test binary, because the pipe limit is process-wide.

mod common;

use std::time::Duration;

use apiway_relay::{pool, RelayConfig, RelayEnd, RelayMode};
use common::{payload, proxied, Via};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splice_falls_back_to_copy_when_pipes_run_out() {
    // One pipe for four connections moving data both ways at once: most
    // chunks find no pipe and are copied, some are spliced.
    pool::set_pipe_limit(1);
    let unavailable_before = pool::stats().pipes_unavailable;
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        tasks.push(tokio::spawn(async move {
            let cfg = RelayConfig {
                mode: RelayMode::Splice,
                ..RelayConfig::default()
            };
            let p = proxied(cfg, Via::Tcp).await;
            let up = payload(6 << 20, 100 + i);
            let down = payload(5 << 20, 200 + i);
            let (mut client_rd, mut client_wr) = p.client.into_split();
            let (mut server_rd, mut server_wr) = p.server.into_split();
            let (up2, down2) = (up.clone(), down.clone());
            let w1 = tokio::spawn(async move {
                client_wr.write_all(&up2).await.unwrap();
                client_wr.shutdown().await.unwrap();
                client_wr
            });
            let w2 = tokio::spawn(async move {
                server_wr.write_all(&down2).await.unwrap();
                server_wr.shutdown().await.unwrap();
                server_wr
            });
            let mut got_up = Vec::new();
            let mut got_down = Vec::new();
            let (r1, r2) = tokio::join!(
                server_rd.read_to_end(&mut got_up),
                client_rd.read_to_end(&mut got_down)
            );
            r1.unwrap();
            r2.unwrap();
            assert!(
                got_up == up && got_down == down,
                "connection {i}: bytes differ"
            );
            let _open = (w1.await.unwrap(), w2.await.unwrap());
            let outcome = p.relay.await.unwrap();
            assert_eq!(outcome.end, RelayEnd::Closed);
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    let stats = pool::stats();
    assert_eq!(stats.pipes_in_use, 0, "{stats:?}");
    assert_eq!(stats.buffers_in_use, 0, "{stats:?}");
    assert!(
        stats.pipes_unavailable > unavailable_before,
        "no chunk was copied"
    );

    // No pipes at all: everything is copied.
    pool::set_pipe_limit(0);
    let cfg = RelayConfig {
        mode: RelayMode::Splice,
        ..RelayConfig::default()
    };
    let mut p = proxied(cfg, Via::Tcp).await;
    let up = payload(3 << 20, 7);
    p.client.write_all(&up).await.unwrap();
    p.client.shutdown().await.unwrap();
    let mut got = Vec::new();
    p.server.read_to_end(&mut got).await.unwrap();
    assert!(got == up);
    p.server.shutdown().await.unwrap();
    let outcome = p.relay.await.unwrap();
    assert_eq!(outcome.end, RelayEnd::Closed);
    assert_eq!(outcome.client_to_backend, up.len() as u64);
    assert_eq!(pool::stats().pipes_in_use, 0);
}
