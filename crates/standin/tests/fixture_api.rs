//! The fixture Kubernetes API through a stand-in API server, with real
//! clients: curl (lists, a streamed watch over HTTP/2, a 410) and kubectl
//! (client-go: discovery, `get -o json`, table output).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::fixture_api::endpoint_slice;
use apiway_standin::pki::Ca;
use apiway_standin::{FixtureApi, StandinConfig, StandinServer};
use apiway_test_support::peers::require_binary;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn pod(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "example/app"}]},
    })
}

/// A fixture, its HTTP server and a stand-in mounting it, with the CA PEM
/// written to `dir`.
struct Setup {
    api: FixtureApi,
    _fixture: apiway_standin::FixtureServer,
    standin: StandinServer,
    ca_file: std::path::PathBuf,
}

async fn setup(dir: &Path) -> Result<Setup> {
    let api = FixtureApi::new();
    let fixture = api.serve(any_port()).await?;
    let ca = Ca::new("fixture test CA")?;
    let cert = ca.issue_server(&["kubernetes.default"], &[LOCALHOST])?;
    let standin = StandinServer::start(
        StandinConfig::new("front", any_port(), cert).with_api_upstream(fixture.url()),
    )
    .await?;
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca.cert_pem())?;
    Ok(Setup {
        api,
        _fixture: fixture,
        standin,
        ca_file,
    })
}

async fn curl_json(setup: &Setup, path: &str) -> Result<(u16, Value)> {
    let curl = require_binary("curl")?;
    let url = format!("https://{}{path}", setup.standin.addr());
    let out = Command::new(curl)
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(&setup.ca_file)
        .arg(&url)
        .output()
        .await?;
    ensure!(out.status.success(), "curl {url}: {out:?}");
    let text = String::from_utf8(out.stdout)?;
    let (body, code) = text.rsplit_once('\n').context("no status line")?;
    Ok((code.trim().parse()?, serde_json::from_str(body)?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_lists_gets_and_sees_status_errors_through_a_standin() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let setup = setup(dir.path()).await?;
    setup.api.apply(pod("a", "web"))?;
    setup.api.apply(pod("b", "db"))?;

    let (code, list) = curl_json(&setup, "/api/v1/namespaces/ns/pods").await?;
    ensure!(code == 200, "{code} {list}");
    ensure!(list["kind"] == "PodList", "{list}");
    ensure!(list["metadata"]["resourceVersion"] == "2", "{list}");
    ensure!(list["items"].as_array().map(Vec::len) == Some(2), "{list}");

    let (_, web) = curl_json(&setup, "/api/v1/pods?labelSelector=app%3Dweb").await?;
    let names: Vec<&str> = web["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    ensure!(names == ["a"], "{web}");

    let (code, one) = curl_json(&setup, "/api/v1/namespaces/ns/pods/b").await?;
    ensure!(
        code == 200 && one["metadata"]["labels"]["app"] == "db",
        "{one}"
    );

    let (code, missing) = curl_json(&setup, "/api/v1/namespaces/ns/pods/zz").await?;
    ensure!(code == 404, "{code}");
    ensure!(
        missing["kind"] == "Status" && missing["reason"] == "NotFound",
        "{missing}"
    );

    // Paths outside the API still get the stand-in's own answers.
    let (code, report) = curl_json(&setup, "/other").await?;
    ensure!(code == 200 && report["server"] == "front", "{report}");
    Ok(())
}

/// Runs curl on a watch `url` until the server ends it; each line is an
/// event.
async fn curl_events(url: &str, ca_file: Option<&Path>) -> Result<Vec<Value>> {
    let mut curl = Command::new(require_binary("curl")?);
    curl.args(["-sS", "--max-time", "10"]);
    if let Some(ca_file) = ca_file {
        curl.arg("--cacert").arg(ca_file);
    }
    let out = curl.arg(url).output().await?;
    ensure!(out.status.success(), "curl {url}: {out:?}");
    let text = String::from_utf8(out.stdout)?;
    let events = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>();
    events.with_context(|| format!("watch events: {text}"))
}

/// Reads lines from a running `curl -N` until `want` lines arrived.
async fn read_events(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    want: usize,
) -> Result<Vec<Value>> {
    let mut events = Vec::new();
    while events.len() < want {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .context("no watch event within 10 s")??
            .context("the watch ended early")?;
        events.push(serde_json::from_str(&line)?);
    }
    Ok(events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_watch_streams_each_event_as_it_happens_and_410_after_compaction() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let setup = setup(dir.path()).await?;
    setup.api.apply(pod("a", "web"))?;
    let start = setup.api.resource_version();

    let curl = require_binary("curl")?;
    let url = format!(
        "https://{}/api/v1/namespaces/ns/pods?watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=20",
        setup.standin.addr()
    );
    // HTTP/2 to the stand-in, HTTP/1.1 chunked from the fixture behind it.
    let mut child = Command::new(&curl)
        .args(["-sSN", "--http2", "--cacert"])
        .arg(&setup.ca_file)
        .arg(&url)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();

    // Each change arrives before the next is made: nothing is buffered.
    setup.api.apply(pod("b", "db"))?;
    let added = read_events(&mut lines, 1).await?;
    ensure!(added[0]["type"] == "ADDED", "{added:?}");
    ensure!(added[0]["object"]["metadata"]["name"] == "b", "{added:?}");
    setup.api.apply(pod("a", "web2"))?;
    let modified = read_events(&mut lines, 1).await?;
    ensure!(modified[0]["type"] == "MODIFIED", "{modified:?}");
    setup.api.delete("pods", "ns", "b")?;
    let deleted = read_events(&mut lines, 1).await?;
    ensure!(deleted[0]["type"] == "DELETED", "{deleted:?}");
    ensure!(
        deleted[0]["object"]["metadata"]["resourceVersion"].as_str()
            == Some(setup.api.resource_version().to_string().as_str()),
        "{deleted:?}"
    );

    // Compaction ends the open watch with a 410 ERROR event.
    setup.api.compact();
    let error = read_events(&mut lines, 1).await?;
    ensure!(error[0]["type"] == "ERROR", "{error:?}");
    ensure!(error[0]["object"]["code"] == 410, "{error:?}");
    ensure!(error[0]["object"]["reason"] == "Expired", "{error:?}");
    let end = tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await??;
    ensure!(end.is_none(), "the watch ends after the 410: {end:?}");

    // A new watch from before the compaction gets the 410 at once; one
    // without resourceVersion starts with the current objects.
    let (_, list) = curl_json(&setup, "/api/v1/namespaces/ns/pods").await?;
    ensure!(list["items"].as_array().map(Vec::len) == Some(1), "{list}");
    let base = format!("https://{}/api/v1/namespaces/ns/pods", setup.standin.addr());
    let ca = Some(setup.ca_file.as_path());
    let events = curl_events(&format!("{base}?watch=true&resourceVersion={start}"), ca).await?;
    ensure!(events.len() == 1, "{events:?}");
    ensure!(
        events[0]["type"] == "ERROR" && events[0]["object"]["code"] == 410,
        "{events:?}"
    );

    let events = curl_events(&format!("{base}?watch=1&timeoutSeconds=1"), ca).await?;
    ensure!(events.len() == 1, "{events:?}");
    ensure!(
        events[0]["type"] == "ADDED" && events[0]["object"]["metadata"]["name"] == "a",
        "{events:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_bookmarks_carry_the_latest_revision() -> Result<()> {
    let api = FixtureApi::with_settings(100, Duration::from_millis(200));
    let fixture = api.serve(any_port()).await?;
    api.apply(pod("a", "web"))?;
    api.apply(pod("other", "db"))?;
    let url = format!(
        "{}/api/v1/namespaces/ns/pods?watch=1&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=1&labelSelector=app%3Dweb",
        fixture.url()
    );
    let events = curl_events(&url, None).await?;
    // Change 2 does not match the selector: no event, yet bookmarks say 2.
    ensure!(!events.is_empty(), "{events:?}");
    ensure!(events.iter().all(|e| e["type"] == "BOOKMARK"), "{events:?}");
    ensure!(
        events[0]["object"]["metadata"]["resourceVersion"] == "2",
        "{events:?}"
    );
    Ok(())
}

fn kubeconfig(dir: &Path, server: SocketAddr, ca_file: &Path) -> Result<std::path::PathBuf> {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: test-token\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        ca_file.display()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn kubectl(dir: &Path, config: &Path, args: &[&str]) -> Result<String> {
    let kubectl = require_binary("kubectl")?;
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(config)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(["--request-timeout", "10s"])
        .args(args)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No discovery or OpenAPI warnings: kubectl asks only for /api, /apis
    // and the group versions (checked with -v=6), never /openapi.
    ensure!(
        out.stderr.is_empty(),
        "kubectl {args:?} warned: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_pods_and_endpointslices_through_a_standin() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let setup = setup(dir.path()).await?;
    setup.api.apply(pod("a", "web"))?;
    setup.api.apply(pod("b", "db"))?;
    setup.api.apply(endpoint_slice(
        "kubernetes",
        "127.0.0.2:6443".parse()?,
        true,
    ))?;
    let config = kubeconfig(dir.path(), setup.standin.addr(), &setup.ca_file)?;

    let json_text = kubectl(
        dir.path(),
        &config,
        &["get", "pods", "-n", "ns", "-o", "json"],
    )
    .await?;
    let list: Value = serde_json::from_str(&json_text)?;
    let names: Vec<&str> = list["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    ensure!(names == ["a", "b"], "{json_text}");

    let selected = kubectl(
        dir.path(),
        &config,
        &["get", "po", "-n", "ns", "-l", "app=db", "-o", "name"],
    )
    .await?;
    ensure!(selected.trim() == "pod/b", "{selected}");

    let table = kubectl(dir.path(), &config, &["get", "endpointslices"]).await?;
    ensure!(table.contains("kubernetes"), "{table}");
    let one = kubectl(
        dir.path(),
        &config,
        &[
            "get",
            "endpointslice",
            "kubernetes",
            "-o",
            "jsonpath={.endpoints[0].addresses[0]}",
        ],
    )
    .await?;
    ensure!(one == "127.0.0.2", "{one}");
    Ok(())
}
