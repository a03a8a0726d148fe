//! An idle relayed connection must hold no data buffers: after a burst has
//! drained, the heap returns to where it was while the connection stays open.
//!
//! This file installs a counting global allocator, so it holds a single test
//! (tests in one binary share the process, and so the counter).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use apiway_relay::{pool, relay, relay_io, RelayConfig, RelayMode};
use common::{payload, Via};

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counter is only
// bookkeeping and never touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// Blocking sockets for the two peers, so that only the relay's side of
/// each connection lives in the tokio runtime (and in the numbers).
fn std_pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    (a, b)
}

struct Connection {
    client: TcpStream,
    server: TcpStream,
    relay: tokio::task::JoinHandle<apiway_relay::RelayOutcome>,
}

/// Opens a proxied connection whose relay runs as a task on `rt`.
fn open(
    rt: &tokio::runtime::Runtime,
    listener: &TcpListener,
    mode: RelayMode,
    via: Via,
) -> Connection {
    let (client, relay_client) = std_pair(listener);
    let (relay_backend, server) = std_pair(listener);
    for s in [&relay_client, &relay_backend] {
        s.set_nonblocking(true).unwrap();
    }
    let cfg = RelayConfig {
        mode,
        ..RelayConfig::default()
    };
    let relay = rt.spawn(async move {
        let a = tokio::net::TcpStream::from_std(relay_client).unwrap();
        let b = tokio::net::TcpStream::from_std(relay_backend).unwrap();
        match via {
            Via::Tcp => relay(a, b, &cfg, &()).await,
            Via::Io => relay_io(a, b, &cfg, &()).await,
        }
    });
    Connection {
        client,
        server,
        relay,
    }
}

/// Sends `len` bytes each way at once and checks they arrive.
fn burst(c: &mut Connection, len: usize) {
    let up = payload(len, 21);
    let down = payload(len, 22);
    let mut client_w = c.client.try_clone().unwrap();
    let mut server_w = c.server.try_clone().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| client_w.write_all(&up).unwrap());
        s.spawn(|| server_w.write_all(&down).unwrap());
        let mut got_up = vec![0u8; len];
        let mut got_down = vec![0u8; len];
        let mut server_r = c.server.try_clone().unwrap();
        let reader = s.spawn(move || {
            server_r.read_exact(&mut got_up).unwrap();
            got_up
        });
        c.client.read_exact(&mut got_down).unwrap();
        assert!(got_down == down);
        assert!(reader.join().unwrap() == up);
    });
}

/// Waits for the relay to notice the sockets went quiet and give back what it borrowed.
fn wait_until_nothing_in_use() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = pool::stats();
        if stats.buffers_in_use == 0 && stats.pipes_in_use == 0 {
            return;
        }
        if Instant::now() > deadline {
            // Let the heap assertion report it, with numbers.
            eprintln!("still in use after the burst: {stats:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn idle_connections_hold_no_buffers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();

    for (mode, via) in [
        (RelayMode::Userspace, Via::Tcp),
        (RelayMode::Splice, Via::Tcp),
        (RelayMode::Auto, Via::Io),
    ] {
        // A first connection makes the runtime and the pool allocate
        // whatever they allocate lazily, so it doesn't count against the
        // connection under test.
        let mut warm_up = open(&rt, &listener, mode, via);
        burst(&mut warm_up, 1 << 20);
        let Connection {
            client,
            server,
            relay,
        } = warm_up;
        drop((client, server));
        rt.block_on(relay).unwrap();

        let mut c = open(&rt, &listener, mode, via);
        wait_until_nothing_in_use();
        pool::trim();
        std::thread::sleep(Duration::from_millis(50));
        let before = allocated();

        burst(&mut c, 16 << 20);
        wait_until_nothing_in_use();
        pool::trim();
        std::thread::sleep(Duration::from_millis(50));
        let after = allocated();

        // One kept buffer would be 64 KiB; allow the runtime a little slack.
        assert!(
            after <= before + 8 * 1024,
            "{mode:?}/{via:?}: heap grew from {before} to {after} bytes across an idle period"
        );
        let stats = pool::stats();
        assert_eq!(stats.buffers_in_use, 0, "{mode:?}/{via:?}: {stats:?}");
        assert_eq!(stats.pipes_in_use, 0, "{mode:?}/{via:?}: {stats:?}");

        // The connection is still open and working.
        burst(&mut c, 1000);
        drop(c);
    }

    // Heap cost of idle relayed connections: the relay's side only (task,
    // future, the two sockets' registrations); the peers use std sockets.
    const IDLE: usize = 1000;
    let mut conns = Vec::new();
    conns.push(open(&rt, &listener, RelayMode::Auto, Via::Tcp));
    std::thread::sleep(Duration::from_millis(100));
    let before = allocated();
    let vec_cost = IDLE * std::mem::size_of::<Connection>();
    conns.reserve(IDLE);
    for _ in 0..IDLE {
        conns.push(open(&rt, &listener, RelayMode::Auto, Via::Tcp));
    }
    std::thread::sleep(Duration::from_millis(300));
    let per_connection = (allocated() - before - vec_cost) / IDLE;
    eprintln!("heap per idle relayed connection: {per_connection} bytes");
    // The budget is 2 KiB of process memory per idle connection in all;
    // the caller's own per-connection state has to fit in the rest.
    assert!(
        per_connection <= 1536,
        "{per_connection} bytes per idle connection"
    );
}
