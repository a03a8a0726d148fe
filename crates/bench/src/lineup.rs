//! The contenders, started side by side with the same routes, so every
//! scenario can measure them in the same run, interleaved.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use apiway_test_support::peers::{
    free_port, proc_memory, process_tree, Haproxy, Nginx, NGINX_STREAM_MODULE,
};
use tempfile::TempDir;
use tokio::time::Instant;

use crate::gateway_process::{AppliedReload, GatewayMetrics, GatewayProcess};

/// Who is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Contender {
    /// The apiway gateway.
    Apiway,
    /// HAProxy, `mode tcp`, routing on `req.ssl_sni`.
    Haproxy,
    /// nginx stream with `ssl_preread`.
    Nginx,
    /// No proxy: the client connects to the backend (the physical limit).
    Direct,
}

impl Contender {
    /// Every contender, in table order.
    pub const ALL: [Contender; 4] = [
        Contender::Apiway,
        Contender::Haproxy,
        Contender::Nginx,
        Contender::Direct,
    ];

    /// Name in tables and on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Apiway => "apiway",
            Contender::Haproxy => "HAProxy",
            Contender::Nginx => "nginx",
            Contender::Direct => "direct",
        }
    }

    /// Parses a command-line name.
    pub fn parse(text: &str) -> Result<Contender> {
        Contender::ALL
            .into_iter()
            .find(|c| c.label().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| anyhow!("unknown contender `{text}` (apiway, haproxy, nginx, direct)"))
    }

    /// Whether there is a proxy process to start.
    pub fn is_proxy(self) -> bool {
        self != Contender::Direct
    }
}

/// One route: connections whose SNI is `hostname` go to `backends`.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// Route name (HAProxy backend / nginx upstream name too).
    pub name: String,
    /// The one SNI it matches.
    pub hostname: String,
    /// Backend addresses.
    pub backends: Vec<SocketAddr>,
}

impl Route {
    /// A route `name` for `hostname` to `backends`.
    pub fn new(name: &str, hostname: &str, backends: &[SocketAddr]) -> Route {
        Route {
            name: name.to_string(),
            hostname: hostname.to_string(),
            backends: backends.to_vec(),
        }
    }
}

/// How the proxies are set up; shared by every scenario.
#[derive(Clone, Debug)]
pub struct LineupOptions {
    /// The apiway binary.
    pub apiway: PathBuf,
    /// Threads (HAProxy `nbthread`, nginx `worker_processes`, apiway tokio
    /// workers) each proxy gets.
    pub proxy_threads: usize,
    /// Which contenders take part.
    pub contenders: Vec<Contender>,
    /// What the apiway contender runs.
    pub apiway_role: ApiwayRole,
    /// Connection limits for a scenario that holds more connections than
    /// the shared configs allow; `None` keeps those (HAProxy `maxconn
    /// 7000`, nginx `worker_connections 12000`, apiway's default).
    pub capacity: Option<Capacity>,
}

/// The same connection limit for every proxy, sized to the open-file
/// limit: each relayed connection holds two descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Relayed connections each proxy may hold: HAProxy `maxconn`, apiway
    /// `max_connections`, nginx `worker_connections` of twice this (nginx
    /// counts both ends).
    pub connections: usize,
    /// The proxies' open-file limit (nginx `worker_rlimit_nofile`).
    pub open_files: u64,
    /// apiway's `when_full`: `queue` (stop accepting at the limit, as
    /// HAProxy and nginx do; apiway's default) when true, else `close`.
    pub apiway_queue: bool,
}

impl Capacity {
    /// Descriptors kept aside for listeners, logs, the admin endpoint,
    /// nginx's and HAProxy's own files.
    pub const RESERVE: u64 = 200;

    /// The most connections that fit in `open_files`, at most `at_most`.
    pub fn fitting(open_files: u64, at_most: usize) -> Capacity {
        let fit = open_files.saturating_sub(Self::RESERVE) / 2;
        Capacity {
            connections: usize::try_from(fit).unwrap_or(usize::MAX).min(at_most),
            open_files,
            apiway_queue: true,
        }
    }

    /// HAProxy's `maxpipes`: HAProxy 2.6 refuses to start (`strict-limits`
    /// is on) unless `2 × maxconn + 2 × maxpipes` plus a few descriptors
    /// fit the limit, and by default it reserves `maxconn / 4` pipes for
    /// splicing; the pipes get what is left (no splicing happens with
    /// a few hundred bytes per connection).
    /// Never more than HAProxy's own default.
    pub fn haproxy_maxpipes(&self) -> u64 {
        let left = self
            .open_files
            .saturating_sub(2 * self.connections as u64)
            .saturating_sub(Self::RESERVE / 2)
            / 2;
        left.min(self.connections as u64 / 4)
    }

    /// nginx's `worker_connections`: a relayed connection is two of them,
    /// plus the listener.
    pub fn nginx_worker_connections(&self) -> u64 {
        (2 * self.connections as u64 + Self::RESERVE / 2).min(self.open_files)
    }
}

/// The apiway role measured as the "apiway" contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ApiwayRole {
    /// `apiway gateway`, routing by SNI like HAProxy and nginx do.
    #[default]
    Gateway,
    /// `apiway agent --upstream direct` with the first route's backend as
    /// its one endpoint: the per-node forwarder's relay (it ignores SNI).
    Agent,
}

/// A running proxy.
enum Proxy {
    Apiway(GatewayProcess),
    Haproxy(Haproxy),
    Nginx(Nginx),
}

struct Running {
    listen: SocketAddr,
    proxy: Proxy,
}

/// How long a reload took, as far as the bench can see.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    /// apiway: from SIGHUP until `/metrics` counted the reload. HAProxy and
    /// nginx: the whole reload, config check (`-c`/`-t`) included, until a
    /// new worker runs and the listener accepts.
    pub wall: Duration,
    /// apiway only: the gateway's own apply time.
    pub apply: Option<Duration>,
}

/// The contenders of one scenario, all configured with the same routes.
/// Dropping it kills every proxy.
pub struct Lineup {
    options: LineupOptions,
    routes: Vec<Route>,
    running: BTreeMap<Contender, Running>,
    start_times: BTreeMap<Contender, Duration>,
    /// Map files HAProxy reads (one per config version).
    files: TempDir,
    version: u32,
    /// Write apiway's file as JSON instead of YAML (see `core::config_text`).
    apiway_json: bool,
}

impl Lineup {
    /// Starts every proxy contender with `routes`.
    pub async fn start(options: &LineupOptions, routes: Vec<Route>) -> Result<Lineup> {
        let files = tempfile::Builder::new()
            .prefix("apiway-bench-")
            .tempdir()
            .context("creating a temporary directory")?;
        let mut lineup = Lineup {
            options: options.clone(),
            routes,
            running: BTreeMap::new(),
            start_times: BTreeMap::new(),
            files,
            version: 0,
            apiway_json: false,
        };
        for contender in options.contenders.clone() {
            if contender.is_proxy() {
                let started = Instant::now();
                let running = lineup.start_one(contender).await?;
                lineup
                    .start_times
                    .entry(contender)
                    .or_insert_with(|| started.elapsed());
                lineup.running.insert(contender, running);
            }
        }
        Ok(lineup)
    }

    /// The contenders taking part, in table order.
    pub fn contenders(&self) -> Vec<Contender> {
        self.options.contenders.clone()
    }

    /// The proxy contenders taking part.
    pub fn proxies(&self) -> Vec<Contender> {
        self.running.keys().copied().collect()
    }

    /// Wall time from spawning `contender` until it served (HAProxy and
    /// nginx: including their `-c`/`-t` config check).
    pub fn start_time(&self, contender: Contender) -> Option<Duration> {
        self.start_times.get(&contender).copied()
    }

    /// Where a client with SNI `hostname` connects for `contender`.
    pub fn target(&self, contender: Contender, hostname: &str) -> Result<SocketAddr> {
        match contender {
            Contender::Direct => self
                .routes
                .iter()
                .find(|r| r.hostname == hostname)
                .and_then(|r| r.backends.first().copied())
                .ok_or_else(|| anyhow!("no route for {hostname}")),
            proxy => self
                .running
                .get(&proxy)
                .map(|r| r.listen)
                .ok_or_else(|| anyhow!("{} is not running", proxy.label())),
        }
    }

    /// Every process of `contender` (master and workers).
    pub fn pids(&self, contender: Contender) -> Vec<u32> {
        let Some(running) = self.running.get(&contender) else {
            return Vec::new();
        };
        let root = match &running.proxy {
            Proxy::Apiway(g) => g.pid(),
            Proxy::Haproxy(h) => h.pid(),
            Proxy::Nginx(n) => n.master_pid(),
        };
        process_tree(root)
    }

    /// Proportional set size of all processes of `contender`, in bytes.
    pub fn pss_bytes(&self, contender: Contender) -> Result<u64> {
        let mut kib = 0;
        for pid in self.pids(contender) {
            kib += proc_memory(pid)?.pss_kb;
        }
        Ok(kib * 1024)
    }

    /// The apiway contender's `/metrics` figures; `None` when apiway is not
    /// running.
    pub async fn apiway_metrics(&self) -> Result<Option<GatewayMetrics>> {
        match self.running.get(&Contender::Apiway).map(|r| &r.proxy) {
            Some(Proxy::Apiway(g)) => Ok(Some(g.metrics().await?)),
            _ => Ok(None),
        }
    }

    /// Open file descriptors of all processes of `contender`.
    pub fn open_fds(&self, contender: Contender) -> usize {
        self.pids(contender)
            .into_iter()
            .map(|pid| {
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .map(|d| d.count())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// CPU time (user + system) used so far by all processes of
    /// `contender`. Processes that exited are not counted, so take
    /// differences only across spans without reloads.
    pub fn cpu_time(&self, contender: Contender) -> Duration {
        self.pids(contender).into_iter().map(process_cpu_time).sum()
    }

    /// From now on apiway's config file is written as JSON (`true`) or YAML.
    pub fn set_apiway_json(&mut self, json: bool) {
        self.apiway_json = json;
    }

    /// Installs `routes` in `contender` the way its operators would: apiway
    /// rewrites its file and gets SIGHUP; HAProxy and nginx check the new
    /// file and reload (SIGUSR2 to the HAProxy master, SIGHUP to nginx),
    /// returning once a new worker serves.
    pub async fn reload(&mut self, contender: Contender, routes: Vec<Route>) -> Result<Timed> {
        self.routes = routes;
        self.version += 1;
        let text = self.config_text(contender)?;
        let running = self
            .running
            .get_mut(&contender)
            .ok_or_else(|| anyhow!("{} is not running", contender.label()))?;
        let started = Instant::now();
        match &mut running.proxy {
            Proxy::Apiway(_) if self.options.apiway_role == ApiwayRole::Agent => {
                Err(anyhow!("the agent has no route config to reload"))
            }
            Proxy::Apiway(g) => {
                let AppliedReload { apply, observed } = g.reload(&text).await?;
                Ok(Timed {
                    wall: observed,
                    apply: Some(apply),
                })
            }
            Proxy::Haproxy(h) => {
                h.reload(&text).await?;
                Ok(Timed {
                    wall: started.elapsed(),
                    apply: None,
                })
            }
            Proxy::Nginx(n) => {
                n.reload(&text).await?;
                Ok(Timed {
                    wall: started.elapsed(),
                    apply: None,
                })
            }
        }
    }

    async fn start_one(&mut self, contender: Contender) -> Result<Running> {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let text = self.config_text_for(contender, listen)?;
        let proxy = match contender {
            Contender::Apiway => {
                let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
                let text = text.replace(ADMIN_PLACEHOLDER, &admin.to_string());
                let (gateway, took) = match self.options.apiway_role {
                    ApiwayRole::Gateway => {
                        GatewayProcess::start(
                            &self.options.apiway,
                            &text,
                            listen,
                            admin,
                            self.options.proxy_threads,
                        )
                        .await?
                    }
                    ApiwayRole::Agent => {
                        let endpoint = self
                            .routes
                            .first()
                            .and_then(|r| r.backends.first().copied())
                            .ok_or_else(|| anyhow!("the agent needs a route with a backend"))?;
                        GatewayProcess::start_agent(
                            &self.options.apiway,
                            listen,
                            endpoint,
                            admin,
                            self.options.proxy_threads,
                        )
                        .await?
                    }
                };
                // The gateway's own figure leaves out the settling pause.
                self.start_times.insert(contender, took);
                Proxy::Apiway(gateway)
            }
            Contender::Haproxy => Proxy::Haproxy(Haproxy::start(&text).await?),
            Contender::Nginx => Proxy::Nginx(Nginx::start(&text).await?),
            Contender::Direct => return Err(anyhow!("direct has no proxy to start")),
        };
        Ok(Running { listen, proxy })
    }

    fn config_text(&self, contender: Contender) -> Result<String> {
        let running = self
            .running
            .get(&contender)
            .ok_or_else(|| anyhow!("{} is not running", contender.label()))?;
        let text = self.config_text_for(contender, running.listen)?;
        Ok(match &running.proxy {
            Proxy::Apiway(g) => text.replace(ADMIN_PLACEHOLDER, &g.admin().to_string()),
            _ => text,
        })
    }

    fn config_text_for(&self, contender: Contender, listen: SocketAddr) -> Result<String> {
        let threads = self.options.proxy_threads;
        match contender {
            Contender::Apiway if self.apiway_json => Ok(apiway_config_json(
                listen,
                &self.routes,
                self.options.capacity,
            )),
            Contender::Apiway => Ok(apiway_config(listen, &self.routes, self.options.capacity)),
            Contender::Haproxy => {
                let map = self.files.path().join(format!("sni-{}.map", self.version));
                write_haproxy_map(&map, &self.routes)?;
                Ok(haproxy_config(
                    listen,
                    &self.routes,
                    &map,
                    threads,
                    self.options.capacity,
                ))
            }
            Contender::Nginx => Ok(nginx_config(
                listen,
                &self.routes,
                threads,
                self.options.capacity,
            )),
            Contender::Direct => Err(anyhow!("direct has no config")),
        }
    }
}

/// utime + stime from `/proc/PID/stat`, in USER_HZ ticks (100 per second
/// on Linux, whatever the kernel's own tick rate).
pub(crate) fn process_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)` start with the state (field 3); utime and
    // stime are fields 14 and 15.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|t| t.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// Stands for the admin address until the gateway's port is chosen.
const ADMIN_PLACEHOLDER: &str = "@ADMIN@";

/// The gateway's YAML. Reloads are triggered by SIGHUP only (the file poll
/// is set to an hour) so each rewrite is exactly one reload.
fn apiway_config(listen: SocketAddr, routes: &[Route], capacity: Option<Capacity>) -> String {
    let limit = capacity
        .map(|c| {
            let when_full = if c.apiway_queue { "queue" } else { "close" };
            format!(
                ", max_connections: {}, when_full: {when_full}",
                c.connections
            )
        })
        .unwrap_or_default();
    let mut text = format!(
        "admin: {{ address: \"{ADMIN_PLACEHOLDER}\" }}\nreload_interval: 1h\nlisteners:\n  - {{ name: bench, address: \"{listen}\", kind: tls{limit} }}\nroutes:\n"
    );
    for route in routes {
        let backends: Vec<String> = route
            .backends
            .iter()
            .map(|b| format!("{{ address: \"{b}\" }}"))
            .collect();
        let _ = writeln!(
            text,
            "  - name: {}\n    hostnames: [\"{}\"]\n    backends: [{}]",
            route.name,
            route.hostname,
            backends.join(", ")
        );
    }
    text.push_str("default_route: reject\n");
    text
}

/// The same configuration as [`apiway_config`], written as JSON the way a
/// generator (a controller rendering thousands of routes) would.
fn apiway_config_json(listen: SocketAddr, routes: &[Route], capacity: Option<Capacity>) -> String {
    let routes: Vec<serde_json::Value> = routes
        .iter()
        .map(|route| {
            serde_json::json!({
                "name": route.name,
                "hostnames": [route.hostname],
                "backends": route
                    .backends
                    .iter()
                    .map(|b| serde_json::json!({ "address": b.to_string() }))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut listener =
        serde_json::json!({ "name": "bench", "address": listen.to_string(), "kind": "tls" });
    if let Some(c) = capacity {
        listener["max_connections"] = c.connections.into();
        listener["when_full"] = if c.apiway_queue { "queue" } else { "close" }.into();
    }
    serde_json::json!({
        "admin": { "address": ADMIN_PLACEHOLDER },
        "reload_interval": "1h",
        "listeners": [listener],
        "routes": routes,
        "default_route": "reject",
    })
    .to_string()
}

fn write_haproxy_map(path: &Path, routes: &[Route]) -> Result<()> {
    let mut text = String::with_capacity(routes.len() * 48);
    for route in routes {
        let _ = writeln!(text, "{} be_{}", route.hostname, route.name);
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// HAProxy in TCP mode routing on the SNI through a map (the way to route
/// thousands of names), splicing when it pays off.
fn haproxy_config(
    listen: SocketAddr,
    routes: &[Route],
    map: &Path,
    threads: usize,
    capacity: Option<Capacity>,
) -> String {
    let limits = match capacity {
        None => "maxconn 7000".to_string(),
        Some(c) => format!(
            "maxconn {}\n    maxpipes {}",
            c.connections,
            c.haproxy_maxpipes()
        ),
    };
    let mut text = format!(
        "global
    nbthread {threads}
    {limits}

defaults
    mode tcp
    option splice-auto
    timeout connect 5s
    timeout client 1h
    timeout server 1h

frontend bench
    bind {listen}
    tcp-request inspect-delay 5s
    tcp-request content accept if {{ req.ssl_hello_type 1 }}
    use_backend %[req.ssl_sni,lower,map({map})]
",
        map = map.display()
    );
    for route in routes {
        let _ = writeln!(text, "\nbackend be_{}", route.name);
        for (i, b) in route.backends.iter().enumerate() {
            let _ = writeln!(text, "    server s{i} {b}");
        }
    }
    text
}

/// nginx stream with `ssl_preread`, one upstream per route.
fn nginx_config(
    listen: SocketAddr,
    routes: &[Route],
    threads: usize,
    capacity: Option<Capacity>,
) -> String {
    let (open_files, connections) = match capacity {
        None => (19_000, 12_000),
        Some(c) => (c.open_files, c.nginx_worker_connections()),
    };
    let mut text = format!(
        "load_module {NGINX_STREAM_MODULE};
worker_processes {threads};
worker_rlimit_nofile {open_files};

events {{
    worker_connections {connections};
}}

stream {{
    map_hash_max_size 65536;
    map_hash_bucket_size 128;
    map $ssl_preread_server_name $route {{
"
    );
    for route in routes {
        let _ = writeln!(text, "        {} up_{};", route.hostname, route.name);
    }
    text.push_str("    }\n");
    for route in routes {
        let _ = writeln!(text, "    upstream up_{} {{", route.name);
        for b in &route.backends {
            let _ = writeln!(text, "        server {b};");
        }
        text.push_str("    }\n");
    }
    let _ = write!(
        text,
        "    server {{
        listen {listen};
        ssl_preread on;
        preread_timeout 5s;
        proxy_pass $route;
        proxy_timeout 1h;
        proxy_half_close on;
    }}
}}
"
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Vec<Route> {
        vec![Route::new(
            "main",
            "api.bench.example.com",
            &[
                "127.0.0.1:7001".parse().unwrap(),
                "127.0.0.1:7002".parse().unwrap(),
            ],
        )]
    }

    #[test]
    fn configs_name_every_backend() {
        let listen: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        let apiway = apiway_config(listen, &routes(), None);
        assert!(apiway.contains("hostnames: [\"api.bench.example.com\"]"));
        assert!(apiway.contains("{ address: \"127.0.0.1:7002\" }"));
        let haproxy = haproxy_config(listen, &routes(), Path::new("/m.map"), 1, None);
        assert!(haproxy.contains("bind 127.0.0.1:8443"));
        assert!(haproxy.contains("server s1 127.0.0.1:7002"));
        assert!(haproxy.contains("maxconn 7000\n"));
        let nginx = nginx_config(listen, &routes(), 1, None);
        assert!(nginx.contains("api.bench.example.com up_main;"));
        assert!(nginx.contains("listen 127.0.0.1:8443;"));
        assert!(nginx.contains("worker_connections 12000;"));
    }

    #[test]
    fn a_capacity_raises_every_limit_within_the_file_limit() {
        let listen: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        let capacity = Capacity::fitting(20_000, 9_000 * 2);
        assert_eq!(capacity.connections, 9_900);
        let apiway = apiway_config(listen, &routes(), Some(capacity));
        assert!(
            apiway.contains("kind: tls, max_connections: 9900, when_full: queue }"),
            "{apiway}"
        );
        let json = apiway_config_json(listen, &routes(), Some(capacity));
        assert!(json.contains("\"max_connections\":9900"), "{json}");
        let haproxy = haproxy_config(listen, &routes(), Path::new("/m.map"), 1, Some(capacity));
        // 2 × 9,900 + 2 × 50 leaves HAProxy its few descriptors under 20,000.
        assert!(
            haproxy.contains("maxconn 9900\n    maxpipes 50\n"),
            "{haproxy}"
        );
        let nginx = nginx_config(listen, &routes(), 1, Some(capacity));
        assert!(nginx.contains("worker_rlimit_nofile 20000;"), "{nginx}");
        assert!(nginx.contains("worker_connections 19900;"), "{nginx}");
        let small = Capacity::fitting(20_000, 3_000);
        assert_eq!(small.connections, 3_000);
        assert_eq!(small.haproxy_maxpipes(), 750);
    }
}
