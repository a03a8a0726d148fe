//! `apiway bootstrap render|wait|dns`: argument parsing and wiring of
//! `apiway-bootstrap`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use apiway_bootstrap::{dns, render, wait};

/// An exit with a code other than 1 (`wait`'s timeout is 1, usage errors
/// are 2), its message already printed.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// `apiway bootstrap` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BootstrapCommand {
    /// Write the Service type LoadBalancer manifests for the API (6443,
    /// external and internal) and the machine-config server (22623),
    /// pinned to the reserved addresses, with the cloud controller's
    /// annotations.
    #[command(after_help = RENDER_EXAMPLES)]
    Render(RenderArgs),
    /// Wait until every Service is Ready: an ingress address and a ready
    /// endpoint. Exit 0 when all are, 1 on timeout (with what was missing),
    /// 2 on usage errors.
    Wait(WaitArgs),
    /// Print the DNS records of a bootstrap stage as zone-file lines.
    Dns(DnsArgs),
}

const RENDER_EXAMPLES: &str = "Examples:
  # Azure: a reserved public IP for api, a private one for api-int (and the machine-config server)
  apiway bootstrap render --platform azure --public-ip 20.1.2.3 --private-ip 10.0.0.100 \\
      --service external --service internal --service machine-config
  # GCP with GKE's controller: reserved addresses by NAME
  apiway bootstrap render --platform gcp --public-ip api-public --private-ip api-internal
  # GCP with upstream cloud-provider-gcp: by IP (spec.loadBalancerIP)
  apiway bootstrap render --platform gcp --cloud-controller cloud-provider-gcp --public-ip 34.1.2.3
  # AWS (AWS Load Balancer Controller): one Elastic IP and one private IP per subnet
  apiway bootstrap render --platform aws --subnet subnet-0a --subnet subnet-0b \\
      --eip-allocation eipalloc-0a --eip-allocation eipalloc-0b \\
      --private-ip 10.0.1.10 --private-ip 10.0.2.10
  # Dual-stack (Azure): one address of each family
  apiway bootstrap render --platform azure --public-ip 20.1.2.3 --public-ip 2603:1030::10 --service external";

/// `apiway bootstrap render` flags.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// The cloud.
    #[arg(long, value_enum)]
    platform: render::Platform,
    /// Which controller reconciles the Services where a cloud has two:
    /// aws: aws-load-balancer-controller (default) or legacy; gcp: gke
    /// (default) or cloud-provider-gcp.
    #[arg(long, value_name = "NAME")]
    cloud_controller: Option<String>,
    /// A reserved public address for the external Service (repeatable:
    /// one per family; GKE: the reserved address's name).
    #[arg(long, value_name = "IP")]
    public_ip: Vec<String>,
    /// A reserved private address for the internal Services (repeatable;
    /// AWS: one per --subnet; GKE: the reserved address's name).
    #[arg(long, value_name = "IP")]
    private_ip: Vec<String>,
    /// AWS: an Elastic IP allocation for the public NLB (one per --subnet).
    #[arg(long, value_name = "ID")]
    eip_allocation: Vec<String>,
    /// AWS: a subnet of the NLB (repeatable).
    #[arg(long, value_name = "ID")]
    subnet: Vec<String>,
    /// Namespace of the API Services.
    #[arg(long, default_value = "openshift-kube-apiserver")]
    namespace: String,
    /// Namespace of the machine-config server's Service.
    #[arg(long, default_value = "openshift-machine-config-operator")]
    machine_config_namespace: String,
    /// Pod selector of the API Services (key=value, repeatable).
    #[arg(long, value_name = "KEY=VALUE", default_value = "app=kube-apiserver")]
    selector: Vec<String>,
    /// Pod selector of the machine-config server's Service.
    #[arg(
        long,
        value_name = "KEY=VALUE",
        default_value = "app=machine-config-server"
    )]
    machine_config_selector: Vec<String>,
    /// Which Services to write (repeatable) [default: external, internal].
    #[arg(long = "service", value_enum)]
    services: Vec<render::Which>,
    /// yaml or json (a v1 List).
    #[arg(long, default_value = "yaml", value_parser = ["yaml", "json"])]
    output: String,
}

/// `apiway bootstrap wait` flags.
#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// A Service to wait for (repeatable).
    #[arg(long = "service", value_name = "NAMESPACE/NAME", required = true)]
    services: Vec<String>,
    /// kubeconfig [default: in-cluster].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Give up after this long (exit 1).
    #[arg(long, default_value = "30m", value_parser = apiway_core::duration::parse)]
    timeout: Duration,
    /// The ingress must be this reserved address (repeatable).
    #[arg(long, value_name = "IP")]
    expect_ingress: Vec<IpAddr>,
    /// Also require a TLS connection and `GET /readyz` answering 2xx
    /// through each ingress address, on the Service's port.
    #[arg(long)]
    probe: bool,
    /// --probe: verify the API servers' certificates with this CA (PEM)
    /// [default: the certificate is not verified].
    #[arg(long, value_name = "FILE", requires = "probe")]
    probe_ca: Option<PathBuf>,
    /// --probe: the TLS server name to ask for [default: the ingress
    /// hostname or IP].
    #[arg(long, value_name = "NAME", requires = "probe")]
    probe_server_name: Option<String>,
    /// text: a line per Service when something changes; json: a JSON
    /// object per change.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    output: String,
}

/// `apiway bootstrap dns` flags.
#[derive(clap::Args, Debug)]
pub struct DnsArgs {
    /// 1 (bootstrapping), 2 (complete), 3 (bootstrap host removed).
    #[arg(long)]
    stage: u8,
    /// The cluster's domain: records are api.DOMAIN and api-int.DOMAIN.
    #[arg(long)]
    domain: String,
    /// The bootstrap host's address (stages 1 and 2; repeatable).
    #[arg(long, value_name = "IP")]
    bootstrap_ip: Vec<IpAddr>,
    /// A reserved public load-balancer address (repeatable).
    #[arg(long, value_name = "IP")]
    public_lb_ip: Vec<IpAddr>,
    /// A reserved private load-balancer address (repeatable).
    #[arg(long, value_name = "IP")]
    private_lb_ip: Vec<IpAddr>,
    /// Record TTL in seconds.
    #[arg(long, default_value_t = 30)]
    ttl: u32,
}

fn usage(problems: &[String]) -> anyhow::Error {
    for p in problems {
        eprintln!("error: {p}");
    }
    Exit(2).into()
}

/// Runs a subcommand.
pub async fn run(command: BootstrapCommand) -> anyhow::Result<()> {
    match command {
        BootstrapCommand::Render(args) => {
            let controller =
                render::Controller::pick(args.platform, args.cloud_controller.as_deref())
                    .map_err(|e| usage(&[e]))?;
            let selector = render::parse_selector("--selector", &args.selector);
            let mc_selector =
                render::parse_selector("--machine-config-selector", &args.machine_config_selector);
            let (selector, machine_config_selector) = match (selector, mc_selector) {
                (Ok(a), Ok(b)) => (a, b),
                (a, b) => {
                    let problems: Vec<String> = [a.err(), b.err()].into_iter().flatten().collect();
                    return Err(usage(&problems));
                }
            };
            let mut services = args.services;
            if services.is_empty() {
                services = vec![render::Which::External, render::Which::Internal];
            }
            let input = render::RenderInput {
                platform: args.platform,
                controller,
                public: args.public_ip,
                private: args.private_ip,
                eip_allocations: args.eip_allocation,
                subnets: args.subnet,
                namespace: args.namespace,
                machine_config_namespace: args.machine_config_namespace,
                selector,
                machine_config_selector,
                services,
            };
            let rendered = render::render(&input).map_err(|p| usage(&p))?;
            for w in &rendered.warnings {
                eprintln!("warning: {w}");
            }
            if args.output == "json" {
                print!("{}", render::to_json(&rendered.services));
            } else {
                print!(
                    "{}",
                    render::to_yaml(&rendered.services).map_err(|e| anyhow::anyhow!(e))?
                );
            }
            Ok(())
        }
        BootstrapCommand::Dns(args) => {
            let input = dns::DnsInput {
                stage: args.stage,
                domain: args.domain,
                bootstrap: args.bootstrap_ip,
                public_lb: args.public_lb_ip,
                private_lb: args.private_lb_ip,
                ttl: args.ttl,
            };
            let problems = dns::validate(&input);
            if !problems.is_empty() {
                return Err(usage(&problems));
            }
            print!("{}", dns::render(&input));
            Ok(())
        }
        BootstrapCommand::Wait(args) => {
            let mut services = Vec::new();
            let mut problems = Vec::new();
            for s in &args.services {
                match s.split_once('/') {
                    Some((ns, name))
                        if !ns.is_empty() && !name.is_empty() && !name.contains('/') =>
                    {
                        services.push((ns.to_owned(), name.to_owned()))
                    }
                    _ => problems.push(format!("--service {s:?}: write NAMESPACE/NAME")),
                }
            }
            if !problems.is_empty() {
                return Err(usage(&problems));
            }
            let client = apiway_kube::client(args.kubeconfig.as_deref())
                .await
                .map_err(|e| usage(&[format!("{e:#}")]))?;
            let json = args.output == "json";
            let outcome = wait::wait(
                client,
                &services,
                &args.expect_ingress,
                args.probe.then(|| wait::ProbeConfig {
                    tls: apiway_core::tls::TlsClientOptions {
                        server_name: args.probe_server_name.clone(),
                        ca_file: args.probe_ca.clone(),
                        client_cert: None,
                    },
                }),
                args.timeout,
                |report| {
                    if json {
                        println!("{}", report.json());
                    } else {
                        print!("{}", report.text());
                    }
                },
                |error| eprintln!("retrying: {error}"),
            )
            .await;
            match outcome {
                wait::Outcome::Ready => Ok(()),
                wait::Outcome::TimedOut(report) => {
                    eprintln!("timed out after {:?}; still missing:", args.timeout);
                    for (key, (_, blocking)) in &report.services {
                        if !blocking.is_empty() {
                            let names: Vec<&str> = blocking.iter().map(|b| b.name()).collect();
                            eprintln!("  {key}: {}", names.join(", "));
                        }
                    }
                    Err(Exit(1).into())
                }
            }
        }
    }
}
