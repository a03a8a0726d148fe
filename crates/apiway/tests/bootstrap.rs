//! `apiway bootstrap` through the real binary: rendered manifests applied
//! with real kubectl to the fixture Kubernetes API for every platform (the
//! annotations each cloud controller reads), input errors one line each,
//! `wait` blocking on each missing condition while the test plays the
//! cloud controller, and the DNS stages.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::KubeApiProcess;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const APIWAY: &str = env!("CARGO_BIN_EXE_apiway");

async fn apiway(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(APIWAY)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

const NAMESPACES: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: openshift-kube-apiserver}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: openshift-machine-config-operator}\n";

/// The Service's annotations, without kubectl's own.
fn annotations(service: &Value) -> serde_json::Map<String, Value> {
    service["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.iter()
                .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_manifests_apply_with_each_clouds_annotations() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(NAMESPACES).await?;
    let get = |ns: &'static str, name: &'static str| {
        let kube = &kube;
        async move {
            let text = kube
                .kubectl(&["get", "service", name, "-n", ns, "-o", "json"])
                .await?;
            serde_json::from_str::<Value>(&text).context("service JSON")
        }
    };
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--platform",
                "azure",
                "--public-ip",
                "20.1.2.3",
                "--public-ip",
                "2603:1030::10",
                "--private-ip",
                "10.0.0.100",
                "--service",
                "external",
                "--service",
                "internal",
                "--service",
                "machine-config",
            ],
            "azure",
        ),
        (
            &[
                "--platform",
                "gcp",
                "--public-ip",
                "api-public",
                "--private-ip",
                "api-internal",
                "--service",
                "external",
                "--service",
                "internal",
            ],
            "gke",
        ),
        (
            &[
                "--platform",
                "gcp",
                "--cloud-controller",
                "cloud-provider-gcp",
                "--public-ip",
                "34.1.2.3",
                "--private-ip",
                "10.0.0.100",
            ],
            "gcp",
        ),
        (
            &[
                "--platform",
                "aws",
                "--subnet",
                "subnet-0a",
                "--subnet",
                "subnet-0b",
                "--eip-allocation",
                "eipalloc-0a",
                "--eip-allocation",
                "eipalloc-0b",
                "--private-ip",
                "10.0.1.10",
                "--private-ip",
                "10.0.2.10",
            ],
            "aws",
        ),
        (
            &[
                "--platform",
                "aws",
                "--cloud-controller",
                "legacy",
                "--subnet",
                "subnet-0a",
                "--eip-allocation",
                "eipalloc-0a",
                "--service",
                "external",
            ],
            "aws-legacy",
        ),
        (
            &[
                "--platform",
                "none",
                "--public-ip",
                "192.0.2.10",
                "--private-ip",
                "10.0.0.100",
            ],
            "none",
        ),
    ];
    for (flags, case) in cases {
        for output in ["yaml", "json"] {
            let mut args = vec!["bootstrap", "render", "--output", output];
            args.extend_from_slice(flags);
            let (code, manifest, stderr) = apiway(&args).await?;
            ensure!(code == 0, "{case}: {code} {stderr}");
            let applied = kube.apply(&manifest).await?;
            ensure!(
                applied.contains("service/external-lb") || applied.contains("service/internal-lb"),
                "{case}: {applied}"
            );
        }
        let external = get("openshift-kube-apiserver", "external-lb").await?;
        let a = annotations(&external);
        match *case {
            "azure" => {
                ensure!(a["service.beta.kubernetes.io/azure-load-balancer-ipv4"] == "20.1.2.3");
                ensure!(
                    a["service.beta.kubernetes.io/azure-load-balancer-ipv6"] == "2603:1030::10"
                );
                ensure!(
                    a["service.beta.kubernetes.io/port_6443_health-probe_request-path"]
                        == "/readyz"
                );
                ensure!(external["spec"]["ipFamilyPolicy"] == "RequireDualStack");
                let internal = get("openshift-kube-apiserver", "internal-lb").await?;
                ensure!(
                    annotations(&internal)
                        ["service.beta.kubernetes.io/azure-load-balancer-internal"]
                        == "true"
                );
                let mcs = get(
                    "openshift-machine-config-operator",
                    "internal-lb-machine-config-server",
                )
                .await?;
                ensure!(mcs["spec"]["ports"][0]["port"] == 22623);
                ensure!(
                    annotations(&mcs)["service.beta.kubernetes.io/azure-load-balancer-ipv4"]
                        == "10.0.0.100"
                );
            }
            "gke" => {
                ensure!(a["networking.gke.io/load-balancer-ip-addresses"] == "api-public");
                let internal = get("openshift-kube-apiserver", "internal-lb").await?;
                let ia = annotations(&internal);
                ensure!(ia["networking.gke.io/load-balancer-type"] == "Internal");
                ensure!(ia["networking.gke.io/load-balancer-ip-addresses"] == "api-internal");
            }
            "gcp" => {
                ensure!(external["spec"]["loadBalancerIP"] == "34.1.2.3");
                let internal = get("openshift-kube-apiserver", "internal-lb").await?;
                ensure!(
                    annotations(&internal)["cloud.google.com/load-balancer-type"] == "Internal"
                );
                ensure!(internal["spec"]["loadBalancerIP"] == "10.0.0.100");
            }
            "aws" => {
                ensure!(a["service.beta.kubernetes.io/aws-load-balancer-type"] == "external");
                ensure!(
                    a["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"
                );
                ensure!(
                    a["service.beta.kubernetes.io/aws-load-balancer-eip-allocations"]
                        == "eipalloc-0a,eipalloc-0b"
                );
                ensure!(
                    a["service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol"]
                        == "HTTPS"
                );
                let internal = get("openshift-kube-apiserver", "internal-lb").await?;
                let ia = annotations(&internal);
                ensure!(ia["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal");
                ensure!(
                    ia["service.beta.kubernetes.io/aws-load-balancer-private-ipv4-addresses"]
                        == "10.0.1.10,10.0.2.10"
                );
            }
            "aws-legacy" => {
                ensure!(a["service.beta.kubernetes.io/aws-load-balancer-type"] == "nlb");
                ensure!(
                    a["service.beta.kubernetes.io/aws-load-balancer-eip-allocations"]
                        == "eipalloc-0a"
                );
            }
            "none" => {
                ensure!(a.is_empty(), "{a:?}");
                ensure!(external["spec"]["loadBalancerIP"] == "192.0.2.10");
            }
            _ => unreachable!(),
        }
        kube.kubectl(&[
            "delete",
            "service",
            "--all",
            "-n",
            "openshift-kube-apiserver",
        ])
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_per_problem_and_exit_2() -> Result<()> {
    let (code, stdout, stderr) = apiway(&[
        "bootstrap",
        "render",
        "--platform",
        "aws",
        "--subnet",
        "subnet-0a",
        "--eip-allocation",
        "eipalloc-1",
        "--eip-allocation",
        "eipalloc-2",
        "--private-ip",
        "8.8.8.8",
        "--public-ip",
        "1.2.3.4",
    ])
    .await?;
    ensure!(code == 2 && stdout.is_empty(), "{code} {stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    ensure!(
        lines.len() == 3 && lines.iter().all(|l| l.starts_with("error: ")),
        "{stderr}"
    );
    ensure!(
        stderr.contains("one Elastic IP per subnet")
            && stderr.contains("public address for an internal")
    );
    let (code, _, stderr) = apiway(&[
        "bootstrap",
        "render",
        "--platform",
        "azure",
        "--public-ip",
        "10.0.0.1",
        "--public-ip",
        "20.1.1.1",
        "--public-ip",
        "20.1.1.2",
    ])
    .await?;
    ensure!(
        code == 2
            && stderr.contains("private address cannot be the public")
            && stderr.contains("at most one IPv4"),
        "{stderr}"
    );
    let (code, _, stderr) = apiway(&[
        "bootstrap",
        "render",
        "--platform",
        "gcp",
        "--public-ip",
        "34.1.2.3",
    ])
    .await?;
    ensure!(
        code == 2 && stderr.contains("GKE's controller takes the reserved address's name"),
        "{stderr}"
    );
    let (code, _, stderr) = apiway(&["bootstrap", "wait", "--service", "no-slash"]).await?;
    ensure!(code == 2 && stderr.contains("NAMESPACE/NAME"), "{stderr}");
    let (code, _, stderr) = apiway(&[
        "bootstrap",
        "dns",
        "--stage",
        "1",
        "--domain",
        "c1.example.com",
        "--private-lb-ip",
        "10.0.0.100",
    ])
    .await?;
    ensure!(code == 2 && stderr.contains("--bootstrap-ip"), "{stderr}");
    let (code, help, _) = apiway(&["bootstrap", "render", "--help"]).await?;
    ensure!(
        code == 0
            && ["azure", "gcp", "aws"]
                .iter()
                .all(|p| help.contains(&format!("--platform {p}")))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_stages() -> Result<()> {
    let args = |stage: &'static str| {
        vec![
            "bootstrap",
            "dns",
            "--stage",
            stage,
            "--domain",
            "c1.example.com",
            "--bootstrap-ip",
            "10.0.0.5",
            "--public-lb-ip",
            "203.0.113.10",
            "--private-lb-ip",
            "10.0.0.100",
        ]
    };
    let (code, one, _) = apiway(&args("1")).await?;
    ensure!(code == 0);
    ensure!(one.contains("api.c1.example.com. 30 IN A 203.0.113.10"));
    ensure!(
        one.contains("api-int.c1.example.com. 30 IN A 10.0.0.5")
            && one.contains("api-int.c1.example.com. 30 IN A 10.0.0.100")
    );
    let (_, three, _) = apiway(&args("3")).await?;
    ensure!(
        !three.contains("10.0.0.5") && three.contains("api-int.c1.example.com. 30 IN A 10.0.0.100"),
        "{three}"
    );
    Ok(())
}

/// A running `apiway bootstrap wait`, its output lines collected.
struct Waiter {
    child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Waiter {
    fn start(kube: &KubeApiProcess, extra: &[&str]) -> Result<Waiter> {
        let mut child = Command::new(APIWAY)
            .args(["bootstrap", "wait", "--kubeconfig"])
            .arg(kube.kubeconfig())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let stdout = child.stdout.take().context("stdout")?;
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        Ok(Waiter {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line containing `want`.
    async fn line(&mut self, want: &str) -> Result<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .with_context(|| format!("no line with {want:?}; saw {:?}", self.seen))?
                .with_context(|| format!("output ended; saw {:?}", self.seen))?;
            self.seen.push(line.clone());
            if line.contains(want) {
                return Ok(line);
            }
        }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn exit(&mut self) -> Result<(i32, String)> {
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await??;
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            e.read_to_string(&mut stderr).await?;
        }
        Ok((status.code().unwrap_or(-1), stderr))
    }
}

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: internal-lb, namespace: openshift-kube-apiserver}\nspec:\n  type: LoadBalancer\n  selector: {app: kube-apiserver}\n  ports: [{port: 6443}]\n";

fn slice(name: &str, ready: &str) -> String {
    format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: openshift-kube-apiserver\n  labels: {{kubernetes.io/service-name: internal-lb}}\naddressType: IPv4\nendpoints: [{{addresses: [10.0.0.11], conditions: {{ready: {ready}}}}}]\nports: [{{port: 6443}}]\n")
}

async fn set_ingress(kube: &KubeApiProcess, ingress: &str) -> Result<()> {
    kube.kubectl(&[
        "patch",
        "service",
        "internal-lb",
        "-n",
        "openshift-kube-apiserver",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"loadBalancer":{{"ingress":{ingress}}}}}}}"#),
    ])
    .await?;
    Ok(())
}

/// The test plays the cloud controller: `wait` names each blocking
/// condition in turn and ends within 1 s of the last one clearing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_each_condition_and_ends_within_a_second() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(NAMESPACES).await?;
    let mut waiter = Waiter::start(
        &kube,
        &[
            "--service",
            "openshift-kube-apiserver/internal-lb",
            "--timeout",
            "60s",
        ],
    )?;
    waiter.line("NotFound").await?;
    kube.apply(SERVICE).await?;
    waiter.line("NoIngress, NoReadyEndpoints").await?;
    // A Warning event the cloud controller writes is shown.
    kube.apply("apiVersion: v1\nkind: Event\nmetadata: {name: e1, namespace: openshift-kube-apiserver}\ntype: Warning\nreason: SyncLoadBalancerFailed\nmessage: quota exceeded\ninvolvedObject: {kind: Service, name: internal-lb, namespace: openshift-kube-apiserver}\n").await?;
    waiter
        .line("SyncLoadBalancerFailed: quota exceeded")
        .await?;
    // A hostname-only ingress (AWS) counts; the endpoint is not ready yet.
    set_ingress(&kube, r#"[{"hostname":"internal-lb.elb.example.com"}]"#).await?;
    waiter.line("internal-lb: NoReadyEndpoints").await?;
    kube.apply(&slice("internal-lb-1", "false")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(waiter.running(), "a not-ready endpoint is not ready");
    kube.apply(&slice("internal-lb-1", "true")).await?;
    let ready_at = Instant::now();
    waiter.line("Ready").await?;
    let (code, stderr) = waiter.exit().await?;
    ensure!(code == 0, "{code} {stderr}");
    let took = ready_at.elapsed();
    ensure!(
        took < Duration::from_secs(1),
        "wait took {took:?} after the last condition became true"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_dual_stack_expected_ingress_and_an_api_restart() -> Result<()> {
    let mut kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(NAMESPACES).await?;
    kube.apply(SERVICE).await?;
    let mut waiter = Waiter::start(
        &kube,
        &[
            "--service",
            "openshift-kube-apiserver/internal-lb",
            "--expect-ingress",
            "10.0.0.100",
            "--expect-ingress",
            "fd00::100",
            "--output",
            "json",
        ],
    )?;
    let first: Value = serde_json::from_str(&waiter.line("\"ready\":false").await?)?;
    ensure!(
        first["services"][0]["blocking"] == serde_json::json!(["NoIngress", "NoReadyEndpoints"]),
        "{first}"
    );
    kube.apply(&slice("internal-lb-1", "true")).await?;
    set_ingress(&kube, r#"[{"ip":"10.0.0.7"}]"#).await?;
    waiter.line("IngressMismatch").await?;

    // The bootstrap control plane restarts (empty): retried, not fatal.
    kube.restart().await?;
    waiter.line("NotFound").await?;
    ensure!(waiter.running());
    kube.apply(NAMESPACES).await?;
    kube.apply(SERVICE).await?;
    kube.apply(&slice("internal-lb-1", "true")).await?;
    set_ingress(&kube, r#"[{"ip":"10.0.0.100"},{"ip":"fd00::100"}]"#).await?;
    let done: Value = serde_json::from_str(&waiter.line("\"ready\":true").await?)?;
    ensure!(
        done["services"][0]["ingress"] == serde_json::json!(["10.0.0.100", "fd00::100"]),
        "{done}"
    );
    let (code, stderr) = waiter.exit().await?;
    ensure!(code == 0, "{code} {stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_with_a_summary() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(NAMESPACES).await?;
    kube.apply(SERVICE).await?;
    let mut waiter = Waiter::start(
        &kube,
        &[
            "--service",
            "openshift-kube-apiserver/internal-lb",
            "--service",
            "openshift-kube-apiserver/external-lb",
            "--timeout",
            "2s",
        ],
    )?;
    let (code, stderr) = waiter.exit().await?;
    ensure!(code == 1, "{code} {stderr}");
    ensure!(stderr.contains("timed out"), "{stderr}");
    ensure!(
        stderr.contains("openshift-kube-apiserver/internal-lb: NoIngress, NoReadyEndpoints"),
        "{stderr}"
    );
    ensure!(
        stderr.contains("openshift-kube-apiserver/external-lb: NotFound"),
        "{stderr}"
    );
    Ok(())
}

/// `--probe`: Ready needs a TLS connection and `/readyz` 2xx through the
/// ingress; an ingress where nothing answers is `ProbeFailed` until the
/// cloud fixes it. The fixture's own stand-in plays the load balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_probe_needs_readyz_through_the_ingress() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(NAMESPACES).await?;
    let port = kube.addr().port();
    kube.apply(&SERVICE.replace(
        "ports: [{port: 6443}]",
        &format!("ports: [{{port: {port}}}]"),
    ))
    .await?;
    kube.apply(&slice("internal-lb-1", "true")).await?;
    // An address where nothing listens on that port.
    set_ingress(&kube, r#"[{"ip":"127.0.0.2"}]"#).await?;
    let ca = kube.ca_file().to_string_lossy().into_owned();
    let mut waiter = Waiter::start(
        &kube,
        &[
            "--service",
            "openshift-kube-apiserver/internal-lb",
            "--probe",
            "--probe-ca",
            &ca,
            "--probe-server-name",
            "localhost",
        ],
    )?;
    waiter.line("ProbeFailed").await?;
    ensure!(waiter.running());
    set_ingress(&kube, r#"[{"ip":"127.0.0.1"}]"#).await?;
    waiter.line("Ready").await?;
    let (code, stderr) = waiter.exit().await?;
    ensure!(code == 0, "{code} {stderr}");
    Ok(())
}
