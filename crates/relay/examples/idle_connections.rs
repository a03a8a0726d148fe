//! Process memory per idle relayed connection, compared with HAProxy.
//!
//! ```text
//! cargo run --release -p apiway-relay --example idle_connections -- [N] [haproxy]
//! ```
//!
//! This process runs only the proxy (the relay on one thread, or HAProxy
//! with `haproxy` as second argument); a child process (this binary again)
//! holds the N clients and the backend's N sockets, so the proxy's resident
//! memory counts nothing but the proxying. It is read with the N connections
//! open and idle, and again once they are idle after a 64 KiB exchange each
//! way on every connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use apiway_relay::{pool, relay, RelayConfig};

const EXCHANGE: usize = 64 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("peer") {
        return peer(args[2].parse().unwrap());
    }
    let n: usize = args.get(1).map_or(5000, |a| a.parse().expect("N"));
    let use_haproxy = args.get(2).map(String::as_str) == Some("haproxy");

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["peer", &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut expect = |word: &str| -> String {
        line.clear();
        from_child.read_line(&mut line).unwrap();
        let rest = line.trim().strip_prefix(word);
        rest.unwrap_or_else(|| panic!("child said {line:?}, expected {word}"))
            .trim()
            .to_string()
    };
    let backend: SocketAddr = expect("backend").parse().unwrap();

    let mut haproxy: Option<Child> = None;
    let (proxy, pid) = if use_haproxy {
        let (addr, child) = start_haproxy(backend, n);
        let pid = child.id();
        haproxy = Some(child);
        (addr, pid)
    } else {
        (start_relay(backend), std::process::id())
    };
    thread::sleep(Duration::from_millis(500));
    let base = rss_kib(pid);

    writeln!(to_child, "proxy {proxy}").unwrap();
    expect("open");
    thread::sleep(Duration::from_secs(1));
    let open = rss_kib(pid);

    writeln!(to_child, "exchange").unwrap();
    expect("idle");
    thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid);
    let stats = pool::stats();
    pool::trim();
    let trimmed = rss_kib(pid);

    let name = if use_haproxy { "haproxy" } else { "relay" };
    let per = |kib: u64| (kib.saturating_sub(base)) as f64 * 1024.0 / n as f64;
    println!("{name}: {n} idle connections, proxy RSS {base} KiB before");
    println!(
        "  open, never used:        +{} KiB = {:.0} bytes/connection",
        open - base,
        per(open)
    );
    println!(
        "  idle after an exchange:  +{} KiB = {:.0} bytes/connection",
        after.saturating_sub(base),
        per(after)
    );
    if !use_haproxy {
        println!(
            "  after pool::trim():      +{} KiB = {:.0} bytes/connection (pool held {stats:?})",
            trimmed.saturating_sub(base),
            per(trimmed)
        );
    }

    writeln!(to_child, "exit").unwrap();
    child.wait().unwrap();
    if let Some(mut h) = haproxy {
        let _ = h.kill();
        let _ = h.wait();
    }
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The relay on one thread, in this process.
fn start_relay(backend: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (client, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let backend = tokio::net::TcpStream::connect(backend).await.unwrap();
                    relay(client, backend, &RelayConfig::default(), &()).await
                });
            }
        });
    });
    addr
}

/// HAProxy `mode tcp` on one thread, as a child process.
fn start_haproxy(backend: SocketAddr, n: usize) -> (SocketAddr, Child) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("apiway-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("haproxy.cfg");
    let cfg = format!(
        "global\n  nbthread 1\n  maxconn {}\n\
         defaults\n  mode tcp\n  maxconn {}\n  timeout connect 5s\n  timeout client 10m\n  timeout server 10m\n\
         listen relay\n  bind 127.0.0.1:{port}\n  option splice-auto\n  server s1 {backend}\n",
        n + 100,
        n + 100
    );
    std::fs::write(&cfg_path, cfg).unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&cfg_path)
        .stdout(Stdio::null())
        .spawn()
        .expect("haproxy");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    thread::sleep(Duration::from_millis(500));
    (addr, child)
}

/// The child: backend and clients, driven by lines on stdin.
fn peer(n: usize) {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("backend {}", backend.local_addr().unwrap());
    let mut lines = std::io::stdin().lines();
    let mut next = || lines.next().unwrap().unwrap();

    let proxy: SocketAddr = next().strip_prefix("proxy ").unwrap().parse().unwrap();
    let accepter = thread::spawn(move || {
        // Each client announces its index, so the two ends can be paired.
        let mut servers: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for _ in 0..n {
            let (mut s, _) = backend.accept().unwrap();
            let mut index = [0u8; 4];
            s.read_exact(&mut index).unwrap();
            servers[u32::from_le_bytes(index) as usize] = Some(s);
        }
        servers
    });
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = TcpStream::connect(proxy).unwrap();
        c.write_all(&(i as u32).to_le_bytes()).unwrap();
        clients.push(c);
    }
    let servers: Vec<TcpStream> = accepter
        .join()
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    println!("open");

    assert_eq!(next(), "exchange");
    let data = vec![7u8; EXCHANGE];
    let mut got = vec![0u8; EXCHANGE];
    for (c, s) in clients.iter_mut().zip(&servers) {
        let mut s = s;
        c.write_all(&data).unwrap();
        s.read_exact(&mut got).unwrap();
        s.write_all(&data).unwrap();
        c.read_exact(&mut got).unwrap();
    }
    println!("idle");
    assert_eq!(next(), "exit");
}
