//! ClientHellos that do not arrive as one record in one segment: split
//! across TLS records (legal, and what long ALPN lists or post-quantum key
//! shares cause), and dribbled one byte per TCP write.

use std::io::Write;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::StandinServer;
use apiway_wire::sni::{parse_client_hello, refragment, DEFAULT_MAX_HELLO_LEN};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::tls::{connect, expect_server, rustls_hello};
use crate::support::tools::{answer_json, long_alpn_list, openssl_get};
use crate::support::{read_until_closed, Closed, GatewayProcess, Pki, Recorder};

/// A cluster behind the gateway, plus a route to a recording backend that
/// shows the bytes the gateway relayed.
struct Setup {
    pki: Pki,
    _standin: StandinServer,
    recorder: Recorder,
    gateway: GatewayProcess,
}

const CLUSTER: &str = "frag.d.example.com";
const RECORDED: &str = "frag.recorded.example.com";

impl Setup {
    async fn start() -> Result<Setup> {
        let pki = Pki::new()?;
        let standin = pki.standin("cluster-d", &[CLUSTER], false).await?;
        let recorder = Recorder::start().await?;
        let gateway = GatewayProcess::start(&format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls, client_hello_timeout: 5s}}]
routes:
  - name: cluster-d
    hostnames: [{CLUSTER}]
    backends: [{{address: {}}}]
  - name: recorded
    hostnames: [{RECORDED}]
    backends: [{{address: {}}}]
"#,
            standin.addr(),
            recorder.addr()
        ))
        .await?;
        Ok(Setup {
            pki,
            _standin: standin,
            recorder,
            gateway,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_hello_split_over_three_records_is_routed() -> Result<()> {
    let mut s = Setup::start().await?;
    let ca = s.pki.ca_pem.to_string_lossy().into_owned();
    let alpn = long_alpn_list();
    let args = [
        "-CAfile",
        ca.as_str(),
        "-max_send_frag",
        "512",
        "-alpn",
        alpn.as_str(),
    ];

    // The hello reaches the backend in three records, unchanged.
    openssl_get(s.gateway.addr(), Some(RECORDED), "/", &args).await?;
    let recorded = s.recorder.next(Duration::from_secs(5)).await?;
    let hello = recorded
        .hello
        .context("the backend got no whole ClientHello")?;
    ensure!(
        hello.records == 3,
        "openssl sent {} records, the test needs 3",
        hello.records
    );
    ensure!(hello.server_name.as_deref() == Some(RECORDED));

    // And a whole TLS session works through it.
    let ran = openssl_get(s.gateway.addr(), Some(CLUSTER), "/split", &args).await?;
    let json = answer_json(&ran.stdout).with_context(|| format!("no answer: {ran:?}"))?;
    ensure!(
        json["server"] == "cluster-d" && json["alpn"] == "http/1.1",
        "{json}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rustls_hello_recut_into_100_byte_records_completes_the_handshake() -> Result<()> {
    let s = Setup::start().await?;
    let pending = rustls_hello(&s.pki, CLUSTER, false)?;
    let recut = refragment(&pending.hello, 100)?;
    let records = parse_client_hello(&recut, DEFAULT_MAX_HELLO_LEN)?.records;
    ensure!(
        records >= 3,
        "the hello is only {} bytes",
        pending.hello.len()
    );
    let addr = s.gateway.addr();
    let answer = tokio::task::spawn_blocking(move || {
        let mut sock = connect(addr)?;
        sock.write_all(&recut)?;
        pending.finish_get(sock, CLUSTER, "/recut")
    })
    .await??;
    expect_server(&answer, "cluster-d")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recut_hello_reaches_the_backend_byte_for_byte() -> Result<()> {
    let mut s = Setup::start().await?;
    let hello = rustls_hello(&s.pki, RECORDED, false)?.hello;
    let recut = refragment(&hello, 100)?;
    let mut client = TcpStream::connect(s.gateway.addr()).await?;
    client.write_all(&recut).await?;
    client.shutdown().await?;

    let recorded = s.recorder.next(Duration::from_secs(5)).await?;
    ensure!(
        recorded.bytes == recut,
        "the backend got {} bytes, not the {} sent",
        recorded.bytes.len(),
        recut.len()
    );
    // rustls wrote one record: a 5-byte header and the handshake message.
    let expected_records = (hello.len() - 5).div_ceil(100);
    let parsed = recorded.hello.context("no ClientHello")?;
    ensure!(
        parsed.records == expected_records && expected_records >= 3,
        "{parsed:?}"
    );
    // The backend closed after reading: the client sees a clean end.
    let (_, closed) = read_until_closed(&mut client, Duration::from_secs(5)).await;
    ensure!(closed == Closed::Eof, "{closed:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_sent_one_byte_per_write_is_routed_and_the_handshake_completes() -> Result<()> {
    let s = Setup::start().await?;
    let pending = rustls_hello(&s.pki, CLUSTER, false)?;
    let addr = s.gateway.addr();
    let answer = tokio::task::spawn_blocking(move || {
        let mut sock = connect(addr)?;
        for byte in pending.hello.clone() {
            sock.write_all(&[byte])?;
            std::thread::sleep(Duration::from_millis(1));
        }
        pending.finish_get(sock, CLUSTER, "/dribble")
    })
    .await??;
    expect_server(&answer, "cluster-d")
}
