//! Interoperability with a live HAProxy, both directions: headers rendered
//! here are sent to a frontend with `accept-proxy`, and HAProxy relays what
//! it understood in the header it sends (`send-proxy-v2` with `crc32c`,
//! `authority` and `unique-id`, or `send-proxy`) to a listener here, which
//! parses it. Skipped, with a note, when `haproxy` is not installed.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiway_wire::proxy::{
    parse, Command as ProxyCommand, ProxyError, ProxyHeader, RenderOptions, Tlvs, Version,
};

/// HAProxy running with a generated config; killed and cleaned up on drop.
struct Haproxy {
    child: Child,
    dir: PathBuf,
}

impl Haproxy {
    /// What HAProxy printed so far, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn haproxy_installed() -> bool {
    Command::new("haproxy")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Ports that were free a moment ago, for HAProxy to bind; all held open
/// together while choosing, so they differ.
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

fn start(backend: u16, v2_port: u16, v1_port: u16) -> Haproxy {
    let dir = std::env::temp_dir().join(format!("apiway-proxy-haproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "defaults
    mode tcp
    timeout connect 5s
    timeout client 10s
    timeout server 10s
    unique-id-format %{{+X}}o\\ %ci:%cp_%fi:%fp

frontend to_v2
    bind 127.0.0.1:{v2_port} accept-proxy
    default_backend to_v2
backend to_v2
    server s 127.0.0.1:{backend} send-proxy-v2 proxy-v2-options crc32c,authority,unique-id

frontend to_v1
    bind 127.0.0.1:{v1_port} accept-proxy
    default_backend to_v1
backend to_v1
    server s 127.0.0.1:{backend} send-proxy
"
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
    let child = Command::new("haproxy")
        .arg("-f")
        .arg(&path)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let haproxy = Haproxy { child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    for port in [v2_port, v1_port] {
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    haproxy
}

/// Accepts the next connection within `wait`, reads it to the end.
fn receive(listener: &TcpListener, wait: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + wait;
    let mut conn = loop {
        match listener.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut bytes = Vec::new();
    let _ = conn.read_to_end(&mut bytes);
    Some(bytes)
}

/// Sends `bytes` to HAProxy on `port`, half-closes, and returns what the
/// listener behind HAProxy received (`None` if HAProxy never connected).
fn relay(listener: &TcpListener, port: u16, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // HAProxy may already have refused the header and reset the connection.
    let _ = client.write_all(bytes);
    let _ = client.shutdown(Shutdown::Write);
    let received = receive(listener, Duration::from_secs(2));
    // Drain whatever HAProxy answers (nothing, or a close).
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = client.read_to_end(&mut Vec::new());
    received
}

fn sa(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn haproxy_accepts_rendered_headers_and_relays_them() {
    // A missing peer fails the test: a silent skip would hide that CI did
    // not test interoperability at all.
    assert!(
        haproxy_installed(),
        "haproxy is not installed: run `apt-get install haproxy` (scripts/test.sh does)"
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let backend = listener.local_addr().unwrap().port();
    let [v2_port, v1_port] = free_ports();
    let haproxy = start(backend, v2_port, v1_port);
    // HAProxy's readiness probes above were connections too: forward nothing.
    while receive(&listener, Duration::from_millis(300)).is_some() {}

    let checksum = RenderOptions {
        crc32c: true,
        noop: Some(5),
    };
    let cases = [
        (
            ProxyHeader {
                tlvs: Tlvs {
                    authority: Some("api.b.example.com".into()),
                    unique_id: Some(b"agent-1".to_vec()),
                    unknown: vec![(0xe5, b"custom".to_vec())],
                    ..Tlvs::default()
                },
                ..ProxyHeader::tcp(Version::V2, sa("10.0.5.6:41000"), sa("10.96.0.1:443"))
            },
            v2_port,
        ),
        (
            ProxyHeader::tcp(
                Version::V2,
                sa("[2001:db8::5]:40000"),
                sa("[fd00:10:96::1]:6443"),
            ),
            v2_port,
        ),
        (
            ProxyHeader::tcp(Version::V1, sa("192.0.2.7:1234"), sa("10.96.0.1:443")),
            v2_port,
        ),
        (
            ProxyHeader::tcp(
                Version::V1,
                sa("[2001:db8::1:0:0:1]:1"),
                sa("[::ffff:10.0.0.1]:65535"),
            ),
            v1_port,
        ),
        (
            ProxyHeader::tcp(Version::V2, sa("198.51.100.3:5000"), sa("10.96.0.1:443")),
            v1_port,
        ),
    ];
    for (sent, port) in cases {
        let mut bytes = sent.render(&checksum).unwrap();
        bytes.extend_from_slice(b"hello");
        let received = relay(&listener, port, &bytes).unwrap_or_else(|| {
            panic!(
                "HAProxy did not relay {sent:?} on port {port}:\n{}",
                haproxy.log()
            )
        });
        let (header, consumed) = parse(&received).unwrap();
        assert_eq!(&received[consumed..], b"hello");
        assert_eq!(header.command, ProxyCommand::Proxy);
        assert_eq!(header.addresses, sent.addresses, "{sent:?}");
        if port == v2_port {
            assert_eq!(header.version, Version::V2);
            assert!(header.tlvs.crc32c_verified);
            // HAProxy forwards the authority it was given, and makes its own
            // unique id (unique-id-format) instead of relaying ours.
            assert_eq!(header.tlvs.authority, sent.tlvs.authority);
            let id = header.tlvs.unique_id.unwrap();
            let client = sent.addresses.unwrap().source;
            if let SocketAddr::V4(v4) = client {
                let prefix = format!("{:08X}:{:04X}_", u32::from(*v4.ip()), v4.port());
                assert!(id.starts_with(prefix.as_bytes()), "{id:?}");
            }
        } else {
            assert_eq!(header.version, Version::V1);
        }
    }

    // LOCAL: HAProxy uses the real connection's endpoints.
    let local = ProxyHeader::local().render(&checksum).unwrap();
    let received = relay(&listener, v2_port, &[&local[..], b"hi"].concat()).unwrap();
    let (header, consumed) = parse(&received).unwrap();
    assert_eq!(&received[consumed..], b"hi");
    let addresses = header.addresses.unwrap();
    assert_eq!(addresses.destination, sa(&format!("127.0.0.1:{v2_port}")));

    // A header whose checksum does not match is refused: HAProxy never
    // connects to the backend.
    let mut corrupt = ProxyHeader::tcp(Version::V2, sa("10.0.0.1:1"), sa("10.0.0.2:2"))
        .render(&checksum)
        .unwrap();
    corrupt[19] ^= 1;
    assert!(matches!(
        parse(&corrupt),
        Err(ProxyError::BadChecksum { .. })
    ));
    assert_eq!(relay(&listener, v2_port, &corrupt), None);
}
