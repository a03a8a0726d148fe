//! `apiway bootstrap render`: the `Service type: LoadBalancer` objects of
//! the "Kubernetes Service owned API load balancers" proposal, for the API
//! (6443, external and internal) and the machine-config server (22623,
//! internal, sharing the internal address), pinned to the addresses the
//! installer reserved, with each cloud controller's current annotations.
//!
//! `spec.loadBalancerIP` is deprecated since Kubernetes 1.24; it is
//! written only where a controller still reads nothing else (upstream
//! cloud-provider-gcp, and `--platform none`), with a warning.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

/// Where the cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    /// Azure (cloud-provider-azure).
    Azure,
    /// Google Cloud (GKE's controller, or upstream cloud-provider-gcp).
    Gcp,
    /// AWS (the AWS Load Balancer Controller, or the legacy provider).
    Aws,
    /// No cloud controller annotations (bare metal load balancers).
    None,
}

/// The cloud controller that reconciles the Services, where a cloud has two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// cloud-provider-azure.
    Azure,
    /// GKE's load balancer controller: internal type
    /// `networking.gke.io/load-balancer-type`, reserved addresses by name.
    Gke,
    /// Upstream cloud-provider-gcp: `cloud.google.com/load-balancer-type`,
    /// the address in `spec.loadBalancerIP`.
    CloudProviderGcp,
    /// The AWS Load Balancer Controller (NLB, `type: external`).
    AwsLbController,
    /// The legacy AWS cloud provider (`type: nlb`).
    AwsLegacy,
    /// None.
    None,
}

impl Controller {
    /// The controller named by `--cloud-controller` for `platform` (its
    /// default when `None`); the error lists the choices.
    pub fn pick(platform: Platform, name: Option<&str>) -> Result<Controller, String> {
        let choices: &[(&str, Controller)] = match platform {
            Platform::Azure => &[("cloud-provider-azure", Controller::Azure)],
            Platform::Gcp => &[
                ("gke", Controller::Gke),
                ("cloud-provider-gcp", Controller::CloudProviderGcp),
            ],
            Platform::Aws => &[
                ("aws-load-balancer-controller", Controller::AwsLbController),
                ("legacy", Controller::AwsLegacy),
            ],
            Platform::None => &[("none", Controller::None)],
        };
        match name {
            None => Ok(choices[0].1),
            Some(name) => choices
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .ok_or_else(|| {
                    format!(
                        "--cloud-controller {name}: for this platform choose one of {}",
                        choices
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
        }
    }
}

/// Which Services to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Which {
    /// The public API load balancer (`api`).
    External,
    /// The internal API load balancer (`api-int`).
    Internal,
    /// The machine-config server (22623) on the internal address.
    MachineConfig,
}

/// What `render` takes (the command line, parsed).
#[derive(Clone, Debug)]
pub struct RenderInput {
    /// The platform.
    pub platform: Platform,
    /// Its controller.
    pub controller: Controller,
    /// Reserved public addresses (IPs; reserved address names for GKE).
    pub public: Vec<String>,
    /// Reserved private addresses (IPs; names for GKE).
    pub private: Vec<String>,
    /// AWS: Elastic IP allocation IDs for the public NLB, one per subnet.
    pub eip_allocations: Vec<String>,
    /// AWS: the subnets of the NLB.
    pub subnets: Vec<String>,
    /// Namespace of the API Services.
    pub namespace: String,
    /// Namespace of the machine-config server's Service.
    pub machine_config_namespace: String,
    /// Pod selector of the API Services.
    pub selector: Vec<(String, String)>,
    /// Pod selector of the machine-config server's Service.
    pub machine_config_selector: Vec<(String, String)>,
    /// The Services to write.
    pub services: Vec<Which>,
}

/// The Services, and warnings for the user.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// `v1` `Service` objects.
    pub services: Vec<Value>,
    /// One line each.
    pub warnings: Vec<String>,
}

/// An address as given: an IP, or (GKE) the name of a reserved address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Given {
    Ip(IpAddr),
    Name(String),
}

fn classify(text: &str) -> Given {
    match text.parse::<IpAddr>() {
        Ok(ip) => Given::Ip(ip),
        Err(_) => Given::Name(text.to_owned()),
    }
}

/// Whether `ip` is a public (globally routable) address, roughly: not
/// private, loopback, link-local, unique-local or documentation space.
fn is_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

const AZURE_INTERNAL: &str = "service.beta.kubernetes.io/azure-load-balancer-internal";
const AZURE_IPV4: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv4";
const AZURE_IPV6: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv6";
const GKE_TYPE: &str = "networking.gke.io/load-balancer-type";
const GKE_ADDRESSES: &str = "networking.gke.io/load-balancer-ip-addresses";
const GCP_TYPE: &str = "cloud.google.com/load-balancer-type";
const AWS: &str = "service.beta.kubernetes.io/aws-load-balancer-";

/// Checks the input (one line per problem) and renders the Services.
pub fn render(input: &RenderInput) -> Result<Rendered, Vec<String>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let public: Vec<Given> = input.public.iter().map(|t| classify(t)).collect();
    let private: Vec<Given> = input.private.iter().map(|t| classify(t)).collect();
    let wants = |w: Which| input.services.contains(&w);
    let internal_wanted = wants(Which::Internal) || wants(Which::MachineConfig);

    // Addresses against what each controller takes.
    for (flag, given, want_public) in [
        ("--public-ip", &public, true),
        ("--private-ip", &private, false),
    ] {
        for g in given {
            match g {
                Given::Ip(ip) if want_public && !is_public(ip) => problems.push(format!(
                    "{flag} {ip}: a private address cannot be the public load balancer's (give it with --private-ip)"
                )),
                Given::Ip(ip) if !want_public && is_public(ip) => problems.push(format!(
                    "{flag} {ip}: a public address for an internal load balancer (give it with --public-ip)"
                )),
                Given::Name(name) if input.controller != Controller::Gke => problems.push(format!(
                    "{flag} {name}: not an IP address (only GKE's controller takes reserved address names)"
                )),
                Given::Ip(ip) if input.controller == Controller::Gke => problems.push(format!(
                    "{flag} {ip}: GKE's controller takes the reserved address's name (`gcloud compute addresses list`), not its IP; or use --cloud-controller cloud-provider-gcp"
                )),
                _ => {}
            }
        }
        let ips: Vec<&IpAddr> = given
            .iter()
            .filter_map(|g| match g {
                Given::Ip(ip) => Some(ip),
                Given::Name(_) => None,
            })
            .collect();
        let v4 = ips.iter().filter(|ip| ip.is_ipv4()).count();
        let v6 = ips.len() - v4;
        let aws = matches!(
            input.controller,
            Controller::AwsLbController | Controller::AwsLegacy
        );
        if !aws && (v4 > 1 || v6 > 1 || given.len() > 2) {
            problems.push(format!(
                "{flag}: at most one IPv4 and one IPv6 address per load balancer on this platform"
            ));
        }
        if aws && want_public && !given.is_empty() {
            problems.push(format!(
                "{flag}: AWS reserves public addresses as Elastic IPs: give --eip-allocation eipalloc-... (one per --subnet)"
            ));
        }
        if aws && !want_public && v6 > 0 {
            problems.push(format!(
                "{flag}: apiway renders IPv4 private addresses for AWS only (aws-load-balancer-private-ipv4-addresses)"
            ));
        }
    }
    let aws = matches!(
        input.controller,
        Controller::AwsLbController | Controller::AwsLegacy
    );
    if !aws && (!input.eip_allocations.is_empty() || !input.subnets.is_empty()) {
        problems.push("--eip-allocation and --subnet are for --platform aws".into());
    }
    if aws {
        if let Some(bad) = input
            .eip_allocations
            .iter()
            .find(|e| !e.starts_with("eipalloc-"))
        {
            problems.push(format!(
                "--eip-allocation {bad}: an allocation ID looks like eipalloc-0123abcd"
            ));
        }
        if let Some(bad) = input.subnets.iter().find(|s| !s.starts_with("subnet-")) {
            problems.push(format!(
                "--subnet {bad}: a subnet ID looks like subnet-0123abcd"
            ));
        }
        if !input.eip_allocations.is_empty() && input.eip_allocations.len() != input.subnets.len() {
            problems.push(format!(
                "--eip-allocation: {} given for {} --subnet; an NLB takes exactly one Elastic IP per subnet",
                input.eip_allocations.len(),
                input.subnets.len()
            ));
        }
        if !input.private.is_empty() && input.private.len() != input.subnets.len() {
            problems.push(format!(
                "--private-ip: {} given for {} --subnet; an internal NLB takes exactly one address per subnet",
                input.private.len(),
                input.subnets.len()
            ));
        }
        if input.controller == Controller::AwsLegacy && !input.private.is_empty() {
            problems.push("--private-ip: the legacy AWS provider cannot pin internal NLB addresses; use --cloud-controller aws-load-balancer-controller".into());
        }
    }
    if wants(Which::External) && public.is_empty() && input.eip_allocations.is_empty() {
        warnings.push("external: no reserved public address given; the cloud picks one, which DNS stage 1 cannot list in advance".into());
    }
    if internal_wanted && private.is_empty() {
        warnings.push("internal: no reserved private address given; the cloud picks one, which DNS stage 1 cannot list in advance".into());
    }
    if input.services.is_empty() {
        problems.push("--service: name at least one of external, internal, machine-config".into());
    }
    for (flag, selector) in [
        ("--selector", &input.selector),
        ("--machine-config-selector", &input.machine_config_selector),
    ] {
        if selector.is_empty() {
            problems.push(format!(
                "{flag}: a Service needs a pod selector (key=value)"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }

    let mut services = Vec::new();
    for which in [Which::External, Which::Internal, Which::MachineConfig] {
        if !wants(which) {
            continue;
        }
        let (addresses, internal) = match which {
            Which::External => (&public, false),
            _ => (&private, true),
        };
        services.push(service(input, which, addresses, internal, &mut warnings));
    }
    Ok(Rendered { services, warnings })
}

fn service(
    input: &RenderInput,
    which: Which,
    addresses: &[Given],
    internal: bool,
    warnings: &mut Vec<String>,
) -> Value {
    let (name, namespace, port, selector) = match which {
        Which::External => ("external-lb", &input.namespace, 6443, &input.selector),
        Which::Internal => ("internal-lb", &input.namespace, 6443, &input.selector),
        Which::MachineConfig => (
            "internal-lb-machine-config-server",
            &input.machine_config_namespace,
            22623,
            &input.machine_config_selector,
        ),
    };
    let ips: Vec<IpAddr> = addresses
        .iter()
        .filter_map(|g| match g {
            Given::Ip(ip) => Some(*ip),
            Given::Name(_) => None,
        })
        .collect();
    let names: Vec<&str> = addresses
        .iter()
        .filter_map(|g| match g {
            Given::Name(n) => Some(n.as_str()),
            Given::Ip(_) => None,
        })
        .collect();
    let mut annotations = Map::new();
    let mut put = |k: &str, v: &str| {
        annotations.insert(k.to_owned(), Value::String(v.to_owned()));
    };
    let mut load_balancer_ip: Option<IpAddr> = None;
    let api = port == 6443;
    match input.controller {
        Controller::Azure => {
            if internal {
                put(AZURE_INTERNAL, "true");
            }
            for ip in &ips {
                put(
                    if ip.is_ipv4() { AZURE_IPV4 } else { AZURE_IPV6 },
                    &ip.to_string(),
                );
            }
            if api {
                put(
                    "service.beta.kubernetes.io/port_6443_health-probe_protocol",
                    "https",
                );
                put(
                    "service.beta.kubernetes.io/port_6443_health-probe_request-path",
                    "/readyz",
                );
            }
        }
        Controller::Gke => {
            if internal {
                put(GKE_TYPE, "Internal");
            }
            if !names.is_empty() {
                put(GKE_ADDRESSES, &names.join(","));
            }
            if internal && which == Which::MachineConfig {
                warnings.push(format!(
                    "{name}: it shares the internal address with internal-lb; reserve that address with purpose SHARED_LOADBALANCER_VIP"
                ));
            }
        }
        Controller::CloudProviderGcp => {
            if internal {
                put(GCP_TYPE, "Internal");
            }
            load_balancer_ip = ips.first().copied();
        }
        Controller::AwsLbController => {
            put(&format!("{AWS}type"), "external");
            put(&format!("{AWS}nlb-target-type"), "ip");
            put(
                &format!("{AWS}scheme"),
                if internal {
                    "internal"
                } else {
                    "internet-facing"
                },
            );
            if !input.subnets.is_empty() {
                put(&format!("{AWS}subnets"), &input.subnets.join(","));
            }
            if !internal && !input.eip_allocations.is_empty() {
                put(
                    &format!("{AWS}eip-allocations"),
                    &input.eip_allocations.join(","),
                );
            }
            if internal && !ips.is_empty() {
                let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
                put(&format!("{AWS}private-ipv4-addresses"), &list.join(","));
            }
            if api {
                put(&format!("{AWS}healthcheck-protocol"), "HTTPS");
                put(&format!("{AWS}healthcheck-path"), "/readyz");
                put(&format!("{AWS}healthcheck-port"), "traffic-port");
            }
        }
        Controller::AwsLegacy => {
            put(&format!("{AWS}type"), "nlb");
            if internal {
                put(&format!("{AWS}internal"), "true");
            }
            if !internal && !input.eip_allocations.is_empty() {
                put(
                    &format!("{AWS}eip-allocations"),
                    &input.eip_allocations.join(","),
                );
            }
            if api {
                put(&format!("{AWS}healthcheck-protocol"), "HTTPS");
                put(&format!("{AWS}healthcheck-path"), "/readyz");
            }
        }
        Controller::None => load_balancer_ip = ips.first().copied(),
    }
    if let Some(ip) = load_balancer_ip {
        warnings.push(format!(
            "{name}: spec.loadBalancerIP {ip} (deprecated since Kubernetes 1.24, still what this controller reads)"
        ));
        if ips.len() > 1 {
            warnings.push(format!(
                "{name}: spec.loadBalancerIP holds one address; {} is left out",
                ips[1]
            ));
        }
    }
    let mut spec = json!({
        "type": "LoadBalancer",
        "selector": {},
        "ports": [{
            "name": if api { "https" } else { "machine-config-server" },
            "port": port,
            "targetPort": port,
            "protocol": "TCP",
        }],
    });
    spec["selector"] = Value::Object(
        selector
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    );
    if let Some(ip) = load_balancer_ip {
        spec["loadBalancerIP"] = json!(ip.to_string());
    }
    let v4 = ips.iter().any(IpAddr::is_ipv4);
    let v6 = ips.iter().any(IpAddr::is_ipv6);
    match (v4, v6) {
        (true, true) => {
            spec["ipFamilies"] = json!(["IPv4", "IPv6"]);
            spec["ipFamilyPolicy"] = json!("RequireDualStack");
        }
        (false, true) => {
            spec["ipFamilies"] = json!(["IPv6"]);
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
        _ => {}
    }
    let mut metadata = json!({
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "apiway-bootstrap"},
    });
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec})
}

/// The Services as YAML documents (`---` between them).
pub fn to_yaml(services: &[Value]) -> Result<String, String> {
    serde_saphyr::to_string_multiple(services).map_err(|e| e.to_string())
}

/// The Services as a JSON `v1` `List`.
pub fn to_json(services: &[Value]) -> String {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": services});
    serde_json::to_string_pretty(&list).unwrap_or_default() + "\n"
}

/// `key=value` pairs of a selector flag.
pub fn parse_selector(flag: &str, items: &[String]) -> Result<Vec<(String, String)>, String> {
    items
        .iter()
        .flat_map(|i| i.split(','))
        .filter(|i| !i.is_empty())
        .map(|item| {
            item.split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("{flag} {item:?}: write key=value"))
        })
        .collect()
}
