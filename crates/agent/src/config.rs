//! The agent's configuration: a YAML file, command-line flags, or both,
//! validated into a [`Snapshot`].
//!
//! Flags and file combine field by field: a repeatable flag (`--listen`,
//! `--bind-address`, `--endpoint`, `--gateway`) adds to the file's list;
//! every other flag replaces the file's value. The merge is redone on each
//! reload, so flags keep applying on top of the changed file.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use apiway_core::config::sections::socket_addr;
use apiway_core::config::source::Merge;
use apiway_core::config::{AdminSection, Common, DrainSection};
use apiway_core::connector::{TcpConnector, Via};
use apiway_core::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
use apiway_core::health::{CheckDefaults, CheckKind, HealthCheck, HealthCheckConfig};
use apiway_core::relay::RelayConfig;
use serde::Deserialize;

use crate::address::AddressSpec;

/// Where connections go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamMode {
    /// Straight to the API server endpoints, with failover.
    Direct,
    /// To a gateway, with a PROXY protocol v2 header naming the original
    /// destination.
    Proxy,
    /// To a gateway, through an HTTP/1.1 `CONNECT` tunnel.
    Connect,
    /// Through a tunnel server (`apiway tunnel-server`, KEP-2025): one
    /// gRPC stream per connection, to the `--target` destination.
    Tunnel,
}

impl std::str::FromStr for UpstreamMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(UpstreamMode::Direct),
            "proxy" => Ok(UpstreamMode::Proxy),
            "connect" => Ok(UpstreamMode::Connect),
            "tunnel" => Ok(UpstreamMode::Tunnel),
            other => Err(format!(
                "`{other}` is not an upstream mode; use direct, proxy, connect or tunnel"
            )),
        }
    }
}

/// The agent's settings: the configuration file and the command line are
/// both this one struct (serde for the file, clap for the flags), so a
/// setting is declared once. Every field is optional so that the whole
/// configuration can come from either.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// `admin:` / `--admin`.
    #[command(flatten)]
    #[serde(default)]
    pub admin: AdminSection,
    /// Local ip:port to listen on (repeatable; at least one, here or in the
    /// file).
    #[arg(long, value_name = "IP:PORT")]
    #[serde(default)]
    pub listen: Vec<String>,
    /// Add this IP as a /32 (/128) host address to --interface at start and
    /// remove it on exit (repeatable). Needs CAP_NET_ADMIN [default: none].
    #[arg(long, value_name = "IP")]
    #[serde(default)]
    pub bind_address: Vec<String>,
    /// Interface for --bind-address; created as a dummy link if missing
    /// (kernels without the dummy type: use `lo`) [default: apiway0].
    #[arg(long, value_name = "NAME")]
    #[serde(default)]
    pub interface: Option<String>,
    /// Leave the --bind-address addresses in place on exit [default: off:
    /// they are removed].
    #[arg(long)]
    #[serde(default)]
    pub keep_address: bool,
    /// Where connections go: `direct` (to --endpoint), `proxy` (to
    /// --gateway with a PROXY v2 header), `connect` (to --gateway through
    /// HTTP CONNECT) or `tunnel` (through --tunnel-server to each --target's
    /// destination) [default: direct].
    #[arg(long, value_name = "MODE")]
    #[serde(default)]
    pub upstream: Option<UpstreamMode>,
    /// API server endpoint host:port for `direct` (repeatable; at least
    /// one); a DNS name stands for every A/AAAA record, re-resolved every 10s.
    #[arg(long = "endpoint", value_name = "HOST:PORT")]
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Gateway host:port for `proxy` and `connect` (repeatable; failover
    /// between them).
    #[arg(long = "gateway", value_name = "HOST:PORT")]
    #[serde(default)]
    pub gateways: Vec<String>,
    /// `tunnel`: LOCAL_PORT:DST_HOST:DST_PORT (repeatable; `[v6]` in
    /// brackets): listen on each --bind-address (127.0.0.1 without one) at
    /// LOCAL_PORT and have the tunnel server dial DST_HOST:DST_PORT.
    #[arg(long, value_name = "LOCAL_PORT:DST_HOST:DST_PORT")]
    #[serde(default)]
    pub target: Vec<String>,
    /// `tunnel`: tunnel server host:port (repeatable; a DNS name means
    /// every address). A warm HTTP/2 connection is kept to each; new
    /// connections go to the best one and move at once when one dies.
    #[arg(long = "tunnel-server", value_name = "HOST:PORT")]
    #[serde(default)]
    pub tunnel_servers: Vec<String>,
    /// `tunnel`: CA (PEM) that signs the tunnel servers' certificates.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tunnel_ca: Option<PathBuf>,
    /// `tunnel`: the agent's client certificate (PEM); re-read when it
    /// changes.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tunnel_cert: Option<PathBuf>,
    /// `tunnel`: the key of --tunnel-cert (PEM).
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tunnel_key: Option<PathBuf>,
    /// `tunnel`: a bearer token file (a projected ServiceAccount token)
    /// sent on every stream instead of (or with) a client certificate;
    /// re-read when it changes.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tunnel_token_file: Option<PathBuf>,
    /// `tunnel`: the name the servers' certificates must carry [default:
    /// each --tunnel-server's host].
    #[arg(long, value_name = "NAME")]
    #[serde(default)]
    pub tunnel_server_name: Option<String>,
    /// `tunnel`: HTTP/2 PING interval; a server that does not answer
    /// within --tunnel-keepalive-timeout is dead and its new connections go
    /// elsewhere [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub tunnel_keepalive_interval: Option<Duration>,
    /// See --tunnel-keepalive-interval [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub tunnel_keepalive_timeout: Option<Duration>,
    /// `tunnel`: time for the server's DIAL_RSP, and how long a connection
    /// waits while no tunnel server is up [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub dial_timeout: Option<Duration>,
    /// `health_check:` in the file: the gateway's schema (`kind:
    /// https|tcp|none`, `path`, `interval`, `timeout`, `rise`, `fall`,
    /// `server_name`, `ca_file`, `insecure_skip_verify`) with the agent's
    /// defaults; the flags below override it.
    #[arg(skip)]
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
    /// Active health check: `https:/PATH`, `https` (= https:/readyz), `tcp`
    /// or `none` [default: https:/readyz for direct, none for gateways].
    #[arg(long = "health-check", value_name = "CHECK")]
    #[serde(skip)]
    pub health_check_flag: Option<String>,
    /// Time between health checks [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(skip)]
    pub health_check_interval: Option<Duration>,
    /// Time one health check may take [default: the interval, at most 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(skip)]
    pub health_check_timeout: Option<Duration>,
    /// TLS server name of https health checks [default: kubernetes.default].
    #[arg(long, value_name = "NAME")]
    #[serde(default)]
    pub server_name: Option<String>,
    /// CA bundle (PEM) that must sign the API servers' certificates in https
    /// checks [default: none: then the check proves only that TLS and HTTP
    /// work].
    #[arg(long = "ca", value_name = "FILE")]
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `prefer_local_then_latency` (default), `lowest_latency`,
    /// `least_connections` or `round_robin` (file only).
    #[arg(skip)]
    #[serde(default)]
    pub policy: Option<Policy>,
    /// `proxy`: add a PROXY v2 AUTHORITY TLV with this host name [default:
    /// none].
    #[arg(long, value_name = "NAME")]
    #[serde(default)]
    pub authority: Option<String>,
    /// `connect`: the host:port to CONNECT to [default: the address the
    /// client connected to].
    #[arg(long, value_name = "HOST:PORT")]
    #[serde(default)]
    pub connect_authority: Option<String>,
    /// Per-endpoint connect timeout; then the next endpoint is tried
    /// [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub connect_timeout: Option<Duration>,
    /// `connect`: time the gateway has to answer CONNECT [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub connect_response_timeout: Option<Duration>,
    /// Close connections with no bytes either way for this long [default:
    /// never].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub idle_timeout: Option<Duration>,
    /// Open connections per listener; what happens to more is
    /// `--when-full` [default: 10000].
    #[arg(long, value_name = "N")]
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// At `--max-connections`: `queue` new connections in the kernel's
    /// accept queue until one ends, or `close` them at once [default:
    /// queue].
    #[arg(long, value_enum)]
    #[serde(default)]
    pub when_full: Option<apiway_core::listener::WhenFull>,
    /// Close relayed connections when a health check takes their endpoint
    /// down, so clients holding long-lived connections (watches) to a hung
    /// API server reconnect to a working one [default: off: established
    /// connections are left alone].
    #[arg(long)]
    #[serde(default)]
    pub close_on_down: bool,
    /// Also learn the API server endpoints from the `default/kubernetes`
    /// EndpointSlices (list and watch, through the agent's own listener,
    /// with the credentials of --kubeconfig or the in-cluster service
    /// account); the --endpoint list stays as the seed and last resort.
    /// `direct` only [default: off].
    #[arg(long)]
    #[serde(default)]
    pub discover_endpoints: bool,
    /// The kubeconfig discovery uses: the shared `--kubeconfig` flag, set
    /// by the binary (not a flag or file key of the agent's own).
    #[arg(skip)]
    #[serde(skip)]
    pub kubeconfig: Option<PathBuf>,
    /// How often DNS names are re-resolved [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub dns_refresh: Option<Duration>,
    /// `drain:` / `--drain-delay`, `--grace-period`.
    #[command(flatten)]
    #[serde(default)]
    pub drain: DrainSection,
    /// How often the --config file is checked for changes [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub reload_interval: Option<Duration>,
}

impl AgentSettings {
    /// `later` over `self`, field by field: a repeatable setting (`listen`,
    /// `bind_address`, `endpoints`, `gateways`) adds to the list, a switch
    /// is on when either turns it on, any other setting of `later`
    /// replaces this one's.
    pub fn overlay(self, later: AgentSettings) -> AgentSettings {
        fn add(mut a: Vec<String>, b: Vec<String>) -> Vec<String> {
            a.extend(b);
            a
        }
        AgentSettings {
            admin: self.admin.overlay(later.admin),
            listen: add(self.listen, later.listen),
            bind_address: add(self.bind_address, later.bind_address),
            interface: later.interface.or(self.interface),
            keep_address: self.keep_address || later.keep_address,
            upstream: later.upstream.or(self.upstream),
            endpoints: add(self.endpoints, later.endpoints),
            gateways: add(self.gateways, later.gateways),
            target: add(self.target, later.target),
            tunnel_servers: add(self.tunnel_servers, later.tunnel_servers),
            tunnel_ca: later.tunnel_ca.or(self.tunnel_ca),
            tunnel_cert: later.tunnel_cert.or(self.tunnel_cert),
            tunnel_key: later.tunnel_key.or(self.tunnel_key),
            tunnel_token_file: later.tunnel_token_file.or(self.tunnel_token_file),
            tunnel_server_name: later.tunnel_server_name.or(self.tunnel_server_name),
            tunnel_keepalive_interval: later
                .tunnel_keepalive_interval
                .or(self.tunnel_keepalive_interval),
            tunnel_keepalive_timeout: later
                .tunnel_keepalive_timeout
                .or(self.tunnel_keepalive_timeout),
            dial_timeout: later.dial_timeout.or(self.dial_timeout),
            health_check: later.health_check.or(self.health_check),
            health_check_flag: later.health_check_flag.or(self.health_check_flag),
            health_check_interval: later.health_check_interval.or(self.health_check_interval),
            health_check_timeout: later.health_check_timeout.or(self.health_check_timeout),
            server_name: later.server_name.or(self.server_name),
            ca_file: later.ca_file.or(self.ca_file),
            policy: later.policy.or(self.policy),
            authority: later.authority.or(self.authority),
            connect_authority: later.connect_authority.or(self.connect_authority),
            connect_timeout: later.connect_timeout.or(self.connect_timeout),
            connect_response_timeout: later
                .connect_response_timeout
                .or(self.connect_response_timeout),
            idle_timeout: later.idle_timeout.or(self.idle_timeout),
            max_connections: later.max_connections.or(self.max_connections),
            when_full: later.when_full.or(self.when_full),
            close_on_down: self.close_on_down || later.close_on_down,
            discover_endpoints: self.discover_endpoints || later.discover_endpoints,
            kubeconfig: later.kubeconfig.or(self.kubeconfig),
            dns_refresh: later.dns_refresh.or(self.dns_refresh),
            drain: self.drain.overlay(later.drain),
            reload_interval: later.reload_interval.or(self.reload_interval),
        }
    }
}

impl Merge for AgentSettings {
    /// The command line is the later source: it overlays the file.
    fn merge(self, later: AgentSettings) -> Result<AgentSettings, String> {
        Ok(self.overlay(later))
    }
}

/// The upstream as the data path uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamSpec {
    /// The mode.
    pub mode: UpstreamMode,
    /// Endpoints (`direct`) or gateways, as configured (names unexpanded).
    pub set: EndpointSetSpec,
    /// Relay settings.
    pub relay: RelayConfig,
    /// Close relayed connections when their endpoint is marked down.
    pub close_on_down: bool,
    /// How connections reach the upstream: the mode with its connect
    /// timeout, AUTHORITY TLV (`proxy`), or `CONNECT` target and answer
    /// timeout (`connect`).
    pub connector: TcpConnector,
    /// DNS re-resolution interval.
    pub dns_refresh: Duration,
    /// `tunnel`: how the tunnel servers are reached.
    pub tunnel: Option<apiway_tunnel::client::ClientSettings>,
}

impl UpstreamSpec {
    /// The endpoint set's name: the `route` label of its metrics.
    pub fn set_name(&self) -> &'static str {
        match self.mode {
            UpstreamMode::Direct => "direct",
            UpstreamMode::Proxy | UpstreamMode::Connect => "gateway",
            UpstreamMode::Tunnel => "tunnel_server",
        }
    }
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Admin endpoint, drain timing, reload interval.
    pub common: Common,
    /// Listener addresses.
    pub listen: Vec<SocketAddr>,
    /// `tunnel`: listener addresses with the destination each forwards to.
    pub targets: Vec<(SocketAddr, String)>,
    /// Addresses to own.
    pub addresses: AddressSpec,
    /// Where connections go.
    pub upstream: UpstreamSpec,
    /// Open connections per listener.
    pub max_connections: usize,
    /// What happens at `max_connections`.
    pub when_full: apiway_core::listener::WhenFull,
    /// EndpointSlice discovery (`--discover-endpoints`).
    pub discovery: Option<DiscoverySpec>,
}

/// How the agent discovers endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoverySpec {
    /// The kubeconfig with the credentials; `None`: in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The TLS server name the API servers' certificates carry
    /// (`--server-name`).
    pub server_name: String,
}

/// Parses a configuration file's text (empty text is an empty file; YAML,
/// or JSON when it starts with `{`, as for the gateway).
pub fn parse_file(text: &str) -> Result<AgentSettings, String> {
    if text.trim().is_empty() {
        return Ok(AgentSettings::default());
    }
    apiway_core::config_text::deserialize(text)
}

/// Validates settings (the file with the flags over it). The error is one
/// line naming the flag or field and the fix.
pub fn build(file: AgentSettings) -> Result<Snapshot, String> {
    let common = Common::validate(
        &file.admin,
        "--admin / admin.address",
        &file.drain,
        file.reload_interval,
    )?;

    let mut listen = Vec::new();
    for text in &file.listen {
        let a = socket_addr("--listen / listen", text)?;
        if listen.contains(&a) {
            return Err(format!("--listen {a} is given twice"));
        }
        listen.push(a);
    }
    let mode = file.upstream.unwrap_or(UpstreamMode::Direct);
    let targets = targets(mode, &file)?;
    if mode == UpstreamMode::Tunnel && !listen.is_empty() {
        return Err(
            "--upstream tunnel forwards --target listeners only; replace --listen IP:PORT with --target PORT:HOST:PORT"
                .into(),
        );
    }
    if listen.is_empty() && targets.is_empty() {
        return Err("no listener: give --listen IP:PORT (or `listen:` in the config file)".into());
    }

    let mut addresses = Vec::new();
    for text in &file.bind_address {
        let ip: IpAddr = text.trim().parse().map_err(|_| {
            format!("--bind-address `{text}` is not an IP address (write 10.1.2.3 or fd00::1)")
        })?;
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(format!(
                "--bind-address {ip} cannot be assigned to an interface"
            ));
        }
        if !addresses.contains(&ip) {
            addresses.push(ip);
        }
    }
    let interface = file.interface.clone().unwrap_or_else(|| "apiway0".into());
    if interface.is_empty() || interface.len() > 15 || interface.contains(['/', ' ', '\0']) {
        return Err(format!(
            "--interface `{interface}` is not an interface name (1 to 15 characters, no / or spaces)"
        ));
    }

    let lists = [
        (&file.endpoints, "--endpoint"),
        (&file.gateways, "--gateway"),
        (&file.tunnel_servers, "--tunnel-server"),
    ];
    let flag = match mode {
        UpstreamMode::Direct => "--endpoint",
        UpstreamMode::Tunnel => "--tunnel-server",
        UpstreamMode::Proxy | UpstreamMode::Connect => "--gateway",
    };
    let mode_name = format!("{mode:?}").to_lowercase();
    let mut list = &file.endpoints;
    for (l, f) in lists {
        if f == flag {
            list = l;
        } else if !l.is_empty() {
            return Err(format!(
                "{f} does not apply to --upstream {mode_name}; use {flag}"
            ));
        }
    }
    if list.is_empty() {
        return Err(format!(
            "--upstream {mode_name} needs at least one {flag} HOST:PORT"
        ));
    }
    let mut endpoints = Vec::new();
    for text in list {
        let a = Address::parse(text).map_err(|e| format!("{flag} {e}"))?;
        if endpoints.contains(&a) {
            return Err(format!("{flag} {text} is given twice"));
        }
        endpoints.push(a);
    }

    let server_name = file
        .server_name
        .clone()
        .unwrap_or_else(|| "kubernetes.default".into());
    let ca_file = file.ca_file.clone();
    if let Some(ca) = &ca_file {
        apiway_core::tls::load_certs(ca).map_err(|e| format!("--ca {e}"))?;
    }
    let discovery = match (file.discover_endpoints, mode) {
        (false, _) => None,
        (true, UpstreamMode::Direct) => Some(DiscoverySpec {
            kubeconfig: file.kubeconfig.clone(),
            server_name: server_name.clone(),
        }),
        (true, _) => {
            return Err(
                "--discover-endpoints / discover_endpoints needs --upstream direct (a gateway or CONNECT proxy finds the API servers itself)"
                    .into(),
            )
        }
    };
    let health_check = health_check(mode, &file, server_name, ca_file)?;

    let authority = file.authority.clone();
    if let Some(a) = &authority {
        if mode != UpstreamMode::Proxy {
            return Err("--authority applies to --upstream proxy only".into());
        }
        if a.is_empty() || a.len() > 255 || !a.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "--authority `{a}` must be a host name (printable ASCII, at most 255 bytes)"
            ));
        }
    }
    let connect_authority = file.connect_authority.clone();
    if let Some(a) = &connect_authority {
        if mode != UpstreamMode::Connect {
            return Err("--connect-authority applies to --upstream connect only".into());
        }
        apiway_wire::authority::Authority::parse(a)
            .map_err(|e| format!("--connect-authority `{a}` must be host:port: {e}"))?;
    }

    let connect_timeout = file.connect_timeout.unwrap_or(Duration::from_secs(2));
    let connect_response_timeout = file
        .connect_response_timeout
        .unwrap_or(Duration::from_secs(5));
    let idle_timeout = file.idle_timeout;
    for (name, d) in [
        ("--connect-timeout", Some(connect_timeout)),
        ("connect_response_timeout", Some(connect_response_timeout)),
        ("--idle-timeout", idle_timeout),
    ] {
        if d.is_some_and(|d| d.is_zero()) {
            return Err(format!("{name} must be more than 0"));
        }
    }
    let dns_refresh = file.dns_refresh.unwrap_or(Duration::from_secs(10));
    if dns_refresh < Duration::from_millis(100) {
        return Err("dns_refresh must be at least 100ms".into());
    }
    let max_connections = file.max_connections.unwrap_or(10_000);
    if max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    let tunnel = tunnel_settings(mode, &file, connect_timeout)?;
    let connector = TcpConnector {
        via: match mode {
            // `tunnel` dials through the tunnel client, not a TCP connector.
            UpstreamMode::Direct | UpstreamMode::Tunnel => Via::Direct,
            UpstreamMode::Proxy => Via::ProxyHeader {
                version: apiway_wire::proxy::Version::V2,
                authority,
            },
            UpstreamMode::Connect => Via::HttpConnect {
                authority: connect_authority,
                response_timeout: connect_response_timeout,
            },
        },
        connect_timeout,
    };
    Ok(Snapshot {
        common,
        listen,
        targets,
        addresses: AddressSpec {
            addresses,
            interface,
            keep: file.keep_address,
        },
        upstream: UpstreamSpec {
            mode,
            set: EndpointSetSpec {
                endpoints,
                // Tunnel servers are peers behind one name: spreading new
                // streams over every warm connection shares the load and
                // keeps each connection proven. Ranking by locality and
                // latency is for API servers, one of which may be local.
                policy: file.policy.unwrap_or(match mode {
                    UpstreamMode::Tunnel => Policy::RoundRobin,
                    _ => Policy::PreferLocalThenLatency,
                }),
                health_check,
                ejection: Ejection::default(),
            },
            relay: RelayConfig {
                idle_timeout,
                ..RelayConfig::default()
            },
            close_on_down: file.close_on_down,
            dns_refresh,
            connector,
            tunnel,
        },
        max_connections,
        when_full: file
            .when_full
            .unwrap_or(apiway_core::listener::WhenFull::Queue),
        discovery,
    })
}

/// `--target` listeners: each local port on every `--bind-address`
/// (127.0.0.1 without one), with its destination as the tunnel server
/// must name it.
fn targets(mode: UpstreamMode, file: &AgentSettings) -> Result<Vec<(SocketAddr, String)>, String> {
    if file.target.is_empty() {
        if mode == UpstreamMode::Tunnel {
            return Err(
                "--upstream tunnel needs at least one --target LOCAL_PORT:DST_HOST:DST_PORT".into(),
            );
        }
        return Ok(Vec::new());
    }
    if mode != UpstreamMode::Tunnel {
        return Err("--target applies to --upstream tunnel only".into());
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    for text in &file.bind_address {
        if let Ok(ip) = text.trim().parse::<IpAddr>() {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    if ips.is_empty() {
        ips.push(IpAddr::from([127, 0, 0, 1]));
    }
    let mut out: Vec<(SocketAddr, String)> = Vec::new();
    for text in &file.target {
        let bad = |why: &str| {
            format!("--target `{text}`: {why}; write LOCAL_PORT:DST_HOST:DST_PORT, e.g. 6443:apiserver.internal:6443")
        };
        let (port, destination) = text.split_once(':').ok_or_else(|| bad("no destination"))?;
        // 0: any free port (the ready file names it).
        let port: u16 = port
            .parse()
            .ok()
            .ok_or_else(|| bad("LOCAL_PORT must be 0 to 65535"))?;
        let destination = Address::parse(destination).map_err(|e| bad(&e))?;
        for ip in &ips {
            let addr = SocketAddr::new(*ip, port);
            if port != 0 && out.iter().any(|(a, _)| *a == addr) {
                return Err(format!("--target: local port {port} is given twice"));
            }
            out.push((addr, destination.to_string()));
        }
    }
    Ok(out)
}

/// `tunnel`: how the tunnel servers are reached.
fn tunnel_settings(
    mode: UpstreamMode,
    file: &AgentSettings,
    connect_timeout: Duration,
) -> Result<Option<apiway_tunnel::client::ClientSettings>, String> {
    let given = file.tunnel_ca.is_some()
        || file.tunnel_cert.is_some()
        || file.tunnel_key.is_some()
        || file.tunnel_server_name.is_some()
        || file.tunnel_token_file.is_some();
    if mode != UpstreamMode::Tunnel {
        if given {
            return Err("--tunnel-ca, --tunnel-cert, --tunnel-key, --tunnel-token-file and --tunnel-server-name apply to --upstream tunnel only".into());
        }
        return Ok(None);
    }
    let ca = file.tunnel_ca.clone().ok_or(
        "--upstream tunnel needs --tunnel-ca FILE: the CA that signs the tunnel servers' certificates",
    )?;
    apiway_core::tls::load_certs(&ca).map_err(|e| format!("--tunnel-ca {e}"))?;
    let token_file = file.tunnel_token_file.clone();
    if let Some(t) = &token_file {
        crate::config::check_token_file(t)?;
    }
    let client_cert = match (&file.tunnel_cert, &file.tunnel_key) {
        (Some(c), Some(k)) => {
            apiway_core::tls::load_certs(c).map_err(|e| format!("--tunnel-cert {e}"))?;
            apiway_core::tls::load_key(k).map_err(|e| format!("--tunnel-key {e}"))?;
            Some((c.clone(), k.clone()))
        }
        (None, None) if token_file.is_some() => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err("--tunnel-cert and --tunnel-key go together".into())
        }
        (None, None) => {
            return Err(
                "--upstream tunnel needs credentials: --tunnel-cert FILE and --tunnel-key FILE (a client certificate), or --tunnel-token-file FILE (a ServiceAccount token)"
                    .into(),
            )
        }
    };
    let defaults = apiway_tunnel::client::ClientSettings::default();
    let s = apiway_tunnel::client::ClientSettings {
        tls: apiway_core::tls::TlsClientOptions {
            server_name: file.tunnel_server_name.clone(),
            ca_file: Some(ca),
            client_cert,
        },
        connect_timeout,
        dial_timeout: file.dial_timeout.unwrap_or(defaults.dial_timeout),
        keepalive_interval: file
            .tunnel_keepalive_interval
            .unwrap_or(defaults.keepalive_interval),
        keepalive_timeout: file
            .tunnel_keepalive_timeout
            .unwrap_or(defaults.keepalive_timeout),
        token_file,
    };
    for (name, d) in [
        ("--dial-timeout", s.dial_timeout),
        ("--tunnel-keepalive-interval", s.keepalive_interval),
        ("--tunnel-keepalive-timeout", s.keepalive_timeout),
    ] {
        if d.is_zero() {
            return Err(format!("{name} must be more than 0"));
        }
    }
    Ok(Some(s))
}

/// Refuses a token file that cannot be read or holds no token.
fn check_token_file(path: &std::path::Path) -> Result<(), String> {
    apiway_tunnel::tokens::TokenFile::new(path.to_owned())
        .token()
        .map(|_| ())
}

/// The health check from `--health-check` or the file. `direct` checks
/// `https:/readyz` by default; gateways get no active check unless asked
/// (passive ejection still applies). An `https` check without its own
/// `server_name` / `ca_file` takes the agent's (`--server-name`, `--ca`).
fn health_check(
    mode: UpstreamMode,
    settings: &AgentSettings,
    server_name: String,
    ca_file: Option<PathBuf>,
) -> Result<Option<HealthCheck>, String> {
    let mut spec = settings.health_check.clone().unwrap_or_else(|| {
        HealthCheckConfig::of_kind(if mode == UpstreamMode::Direct {
            CheckKind::Https
        } else {
            CheckKind::None
        })
    });
    if let Some(text) = &settings.health_check_flag {
        let (kind, path) = match text.split_once(':') {
            Some((k, p)) => (k, Some(p.to_owned())),
            None => (text.as_str(), None),
        };
        spec.kind = match kind {
            "none" => CheckKind::None,
            "https" => CheckKind::Https,
            "tcp" => CheckKind::Tcp,
            other => {
                return Err(format!(
                    "--health-check `{other}`: use https:/PATH, https, tcp or none"
                ))
            }
        };
        if spec.kind == CheckKind::Tcp && path.as_deref().is_some_and(|p| !p.is_empty()) {
            return Err("--health-check tcp takes no path".into());
        }
        spec.path = path.filter(|p| !p.is_empty());
    }
    if let Some(i) = settings.health_check_interval {
        spec.interval = Some(i);
    }
    if let Some(t) = settings.health_check_timeout {
        spec.timeout = Some(t);
    }
    match spec.kind {
        CheckKind::None => {
            // Flags that tune a check mean nothing without one.
            spec = HealthCheckConfig::of_kind(CheckKind::None);
        }
        CheckKind::Tcp => {
            spec.path = None;
        }
        CheckKind::Https => {
            spec.server_name = spec.server_name.or(Some(server_name));
            if !spec.insecure_skip_verify {
                spec.ca_file = spec.ca_file.or(ca_file);
            }
        }
    }
    // Probes of gateways in `proxy` mode carry the PROXY v2 header the
    // agent's connections carry, unless the check says otherwise.
    let sent = (mode == UpstreamMode::Proxy).then_some(apiway_wire::proxy::Version::V2);
    Ok(spec
        .validate_with(&CheckDefaults::AGENT)
        .map_err(|e| format!("--health-check: {e}"))?
        .map(|mut h| {
            h.send_proxy = h.send_proxy.for_route(sent);
            h
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(listen: &str) -> AgentSettings {
        AgentSettings {
            listen: vec![listen.into()],
            ..AgentSettings::default()
        }
    }

    #[test]
    fn the_documented_direct_command_line() {
        let mut f = flags("10.1.2.3:443");
        f.bind_address = vec!["10.1.2.3".into()];
        f.interface = Some("lo".into());
        f.upstream = Some(UpstreamMode::Direct);
        f.endpoints = vec!["127.0.0.1:7001".into(), "api-int.example.com:6443".into()];
        f.health_check_flag = Some("https:/readyz".into());
        f.admin.address = Some("127.0.0.1:9902".into());
        let s = build(f.clone()).unwrap();
        assert_eq!(s.listen, ["10.1.2.3:443".parse::<SocketAddr>().unwrap()]);
        assert_eq!(s.addresses.interface, "lo");
        assert_eq!(s.upstream.set.endpoints.len(), 2);
        assert_eq!(s.upstream.set.policy, Policy::PreferLocalThenLatency);
        let hc = s.upstream.set.health_check.unwrap();
        assert_eq!(hc.interval, Duration::from_secs(1));
        match hc.probe {
            apiway_core::health::Probe::Https { path, tls, .. } => {
                assert_eq!(path, "/readyz");
                assert_eq!(tls.server_name.as_deref(), Some("kubernetes.default"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn when_full_queues_unless_told_to_close() {
        use apiway_core::listener::WhenFull;
        let mut f = flags("10.1.2.3:443");
        f.upstream = Some(UpstreamMode::Direct);
        f.endpoints = vec!["127.0.0.1:7001".into()];
        assert_eq!(build(f.clone()).unwrap().when_full, WhenFull::Queue);
        let file = parse_file("when_full: close\n").unwrap();
        assert_eq!(
            build(file.overlay(f.clone())).unwrap().when_full,
            WhenFull::Close
        );
        f.when_full = Some(WhenFull::Queue);
        let file = parse_file("when_full: close\n").unwrap();
        assert_eq!(
            build(file.overlay(f)).unwrap().when_full,
            WhenFull::Queue,
            "the flag wins"
        );
        assert!(parse_file("when_full: wait\n").is_err());
    }

    #[test]
    fn gateway_modes() {
        let mut f = flags("10.1.2.3:443");
        f.upstream = Some(UpstreamMode::Proxy);
        f.gateways = vec!["127.0.0.1:8444".into()];
        let s = build(f.clone()).unwrap();
        assert_eq!(s.upstream.set_name(), "gateway");
        assert!(s.upstream.set.health_check.is_none());
        f.upstream = Some(UpstreamMode::Connect);
        f.connect_authority = Some("kubernetes.default.svc:443".into());
        assert!(build(f.clone()).is_ok());
    }

    #[test]
    fn flags_complement_and_override_the_file() {
        let file = parse_file(
            "listen: ['127.0.0.1:1']\nendpoints: ['127.0.0.1:7001']\nconnect_timeout: 3s\nhealth_check: {kind: tcp, interval: 500ms}\n",
        )
        .unwrap();
        let mut f = flags("127.0.0.1:2");
        f.endpoints = vec!["127.0.0.1:7002".into()];
        f.connect_timeout = Some(Duration::from_secs(1));
        let s = build(file.overlay(f)).unwrap();
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.upstream.set.endpoints.len(), 2);
        assert_eq!(s.upstream.connector.connect_timeout, Duration::from_secs(1));
        let hc = s.upstream.set.health_check.unwrap();
        assert_eq!(hc.interval, Duration::from_millis(500));
        assert_eq!(hc.probe, apiway_core::health::Probe::Tcp);
    }

    #[test]
    fn errors_name_the_flag() {
        let err = |f: &AgentSettings| build(f.clone()).unwrap_err();
        assert!(err(&AgentSettings::default()).contains("--listen"));
        let mut f = flags("10.1.2.3:443");
        assert!(err(&f).contains("--upstream direct needs at least one --endpoint"));
        f.endpoints = vec!["nohost".into()];
        assert!(err(&f).contains("--endpoint `nohost` has no port"));
        f.endpoints = vec!["127.0.0.1:1".into()];
        f.gateways = vec!["127.0.0.1:2".into()];
        assert!(err(&f).contains("--gateway does not apply to --upstream direct"));
        f.gateways.clear();
        f.health_check_flag = Some("http:/x".into());
        assert!(err(&f).contains("--health-check `http`"));
        f.health_check_flag = None;
        f.bind_address = vec!["10.1.2".into()];
        assert!(err(&f).contains("--bind-address `10.1.2`"));
        f.bind_address.clear();
        f.interface = Some("a-very-long-interface-name".into());
        assert!(err(&f).contains("--interface"));
        f.interface = None;
        f.authority = Some("x".into());
        assert!(err(&f).contains("--authority applies to --upstream proxy only"));
        f.authority = None;
        f.target = vec!["6443:api:6443".into()];
        assert!(err(&f).contains("--target applies to --upstream tunnel only"));
        f.upstream = Some(UpstreamMode::Tunnel);
        assert!(err(&f).contains("--upstream tunnel forwards --target listeners only"));
        f.listen.clear();
        assert!(err(&f).contains("--endpoint does not apply to --upstream tunnel"));
        f.endpoints.clear();
        assert!(err(&f).contains("needs at least one --tunnel-server"));
        f.tunnel_servers = vec!["tunnel.example.com:8132".into()];
        assert!(err(&f).contains("--upstream tunnel needs --tunnel-ca"));
        f.target = vec!["x:api:6443".into()];
        assert!(err(&f).contains("--target `x:api:6443`: LOCAL_PORT"));
        f.target = vec!["6443:api".into()];
        assert!(err(&f).contains("--target `6443:api`"));
        assert!(parse_file("bogus: 1")
            .unwrap_err()
            .starts_with("invalid configuration"));
    }
}
