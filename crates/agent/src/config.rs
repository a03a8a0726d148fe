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

use apiway_core::drain::DrainTiming;
use apiway_core::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
use apiway_core::health::{CheckKind, HealthCheck, HealthCheckConfig};
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
}

impl std::str::FromStr for UpstreamMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(UpstreamMode::Direct),
            "proxy" => Ok(UpstreamMode::Proxy),
            "connect" => Ok(UpstreamMode::Connect),
            other => Err(format!(
                "`{other}` is not an upstream mode; use direct, proxy or connect"
            )),
        }
    }
}

/// The configuration file as written. Every field is optional so that the
/// whole configuration can come from flags instead.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `ip:port` of the admin endpoint (/healthz /livez /readyz /metrics).
    #[serde(default)]
    pub admin: Option<String>,
    /// Local `ip:port` addresses to listen on.
    #[serde(default)]
    pub listen: Vec<String>,
    /// Addresses the agent adds to `interface` and removes on exit.
    #[serde(default)]
    pub bind_address: Vec<String>,
    /// Interface for `bind_address` (default `apiway0`).
    #[serde(default)]
    pub interface: Option<String>,
    /// Leave `bind_address` in place on exit (default false).
    #[serde(default)]
    pub keep_address: Option<bool>,
    /// `direct` (default), `proxy` or `connect`.
    #[serde(default)]
    pub upstream: Option<UpstreamMode>,
    /// API server endpoints (`direct`).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Gateways (`proxy`, `connect`).
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Active health check of endpoints or gateways.
    #[serde(default)]
    pub health_check: Option<HealthCheckFile>,
    /// TLS server name of `https` checks (default `kubernetes.default`).
    #[serde(default)]
    pub server_name: Option<String>,
    /// CA bundle (PEM) that must sign the API servers' certificates in `https` checks.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `prefer_local_then_latency` (default), `lowest_latency`, `least_connections`, `round_robin`.
    #[serde(default)]
    pub policy: Option<Policy>,
    /// PROXY v2 AUTHORITY TLV value (`proxy`).
    #[serde(default)]
    pub authority: Option<String>,
    /// `host:port` for `CONNECT` (default: the address the client connected to).
    #[serde(default)]
    pub connect_authority: Option<String>,
    /// Per-endpoint connect timeout (default 2s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub connect_timeout: Option<Duration>,
    /// Time the gateway has to answer `CONNECT` (default 5s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub connect_response_timeout: Option<Duration>,
    /// Close connections idle this long (default: never).
    #[serde(default, with = "apiway_core::duration::option")]
    pub idle_timeout: Option<Duration>,
    /// Open client connections per listener (default 10000).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Close relayed connections when a health check takes their endpoint
    /// down (default false).
    #[serde(default)]
    pub close_on_down: Option<bool>,
    /// How often DNS names are re-resolved (default 10s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub dns_refresh: Option<Duration>,
    /// Graceful shutdown timing.
    #[serde(default)]
    pub drain: Option<DrainFile>,
    /// How often the file is checked for changes (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub reload_interval: Option<Duration>,
}

/// `health_check:` (the fields of the gateway's, with `none` allowed).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckFile {
    /// `https`, `tcp` or `none`.
    pub kind: String,
    /// Path for `https` (default `/readyz`).
    #[serde(default)]
    pub path: Option<String>,
    /// Time between checks (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub interval: Option<Duration>,
    /// Time one check may take (default 1s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub timeout: Option<Duration>,
    /// Passes that bring an endpoint up (default 1).
    #[serde(default)]
    pub rise: Option<u32>,
    /// Failures that take it down (default 1).
    #[serde(default)]
    pub fall: Option<u32>,
}

/// `drain:`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainFile {
    /// Keep accepting this long after SIGTERM (default 5s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub delay: Option<Duration>,
    /// Then wait this long for connections (default 30s).
    #[serde(default, with = "apiway_core::duration::option")]
    pub grace_period: Option<Duration>,
}

/// Values from the command line; `None` / empty means "not given".
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--admin`.
    pub admin: Option<String>,
    /// `--listen` (repeatable).
    pub listen: Vec<String>,
    /// `--bind-address` (repeatable).
    pub bind_address: Vec<String>,
    /// `--interface`.
    pub interface: Option<String>,
    /// `--keep-address`.
    pub keep_address: bool,
    /// `--upstream`.
    pub upstream: Option<UpstreamMode>,
    /// `--endpoint` (repeatable).
    pub endpoints: Vec<String>,
    /// `--gateway` (repeatable).
    pub gateways: Vec<String>,
    /// `--health-check` (`https:/PATH`, `https`, `tcp`, `none`).
    pub health_check: Option<String>,
    /// `--health-check-interval`.
    pub health_check_interval: Option<Duration>,
    /// `--health-check-timeout`.
    pub health_check_timeout: Option<Duration>,
    /// `--server-name`.
    pub server_name: Option<String>,
    /// `--ca`.
    pub ca_file: Option<PathBuf>,
    /// `--authority`.
    pub authority: Option<String>,
    /// `--connect-authority`.
    pub connect_authority: Option<String>,
    /// `--connect-timeout`.
    pub connect_timeout: Option<Duration>,
    /// `--idle-timeout`.
    pub idle_timeout: Option<Duration>,
    /// `--max-connections`.
    pub max_connections: Option<usize>,
    /// `--close-on-down`.
    pub close_on_down: bool,
    /// `--drain-delay`.
    pub drain_delay: Option<Duration>,
    /// `--grace-period`.
    pub grace_period: Option<Duration>,
}

/// The upstream as the data path uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamSpec {
    /// The mode.
    pub mode: UpstreamMode,
    /// Endpoints (`direct`) or gateways, as configured (names unexpanded).
    pub set: EndpointSetSpec,
    /// Per-endpoint connect timeout.
    pub connect_timeout: Duration,
    /// AUTHORITY TLV (`proxy`).
    pub authority: Option<String>,
    /// Fixed `CONNECT` target (`connect`).
    pub connect_authority: Option<String>,
    /// Time the gateway has to answer `CONNECT`.
    pub connect_response_timeout: Duration,
    /// Relay settings.
    pub relay: RelayConfig,
    /// Close relayed connections when their endpoint is marked down.
    pub close_on_down: bool,
    /// DNS re-resolution interval.
    pub dns_refresh: Duration,
}

impl UpstreamSpec {
    /// The endpoint set's name: the `route` label of its metrics.
    pub fn set_name(&self) -> &'static str {
        match self.mode {
            UpstreamMode::Direct => "direct",
            UpstreamMode::Proxy | UpstreamMode::Connect => "gateway",
        }
    }
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Admin address.
    pub admin: Option<SocketAddr>,
    /// Listener addresses.
    pub listen: Vec<SocketAddr>,
    /// Addresses to own.
    pub addresses: AddressSpec,
    /// Where connections go.
    pub upstream: UpstreamSpec,
    /// Open connections per listener.
    pub max_connections: usize,
    /// Shutdown timing.
    pub drain: DrainTiming,
    /// Reload poll interval.
    pub reload_interval: Duration,
}

/// Parses a configuration file's text (empty text is an empty file; YAML,
/// or JSON when it starts with `{`, as for the gateway).
pub fn parse_file(text: &str) -> Result<ConfigFile, String> {
    if text.trim().is_empty() {
        return Ok(ConfigFile::default());
    }
    apiway_core::config_text::deserialize(text)
}

/// Merges `flags` over `file` and validates. The error is one line naming
/// the flag or field and the fix.
pub fn build(file: ConfigFile, flags: &Flags) -> Result<Snapshot, String> {
    let admin = flags
        .admin
        .clone()
        .or(file.admin)
        .map(|a| socket_addr("--admin / admin", &a))
        .transpose()?;

    let mut listen = Vec::new();
    for text in file.listen.iter().chain(&flags.listen) {
        let a = socket_addr("--listen / listen", text)?;
        if listen.contains(&a) {
            return Err(format!("--listen {a} is given twice"));
        }
        listen.push(a);
    }
    if listen.is_empty() {
        return Err("no listener: give --listen IP:PORT (or `listen:` in the config file)".into());
    }

    let mut addresses = Vec::new();
    for text in file.bind_address.iter().chain(&flags.bind_address) {
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
    let interface = flags
        .interface
        .clone()
        .or(file.interface)
        .unwrap_or_else(|| "apiway0".into());
    if interface.is_empty() || interface.len() > 15 || interface.contains(['/', ' ', '\0']) {
        return Err(format!(
            "--interface `{interface}` is not an interface name (1 to 15 characters, no / or spaces)"
        ));
    }

    let mode = flags
        .upstream
        .or(file.upstream)
        .unwrap_or(UpstreamMode::Direct);
    let (list, flag, other, other_flag) = match mode {
        UpstreamMode::Direct => (
            file.endpoints
                .iter()
                .chain(&flags.endpoints)
                .collect::<Vec<_>>(),
            "--endpoint",
            file.gateways.len() + flags.gateways.len(),
            "--gateway",
        ),
        _ => (
            file.gateways
                .iter()
                .chain(&flags.gateways)
                .collect::<Vec<_>>(),
            "--gateway",
            file.endpoints.len() + flags.endpoints.len(),
            "--endpoint",
        ),
    };
    let mode_name = format!("{mode:?}").to_lowercase();
    if other > 0 {
        return Err(format!(
            "{other_flag} does not apply to --upstream {mode_name}; use {flag}"
        ));
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

    let server_name = flags
        .server_name
        .clone()
        .or(file.server_name)
        .unwrap_or_else(|| "kubernetes.default".into());
    let ca_file = flags.ca_file.clone().or(file.ca_file);
    if let Some(ca) = &ca_file {
        apiway_core::tls::load_certs(ca).map_err(|e| format!("--ca {e}"))?;
    }
    let health_check = health_check(mode, file.health_check, flags, server_name, ca_file)?;

    let authority = flags.authority.clone().or(file.authority);
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
    let connect_authority = flags.connect_authority.clone().or(file.connect_authority);
    if let Some(a) = &connect_authority {
        if mode != UpstreamMode::Connect {
            return Err("--connect-authority applies to --upstream connect only".into());
        }
        apiway_wire::authority::Authority::parse(a)
            .map_err(|e| format!("--connect-authority `{a}` must be host:port: {e}"))?;
    }

    let connect_timeout = flags
        .connect_timeout
        .or(file.connect_timeout)
        .unwrap_or(Duration::from_secs(2));
    let connect_response_timeout = file
        .connect_response_timeout
        .unwrap_or(Duration::from_secs(5));
    let idle_timeout = flags.idle_timeout.or(file.idle_timeout);
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
    let max_connections = flags
        .max_connections
        .or(file.max_connections)
        .unwrap_or(10_000);
    if max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    let default_drain = DrainTiming::default();
    let drain_file = file.drain.unwrap_or_default();
    let drain = DrainTiming {
        drain_delay: flags
            .drain_delay
            .or(drain_file.delay)
            .unwrap_or(default_drain.drain_delay),
        grace_period: flags
            .grace_period
            .or(drain_file.grace_period)
            .unwrap_or(default_drain.grace_period),
    };
    let reload_interval = file.reload_interval.unwrap_or(Duration::from_secs(1));
    if reload_interval < Duration::from_millis(100) {
        return Err("reload_interval must be at least 100ms".into());
    }

    Ok(Snapshot {
        admin,
        listen,
        addresses: AddressSpec {
            addresses,
            interface,
            keep: flags.keep_address || file.keep_address.unwrap_or(false),
        },
        upstream: UpstreamSpec {
            mode,
            set: EndpointSetSpec {
                endpoints,
                policy: file.policy.unwrap_or(Policy::PreferLocalThenLatency),
                health_check,
                ejection: Ejection::default(),
            },
            connect_timeout,
            authority,
            connect_authority,
            connect_response_timeout,
            relay: RelayConfig {
                idle_timeout,
                ..RelayConfig::default()
            },
            close_on_down: flags.close_on_down || file.close_on_down.unwrap_or(false),
            dns_refresh,
        },
        max_connections,
        drain,
        reload_interval,
    })
}

/// The health check from `--health-check` or the file. `direct` checks
/// `https:/readyz` by default; gateways get no active check unless asked
/// (passive ejection still applies).
fn health_check(
    mode: UpstreamMode,
    file: Option<HealthCheckFile>,
    flags: &Flags,
    server_name: String,
    ca_file: Option<PathBuf>,
) -> Result<Option<HealthCheck>, String> {
    let mut spec = file.unwrap_or_else(|| HealthCheckFile {
        kind: if mode == UpstreamMode::Direct {
            "https".into()
        } else {
            "none".into()
        },
        ..HealthCheckFile::default()
    });
    if let Some(text) = &flags.health_check {
        let (kind, path) = match text.split_once(':') {
            Some((k, p)) => (k, Some(p.to_owned())),
            None => (text.as_str(), None),
        };
        spec.kind = kind.to_owned();
        spec.path = path;
    }
    if let Some(i) = flags.health_check_interval {
        spec.interval = Some(i);
    }
    if let Some(t) = flags.health_check_timeout {
        spec.timeout = Some(t);
    }
    let kind = match spec.kind.as_str() {
        "none" => return Ok(None),
        "https" => CheckKind::Https,
        "tcp" => CheckKind::Tcp,
        other => {
            return Err(format!(
                "--health-check `{other}`: use https:/PATH, https, tcp or none"
            ))
        }
    };
    let https = kind == CheckKind::Https;
    let interval = spec.interval.unwrap_or(Duration::from_secs(1));
    let config = HealthCheckConfig {
        kind,
        path: if https { spec.path.clone() } else { None },
        interval: Some(interval),
        timeout: Some(spec.timeout.unwrap_or(interval.min(Duration::from_secs(1)))),
        rise: Some(spec.rise.unwrap_or(1)),
        fall: Some(spec.fall.unwrap_or(1)),
        server_name: https.then_some(server_name),
        ca_file: if https { ca_file.clone() } else { None },
        insecure_skip_verify: false,
    };
    if !https && spec.path.as_deref().is_some_and(|p| !p.is_empty()) {
        return Err("--health-check tcp takes no path".into());
    }
    config
        .validate()
        .map(Some)
        .map_err(|e| format!("--health-check: {e}"))
}

fn socket_addr(what: &str, text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("{what}: `{text}` is not an ip:port address (write 10.1.2.3:443 or [fd00::1]:443)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(listen: &str) -> Flags {
        Flags {
            listen: vec![listen.into()],
            ..Flags::default()
        }
    }

    #[test]
    fn the_documented_direct_command_line() {
        let mut f = flags("10.1.2.3:443");
        f.bind_address = vec!["10.1.2.3".into()];
        f.interface = Some("lo".into());
        f.upstream = Some(UpstreamMode::Direct);
        f.endpoints = vec!["127.0.0.1:7001".into(), "api-int.example.com:6443".into()];
        f.health_check = Some("https:/readyz".into());
        f.admin = Some("127.0.0.1:9902".into());
        let s = build(ConfigFile::default(), &f).unwrap();
        assert_eq!(s.listen, ["10.1.2.3:443".parse::<SocketAddr>().unwrap()]);
        assert_eq!(s.addresses.interface, "lo");
        assert_eq!(s.upstream.set.endpoints.len(), 2);
        assert_eq!(s.upstream.set.policy, Policy::PreferLocalThenLatency);
        let hc = s.upstream.set.health_check.unwrap();
        assert_eq!(hc.interval, Duration::from_secs(1));
        match hc.probe {
            apiway_core::health::Probe::Https { path, tls } => {
                assert_eq!(path, "/readyz");
                assert_eq!(tls.server_name.as_deref(), Some("kubernetes.default"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gateway_modes() {
        let mut f = flags("10.1.2.3:443");
        f.upstream = Some(UpstreamMode::Proxy);
        f.gateways = vec!["127.0.0.1:8444".into()];
        let s = build(ConfigFile::default(), &f).unwrap();
        assert_eq!(s.upstream.set_name(), "gateway");
        assert!(s.upstream.set.health_check.is_none());
        f.upstream = Some(UpstreamMode::Connect);
        f.connect_authority = Some("kubernetes.default.svc:443".into());
        assert!(build(ConfigFile::default(), &f).is_ok());
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
        let s = build(file, &f).unwrap();
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.upstream.set.endpoints.len(), 2);
        assert_eq!(s.upstream.connect_timeout, Duration::from_secs(1));
        let hc = s.upstream.set.health_check.unwrap();
        assert_eq!(hc.interval, Duration::from_millis(500));
        assert_eq!(hc.probe, apiway_core::health::Probe::Tcp);
    }

    #[test]
    fn errors_name_the_flag() {
        let err = |f: &Flags| build(ConfigFile::default(), f).unwrap_err();
        assert!(err(&Flags::default()).contains("--listen"));
        let mut f = flags("10.1.2.3:443");
        assert!(err(&f).contains("--upstream direct needs at least one --endpoint"));
        f.endpoints = vec!["nohost".into()];
        assert!(err(&f).contains("--endpoint `nohost` has no port"));
        f.endpoints = vec!["127.0.0.1:1".into()];
        f.gateways = vec!["127.0.0.1:2".into()];
        assert!(err(&f).contains("--gateway does not apply to --upstream direct"));
        f.gateways.clear();
        f.health_check = Some("http:/x".into());
        assert!(err(&f).contains("--health-check `http`"));
        f.health_check = None;
        f.bind_address = vec!["10.1.2".into()];
        assert!(err(&f).contains("--bind-address `10.1.2`"));
        f.bind_address.clear();
        f.interface = Some("a-very-long-interface-name".into());
        assert!(err(&f).contains("--interface"));
        f.interface = None;
        f.authority = Some("x".into());
        assert!(err(&f).contains("--authority applies to --upstream proxy only"));
        assert!(parse_file("bogus: 1")
            .unwrap_err()
            .starts_with("invalid YAML"));
    }
}
