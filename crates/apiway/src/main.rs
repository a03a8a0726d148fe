//! The `apiway` binary: argument parsing and wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

mod bootstrap;
mod demo;
mod endpoints;
mod memory;

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
        /// YAML configuration file; reloaded on change and on SIGHUP
        /// (optional with --kubernetes-gateway: admin, drain, limits and
        /// static listeners and routes).
        #[arg(long, short = 'c', required_unless_present = "kubernetes_gateway")]
        config: Option<PathBuf>,
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        gateway_api: GatewayApiArgs,
    },
    /// Per-node forwarder: listen on local addresses (optionally adding the
    /// address to an interface) and forward each connection directly to the
    /// API server endpoints with failover, to a gateway with a PROXY v2
    /// header, or through an HTTP CONNECT tunnel. Flags add to (lists) or
    /// override (single values) the --config file.
    Agent(Box<AgentArgs>),
    /// Node-to-control-plane tunnel server (KEP-2025): agents connect over
    /// mutual TLS and HTTP/2; each tunneled connection is one gRPC stream
    /// (konnectivity-client's ProxyService/Proxy) that the server dials to
    /// an --allowed-destination (none: every dial is refused). Flags add to
    /// (lists) or override (single values) the --config file.
    TunnelServer(Box<TunnelServerArgs>),
    /// Run a whole topology on loopback: a gateway in front of stand-in API
    /// servers for two clusters; shows routing by SNI, health-check
    /// ejection and the node-to-control-plane tunnel, then exits (or, with
    /// --keep-running, stays up for curl and kubectl until Ctrl-C).
    Demo(demo::DemoArgs),
    /// What apiway-client sees for a kubeconfig's cluster: the origin, the
    /// alternatives from --alternative-hosts, `Alt-Svc` and the
    /// `default/kubernetes` EndpointSlices, each probed (connect, verified
    /// TLS, /readyz, latency), with blocks and the endpoint a request would
    /// take. Exits 1 when that endpoint failed its probe.
    Endpoints(endpoints::EndpointsArgs),
    /// Cluster-owned API load balancers: render the Service manifests per
    /// cloud, wait until they are Ready (ingress and a ready endpoint),
    /// print each bootstrap stage's DNS records.
    #[command(subcommand)]
    Bootstrap(bootstrap::BootstrapCommand),
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
        #[arg(long, required_unless_present = "self_signed")]
        cert: Option<PathBuf>,
        /// Serving key (PEM).
        #[arg(long, required_unless_present = "self_signed")]
        key: Option<PathBuf>,
        /// Make a throw-away CA and a serving certificate for the listen
        /// address, `localhost` and `kubernetes.default`, and write the CA
        /// and a kubeconfig for this server into --pki-dir.
        #[arg(long, conflicts_with_all = ["cert", "key", "client_ca"])]
        self_signed: bool,
        /// With --self-signed: where to write `ca.crt` and `kubeconfig`
        /// [default: a new directory in the system's temporary directory,
        /// printed at start].
        #[arg(long, value_name = "DIR", requires = "self_signed")]
        pki_dir: Option<PathBuf>,
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
        /// Serve an in-memory Kubernetes API behind the stand-in (the
        /// fixture API: Namespaces, Nodes, Services, EndpointSlices, Events,
        /// Leases, TokenReviews, Gateway API kinds; list, watch, patch),
        /// for trying the Kubernetes modes with kubectl.
        #[arg(long, conflicts_with = "api_upstream")]
        kubernetes_api: bool,
        /// With --kubernetes-api: the bearer tokens it knows, in
        /// kube-apiserver's token file format (`token,user,uid,"groups"`
        /// plus an optional `"audiences"` column); requests then need one
        /// of them or a client certificate [default: every request is let
        /// in].
        #[arg(long, value_name = "FILE", requires = "kubernetes_api")]
        token_file: Option<PathBuf>,
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

/// What every long-running role takes besides its configuration.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Only validate the configuration (file and flags), print the
    /// problem, and exit: 0 when valid, 1 when not.
    #[arg(long)]
    check: bool,
    /// Write a JSON file with the pid, the admin address and every
    /// listener's bound address once all are bound (for scripts and tests)
    /// [default: none].
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,
    /// Refuse a --config file larger than this many bytes, before parsing
    /// it (YAML or JSON).
    #[arg(long, value_name = "BYTES", default_value_t = apiway_core::config::source::DEFAULT_MAX_CONFIG_BYTES)]
    max_config_bytes: u64,
    /// Node awareness and Kubernetes access (`--node-name`, `--kubeconfig`,
    /// `--drain-on-taint`).
    #[command(flatten)]
    kube: apiway_core::config::KubernetesArgs,
}

/// The gateway's Gateway API flags.
#[derive(clap::Args, Debug)]
struct GatewayApiArgs {
    /// Serve the Gateway API Gateway NAMESPACE/NAME (its TLS Passthrough
    /// listeners and the TLSRoutes attached to them), watched through
    /// --kubeconfig (default in-cluster), when its GatewayClass names
    /// --controller-name [default: none].
    #[arg(long, value_name = "NAMESPACE/NAME")]
    kubernetes_gateway: Option<String>,
    /// The address the Gateway's listeners bind.
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    listen_address: std::net::IpAddr,
    /// The GatewayClass controllerName this gateway answers to.
    #[arg(long, value_name = "NAME", default_value = apiway_kube::gateway_api::CONTROLLER)]
    controller_name: String,
    /// Do not write status to the Gateway API objects (another replica or
    /// tool does).
    #[arg(long)]
    no_status: bool,
    /// How long the status Lease lasts without renewal: after this another
    /// replica takes over writing status.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = apiway_core::duration::parse)]
    status_lease_duration: std::time::Duration,
}

impl GatewayApiArgs {
    /// The Gateway API source, when asked for.
    async fn source(
        &self,
        kubeconfig: Option<&std::path::Path>,
    ) -> anyhow::Result<Option<apiway_kube::gateway_api::GatewaySource>> {
        let Some(target) = &self.kubernetes_gateway else {
            return Ok(None);
        };
        let Some((namespace, name)) = target
            .split_once('/')
            .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
        else {
            anyhow::bail!(
                "--kubernetes-gateway {target}: write NAMESPACE/NAME, like apiway-system/seed-api"
            );
        };
        let client = apiway_kube::client(kubeconfig).await?;
        let settings = apiway_kube::gateway_api::Settings {
            controller: self.controller_name.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            listen_address: self.listen_address,
        };
        let status = (!self.no_status).then(|| apiway_kube::gateway_api::status::StatusOptions {
            identity: apiway_kube::gateway_api::status::StatusOptions::default_identity(),
            lease_duration: self.status_lease_duration,
        });
        Ok(Some(apiway_kube::gateway_api::GatewaySource::new(
            client, settings, status,
        )))
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
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    settings: apiway_agent::config::AgentSettings,
}

/// `apiway tunnel-server` flags; see `apiway tunnel-server --help`.
#[derive(clap::Args, Debug)]
struct TunnelServerArgs {
    /// YAML configuration file; reloaded on change and on SIGHUP (allowed
    /// destinations with per-identity scopes, timeouts, limits) [default:
    /// none, flags only].
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    settings: apiway_tunnel::config::ServerSettings,
}

/// The sources of a role whose flags and file share one settings type:
/// the `--config` file (when given), then the flags over it.
fn file_and_flags<S>(
    config: Option<PathBuf>,
    parse: fn(&str) -> Result<S, String>,
    flags: S,
    run: &RunArgs,
) -> Vec<Box<dyn apiway_core::config::Source<S>>>
where
    S: apiway_core::config::Merge + Clone + Send + Sync + 'static,
{
    let mut sources: Vec<Box<dyn apiway_core::config::Source<S>>> = Vec::new();
    if let Some(path) = config {
        sources.push(Box::new(
            apiway_core::config::FileSource::new(path, parse).with_max_bytes(run.max_config_bytes),
        ));
    }
    sources.push(Box::new(apiway_core::config::StaticSource::new(
        "flags", flags,
    )));
    sources
}

/// Runs `R` from `sources`, or only checks them.
async fn run_role<R: apiway_core::runtime::Role>(
    sources: Vec<Box<dyn apiway_core::config::Source<R::Spec>>>,
    args: RunArgs,
) -> anyhow::Result<()> {
    if args.check {
        apiway_core::runtime::check::<R>(sources)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        println!("valid");
        return Ok(());
    }
    let node = node_watch(&args.kube).await?;
    apiway_core::runtime::run::<R>(
        sources,
        apiway_core::runtime::RunOptions {
            ready_file: args.ready_file,
            node,
            after_reload: Some(memory::release_freed),
        },
    )
    .await
}

/// With `--node-name`, the watch of that Node (KEP-3836 draining): the
/// Kubernetes client is built now, so a bad kubeconfig stops the start;
/// the API server being unreachable does not (the watch retries, and the
/// role counts as eligible until it knows better).
async fn node_watch(
    kube: &apiway_core::config::KubernetesArgs,
) -> anyhow::Result<Option<apiway_core::node::NodeWatch>> {
    let Some(name) = kube.node_name.clone().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let client = apiway_kube::client(kube.kubeconfig.as_deref()).await?;
    let (tx, feed) = apiway_core::node::feed();
    tracing::info!(node = %name, "node-aware: /healthz fails while this Node is deleted or tainted for scale-down");
    tokio::spawn(apiway_kube::node::watch(
        client,
        name,
        tx,
        tokio_util::sync::CancellationToken::new(),
    ));
    Ok(Some(apiway_core::node::NodeWatch {
        feed,
        policy: apiway_core::node::NodePolicy {
            extra_taints: kube.drain_on_taint.clone(),
        },
    }))
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal (`kubectl logs` and files get plain
    // text), and never with NO_COLOR set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.role {
        Role::Demo(_) => "warn",
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
                run,
                gateway_api,
            } => {
                let mut sources: Vec<
                    Box<dyn apiway_core::config::Source<apiway_gateway::config::GatewaySpec>>,
                > = Vec::new();
                if let Some(config) = config {
                    sources.push(Box::new(
                        apiway_core::config::FileSource::new(
                            config,
                            apiway_gateway::config::decode,
                        )
                        .with_max_bytes(run.max_config_bytes),
                    ));
                }
                if let Some(source) = gateway_api.source(run.kube.kubeconfig.as_deref()).await? {
                    sources.push(Box::new(source));
                }
                run_role::<apiway_gateway::Gateway>(sources, run).await
            }
            Role::Agent(args) => {
                let AgentArgs {
                    config,
                    run,
                    mut settings,
                } = *args;
                // Discovery reads the shared --kubeconfig.
                settings.kubeconfig = run.kube.kubeconfig.clone();
                let sources = file_and_flags(config, apiway_agent::config::parse_file, settings, &run);
                run_role::<apiway_agent::Agent>(sources, run).await
            }
            Role::TunnelServer(args) => {
                let TunnelServerArgs {
                    config,
                    run,
                    mut settings,
                } = *args;
                // --token-review reads the shared --kubeconfig.
                settings.kubeconfig = run.kube.kubeconfig.clone();
                let sources = file_and_flags(config, apiway_tunnel::config::parse_file, settings, &run);
                run_role::<apiway_tunnel::server::TunnelServer>(sources, run).await
            }
            Role::Demo(args) => demo::run(args).await,
            Role::Endpoints(args) => endpoints::run(args).await,
            Role::Bootstrap(command) => bootstrap::run(command).await,
            Role::Standin {
                name,
                listen,
                cert,
                key,
                self_signed,
                pki_dir,
                client_ca,
                alt_svc,
                api_upstream,
                kubernetes_api,
                token_file,
                advertise,
                ready_file,
            } => {
                let (mut config, self_ca) = match (cert, key) {
                    (Some(cert), Some(key)) if !self_signed => (
                        apiway_standin::StandinConfig::from_files(
                            name,
                            listen,
                            &cert,
                            &key,
                            client_ca.as_deref(),
                        )?,
                        None,
                    ),
                    _ => {
                        let ca = apiway_standin::pki::Ca::new("apiway standin self-signed CA")?;
                        let issued = ca.issue_server(
                            &["localhost", "kubernetes.default", "kubernetes.default.svc"],
                            &[listen.ip()],
                        )?;
                        (
                            apiway_standin::StandinConfig::new(name, listen, issued),
                            Some(ca),
                        )
                    }
                };
                if let Some(value) = alt_svc {
                    config = config.with_alt_svc(value);
                }
                config.api_upstream = api_upstream;
                // The in-memory API, served on loopback for the stand-in
                // in front (which adds TLS, HTTP/2 and client certificates).
                let fixture = if kubernetes_api {
                    let api = apiway_standin::fixture_api::FixtureApi::new();
                    let now_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0);
                    api.start_revisions_at(now_ms);
                    if let Some(path) = &token_file {
                        let text = std::fs::read_to_string(path).map_err(|e| {
                            anyhow::anyhow!("--token-file {}: {e}", path.display())
                        })?;
                        let tokens = apiway_standin::fixture_api::tokens::parse_token_file(&text)
                            .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", path.display()))?;
                        api.set_tokens(tokens);
                    }
                    let server = api.serve(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
                    config.api_upstream = Some(server.url());
                    Some(server)
                } else {
                    None
                };
                if let Some(advertiser) = advertise.advertiser() {
                    config = config.with_advertiser(advertiser);
                }
                let server = apiway_standin::StandinServer::start(config).await?;
                tracing::info!(name = %server.name(), addr = %server.addr(), "stand-in API server serving");
                if let Some(ca) = &self_ca {
                    let dir = match pki_dir {
                        Some(dir) => {
                            std::fs::create_dir_all(&dir).map_err(|e| {
                                anyhow::anyhow!("--pki-dir {}: {e}", dir.display())
                            })?;
                            dir
                        }
                        None => {
                            let dir = std::env::temp_dir()
                                .join(format!("apiway-standin-{}", std::process::id()));
                            std::fs::create_dir_all(&dir)?;
                            dir
                        }
                    };
                    let ca_file = dir.join("ca.crt");
                    std::fs::write(&ca_file, ca.cert_pem())?;
                    let kubeconfig = dir.join("kubeconfig");
                    std::fs::write(
                        &kubeconfig,
                        format!(
                            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\nusers:\n- name: standin\n  user:\n    token: standin\ncontexts:\n- name: standin\n  context: {{cluster: standin, user: standin}}\ncurrent-context: standin\n",
                            addr = server.addr(),
                            ca = ca_file.display()
                        ),
                    )?;
                    println!("CA: {}", ca_file.display());
                    println!("kubeconfig: {}", kubeconfig.display());
                    println!(
                        "try: curl --cacert {} https://{}/version ; kubectl --kubeconfig {} get --raw /version",
                        ca_file.display(),
                        server.addr(),
                        kubeconfig.display()
                    );
                }
                if let Some(path) = ready_file {
                    let mut report = apiway_core::ready::ReadyReport::for_this_process();
                    report.listeners.insert("https".to_owned(), server.addr());
                    if let Some(fixture) = &fixture {
                        report
                            .listeners
                            .insert("kubernetes-api-http".to_owned(), fixture.addr());
                    }
                    report.write(&path)?;
                }
                std::future::pending::<()>().await;
                drop((server, fixture));
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<bootstrap::Exit>().is_some() => {
            let code = e.downcast_ref::<bootstrap::Exit>().map_or(1, |x| x.0);
            std::process::ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
