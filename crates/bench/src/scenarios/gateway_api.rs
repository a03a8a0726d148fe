//! `gateway_api`: the gateway configured from Kubernetes at scale, against
//! the fixture Kubernetes API (`apiway standin --kubernetes-api`).
//!
//! With N TLSRoutes (each with its own Service and EndpointSlice) in the
//! API, a fresh `apiway gateway --kubernetes-gateway` is timed from spawn to
//! the first routed connection to the last route (the first full sync
//! applied), and its memory read; then, 20 times each: a new TLSRoute is
//! created through the API and a connection for its host name is retried
//! until it is routed (create → first routed connection), and an
//! EndpointSlice is moved to another backend and connections retried until
//! one reaches the new one (change → first connection to the new backend).
//! N = 100 first, then N = 10,000, to show the times stay flat. The peer in
//! the same run is the same gateway reading the same N routes from a file.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_kube::gateway_api::types::{
    BackendRef, Gateway, GatewayClass, GatewayClassSpec, GatewaySpec, Listener, ListenerTls,
    ParentReference, TlsRoute, TlsRouteRule, TlsRouteSpec,
};
use apiway_test_support::peers::{proc_memory, KubeApiProcess};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::Settings;
use crate::gateway_process::GatewayProcess;
use crate::lineup::Contender;
use crate::protocol::client_hello;
use crate::report::{Better, Row, ScenarioReport, Target};

const NS: &str = "bench";
const TRIALS: usize = 20;

/// An echo backend that counts its connections.
struct Echo {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Echo {
    async fn start() -> Result<Echo> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        Ok(Echo { addr, connections })
    }

    fn count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(NS.to_owned()),
        ..ObjectMeta::default()
    }
}

fn service(i: usize) -> Service {
    Service {
        metadata: meta(&format!("svc-{i}")),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn slice(i: usize, backend: SocketAddr) -> EndpointSlice {
    let mut metadata = meta(&format!("svc-{i}-1"));
    metadata.labels = Some(
        [("kubernetes.io/service-name".to_owned(), format!("svc-{i}"))]
            .into_iter()
            .collect(),
    );
    EndpointSlice {
        metadata,
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint {
            addresses: vec![backend.ip().to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..EndpointConditions::default()
            }),
            ..Endpoint::default()
        }],
        ports: Some(vec![EndpointPort {
            name: Some("https".into()),
            port: Some(i32::from(backend.port())),
            ..EndpointPort::default()
        }]),
    }
}

fn host(name: &str) -> String {
    format!("{name}.bench.example")
}

fn route(name: &str, service: usize) -> TlsRoute {
    TlsRoute {
        metadata: meta(name),
        spec: TlsRouteSpec {
            parent_refs: vec![ParentReference {
                name: "api".into(),
                ..ParentReference::default()
            }],
            hostnames: vec![host(name)],
            rules: vec![TlsRouteRule {
                backend_refs: vec![BackendRef {
                    name: format!("svc-{service}"),
                    port: Some(443),
                    ..BackendRef::default()
                }],
            }],
        },
        status: None,
    }
}

/// Creates `objects` with up to 32 requests in flight.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<_> = futures_util::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r.context("creating an object in the fixture API")?;
    }
    Ok(())
}

/// Services, slices and routes `from..to`.
async fn populate(
    client: &kube::Client,
    from: usize,
    to: usize,
    backend: SocketAddr,
) -> Result<()> {
    create_all(
        &Api::namespaced(client.clone(), NS),
        (from..to).map(service).collect(),
    )
    .await?;
    create_all(
        &Api::namespaced(client.clone(), NS),
        (from..to).map(|i| slice(i, backend)).collect(),
    )
    .await?;
    create_all(
        &Api::namespaced(client.clone(), NS),
        (from..to).map(|i| route(&format!("r{i}"), i)).collect(),
    )
    .await
}

/// Whether a connection for `name` is routed (the echo backend answers).
async fn routed(port: u16, hello: &[u8]) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(hello).await?;
        let mut back = vec![0u8; hello.len()];
        s.read_exact(&mut back).await?;
        anyhow::Ok(back == hello)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

async fn until(what: &str, mut ok: impl AsyncFnMut() -> bool) -> Result<Duration> {
    let started = Instant::now();
    loop {
        if ok().await {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{what} did not happen within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

struct Phase {
    sync: Duration,
    pss_mib: f64,
    create: Vec<Duration>,
    change: Vec<Duration>,
    file_start: Duration,
    file_pss_mib: f64,
}

/// One phase at `routes` routes (already in the API).
async fn phase(
    settings: &Settings,
    kube: &KubeApiProcess,
    client: &kube::Client,
    routes: usize,
    port: u16,
    backends: (&Echo, &Echo),
    tag: &str,
) -> Result<Phase> {
    let apiway = &settings.lineup.apiway;
    let admin = SocketAddr::from(([127, 0, 0, 1], apiway_test_support::peers::free_port()?));
    let static_listen =
        SocketAddr::from(([127, 0, 0, 1], apiway_test_support::peers::free_port()?));
    let config = format!(
        "admin: {{address: \"{admin}\"}}\nlisteners:\n  - {{name: static, address: \"{static_listen}\", kind: tls}}\n"
    );
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let started = Instant::now();
    let (gateway, _) = GatewayProcess::start_with_args(
        apiway,
        &config,
        &[
            "--kubernetes-gateway",
            &format!("{NS}/api"),
            "--kubeconfig",
            &kubeconfig,
            "--listen-address",
            "127.0.0.1",
        ],
        static_listen,
        admin,
        settings.lineup.proxy_threads,
    )
    .await?;
    let last = client_hello(&host(&format!("r{}", routes - 1)))?;
    until("the first full sync", async || routed(port, &last).await).await?;
    let sync = started.elapsed();
    let pss_mib = proc_memory(gateway.pid())?.pss_kb as f64 / 1024.0;

    let routes_api: Api<TlsRoute> = Api::namespaced(client.clone(), NS);
    let mut create = Vec::new();
    for t in 0..TRIALS {
        let name = format!("new-{tag}-{t}");
        let hello = client_hello(&host(&name))?;
        let t0 = Instant::now();
        routes_api
            .create(&PostParams::default(), &route(&name, t))
            .await?;
        until("a new route routed", async || routed(port, &hello).await).await?;
        create.push(t0.elapsed());
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let mut change = Vec::new();
    for t in 0..TRIALS {
        // Route r{i} (still on the first backend) moves to the second.
        let i = routes - 1 - t;
        let to = backends.1;
        let hello = client_hello(&host(&format!("r{i}")))?;
        let body = serde_json::json!({ "ports": [{ "name": "https", "port": to.addr.port() }] });
        let t0 = Instant::now();
        slices
            .patch(
                &format!("svc-{i}-1"),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await?;
        until("an EndpointSlice change followed", async || {
            let before = to.count();
            routed(port, &hello).await && to.count() > before
        })
        .await?;
        change.push(t0.elapsed());
    }
    if std::env::var_os("APIWAY_BENCH_LOG").is_some() {
        eprintln!("{}", gateway.log_tail());
    }
    drop(gateway);

    // The same routes from a file: the peer in this run.
    let mut file = config.clone();
    file.push_str(&format!(
        "  - {{name: kube, address: \"127.0.0.1:{port}\", kind: tls}}\nroutes:\n"
    ));
    for i in 0..routes {
        file.push_str(&format!(
            "  - {{name: r{i}, hostnames: [{}], backends: [{{address: \"{}\"}}], health_check: {{kind: none}}}}\n",
            host(&format!("r{i}")),
            backends.0.addr
        ));
    }
    let started = Instant::now();
    let (file_gateway, _) = GatewayProcess::start(
        apiway,
        &file,
        static_listen,
        admin,
        settings.lineup.proxy_threads,
    )
    .await?;
    until("the file's last route", async || routed(port, &last).await).await?;
    let file_start = started.elapsed();
    let file_pss_mib = proc_memory(file_gateway.pid())?.pss_kb as f64 / 1024.0;
    drop(file_gateway);
    Ok(Phase {
        sync,
        pss_mib,
        create,
        change,
        file_start,
        file_pss_mib,
    })
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> Result<ScenarioReport> {
    let kube = KubeApiProcess::start(&settings.lineup.apiway).await?;
    let client = apiway_kube::client(Some(kube.kubeconfig())).await?;
    let (a, b) = (Echo::start().await?, Echo::start().await?);
    let port = apiway_test_support::peers::free_port()?;
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
    ))
    .await?;
    Api::<GatewayClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &GatewayClass {
                metadata: ObjectMeta {
                    name: Some("apiway".into()),
                    ..ObjectMeta::default()
                },
                spec: GatewayClassSpec {
                    controller_name: "apiway.dev/gateway".into(),
                },
                status: None,
            },
        )
        .await?;
    Api::<Gateway>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &Gateway {
                metadata: meta("api"),
                spec: GatewaySpec {
                    gateway_class_name: "apiway".into(),
                    listeners: vec![Listener {
                        name: "tls".into(),
                        port: i32::from(port),
                        protocol: "TLS".into(),
                        tls: Some(ListenerTls {
                            mode: Some("Passthrough".into()),
                        }),
                        ..Listener::default()
                    }],
                },
                status: None,
            },
        )
        .await?;

    let small = 100;
    let big = settings.big_routes;
    let mut phases = Vec::new();
    for (count, from) in [(small, 0), (big, small)] {
        let started = Instant::now();
        populate(&client, from, count, a.addr).await?;
        eprintln!(
            "   {count} routes in the API ({:.1} s to create)",
            started.elapsed().as_secs_f64()
        );
        phases.push((
            count,
            phase(
                settings,
                &kube,
                &client,
                count,
                port,
                (&a, &b),
                &count.to_string(),
            )
            .await?,
        ));
    }

    let mut report = ScenarioReport::default();
    for (count, p) in &mut phases {
        p.create.sort();
        p.change.sort();
        let name = format!("gateway_api ({count} routes)");
        let mut row = |metric: &str,
                       unit: &str,
                       better: Better,
                       decimals: usize,
                       value: f64,
                       target: Option<Target>| {
            let mut r = Row::new(&name, metric, unit, better, decimals);
            if let Some(t) = target {
                r = r.target(t);
            }
            r.set(Contender::Apiway, value);
            report.rows.push(r);
        };
        row(
            "first full sync → routed",
            "ms",
            Better::Lower,
            0,
            p.sync.as_secs_f64() * 1000.0,
            None,
        );
        row(
            "same routes from a file → routed",
            "ms",
            Better::Lower,
            0,
            p.file_start.as_secs_f64() * 1000.0,
            None,
        );
        row("PSS after sync", "MiB", Better::Lower, 1, p.pss_mib, None);
        row(
            "PSS, same routes from a file",
            "MiB",
            Better::Lower,
            1,
            p.file_pss_mib,
            None,
        );
        row(
            "TLSRoute created → routed p50",
            "ms",
            Better::Lower,
            1,
            percentile(&p.create, 0.5),
            None,
        );
        row(
            "TLSRoute created → routed p99",
            "ms",
            Better::Lower,
            1,
            percentile(&p.create, 0.99),
            Some(Target::AtMost(500.0)),
        );
        row(
            "EndpointSlice changed → followed p50",
            "ms",
            Better::Lower,
            1,
            percentile(&p.change, 0.5),
            None,
        );
        row(
            "EndpointSlice changed → followed p99",
            "ms",
            Better::Lower,
            1,
            percentile(&p.change, 0.99),
            Some(Target::AtMost(500.0)),
        );
        report.notes.push(format!(
            "gateway_api ({count} routes): Kubernetes/file ratios in this run: start to routed {:.2}×, PSS {:.2}×",
            p.sync.as_secs_f64() / p.file_start.as_secs_f64(),
            p.pss_mib / p.file_pss_mib
        ));
    }
    report.notes.push(format!(
        "gateway_api: fixture Kubernetes API (`apiway standin --kubernetes-api`) with N TLSRoutes, N Services and N EndpointSlices (one ready endpoint each); {TRIALS} trials per latency; times from the API write (kube-rs create/patch) to the first connection routed as asked, retried every 2 ms; the file figures are the same gateway binary reading the same N routes from --config in the same run"
    ));
    Ok(report)
}
