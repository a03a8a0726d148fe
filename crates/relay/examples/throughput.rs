//! Bulk throughput on loopback: direct, through the relay (userspace copy and
//! splice), and through HAProxy (`mode tcp`, with and without
//! `option splice-auto`) when `haproxy` is on the PATH.
//!
//! ```text
//! cargo run --release -p apiway-relay --example throughput -- [GIB] [STREAMS] [ROUNDS] [ONLY]
//! ```
//!
//! A sender thread writes GIB gibibytes (default 4) over STREAMS connections
//! (default 1) to a sink that reads and discards them; the time runs from the
//! first connect to the last byte read. Every proxy gets one thread, like
//! HAProxy's `nbthread 1`. Each target runs ROUNDS times (default 3),
//! interleaved, and the best and median rates are printed; ONLY keeps the
//! targets whose name contains it (and `direct`). `APIWAY_BUFFER_SIZE` sets
//! the relays' userspace buffer size (default 64 KiB).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use apiway_relay::{relay, RelayConfig, RelayMode};

const IO_CHUNK: usize = 256 * 1024;

/// Accepts connections forever; reports each one's byte count at its EOF.
fn start_sink() -> (SocketAddr, mpsc::Receiver<u64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let mut conn = conn.unwrap();
            let done = done_tx.clone();
            thread::spawn(move || {
                let mut buf = vec![0u8; IO_CHUNK];
                let mut total = 0u64;
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(e) => panic!("sink read: {e}"),
                    }
                }
                let _ = done.send(total);
            });
        }
    });
    (addr, done_rx)
}

/// CPU time (user + system) used so far by the process or thread whose
/// `/proc/.../stat` file is `stat`.
fn cpu_seconds(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &text[text.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// A relay listening on loopback, forwarding to `backend`, on one thread;
/// returns its address and the thread's stat file.
fn start_relay(backend: SocketAddr, mode: RelayMode) -> (SocketAddr, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let (stat_tx, stat_rx) = mpsc::channel();
    thread::spawn(move || {
        // "/proc/thread-self" links to "<pid>/task/<tid>".
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        let tid = me.file_name().unwrap().to_string_lossy().into_owned();
        stat_tx.send(format!("/proc/self/task/{tid}/stat")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let cfg = RelayConfig {
                mode,
                buffer_size: std::env::var("APIWAY_BUFFER_SIZE")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(64 * 1024),
                ..RelayConfig::default()
            };
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let cfg = cfg.clone();
                tokio::spawn(async move {
                    let backend = tokio::net::TcpStream::connect(backend).await.unwrap();
                    relay(client, backend, &cfg, &()).await
                });
            }
        });
    });
    (addr, stat_rx.recv().unwrap())
}

/// HAProxy in `mode tcp` on one thread, killed on drop.
struct Haproxy {
    child: Child,
    stat: String,
    addr: SocketAddr,
    _dir: std::path::PathBuf,
}

impl Haproxy {
    fn start(backend: SocketAddr, splice: bool, name: &str) -> Option<Haproxy> {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("apiway-throughput-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg_path = dir.join("haproxy.cfg");
        let splice_line = if splice { "option splice-auto" } else { "" };
        let cfg = format!(
            "global\n  nbthread 1\n  maxconn 1000\n\
             defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             listen relay\n  bind 127.0.0.1:{port}\n  {splice_line}\n  server s1 {backend}\n"
        );
        std::fs::write(&cfg_path, cfg).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        Some(Haproxy {
            stat: format!("/proc/{}/stat", child.id()),
            child,
            addr,
            _dir: dir,
        })
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// Sends `total` bytes to `target` over `streams` connections; bytes/s.
fn measure(target: SocketAddr, total: u64, streams: usize, sink: &mpsc::Receiver<u64>) -> f64 {
    let per_stream = total / streams as u64;
    let start = Instant::now();
    let senders: Vec<_> = (0..streams)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(target).unwrap();
                let buf = vec![0x5au8; IO_CHUNK];
                let mut left = per_stream;
                while left > 0 {
                    let n = left.min(IO_CHUNK as u64) as usize;
                    s.write_all(&buf[..n]).unwrap();
                    left -= n as u64;
                }
                s.shutdown(Shutdown::Write).unwrap();
                // Hold the socket until the sink is done reading.
                let mut rest = [0u8; 16];
                let _ = s.read(&mut rest);
            })
        })
        .collect();
    let mut received = 0;
    let mut finished = 0;
    while finished < streams {
        // Empty connections are readiness probes (HAProxy's), not ours.
        let n = sink.recv().unwrap();
        if n > 0 {
            received += n;
            finished += 1;
        }
    }
    let elapsed = start.elapsed();
    for s in senders {
        s.join().unwrap();
    }
    assert_eq!(received, per_stream * streams as u64, "bytes lost");
    received as f64 / elapsed.as_secs_f64()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let gib: f64 = args.next().map_or(4.0, |a| a.parse().expect("GIB"));
    let streams: usize = args.next().map_or(1, |a| a.parse().expect("STREAMS"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let only = args.next();
    let total = (gib * (1u64 << 30) as f64) as u64;

    let (sink, reports) = start_sink();
    // (name, address, stat file of the proxy's thread or process)
    let mut targets: Vec<(String, SocketAddr, Option<String>)> =
        vec![("direct".into(), sink, None)];
    for (name, mode) in [
        ("relay userspace", RelayMode::Userspace),
        ("relay splice", RelayMode::Splice),
        ("relay auto", RelayMode::Auto),
    ] {
        let (addr, stat) = start_relay(sink, mode);
        targets.push((name.into(), addr, Some(stat)));
    }
    let mut proxies = Vec::new();
    for (name, splice) in [("haproxy", false), ("haproxy splice-auto", true)] {
        match Haproxy::start(sink, splice, &name.replace(' ', "-")) {
            Some(h) => {
                targets.push((name.into(), h.addr, Some(h.stat.clone())));
                proxies.push(h);
            }
            None => eprintln!("{name}: not available, skipped"),
        }
    }

    if let Some(only) = &only {
        targets.retain(|(name, _, _)| name == "direct" || name.contains(only.as_str()));
    }
    println!("{gib} GiB over {streams} stream(s), {rounds} rounds");
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut cpu = vec![0.0; targets.len()];
    let mut cpu_all = vec![0.0; targets.len()];
    // Everything: this process (sender, sink, in-process relays) plus HAProxy.
    let everything = |stat: &Option<String>| {
        let external = stat.as_deref().filter(|s| !s.starts_with("/proc/self/"));
        cpu_seconds("/proc/self/stat") + external.map_or(0.0, cpu_seconds)
    };
    for _ in 0..rounds {
        for (i, (_, addr, stat)) in targets.iter().enumerate() {
            let cpu_before = stat.as_deref().map_or(0.0, cpu_seconds);
            let all_before = everything(stat);
            rates[i].push(measure(*addr, total, streams, &reports));
            cpu[i] += stat.as_deref().map_or(0.0, cpu_seconds) - cpu_before;
            cpu_all[i] += everything(stat) - all_before;
        }
    }
    let direct_median = median(&rates[0]);
    println!(
        "{:<22} {:>10} {:>10} {:>9} {:>16} {:>14}",
        "target", "best Gb/s", "median", "vs direct", "proxy CPU s/GiB", "all CPU s/GiB"
    );
    let moved_gib = gib * rounds as f64;
    for ((((name, _, stat), r), cpu), all) in targets.iter().zip(&rates).zip(&cpu).zip(&cpu_all) {
        let best = r.iter().cloned().fold(0.0, f64::max);
        let med = median(r);
        let cpu_per_gib = match stat {
            Some(_) => format!("{:.3}", cpu / moved_gib),
            None => "-".into(),
        };
        println!(
            "{name:<22} {:>10.2} {:>10.2} {:>8.2}x {:>16} {:>14.3}",
            best * 8e-9,
            med * 8e-9,
            med / direct_median,
            cpu_per_gib,
            all / moved_gib
        );
    }
    drop(proxies);
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
