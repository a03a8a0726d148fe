//! `RelayMode::Auto` copies small exchanges and splices bulk transfers.
//! Its own test binary: it reads the process-wide pool counters.

mod common;

use apiway_relay::{pool, RelayConfig, RelayMode};
use common::{payload, proxied, Via};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_exchanges_copy_and_bulk_transfers_splice() {
    let cfg = RelayConfig {
        mode: RelayMode::Auto,
        ..RelayConfig::default()
    };
    let mut p = proxied(cfg, Via::Tcp).await;
    let before = pool::stats().pipes_taken;
    for i in 0..20u8 {
        p.client.write_all(&[i; 100]).await.unwrap();
        let mut got = [0u8; 100];
        p.server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [i; 100]);
        p.server.write_all(&[i; 200]).await.unwrap();
        let mut back = [0u8; 200];
        p.client.read_exact(&mut back).await.unwrap();
        assert_eq!(back, [i; 200]);
    }
    assert_eq!(
        pool::stats().pipes_taken,
        before,
        "small request/response pairs are copied"
    );

    let bulk = payload(8 << 20, 3);
    let expected = bulk.clone();
    let (mut server_rd, _server_wr) = p.server.into_split();
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; expected.len()];
        server_rd.read_exact(&mut got).await.unwrap();
        got == expected
    });
    p.client.write_all(&bulk).await.unwrap();
    assert!(reader.await.unwrap(), "bulk bytes arrive intact");
    assert!(
        pool::stats().pipes_taken > before,
        "a bulk transfer switches to splice"
    );
}
