//! Routing by SNI with real clients: curl over HTTP/1.1 and HTTP/2, and
//! openssl for server names curl would normalize.

use anyhow::{ensure, Context, Result};
use apiway_standin::StandinServer;

use crate::support::tools::{answer_json, curl, openssl_get};
use crate::support::{GatewayProcess, Pki};

/// Two clusters. `api.a.example.com` is an exact name of cluster A and also
/// matches cluster B's wildcard `*.a.example.com`: the exact name must win.
struct TwoClusters {
    pki: Pki,
    _a: StandinServer,
    _b: StandinServer,
    gateway: GatewayProcess,
}

impl TwoClusters {
    async fn start() -> Result<TwoClusters> {
        let pki = Pki::new()?;
        let a = pki
            .standin(
                "cluster-a",
                &["api.a.example.com", "*.a.internal.example.com"],
                false,
            )
            .await?;
        let b = pki
            .standin(
                "cluster-b",
                &["api.b.example.com", "*.a.example.com"],
                false,
            )
            .await?;
        let gateway = GatewayProcess::start(&format!(
            r#"
admin: {{address: 127.0.0.1:0}}
listeners:
  - {{name: public, address: 127.0.0.1:0, kind: tls}}
routes:
  - name: cluster-a
    hostnames: [api.a.example.com, "*.a.internal.example.com"]
    backends: [{{address: {a}}}]
  - name: cluster-b
    hostnames: [api.b.example.com, "*.a.example.com"]
    backends: [{{address: {b}}}]
default_route: reject
"#,
            a = a.addr(),
            b = b.addr()
        ))
        .await?;
        Ok(TwoClusters {
            pki,
            _a: a,
            _b: b,
            gateway,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_http1_and_http2_reaches_the_cluster_named_by_sni() -> Result<()> {
    let t = TwoClusters::start().await?;
    let cases = [
        ("api.a.example.com", "cluster-a"),
        ("api.b.example.com", "cluster-b"),
        // Wildcards, one label and two labels deep.
        ("web.a.internal.example.com", "cluster-a"),
        ("x.a.example.com", "cluster-b"),
    ];
    for (host, cluster) in cases {
        for http2 in [false, true] {
            let answer = curl(
                t.gateway.addr(),
                host,
                "/api/v1/namespaces",
                &t.pki,
                http2,
                &[],
            )
            .await
            .with_context(|| format!("curl {host} http2={http2}"))?;
            let want_status = if http2 { "HTTP/2 200" } else { "HTTP/1.1 200" };
            ensure!(
                answer.status_line.starts_with(want_status),
                "{host}: status line {:?}, want {want_status}",
                answer.status_line
            );
            ensure!(
                answer.standin() == Some(cluster)
                    && answer.json_field("server").as_deref() == Some(cluster),
                "{host} (http2={http2}) should reach {cluster}: {answer:?}"
            );
            ensure!(
                answer.json_field("sni").as_deref() == Some(host),
                "{answer:?}"
            );
        }
    }
    let m = t.gateway.metrics().await?;
    ensure!(m.count("apiway_route_connections_total", &[("route", "cluster-a")]) == 4.0);
    ensure!(m.count("apiway_route_connections_total", &[("route", "cluster-b")]) == 4.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_matching_ignores_case_and_one_trailing_dot() -> Result<()> {
    // curl lowercases names and drops a trailing dot; openssl sends the
    // server name exactly as given.
    let t = TwoClusters::start().await?;
    let ca = t.pki.ca_pem.to_string_lossy().into_owned();
    let cases = [
        ("API.A.Example.COM", "cluster-a"),
        ("api.a.example.com.", "cluster-a"),
        ("Api.A.Example.Com.", "cluster-a"),
        ("WEB.a.Internal.example.com.", "cluster-a"),
        ("X.A.EXAMPLE.COM.", "cluster-b"),
        ("API.B.EXAMPLE.COM", "cluster-b"),
    ];
    for (name, cluster) in cases {
        let ran = openssl_get(t.gateway.addr(), Some(name), "/who", &["-CAfile", &ca]).await?;
        let json = answer_json(&ran.stdout)
            .with_context(|| format!("no answer for SNI {name}: {ran:?}"))?;
        ensure!(
            json["server"] == cluster,
            "SNI {name} should reach {cluster}: {json}"
        );
    }
    Ok(())
}
