//! The `apiway` binary: argument parsing and wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

mod demo;
mod endpoints;

/// Keeps Kubernetes components connected to their API servers, and lets one
/// load balancer serve many API servers.
#[derive(Parser, Debug)]
#[command(name = "apiway", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// Log filter in tracing env-filter syntax [default: info; warn for
    /// demo; error for endpoints].
    /// RUST_LOG overrides it.
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    role: Role,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// One load balancer for many API servers: routes TLS by SNI without
    /// terminating it (passthrough), PROXY-protocol connections by original
    /// destination, HTTP CONNECT by authority; health-checked backends, hot
    /// reload and graceful drain.
    Gateway {
        /// YAML configuration file; reloaded on change and on SIGHUP.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Only validate the configuration file and exit (0 when valid).
        #[arg(long)]
        check: bool,
        /// Write a JSON file with the pid, the admin address and every
        /// listener's bound address once all are bound (for scripts and tests)
        /// [default: none].
        #[arg(long, value_name = "PATH")]
        ready_file: Option<PathBuf>,
    },
    /// Per-node forwarder: listen on local addresses (optionally adding the
    /// address to an interface) and forward each connection directly to the
    /// API server endpoints with failover, to a gateway with a PROXY v2
    /// header, or through an HTTP CONNECT tunnel. Flags add to (lists) or
    /// override (single values) the --config file.
    Agent(Box<AgentArgs>),
    /// Run a whole topology on loopback: a gateway in front of stand-in API
    /// servers for two clusters; shows routing by SNI and health-check
    /// ejection, then exits.
    Demo,
    /// What apiway-client sees for a kubeconfig's cluster: the origin, the
    /// alternatives from --alternative-hosts, `Alt-Svc` and the
    /// `default/kubernetes` EndpointSlices, each probed (connect, verified
    /// TLS, /readyz, latency), with blocks and the endpoint a request would
    /// take. Exits 1 when that endpoint failed its probe.
    Endpoints(endpoints::EndpointsArgs),
    /// Run a stand-in Kubernetes API server (real TLS, HTTP/1.1 and HTTP/2,
    /// /readyz, /version) for trying things out and for tests.
    Standin {
        /// Name reported in answers (the `x-apiway-standin` header).
        #[arg(long, default_value = "standin")]
        name: String,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Serving certificate (PEM).
        #[arg(long)]
        cert: PathBuf,
        /// Serving key (PEM).
        #[arg(long)]
        key: PathBuf,
        /// Require client certificates signed by this CA (PEM).
        #[arg(long)]
        client_ca: Option<PathBuf>,
        /// Add `Alt-Svc: VALUE` to every response, e.g.
        /// `h2="127.0.0.2:6443"; ma=60`, as is (for odd values; --advertise
        /// renders them) [default: none].
        #[arg(long, value_name = "VALUE", conflicts_with = "advertise")]
        alt_svc: Option<String>,
        /// Forward /api and /apis requests to this Kubernetes API
        /// (http://host:port, e.g. a test's fixture API), streaming the
        /// answers; without it those paths get the stand-in's JSON report.
        #[arg(long)]
        api_upstream: Option<String>,
        #[command(flatten)]
        advertise: AdvertiseArgs,
        /// Write a JSON file with the pid, the admin address and every
        /// listener's bound address once all are bound (for scripts and tests)
        /// [default: none].
        #[arg(long, value_name = "PATH")]
        ready_file: Option<PathBuf>,
    },
}

/// `apiway standin` flags for `Alt-Svc` advertising.
#[derive(clap::Args, Debug)]
struct AdvertiseArgs {
    /// Advertise this API server endpoint in `Alt-Svc` (repeatable), as
    /// `h2`; the stand-in's own --listen address, if listed, is left out
    /// while its /readyz fails [default: none: no Alt-Svc header].
    #[arg(long, value_name = "HOST:PORT", value_parser = apiway_core::endpoint::Address::parse)]
    advertise: Vec<apiway_core::endpoint::Address>,
    /// `ma` of the advertised alternatives (clients cache them this long).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = apiway_core::duration::parse,
        default_value = "70s",
        requires = "advertise"
    )]
    advertise_max_age: std::time::Duration,
    /// Advertise the endpoints in ENDPOINT_CIDR to clients in CLIENT_CIDR
    /// only (repeatable); with rules, a client that no rule names gets
    /// `Alt-Svc: clear` [default: none: every client gets every endpoint].
    #[arg(
        long,
        value_name = "CLIENT_CIDR=ENDPOINT_CIDR",
        value_parser = apiway_advertise::ReachabilityRule::parse,
        requires = "advertise"
    )]
    advertise_rule: Vec<apiway_advertise::ReachabilityRule>,
}

impl AdvertiseArgs {
    /// The advertiser the flags describe; `None` without --advertise.
    fn advertiser(self) -> Option<apiway_advertise::Advertiser> {
        use apiway_advertise::{AdvertisedEndpoint, Advertiser, Reachability};
        if self.advertise.is_empty() {
            return None;
        }
        let endpoints = self
            .advertise
            .into_iter()
            .map(|address| AdvertisedEndpoint {
                address,
                ready: true,
            })
            .collect();
        Some(Advertiser::new(
            endpoints,
            self.advertise_max_age,
            Reachability::new(self.advertise_rule),
        ))
    }
}

/// `apiway agent` flags; see `apiway agent --help`.
#[derive(clap::Args, Debug)]
struct AgentArgs {
    /// YAML configuration file; reloaded on change and on SIGHUP (the
    /// endpoint list, health check and timeouts; listeners, addresses and
    /// the upstream mode need a restart) [default: none, flags only].
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Local ip:port to listen on (repeatable; at least one, here or in the file).
    #[arg(long, value_name = "IP:PORT")]
    listen: Vec<String>,
    /// Add this IP as a /32 (/128) host address to --interface at start and
    /// remove it on exit (repeatable). Needs CAP_NET_ADMIN [default: none].
    #[arg(long, value_name = "IP")]
    bind_address: Vec<String>,
    /// Interface for --bind-address; created as a dummy link if missing
    /// (kernels without the dummy type: use `lo`) [default: apiway0].
    #[arg(long, value_name = "NAME")]
    interface: Option<String>,
    /// Leave the --bind-address addresses in place on exit [default: off:
    /// they are removed].
    #[arg(long)]
    keep_address: bool,
    /// Where connections go: `direct` (to --endpoint), `proxy` (to
    /// --gateway with a PROXY v2 header) or `connect` (to --gateway through
    /// HTTP CONNECT) [default: direct].
    #[arg(long, value_name = "MODE")]
    upstream: Option<apiway_agent::config::UpstreamMode>,
    /// API server endpoint host:port for `direct` (repeatable; at least
    /// one); a DNS name stands for every A/AAAA record, re-resolved every 10s.
    #[arg(long, value_name = "HOST:PORT")]
    endpoint: Vec<String>,
    /// Gateway host:port for `proxy` and `connect` (repeatable; failover
    /// between them).
    #[arg(long, value_name = "HOST:PORT")]
    gateway: Vec<String>,
    /// Active health check: `https:/PATH`, `https` (= https:/readyz), `tcp`
    /// or `none` [default: https:/readyz for direct, none for gateways].
    #[arg(long, value_name = "CHECK")]
    health_check: Option<String>,
    /// Time between health checks [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    health_check_interval: Option<std::time::Duration>,
    /// Time one health check may take [default: the interval, at most 1s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    health_check_timeout: Option<std::time::Duration>,
    /// TLS server name of https health checks [default: kubernetes.default].
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
    /// CA bundle (PEM) that must sign the API servers' certificates in https
    /// checks [default: none: then the check proves only that TLS and HTTP work].
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// `proxy`: add a PROXY v2 AUTHORITY TLV with this host name [default: none].
    #[arg(long, value_name = "NAME")]
    authority: Option<String>,
    /// `connect`: the host:port to CONNECT to [default: the address the
    /// client connected to].
    #[arg(long, value_name = "HOST:PORT")]
    connect_authority: Option<String>,
    /// Per-endpoint connect timeout; then the next endpoint is tried [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    connect_timeout: Option<std::time::Duration>,
    /// Close connections with no bytes either way for this long [default: never].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    idle_timeout: Option<std::time::Duration>,
    /// Open connections per listener; more are closed at once [default: 10000].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Close relayed connections when a health check takes their endpoint
    /// down, so clients holding long-lived connections (watches) to a hung
    /// API server reconnect to a working one [default: off: established
    /// connections are left alone].
    #[arg(long)]
    close_on_down: bool,
    /// Admin endpoint ip:port (/healthz /livez /readyz /metrics) [default: none].
    #[arg(long, value_name = "IP:PORT")]
    admin: Option<String>,
    /// After SIGTERM, keep accepting this long while /healthz fails [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    drain_delay: Option<std::time::Duration>,
    /// Then wait this long for open connections [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = apiway_core::duration::parse)]
    grace_period: Option<std::time::Duration>,
    /// Write a JSON file with the pid, the admin address and every
    /// listener's bound address once all are bound (for scripts and tests)
    /// [default: none].
    #[arg(long, value_name = "PATH")]
    ready_file: Option<PathBuf>,
}

impl AgentArgs {
    fn into_parts(self) -> (Option<PathBuf>, apiway_agent::config::Flags) {
        let flags = apiway_agent::config::Flags {
            admin: self.admin,
            listen: self.listen,
            bind_address: self.bind_address,
            interface: self.interface,
            keep_address: self.keep_address,
            upstream: self.upstream,
            endpoints: self.endpoint,
            gateways: self.gateway,
            health_check: self.health_check,
            health_check_interval: self.health_check_interval,
            health_check_timeout: self.health_check_timeout,
            server_name: self.server_name,
            ca_file: self.ca,
            authority: self.authority,
            connect_authority: self.connect_authority,
            connect_timeout: self.connect_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            close_on_down: self.close_on_down,
            drain_delay: self.drain_delay,
            grace_period: self.grace_period,
        };
        (self.config, flags)
    }
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.role {
        Role::Demo => "warn",
        // Failed probes are in the output already.
        Role::Endpoints(_) => "error",
        _ => "info",
    };
    init_logging(
        cli.log_format,
        cli.log_level.as_deref().unwrap_or(default_level),
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.role {
            Role::Gateway {
                config,
                check,
                ready_file,
            } => {
                if check {
                    let text = std::fs::read_to_string(&config).map_err(|e| {
                        anyhow::anyhow!("cannot read the config file {}: {e}", config.display())
                    })?;
                    apiway_gateway::config::parse(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
                    println!("{}: valid", config.display());
                    Ok(())
                } else {
                    apiway_gateway::Gateway::run(config, ready_file).await
                }
            }
            Role::Agent(mut args) => {
                let ready_file = args.ready_file.take();
                let (config, flags) = args.into_parts();
                apiway_agent::Agent::run(config, flags, ready_file).await
            }
            Role::Demo => demo::run().await,
            Role::Endpoints(args) => endpoints::run(args).await,
            Role::Standin {
                name,
                listen,
                cert,
                key,
                client_ca,
                alt_svc,
                api_upstream,
                advertise,
                ready_file,
            } => {
                let mut config = apiway_standin::StandinConfig::from_files(
                    name,
                    listen,
                    &cert,
                    &key,
                    client_ca.as_deref(),
                )?;
                if let Some(value) = alt_svc {
                    config = config.with_alt_svc(value);
                }
                config.api_upstream = api_upstream;
                if let Some(advertiser) = advertise.advertiser() {
                    config = config.with_advertiser(advertiser);
                }
                let server = apiway_standin::StandinServer::start(config).await?;
                tracing::info!(name = %server.name(), addr = %server.addr(), "stand-in API server serving");
                if let Some(path) = ready_file {
                    let mut report = apiway_core::ready::ReadyReport::for_this_process();
                    report.listeners.insert("https".to_owned(), server.addr());
                    report.write(&path)?;
                }
                std::future::pending::<()>().await;
                drop(server);
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
