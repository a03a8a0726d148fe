//! `apiway tunnel-server` settings: one struct for the file and the flags,
//! validated into a [`Snapshot`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use apiway_core::config::{AdminSection, Common, DrainSection, Merge};
use apiway_core::endpoint::check::HealthCheckConfig;
use apiway_core::endpoint::{Address, Ejection, EndpointSetSpec, Policy};
use serde::Deserialize;

pub use crate::identity::TlsFiles;

/// One `allowed_destinations:` entry of the file: `host:port`, or the
/// address with the agent identities that may dial it and its health check.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DestinationEntry {
    /// Every authenticated agent may dial it.
    Address(String),
    /// Scoped.
    Scoped {
        /// `host:port`; a DNS name stands for every address it resolves to.
        address: String,
        /// Agent identities (certificate CN/SAN, or
        /// `system:serviceaccount:NS:NAME`) that may dial it [default:
        /// every agent].
        #[serde(default)]
        identities: Vec<String>,
        /// Active check of the addresses (the gateway's schema) [default:
        /// none: passive ejection on failed dials].
        #[serde(default)]
        health_check: Option<Box<HealthCheckConfig>>,
    },
}

/// The tunnel server's settings.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// `admin:` / `--admin`.
    #[command(flatten)]
    #[serde(default)]
    pub admin: AdminSection,
    /// Address agents connect to [default: 0.0.0.0:8132].
    #[arg(long, value_name = "IP:PORT")]
    #[serde(default)]
    pub listen: Option<String>,
    /// Serving certificate chain (PEM); re-read when it changes.
    #[arg(long = "cert", value_name = "FILE")]
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Serving key (PEM); re-read when it changes.
    #[arg(long = "key", value_name = "FILE")]
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// CA bundle (PEM) that signs agents' client certificates; the agent's
    /// identity is its certificate's subject CN (else its first SAN).
    /// Re-read when it changes. Required unless --token-review.
    #[arg(long = "client-ca", value_name = "FILE")]
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Also accept agents that send a bearer token (a projected
    /// ServiceAccount token), checked by a Kubernetes TokenReview with the
    /// --kubeconfig credentials (in-cluster by default); the agent's
    /// identity is then `system:serviceaccount:NAMESPACE:NAME`.
    #[arg(long)]
    #[serde(default)]
    pub token_review: bool,
    /// Audience the tokens must be for (repeatable) [default: the API
    /// server's].
    #[arg(long = "token-audience", value_name = "AUDIENCE")]
    #[serde(default)]
    pub token_audiences: Vec<String>,
    /// ServiceAccount NAMESPACE/NAME whose tokens are accepted (repeatable;
    /// at least one with --token-review).
    #[arg(long = "allowed-service-account", value_name = "NAMESPACE/NAME")]
    #[serde(default)]
    pub allowed_service_accounts: Vec<String>,
    /// The shared `--kubeconfig`, set by the binary.
    #[arg(skip)]
    #[serde(skip)]
    pub kubeconfig: Option<PathBuf>,
    /// A destination agents may dial, host:port (repeatable; a DNS name
    /// means every address it resolves to, with failover). With none every
    /// dial is refused. The file's `allowed_destinations:` entries can
    /// scope one to agent identities.
    #[arg(long = "allowed-destination", value_name = "HOST:PORT")]
    #[serde(default)]
    pub allowed_destinations: Vec<DestinationEntry>,
    /// Time a dial may take, all addresses of the destination included
    /// [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub dial_timeout: Option<Duration>,
    /// Close tunneled connections with no bytes either way for this long
    /// [default: never].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub idle_timeout: Option<Duration>,
    /// HTTP/2 PING to every agent this often; an agent that does not
    /// answer within --keepalive-timeout is disconnected [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub keepalive_interval: Option<Duration>,
    /// See --keepalive-interval [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub keepalive_timeout: Option<Duration>,
    /// Tunneled connections at most, all agents together [default: 10000].
    #[arg(long, value_name = "N")]
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// `drain:` / `--drain-delay`, `--grace-period`.
    #[command(flatten)]
    #[serde(default)]
    pub drain: DrainSection,
    /// How often the --config file is checked for changes [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    #[serde(default, with = "apiway_core::duration::option")]
    pub reload_interval: Option<Duration>,
}

impl std::str::FromStr for DestinationEntry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(DestinationEntry::Address(s.to_owned()))
    }
}

impl Merge for ServerSettings {
    /// The command line is the later source: lists add, values replace.
    fn merge(self, later: ServerSettings) -> Result<ServerSettings, String> {
        let mut destinations = self.allowed_destinations;
        destinations.extend(later.allowed_destinations);
        Ok(ServerSettings {
            admin: self.admin.overlay(later.admin),
            listen: later.listen.or(self.listen),
            cert_file: later.cert_file.or(self.cert_file),
            key_file: later.key_file.or(self.key_file),
            client_ca_file: later.client_ca_file.or(self.client_ca_file),
            token_review: self.token_review || later.token_review,
            token_audiences: [self.token_audiences, later.token_audiences].concat(),
            allowed_service_accounts: [
                self.allowed_service_accounts,
                later.allowed_service_accounts,
            ]
            .concat(),
            kubeconfig: later.kubeconfig.or(self.kubeconfig),
            allowed_destinations: destinations,
            dial_timeout: later.dial_timeout.or(self.dial_timeout),
            idle_timeout: later.idle_timeout.or(self.idle_timeout),
            keepalive_interval: later.keepalive_interval.or(self.keepalive_interval),
            keepalive_timeout: later.keepalive_timeout.or(self.keepalive_timeout),
            max_connections: later.max_connections.or(self.max_connections),
            drain: self.drain.overlay(later.drain),
            reload_interval: later.reload_interval.or(self.reload_interval),
        })
    }
}

/// A destination agents may dial.
#[derive(Clone, Debug, PartialEq)]
pub struct Destination {
    /// As configured (and as a DIAL_REQ must name it).
    pub address: Address,
    /// Identities that may dial it; empty: every agent.
    pub identities: Vec<String>,
    /// Its addresses, health and policy.
    pub set: EndpointSetSpec,
}

impl Destination {
    /// Whether `identity` may dial it.
    pub fn allows(&self, identity: &str) -> bool {
        self.identities.is_empty() || self.identities.iter().any(|i| i == identity)
    }
}

/// `--token-review`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSettings {
    /// Audiences asked for.
    pub audiences: Vec<String>,
    /// Accepted user names (`system:serviceaccount:NS:NAME`).
    pub users: Vec<String>,
    /// The kubeconfig of the reviews (`None`: in-cluster).
    pub kubeconfig: Option<PathBuf>,
}

/// HTTP/2 settings of the agent connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2Settings {
    /// Per-stream receive window.
    pub stream_window: u32,
    /// Per-connection receive window.
    pub connection_window: u32,
    /// PING interval.
    pub keepalive_interval: Duration,
    /// PING answer timeout.
    pub keepalive_timeout: Duration,
}

/// Per-stream window: one connection's bytes in flight.
pub const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
/// Per-connection window: all of an agent's connections' bytes in flight.
pub const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Admin, drain, reload interval.
    pub common: Common,
    /// Where agents connect.
    pub listen: SocketAddr,
    /// Serving certificate and client CA.
    pub tls: TlsFiles,
    /// Bearer tokens, when accepted.
    pub tokens: Option<TokenSettings>,
    /// What agents may dial.
    pub destinations: Vec<Destination>,
    /// Dial timeout.
    pub dial_timeout: Duration,
    /// Relay settings.
    pub relay: apiway_relay::RelayConfig,
    /// HTTP/2.
    pub h2: H2Settings,
    /// Tunneled connections at most.
    pub max_connections: usize,
}

/// Parses a configuration file (YAML, or JSON when it starts with `{`).
pub fn parse_file(text: &str) -> Result<ServerSettings, String> {
    if text.trim().is_empty() {
        return Ok(ServerSettings::default());
    }
    apiway_core::config_text::deserialize(text)
}

/// Validates settings; the error is one line naming the flag or field.
pub fn build(s: ServerSettings) -> Result<Snapshot, String> {
    let common = Common::validate(
        &s.admin,
        "--admin / admin.address",
        &s.drain,
        s.reload_interval,
    )?;
    let listen = apiway_core::config::sections::socket_addr(
        "--listen / listen",
        s.listen.as_deref().unwrap_or("0.0.0.0:8132"),
    )?;
    let need = |v: &Option<PathBuf>, flag: &str, what: &str| {
        v.clone()
            .ok_or_else(|| format!("{flag} FILE is required: {what}"))
    };
    let tls = TlsFiles {
        cert: need(
            &s.cert_file,
            "--cert / cert_file",
            "the serving certificate (PEM)",
        )?,
        key: need(&s.key_file, "--key / key_file", "the serving key (PEM)")?,
        client_ca: s.client_ca_file.clone(),
    };
    if tls.client_ca.is_none() && !s.token_review {
        return Err("agents must authenticate: give --client-ca FILE (client certificates), --token-review (ServiceAccount tokens), or both".into());
    }
    let tokens = if s.token_review {
        if s.allowed_service_accounts.is_empty() {
            return Err(
                "--token-review needs at least one --allowed-service-account NAMESPACE/NAME".into(),
            );
        }
        let mut users = Vec::new();
        for sa in &s.allowed_service_accounts {
            let Some((ns, name)) = sa
                .split_once('/')
                .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
            else {
                return Err(format!(
                    "--allowed-service-account `{sa}`: write NAMESPACE/NAME, like kube-system/apiway-agent"
                ));
            };
            users.push(format!("system:serviceaccount:{ns}:{name}"));
        }
        Some(TokenSettings {
            audiences: s.token_audiences.clone(),
            users,
            kubeconfig: s.kubeconfig.clone(),
        })
    } else {
        if !s.token_audiences.is_empty() || !s.allowed_service_accounts.is_empty() {
            return Err(
                "--token-audience and --allowed-service-account apply with --token-review only"
                    .into(),
            );
        }
        None
    };
    // Read now, so that a bad file is refused with the rest.
    crate::identity::server_config(&tls, s.token_review)?;

    let mut destinations: Vec<Destination> = Vec::new();
    for entry in s.allowed_destinations {
        let (text, identities, check) = match entry {
            DestinationEntry::Address(a) => (a, Vec::new(), None),
            DestinationEntry::Scoped {
                address,
                identities,
                health_check,
            } => (address, identities, health_check),
        };
        let address = Address::parse(&text).map_err(|e| format!("--allowed-destination {e}"))?;
        let health_check = match check {
            None => None,
            Some(c) => c
                .validate_with(&apiway_core::endpoint::check::CheckDefaults::GATEWAY)
                .map_err(|e| format!("allowed_destinations {text}: health_check: {e}"))?,
        };
        if let Some(d) = destinations.iter_mut().find(|d| d.address == address) {
            // The same address twice: the identities add up (an unscoped
            // entry allows everyone).
            if d.identities.is_empty() || identities.is_empty() {
                d.identities.clear();
            } else {
                d.identities.extend(identities);
            }
            continue;
        }
        destinations.push(Destination {
            set: EndpointSetSpec {
                endpoints: vec![address.clone()],
                policy: Policy::RoundRobin,
                health_check,
                ejection: Ejection::default(),
            },
            address,
            identities,
        });
    }
    let dial_timeout = s.dial_timeout.unwrap_or(Duration::from_secs(5));
    let keepalive_interval = s.keepalive_interval.unwrap_or(Duration::from_secs(10));
    let keepalive_timeout = s.keepalive_timeout.unwrap_or(Duration::from_secs(5));
    for (name, d) in [
        ("--dial-timeout", Some(dial_timeout)),
        ("--idle-timeout", s.idle_timeout),
        ("--keepalive-interval", Some(keepalive_interval)),
        ("--keepalive-timeout", Some(keepalive_timeout)),
    ] {
        if d.is_some_and(|d| d.is_zero()) {
            return Err(format!("{name} must be more than 0"));
        }
    }
    let max_connections = s.max_connections.unwrap_or(10_000);
    if max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    Ok(Snapshot {
        common,
        listen,
        tls,
        tokens,
        destinations,
        dial_timeout,
        relay: apiway_relay::RelayConfig {
            idle_timeout: s.idle_timeout,
            ..apiway_relay::RelayConfig::default()
        },
        h2: H2Settings {
            stream_window: STREAM_WINDOW,
            connection_window: CONNECTION_WINDOW,
            keepalive_interval,
            keepalive_timeout,
        },
        max_connections,
    })
}
