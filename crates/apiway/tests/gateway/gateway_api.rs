//! The gateway configured from Kubernetes (Gateway API), through the real
//! binary, with real kubectl against the fixture Kubernetes API
//! (`apiway standin --kubernetes-api`) and real TLS clients (curl, openssl,
//! rustls) routed by SNI: attachment, every status reason read back with
//! kubectl, ReferenceGrants checked live, weights, terminating endpoints,
//! and route changes that break no established connection.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::KubeApiProcess;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::backend::EchoBackend;
use crate::support::process::APIWAY;
use crate::support::tls::rustls_hello;
use crate::support::tools::curl;
use crate::support::{closed_port, eventually, GatewayProcess, Pki};

const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: apiway}
spec: {controllerName: apiway.dev/gateway}
";

/// Namespaces, the Gateway `seed/api` with a TLS listener on `tls` for
/// `*.example` (routes from all namespaces), one on `internal` for
/// `*.internal` (routes from its own namespace only) and an HTTP one.
fn gateway(tls: u16, internal: u16, http: u16) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: seed}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: shoot-b}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: api, namespace: seed}}
spec:
  gatewayClassName: apiway
  listeners:
  - name: tls
    port: {tls}
    protocol: TLS
    hostname: '*.example'
    tls: {{mode: Passthrough}}
    allowedRoutes: {{namespaces: {{from: All}}}}
  - name: internal
    port: {internal}
    protocol: TLS
    hostname: '*.internal'
    tls: {{mode: Passthrough}}
  - name: web
    port: {http}
    protocol: HTTP
"
    )
}

/// A Service `ns/name` on port 443 (`https`) and its EndpointSlice with
/// `endpoints` as (address, port, ready, serving, terminating).
fn service(ns: &str, name: &str, endpoints: &[(SocketAddr, bool, bool, bool)]) -> String {
    let port = endpoints.first().map(|e| e.0.port()).unwrap_or(1);
    let list: String = endpoints
        .iter()
        .map(|(a, ready, serving, terminating)| {
            format!(
                "- addresses: ['{}']\n  conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}\n",
                a.ip()
            )
        })
        .collect();
    let list = if list.is_empty() {
        "[]\n".to_owned()
    } else {
        format!("\n{list}")
    };
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{{name: https, port: 443, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: https, port: {port}}}]
endpoints: {list}"
    )
}

/// One more EndpointSlice `slice` of Service `ns/svc`, with one endpoint.
fn slice(ns: &str, svc: &str, slice: &str, e: (SocketAddr, bool, bool, bool)) -> String {
    let (a, ready, serving, terminating) = e;
    format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {svc}}}
addressType: IPv4
ports: [{{name: https, port: {}}}]
endpoints:
- addresses: ['{}']
  conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}
",
        a.port(),
        a.ip()
    )
}

fn ready(addr: SocketAddr) -> (SocketAddr, bool, bool, bool) {
    (addr, true, true, false)
}

/// A TLSRoute `ns/name` attached to `seed/api` (listener `section` if
/// given) for `hostnames`, to `backends` as (namespace, service, weight).
fn route(
    ns: &str,
    name: &str,
    section: Option<&str>,
    hostnames: &[&str],
    backends: &[(&str, &str, u32)],
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    let hosts = hostnames
        .iter()
        .map(|h| format!("'{h}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let refs: String = backends
        .iter()
        .map(|(bns, svc, w)| {
            format!("    - {{name: {svc}, namespace: {bns}, port: 443, weight: {w}}}\n")
        })
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: api, namespace: seed{section}}}]
  hostnames: [{hosts}]
  rules:
  - backendRefs:
{refs}"
    )
}

/// A gateway serving `seed/api` from `kube`.
async fn start_gateway(kube: &KubeApiProcess) -> Result<GatewayProcess> {
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let gateway = GatewayProcess::start_with_args(
        None,
        "admin: {address: 127.0.0.1:0}\n",
        &[
            "--kubernetes-gateway",
            "seed/api",
            "--kubeconfig",
            &kubeconfig,
            "--listen-address",
            "127.0.0.1",
            "--status-lease-duration",
            "3s",
        ],
    )
    .await?;
    eventually(
        "/readyz 200 (first full sync)",
        Duration::from_secs(10),
        || async {
            match gateway.admin_get("/readyz").await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    Ok(gateway)
}

/// The conditions of `kind ns/name` as `type → (status, reason)`; for a
/// route, those of its first parent entry.
async fn conditions(
    kube: &KubeApiProcess,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Result<Value> {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    let text = kube.kubectl(&args).await?;
    let object: Value = serde_json::from_str(&text)?;
    Ok(object["status"].clone())
}

fn condition<'a>(list: &'a Value, type_: &str) -> Option<(&'a str, &'a str)> {
    list.as_array()?.iter().find_map(|c| {
        (c["type"] == type_).then(|| {
            (
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
            )
        })
    })
}

/// Waits until TLSRoute `ns/name` shows `type_` = (`status`, `reason`).
async fn wait_route(
    kube: &KubeApiProcess,
    ns: &str,
    name: &str,
    type_: &str,
    want: (&str, &str),
) -> Result<()> {
    eventually(
        &format!("TLSRoute {ns}/{name} {type_}={want:?}"),
        Duration::from_secs(10),
        || async {
            let status = conditions(kube, "tlsroute", Some(ns), name)
                .await
                .map_err(|e| e.to_string())?;
            let parent = &status["parents"][0];
            if parent["controllerName"] != "apiway.dev/gateway" {
                return Err(format!("{status}"));
            }
            match condition(&parent["conditions"], type_) {
                Some(got) if got == want => Ok(()),
                _ => Err(format!("{status}")),
            }
        },
    )
    .await
}

/// Which stand-in answers `https://host:port/` through the gateway.
async fn served_by(port: u16, host: &str, pki: &Pki) -> Result<String> {
    let answer = curl(
        SocketAddr::from(([127, 0, 0, 1], port)),
        host,
        "/version",
        pki,
        true,
        &[],
    )
    .await?;
    answer
        .standin()
        .map(str::to_owned)
        .with_context(|| format!("no stand-in header in {answer:?}"))
}

async fn wait_served_by(port: u16, host: &str, pki: &Pki, want: &str) -> Result<()> {
    eventually(
        &format!("{host} served by {want}"),
        Duration::from_secs(10),
        || async {
            match served_by(port, host, pki).await {
                Ok(s) if s == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

async fn wait_refused(port: u16, host: &str, pki: &Pki) -> Result<()> {
    eventually(
        &format!("{host} refused"),
        Duration::from_secs(10),
        || async {
            match served_by(port, host, pki).await {
                Err(_) => Ok(()),
                Ok(s) => Err(format!("served by {s}")),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_status_reasons_and_reference_grants() -> Result<()> {
    let pki = Pki::new()?;
    let a = pki.standin("api-a", &["a.example"], false).await?;
    let b = pki.standin("api-b", &["b.example"], false).await?;
    let (tls, internal, http) = (
        closed_port()?.port(),
        closed_port()?.port(),
        closed_port()?.port(),
    );
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(CLASS).await?;
    kube.apply(&gateway(tls, internal, http)).await?;
    kube.apply(&service("seed", "api-a", &[ready(a.addr())]))
        .await?;
    kube.apply(&service("seed", "api-b", &[ready(b.addr())]))
        .await?;
    kube.apply(&route(
        "seed",
        "a",
        None,
        &["a.example"],
        &[("seed", "api-a", 1)],
    ))
    .await?;
    let gateway = start_gateway(&kube).await?;

    // Routed by SNI to the Service's endpoint, with curl over HTTP/2.
    wait_served_by(tls, "a.example", &pki, "api-a").await?;
    ensure!(
        gateway.current_listener(&format!("gateway/seed/api:{tls}"))
            == Some(SocketAddr::from(([127, 0, 0, 1], tls))),
        "the ready file lists the Gateway's listener"
    );
    wait_route(&kube, "seed", "a", "Accepted", ("True", "Accepted")).await?;
    wait_route(&kube, "seed", "a", "ResolvedRefs", ("True", "ResolvedRefs")).await?;

    // GatewayClass and Gateway status, per listener.
    let class = conditions(&kube, "gatewayclass", None, "apiway").await?;
    ensure!(
        condition(&class["conditions"], "Accepted") == Some(("True", "Accepted")),
        "{class}"
    );
    let gw = eventually("Gateway status", Duration::from_secs(5), || async {
        let s = conditions(&kube, "gateway", Some("seed"), "api")
            .await
            .map_err(|e| e.to_string())?;
        (s["listeners"][0]["attachedRoutes"] == 1)
            .then_some(s.clone())
            .ok_or(format!("{s}"))
    })
    .await?;
    ensure!(
        condition(&gw["conditions"], "Accepted") == Some(("True", "ListenersNotValid")),
        "{gw}"
    );
    ensure!(
        condition(&gw["conditions"], "Programmed") == Some(("True", "Programmed")),
        "{gw}"
    );
    let web = &gw["listeners"][2];
    ensure!(
        web["name"] == "web"
            && condition(&web["conditions"], "Accepted") == Some(("False", "UnsupportedProtocol")),
        "{gw}"
    );
    ensure!(
        condition(&gw["listeners"][0]["conditions"], "Programmed") == Some(("True", "Programmed")),
        "{gw}"
    );
    ensure!(
        gw["listeners"][0]["supportedKinds"][0]["kind"] == "TLSRoute",
        "{gw}"
    );

    // A cross-namespace backend: refused until a ReferenceGrant allows it.
    kube.apply(&route(
        "shoot-b",
        "b",
        Some("tls"),
        &["b.example"],
        &[("seed", "api-b", 1)],
    ))
    .await?;
    wait_route(
        &kube,
        "shoot-b",
        "b",
        "ResolvedRefs",
        ("False", "RefNotPermitted"),
    )
    .await?;
    wait_route(&kube, "shoot-b", "b", "Accepted", ("True", "Accepted")).await?;
    wait_refused(tls, "b.example", &pki).await?;
    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: shoot-b-api, namespace: seed}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: shoot-b}]
  to: [{group: '', kind: Service, name: api-b}]
";
    kube.apply(grant).await?;
    wait_route(
        &kube,
        "shoot-b",
        "b",
        "ResolvedRefs",
        ("True", "ResolvedRefs"),
    )
    .await?;
    wait_served_by(tls, "b.example", &pki, "api-b").await?;
    kube.kubectl(&["delete", "referencegrant", "shoot-b-api", "-n", "seed"])
        .await?;
    wait_route(
        &kube,
        "shoot-b",
        "b",
        "ResolvedRefs",
        ("False", "RefNotPermitted"),
    )
    .await?;
    wait_refused(tls, "b.example", &pki).await?;
    // a.example never noticed.
    ensure!(served_by(tls, "a.example", &pki).await? == "api-a");

    // Every other reason, read back with kubectl.
    kube.apply(&route(
        "seed",
        "no-parent",
        Some("nope"),
        &["x.example"],
        &[("seed", "api-a", 1)],
    ))
    .await?;
    wait_route(
        &kube,
        "seed",
        "no-parent",
        "Accepted",
        ("False", "NoMatchingParent"),
    )
    .await?;
    kube.apply(&route(
        "seed",
        "other-host",
        Some("tls"),
        &["a.other"],
        &[("seed", "api-a", 1)],
    ))
    .await?;
    wait_route(
        &kube,
        "seed",
        "other-host",
        "Accepted",
        ("False", "NoMatchingListenerHostname"),
    )
    .await?;
    kube.apply(&route(
        "shoot-b",
        "not-allowed",
        Some("internal"),
        &["x.internal"],
        &[("shoot-b", "svc", 1)],
    ))
    .await?;
    wait_route(
        &kube,
        "shoot-b",
        "not-allowed",
        "Accepted",
        ("False", "NotAllowedByListeners"),
    )
    .await?;
    kube.apply(&route(
        "seed",
        "missing",
        Some("tls"),
        &["m.example"],
        &[("seed", "nothing-here", 1)],
    ))
    .await?;
    wait_route(
        &kube,
        "seed",
        "missing",
        "ResolvedRefs",
        ("False", "BackendNotFound"),
    )
    .await?;
    let invalid_kind = route(
        "seed",
        "kind",
        Some("tls"),
        &["k.example"],
        &[("seed", "api-a", 1)],
    )
    .replace("{name: api-a,", "{kind: ConfigMap, name: api-a,");
    kube.apply(&invalid_kind).await?;
    wait_route(
        &kube,
        "seed",
        "kind",
        "ResolvedRefs",
        ("False", "InvalidKind"),
    )
    .await?;
    let bad_annotation = route("seed", "bad", Some("tls"), &["bad.example"], &[("seed", "api-a", 1)])
        .replace(
            "metadata: {name: bad, namespace: seed}",
            "metadata: {name: bad, namespace: seed, annotations: {apiway.dev/destinations: 'not-an-address'}}",
        );
    kube.apply(&bad_annotation).await?;
    wait_route(
        &kube,
        "seed",
        "bad",
        "Accepted",
        ("False", "UnsupportedValue"),
    )
    .await?;
    // observedGeneration follows the route's generation.
    let status = conditions(&kube, "tlsroute", Some("seed"), "a").await?;
    ensure!(
        status["parents"][0]["conditions"][0]["observedGeneration"] == 1,
        "{status}"
    );

    // A removed route: its SNI is refused for new connections.
    kube.kubectl(&["delete", "tlsroute", "a", "-n", "seed"])
        .await?;
    wait_refused(tls, "a.example", &pki).await?;
    let metrics = gateway.metrics().await?;
    ensure!(metrics.count("apiway_kubernetes_synced", &[]) == 1.0);
    ensure!(metrics.count("apiway_kubernetes_status_leader", &[]) == 1.0);
    Ok(())
}

/// Opens a connection through the gateway for SNI `host` with a real
/// ClientHello; the echo backend sends the hello back.
async fn open_stream(port: u16, hello: &[u8]) -> Result<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(hello).await?;
    let mut back = vec![0; hello.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
        .await
        .context("echo of the hello timed out")??;
    ensure!(back == hello);
    Ok(s)
}

async fn ping(s: &mut TcpStream, n: u32) -> Result<()> {
    let msg = n.to_be_bytes();
    s.write_all(&msg).await?;
    let mut back = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
        .await
        .context("ping timed out")??;
    ensure!(back == msg);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_terminating_endpoints_and_changes_that_break_nothing() -> Result<()> {
    let pki = Pki::new()?;
    let (x, y, t) = (
        EchoBackend::start().await?,
        EchoBackend::start().await?,
        EchoBackend::start().await?,
    );
    let (tls, internal, http) = (
        closed_port()?.port(),
        closed_port()?.port(),
        closed_port()?.port(),
    );
    let mut kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(CLASS).await?;
    kube.apply(&gateway(tls, internal, http)).await?;
    kube.apply(&service("seed", "svc-x", &[ready(x.addr())]))
        .await?;
    kube.apply(&service("seed", "svc-y", &[ready(y.addr())]))
        .await?;
    kube.apply(&route(
        "seed",
        "w",
        None,
        &["w.example"],
        &[("seed", "svc-x", 3), ("seed", "svc-y", 1)],
    ))
    .await?;
    let gateway = start_gateway(&kube).await?;
    let hello = rustls_hello(&pki, "w.example", false)?.hello;
    eventually("w.example routed", Duration::from_secs(10), || async {
        open_stream(tls, &hello)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await?;

    // Weights 3:1 over 10,000 connections.
    let (x0, y0) = (x.connections(), y.connections());
    let total = 10_000;
    for _ in 0..total / 100 {
        let batch: Vec<_> = (0..100).map(|_| open_stream(tls, &hello)).collect();
        for s in futures_util::future::join_all(batch).await {
            drop(s?);
        }
    }
    let (dx, dy) = (x.connections() - x0, y.connections() - y0);
    ensure!(dx + dy == total, "{dx} + {dy} connections");
    let share = dx as f64 / total as f64;
    ensure!(
        (0.72..=0.78).contains(&share),
        "x took {share:.3} of the connections, want 0.75"
    );

    // Terminating endpoints serve only when nothing is ready: Service t
    // has a ready endpoint (backend t) and, in a second slice, a serving
    // but terminating one (backend x).
    kube.apply(&service("seed", "svc-t", &[ready(t.addr())]))
        .await?;
    kube.apply(&slice(
        "seed",
        "svc-t",
        "t-2",
        (x.addr(), false, true, true),
    ))
    .await?;
    kube.apply(&route(
        "seed",
        "term",
        None,
        &["t.example"],
        &[("seed", "svc-t", 1)],
    ))
    .await?;
    let t_hello = rustls_hello(&pki, "t.example", false)?.hello;
    eventually("t.example routed", Duration::from_secs(10), || async {
        open_stream(tls, &t_hello)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await?;
    let (t0, x0) = (t.connections(), x.connections());
    for _ in 0..20 {
        drop(open_stream(tls, &t_hello).await?);
    }
    ensure!(
        t.connections() - t0 == 20 && x.connections() == x0,
        "the ready endpoint takes all"
    );
    // The ready one starts terminating and stops serving: the terminating
    // serving one takes over.
    kube.apply(&slice(
        "seed",
        "svc-t",
        "svc-t-1",
        (t.addr(), false, false, true),
    ))
    .await?;
    eventually(
        "t.example on the terminating endpoint",
        Duration::from_secs(10),
        || async {
            let before = x.connections();
            open_stream(tls, &t_hello)
                .await
                .map_err(|e| e.to_string())?;
            (x.connections() > before)
                .then_some(())
                .ok_or("still the old one".to_owned())
        },
    )
    .await?;

    // 50 long-lived streams while 100 route changes go through Kubernetes.
    let mut streams = Vec::new();
    for _ in 0..50 {
        streams.push(open_stream(tls, &hello).await?);
    }
    for batch in 0..10 {
        let mut manifest = String::new();
        for i in 0..10 {
            let n = batch * 10 + i;
            manifest.push_str(&route(
                "seed",
                &format!("churn-{n}"),
                None,
                &[&format!("c{n}.example")],
                &[("seed", if n % 2 == 0 { "svc-x" } else { "svc-y" }, 1)],
            ));
            manifest.push_str("---\n");
        }
        kube.apply(&manifest).await?;
        for (i, s) in streams.iter_mut().enumerate() {
            ping(s, (batch * 100 + i) as u32).await?;
        }
    }
    // Removing and changing routes, Services and endpoints too. A
    // connection of a removed route keeps running.
    let c0_hello = rustls_hello(&pki, "c0.example", false)?.hello;
    let mut removed_route_stream = open_stream(tls, &c0_hello).await?;
    kube.kubectl(&[
        "delete", "tlsroute", "-n", "seed", "churn-0", "churn-1", "churn-2",
    ])
    .await?;
    eventually("c0.example refused", Duration::from_secs(10), || async {
        match open_stream(tls, &c0_hello).await {
            Err(_) => Ok(()),
            Ok(_) => Err("still routed".to_owned()),
        }
    })
    .await?;
    ping(&mut removed_route_stream, 1)
        .await
        .context("the removed route's connection")?;
    kube.apply(&service(
        "seed",
        "svc-y",
        &[ready(y.addr()), ready(t.addr())],
    ))
    .await?;
    kube.apply(&route(
        "seed",
        "w",
        None,
        &["w.example", "w2.example"],
        &[("seed", "svc-x", 1), ("seed", "svc-y", 1)],
    ))
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (i, s) in streams.iter_mut().enumerate() {
        ping(s, 5000 + i as u32)
            .await
            .with_context(|| format!("stream {i} after the changes"))?;
    }
    // The API server goes away: routing stays as it was, errors are
    // counted, and streams carry on.
    kube.kill();
    let errors = eventually("watch errors counted", Duration::from_secs(15), || async {
        let m = gateway.metrics().await.map_err(|e| e.to_string())?;
        let n = m.count(
            "apiway_kubernetes_watch_errors_total",
            &[("kind", "TLSRoute")],
        );
        (n > 0.0).then_some(n).ok_or(format!("{n}"))
    })
    .await?;
    ensure!(errors > 0.0);
    drop(
        open_stream(tls, &hello)
            .await
            .context("routing after the API went away")?,
    );
    for (i, s) in streams.iter_mut().enumerate() {
        ping(s, 9000 + i as u32).await?;
    }
    let metrics = gateway.metrics().await?;
    ensure!(
        metrics.count("apiway_kubernetes_tlsroutes", &[]) == 99.0,
        "{}",
        metrics.matching("apiway_kubernetes")
    );
    Ok(())
}

/// `deploy/gateway-api/gateway.yaml` applies with kubectl, its RBAC covers
/// what the gateway watches and writes, and its Gateway and TLSRoute work
/// as written (the namespace selector, the health-check annotation) when a
/// gateway serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_manifests_apply_and_serve() -> Result<()> {
    let pki = Pki::new()?;
    let api = pki
        .standin("shoot-a", &["api.shoot-a.seed.example.com"], false)
        .await?;
    let port = closed_port()?.port();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = std::fs::read_to_string(root.join("deploy/gateway-api/gateway.yaml"))?
        .replace("port: 8443", &format!("port: {port}"));
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    kube.apply(&manifest).await?;

    // RBAC: every kind the source watches, every status it writes, Leases.
    let role: Value = serde_json::from_str(
        &kube
            .kubectl(&["get", "clusterrole", "apiway-gateway", "-o", "json"])
            .await?,
    )?;
    let allows = |group: &str, resource: &str, verb: &str| {
        role["rules"].as_array().into_iter().flatten().any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for (group, resource) in [
        ("gateway.networking.k8s.io", "gatewayclasses"),
        ("gateway.networking.k8s.io", "gateways"),
        ("gateway.networking.k8s.io", "tlsroutes"),
        ("gateway.networking.k8s.io", "referencegrants"),
        ("", "services"),
        ("", "namespaces"),
        ("discovery.k8s.io", "endpointslices"),
    ] {
        for verb in ["list", "watch"] {
            ensure!(allows(group, resource, verb), "{verb} {group}/{resource}");
        }
    }
    for resource in [
        "gatewayclasses/status",
        "gateways/status",
        "tlsroutes/status",
    ] {
        ensure!(
            allows("gateway.networking.k8s.io", resource, "patch"),
            "{resource}"
        );
    }
    let lease_role = kube
        .kubectl(&[
            "get",
            "role",
            "apiway-gateway-status-lease",
            "-n",
            "apiway",
            "-o",
            "json",
        ])
        .await?;
    ensure!(lease_role.contains("leases") && lease_role.contains("\"update\""));
    let deployment = kube
        .kubectl(&[
            "get",
            "deployment",
            "apiway-gateway-kubernetes",
            "-n",
            "apiway",
            "-o",
            "json",
        ])
        .await?;
    ensure!(deployment.contains("--kubernetes-gateway=apiway/seed-api"));

    // The example cluster's kube-apiserver Service, at the stand-in.
    kube.apply(&service("shoot-a", "kube-apiserver", &[ready(api.addr())]))
        .await?;
    let kubeconfig = kube.kubeconfig().to_string_lossy().into_owned();
    let _gateway = GatewayProcess::start_with_args(
        None,
        "admin: {address: 127.0.0.1:0}\n",
        &[
            "--kubernetes-gateway",
            "apiway/seed-api",
            "--kubeconfig",
            &kubeconfig,
            "--listen-address",
            "127.0.0.1",
        ],
    )
    .await?;
    wait_served_by(port, "api.shoot-a.seed.example.com", &pki, "shoot-a").await?;
    wait_route(
        &kube,
        "shoot-a",
        "kube-apiserver",
        "Accepted",
        ("True", "Accepted"),
    )
    .await?;
    // A namespace without the label may not attach.
    kube.kubectl(&["label", "namespace", "shoot-a", "apiway.dev/api-routes-"])
        .await?;
    wait_route(
        &kube,
        "shoot-a",
        "kube-apiserver",
        "Accepted",
        ("False", "NotAllowedByListeners"),
    )
    .await?;
    wait_refused(port, "api.shoot-a.seed.example.com", &pki).await?;
    Ok(())
}
