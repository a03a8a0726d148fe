//! `apiway endpoints --kubeconfig`: the real binary against the three
//! stand-ins (which advertise each other in `Alt-Svc`), a fixture API
//! behind them whose EndpointSlices list one more endpoint where nothing
//! listens, and a static alternative where nothing listens either.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::fixture_api::{endpoint_slice, FixtureApi};
use serde_json::Value;

use crate::support::{bounded, Standins, IPS};

/// Writes a kubeconfig for `standins`' origin with a bearer token.
fn kubeconfig(standins: &Standins, dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, standins.ca.cert_pem())?;
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: e2e\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: e2e\n  user:\n    token: e2e-token\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: e2e\n",
            standins.origin(),
            ca.display()
        ),
    )?;
    Ok(path)
}

fn endpoints_command(kubeconfig: &std::path::Path, args: &[&str]) -> Result<std::process::Output> {
    Command::new(env!("CARGO_BIN_EXE_apiway"))
        .arg("endpoints")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .context("running apiway endpoints")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_lists_probes_and_chooses_what_the_client_would() -> Result<()> {
    bounded(Duration::from_secs(60), async {
        let fixture = FixtureApi::new();
        let server = fixture.serve("127.0.0.1:0".parse()?).await?;
        let mut standins = Standins::start(&["--api-upstream".to_owned(), server.url()]).await?;
        let port = standins.port;
        // Discovery lists the three stand-ins and .6, where nothing listens.
        let gone = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6)), port);
        for (i, ip) in IPS.iter().enumerate() {
            let addr = SocketAddr::new(IpAddr::V4(*ip), port);
            fixture.apply(endpoint_slice(&format!("kubernetes-{i}"), addr, true))?;
        }
        fixture.apply(endpoint_slice("kubernetes-gone", gone, true))?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = kubeconfig(&standins, dir.path())?;
        let closed = format!("127.0.0.5:{port}");

        let output =
            endpoints_command(&kubeconfig, &["-o", "json", "--alternative-hosts", &closed])?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "exit {:?}: {stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_str(&stdout).context("JSON output")?;
        ensure!(
            report["origin"] == format!("{}:{port}", IPS[0]),
            "{report:#}"
        );
        ensure!(
            report["version"]
                .as_str()
                .is_some_and(|v| v.contains("standin")),
            "{report:#}"
        );
        ensure!(report["discovery"]["endpoints"] == 4, "{report:#}");
        let endpoints = report["endpoints"].as_array().context("endpoints")?;
        let find = |addr: &str| {
            endpoints
                .iter()
                .find(|e| e["address"] == addr)
                .with_context(|| format!("{addr} missing: {report:#}"))
        };
        let origin = find(&format!("{}:{port}", IPS[0]))?;
        ensure!(
            origin["source"] == "origin" && origin["readyz"] == "passed",
            "{origin}"
        );
        for ip in &IPS[1..] {
            let e = find(&format!("{ip}:{port}"))?;
            ensure!(e["source"] == "alt-svc", "{e}");
            ensure!(
                e["tls"] == "passed" && e["readyz"] == "passed" && e["blocked"].is_null(),
                "{e}"
            );
            ensure!(e["local"] == true, "loopback is local: {e}");
        }
        let s = find(&closed)?;
        ensure!(
            s["source"] == "static" && s["connect"]["failed"].is_string(),
            "{s}"
        );
        ensure!(
            s["tls"] == "not_reached" && s["blocked"]["seconds_left"].as_f64() > Some(10.0),
            "{s}"
        );
        let d = find(&gone.to_string())?;
        ensure!(
            d["source"] == "endpointslice" && d["connect"]["failed"].is_string(),
            "{d}"
        );
        let chosen: Vec<&Value> = endpoints.iter().filter(|e| e["chosen"] == true).collect();
        ensure!(
            chosen.len() == 1 && chosen[0]["readyz"] == "passed",
            "{report:#}"
        );
        // The origin answered GET /version and is listed in Alt-Svc (it is
        // one of the API servers): it stays in use, no flapping.
        ensure!(chosen[0]["source"] == "origin", "{report:#}");

        // The table says the same for people; with the stand-in the client
        // would choose stopped, the probe fails there and the command says
        // so with exit status 1.
        let output = endpoints_command(&kubeconfig, &["--no-discovery"])?;
        let table = String::from_utf8_lossy(&output.stdout);
        ensure!(output.status.success(), "{table}");
        ensure!(
            table.contains("ENDPOINT") && table.contains("discovery off"),
            "{table}"
        );
        ensure!(
            table
                .lines()
                .filter(|l| l.trim_end().ends_with('*'))
                .count()
                == 1,
            "{table}"
        );

        for p in &mut standins.processes {
            p.kill();
        }
        let output = endpoints_command(&kubeconfig, &["--no-discovery"])?;
        let table = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(output.status.code() == Some(1), "{table}\n{stderr}");
        ensure!(
            table.contains("FAILED") && stderr.contains("did not pass the probe"),
            "{table}\n{stderr}"
        );
        Ok(())
    })
    .await
}
