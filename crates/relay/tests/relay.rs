//! Relay behaviour through real sockets on 127.0.0.1.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use apiway_relay::{relay, RelayConfig, RelayEnd, RelayMode};
use common::{payload, proxied, Via};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Every way a connection can be carried: splice, copy and auto over TCP,
/// and the generic stream entry point.
const WAYS: [(RelayMode, Via); 4] = [
    (RelayMode::Splice, Via::Tcp),
    (RelayMode::Auto, Via::Tcp),
    (RelayMode::Userspace, Via::Tcp),
    (RelayMode::Auto, Via::Io),
];

fn config(mode: RelayMode) -> RelayConfig {
    RelayConfig {
        mode,
        ..RelayConfig::default()
    }
}

/// Guards every wait so a broken relay fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_arrive_intact_both_ways() {
    for (mode, via) in WAYS {
        let up = payload(24 << 20, 1);
        let down = payload(20 << 20, 2);
        let p = proxied(config(mode), via).await;
        let (mut client_rd, mut client_wr) = p.client.into_split();
        let (mut server_rd, mut server_wr) = p.server.into_split();

        let up_sent = up.clone();
        let down_sent = down.clone();
        let client_send = tokio::spawn(async move {
            client_wr.write_all(&up_sent).await.unwrap();
            client_wr.shutdown().await.unwrap();
            client_wr
        });
        let server_send = tokio::spawn(async move {
            server_wr.write_all(&down_sent).await.unwrap();
            server_wr.shutdown().await.unwrap();
            server_wr
        });
        let client_recv = tokio::spawn(async move {
            let mut got = Vec::new();
            client_rd.read_to_end(&mut got).await.unwrap();
            got
        });
        let server_recv = tokio::spawn(async move {
            let mut got = Vec::new();
            server_rd.read_to_end(&mut got).await.unwrap();
            got
        });

        let got_up = timeout(LIMIT, server_recv).await.unwrap().unwrap();
        let got_down = timeout(LIMIT, client_recv).await.unwrap().unwrap();
        assert!(
            got_up == up,
            "{mode:?}/{via:?}: client to backend bytes differ"
        );
        assert!(
            got_down == down,
            "{mode:?}/{via:?}: backend to client bytes differ"
        );
        let _keep_open = (client_send.await.unwrap(), server_send.await.unwrap());

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::Closed, "{mode:?}/{via:?}");
        assert_eq!(outcome.client_to_backend, up.len() as u64);
        assert_eq!(outcome.backend_to_client, down.len() as u64);
        // The observer saw exactly what moved.
        assert_eq!(p.totals.to_backend.load(Ordering::Relaxed), up.len() as u64);
        assert_eq!(
            p.totals.to_client.load(Ordering::Relaxed),
            down.len() as u64
        );
    }
}

#[tokio::test]
async fn client_half_close_still_gets_the_full_response() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        let request = payload(300_000, 3);
        let response = payload(5 << 20, 4);

        p.client.write_all(&request).await.unwrap();
        p.client.shutdown().await.unwrap();

        // The backend sees the request end...
        let mut got = Vec::new();
        timeout(LIMIT, p.server.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == request, "{mode:?}/{via:?}");

        // ...and can still answer in full, after a pause.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (mut server_rd, mut server_wr) = p.server.into_split();
        let sent = response.clone();
        let writer = tokio::spawn(async move {
            server_wr.write_all(&sent).await.unwrap();
            server_wr.shutdown().await.unwrap();
            server_wr
        });
        let mut got = Vec::new();
        timeout(LIMIT, p.client.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == response, "{mode:?}/{via:?}");
        let _server_wr = writer.await.unwrap();
        // The relay already shut the backend's read side: it reads EOF again.
        assert_eq!(server_rd.read(&mut [0; 8]).await.unwrap(), 0);

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::Closed, "{mode:?}/{via:?}");
        assert_eq!(outcome.client_to_backend, request.len() as u64);
        assert_eq!(outcome.backend_to_client, response.len() as u64);
    }
}

#[tokio::test]
async fn backend_half_close_still_gets_the_full_request() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        let greeting = payload(200_000, 5);
        let reply = payload(3 << 20, 6);

        p.server.write_all(&greeting).await.unwrap();
        p.server.shutdown().await.unwrap();

        let mut got = Vec::new();
        timeout(LIMIT, p.client.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == greeting, "{mode:?}/{via:?}");

        let (_client_rd, mut client_wr) = p.client.into_split();
        let sent = reply.clone();
        let writer = tokio::spawn(async move {
            client_wr.write_all(&sent).await.unwrap();
            client_wr.shutdown().await.unwrap();
            client_wr
        });
        let mut got = Vec::new();
        timeout(LIMIT, p.server.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == reply, "{mode:?}/{via:?}");
        let _client_wr = writer.await.unwrap();

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::Closed, "{mode:?}/{via:?}");
        assert_eq!(outcome.client_to_backend, reply.len() as u64);
        assert_eq!(outcome.backend_to_client, greeting.len() as u64);
    }
}

/// Closes `s` with an RST instead of a FIN.
fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
}

/// Reads until the stream ends one way or another: `None` for a clean
/// end, the error's kind for a reset.
async fn read_until_closed(s: &mut TcpStream) -> Option<std::io::ErrorKind> {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) => return None,
            Err(e) => return Some(e.kind()),
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn client_reset_closes_the_backend() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        p.client.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        p.server.read_exact(&mut got).await.unwrap();
        reset(p.client);

        let end = timeout(LIMIT, read_until_closed(&mut p.server))
            .await
            .unwrap();
        // Between TCP sockets the reset is passed on.
        if matches!(via, Via::Tcp) {
            assert_eq!(end, Some(std::io::ErrorKind::ConnectionReset), "{mode:?}");
        }
        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert!(
            matches!(outcome.end, RelayEnd::ClientError(_)),
            "{mode:?}/{via:?}: {outcome:?}"
        );
        assert_eq!(outcome.client_to_backend, 5);
    }
}

#[tokio::test]
async fn backend_reset_closes_the_client() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        p.server.write_all(b"hi").await.unwrap();
        let mut got = [0u8; 2];
        p.client.read_exact(&mut got).await.unwrap();
        reset(p.server);

        let end = timeout(LIMIT, read_until_closed(&mut p.client))
            .await
            .unwrap();
        if matches!(via, Via::Tcp) {
            assert_eq!(end, Some(std::io::ErrorKind::ConnectionReset), "{mode:?}");
        }
        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert!(
            matches!(outcome.end, RelayEnd::BackendError(_)),
            "{mode:?}/{via:?}: {outcome:?}"
        );
        assert_eq!(outcome.backend_to_client, 2);
    }
}

#[tokio::test]
async fn reset_while_half_closed_still_ends_the_relay() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        p.client.shutdown().await.unwrap();
        let mut got = Vec::new();
        p.server.read_to_end(&mut got).await.unwrap();
        p.server.write_all(b"partial").await.unwrap();
        let mut got = [0u8; 7];
        p.client.read_exact(&mut got).await.unwrap();
        reset(p.server);

        timeout(LIMIT, read_until_closed(&mut p.client))
            .await
            .unwrap();
        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert!(
            matches!(outcome.end, RelayEnd::BackendError(_)),
            "{mode:?}/{via:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn idle_timeout_closes_both_sides() {
    for (mode, via) in WAYS {
        let cfg = RelayConfig {
            idle_timeout: Some(Duration::from_millis(300)),
            ..config(mode)
        };
        let mut p = proxied(cfg, via).await;
        p.client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        p.server.read_exact(&mut got).await.unwrap();

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::IdleTimeout, "{mode:?}/{via:?}");
        assert_eq!(outcome.client_to_backend, 4);
        let mut rest = Vec::new();
        assert_eq!(p.client.read_to_end(&mut rest).await.unwrap(), 0);
        assert_eq!(p.server.read_to_end(&mut rest).await.unwrap(), 0);
    }
}

#[tokio::test]
async fn idle_timeout_waits_while_bytes_flow() {
    for (mode, via) in WAYS {
        let cfg = RelayConfig {
            idle_timeout: Some(Duration::from_millis(400)),
            ..config(mode)
        };
        let mut p = proxied(cfg, via).await;
        // Two and a half timeouts of traffic, alternating directions.
        for i in 0..20u8 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut got = [0u8; 1];
            if i % 2 == 0 {
                p.client.write_all(&[i]).await.unwrap();
                p.server.read_exact(&mut got).await.unwrap();
            } else {
                p.server.write_all(&[i]).await.unwrap();
                p.client.read_exact(&mut got).await.unwrap();
            }
            assert_eq!(got, [i]);
        }
        assert!(
            !p.relay.is_finished(),
            "{mode:?}/{via:?}: timed out despite traffic"
        );

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::IdleTimeout);
        assert_eq!(outcome.client_to_backend + outcome.backend_to_client, 20);
    }
}

#[tokio::test]
async fn dropping_the_relay_closes_both_sides() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        p.client.write_all(b"x").await.unwrap();
        let mut got = [0u8; 1];
        p.server.read_exact(&mut got).await.unwrap();

        p.relay.abort();
        let mut rest = Vec::new();
        let read = timeout(LIMIT, p.client.read_to_end(&mut rest))
            .await
            .unwrap();
        assert_eq!(read.unwrap(), 0, "{mode:?}/{via:?}");
        let read = timeout(LIMIT, p.server.read_to_end(&mut rest))
            .await
            .unwrap();
        assert_eq!(read.unwrap(), 0, "{mode:?}/{via:?}");
    }
}

#[tokio::test]
async fn observer_counts_every_byte_of_many_small_writes() {
    for (mode, via) in WAYS {
        let mut p = proxied(config(mode), via).await;
        let mut expected_up = 0u64;
        for i in 1..=200usize {
            let chunk = payload(i * 7, i as u64);
            p.client.write_all(&chunk).await.unwrap();
            expected_up += chunk.len() as u64;
        }
        p.client.shutdown().await.unwrap();
        let mut got = Vec::new();
        p.server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len() as u64, expected_up);
        p.server.write_all(&payload(12345, 9)).await.unwrap();
        p.server.shutdown().await.unwrap();
        p.client.read_to_end(&mut got).await.unwrap();

        let outcome = timeout(LIMIT, p.relay).await.unwrap().unwrap();
        assert_eq!(outcome.end, RelayEnd::Closed);
        assert_eq!(outcome.client_to_backend, expected_up);
        assert_eq!(outcome.backend_to_client, 12345);
        assert_eq!(
            p.totals.to_backend.load(Ordering::Relaxed),
            expected_up,
            "{mode:?}/{via:?}"
        );
        assert_eq!(
            p.totals.to_client.load(Ordering::Relaxed),
            12345,
            "{mode:?}/{via:?}"
        );
    }
}

/// Answers every connection with its own bytes reversed, after its EOF.
async fn reversing_backend() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.expect("backend accept");
            tokio::spawn(async move {
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.expect("backend read");
                got.reverse();
                s.write_all(&got).await.expect("backend write");
                s.shutdown().await.expect("backend shutdown");
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections() {
    const CONNECTIONS: usize = 500;
    for mode in [RelayMode::Splice, RelayMode::Userspace] {
        let backend = reversing_backend().await;
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let proxy = tokio::spawn(async move {
            let mut relays = tokio::task::JoinSet::new();
            for _ in 0..CONNECTIONS {
                let (client, _) = front.accept().await.unwrap();
                relays.spawn(async move {
                    let backend = TcpStream::connect(backend).await.expect("dial backend");
                    relay(client, backend, &config(mode), &()).await
                });
            }
            let mut outcomes = Vec::new();
            while let Some(outcome) = relays.join_next().await {
                outcomes.push(outcome.unwrap());
            }
            outcomes
        });

        // Connect one at a time (a burst of 500 SYNs can overflow the
        // listen queue and draw resets), then talk on all at once.
        let mut streams = Vec::new();
        for _ in 0..CONNECTIONS {
            streams.push(TcpStream::connect(front_addr).await.unwrap());
        }
        let mut clients = tokio::task::JoinSet::new();
        for (i, mut s) in streams.into_iter().enumerate() {
            clients.spawn(async move {
                let sent = payload(100 + i * 13, i as u64);
                s.write_all(&sent).await.unwrap();
                s.shutdown().await.unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.unwrap();
                got.reverse();
                assert!(got == sent, "{mode:?}: connection {i} got other bytes");
            });
        }
        while let Some(done) = timeout(LIMIT, clients.join_next()).await.unwrap() {
            done.unwrap();
        }
        let outcomes = timeout(LIMIT, proxy).await.unwrap().unwrap();
        assert_eq!(outcomes.len(), CONNECTIONS);
        for outcome in outcomes {
            assert_eq!(outcome.end, RelayEnd::Closed, "{mode:?}");
            assert_eq!(outcome.client_to_backend, outcome.backend_to_client);
        }
    }
}

#[tokio::test]
async fn relay_io_works_over_in_memory_streams() {
    let (mut client, relay_client_side) = tokio::io::duplex(1000);
    let (relay_backend_side, mut server) = tokio::io::duplex(700);
    let cfg = RelayConfig::default();
    let relay = tokio::spawn(async move {
        apiway_relay::relay_io(relay_client_side, relay_backend_side, &cfg, &()).await
    });
    let request = payload(50_000, 11);
    let response = payload(80_000, 12);
    let sent = request.clone();
    let writer = tokio::spawn(async move {
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        client
    });
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert!(got == request);
    let mut client = writer.await.unwrap();
    let sent = response.clone();
    let writer = tokio::spawn(async move {
        server.write_all(&sent).await.unwrap();
        server.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert!(got == response);
    writer.await.unwrap();
    let outcome = timeout(LIMIT, relay).await.unwrap().unwrap();
    assert_eq!(outcome.end, RelayEnd::Closed);
    assert_eq!(outcome.client_to_backend, 50_000);
    assert_eq!(outcome.backend_to_client, 80_000);
}
