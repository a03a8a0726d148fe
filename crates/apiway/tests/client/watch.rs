//! A kube-rs `watcher` on pods while the endpoint in use is killed or
//! hung: the watch starts again on another endpoint and sees a pod created
//! after the fault. The pods live in one fixture API behind all three
//! stand-ins (`--api-upstream`), as etcd sits behind API servers.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use apiway_standin::fixture_api::FixtureApi;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::{bounded, Fault, Standins, Transport};

/// How long the watch may take to show the pod created after the fault:
/// a hang is noticed within a few seconds (PING, or kube's timeouts), the
/// watcher's back-off adds at most a few more.
const RESUME_LIMIT: Duration = Duration::from_secs(30);

fn pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    })
}

/// A watch event as the test reads it: what happened to which pod.
#[derive(Debug)]
enum Seen {
    /// The pod was listed or applied.
    Pod(String),
    /// The initial list is complete.
    Listed,
    /// The watch failed (the watcher starts it again).
    Error(String),
}

/// Waits for the first event `wanted` accepts; errors are counted.
async fn wait_for(
    events: &mut mpsc::UnboundedReceiver<Seen>,
    errors: &mut Vec<String>,
    wanted: impl Fn(&Seen) -> bool,
) -> Result<()> {
    while let Some(seen) = events.recv().await {
        if wanted(&seen) {
            return Ok(());
        }
        if let Seen::Error(e) = seen {
            errors.push(e);
        }
    }
    bail!("the watcher ended")
}

async fn watch_across_fault(transport: Transport, fault: Fault) -> Result<()> {
    // Bookmarks every second keep an idle watch inside kube's 3 s read
    // timeout on the HTTP/1.1 path.
    let fixture = FixtureApi::with_settings(1000, Duration::from_secs(1));
    let listen: SocketAddr = "127.0.0.1:0".parse()?;
    let server = fixture.serve(listen).await?;
    fixture.create(pod("before-fault"))?;
    let mut standins = Standins::start(&["--api-upstream".to_owned(), server.url()]).await?;
    let client = standins.client()?;
    let pods: Api<Pod> = Api::namespaced(standins.kube_client(&client, transport)?, "default");
    // Let the client learn the alternatives (Alt-Svc) and settle on one
    // before the watch starts: the endpoint in use is then the one that
    // carries the watch, which is the one the fault must hit. (Started at
    // once, the watch could stay on the origin while the client's choice
    // for new requests moved on, and the fault would miss it.)
    let settle = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut stable = 0;
    let mut last = None;
    while stable < 5 {
        ensure!(
            tokio::time::Instant::now() < settle,
            "the client did not settle on an endpoint: {:?}",
            client.endpoints()
        );
        pods.list(&Default::default()).await?;
        let now = client.endpoint_in_use();
        if client.endpoints().len() == 3 && now.is_some() && now == last {
            stable += 1;
        } else {
            stable = 0;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (tx, mut events) = mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        let mut stream =
            std::pin::pin!(watcher::watcher(pods, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            let seen = match event {
                Ok(Event::InitApply(p) | Event::Apply(p)) => {
                    Seen::Pod(p.metadata.name.unwrap_or_default())
                }
                Ok(Event::InitDone) => Seen::Listed,
                Ok(Event::Init | Event::Delete(_)) => continue,
                Err(e) => Seen::Error(e.to_string()),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    let mut errors = Vec::new();
    wait_for(
        &mut events,
        &mut errors,
        |s| matches!(s, Seen::Pod(n) if n == "before-fault"),
    )
    .await?;
    wait_for(&mut events, &mut errors, |s| matches!(s, Seen::Listed)).await?;
    // The watch itself is open once the fixture counts it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fixture.stats().watches < 1 {
        ensure!(tokio::time::Instant::now() < deadline, "no watch opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ensure!(
        errors.is_empty(),
        "no watch error before the fault: {errors:?}"
    );
    ensure!(
        client.endpoints().len() == 3,
        "alternatives learned from Alt-Svc: {:?}",
        client.endpoints()
    );
    let in_use = client.endpoint_in_use().context("an endpoint in use")?;
    let victim = standins.index_of(&in_use)?;
    let watches_before = fixture.stats().watches;

    standins.inflict(victim, fault)?;
    fixture.create(pod("after-fault"))?;
    tokio::time::timeout(
        RESUME_LIMIT,
        wait_for(
            &mut events,
            &mut errors,
            |s| matches!(s, Seen::Pod(n) if n == "after-fault"),
        ),
    )
    .await
    .with_context(|| {
        format!("the watch did not resume within {RESUME_LIMIT:?}; errors: {errors:?}")
    })??;
    watch.abort();

    let now_in_use = client.endpoint_in_use().context("an endpoint in use")?;
    ensure!(
        now_in_use != in_use,
        "the watch moved off the failed endpoint {in_use}"
    );
    ensure!(
        fixture.stats().watches > watches_before,
        "a new watch was opened (through another stand-in)"
    );
    eprintln!(
        "{transport:?} {fault:?}: watch resumed on {now_in_use} after {} watcher error(s): {errors:?}",
        errors.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_watch_resumes_after_the_endpoint_in_use_is_killed() -> Result<()> {
    bounded(
        Duration::from_secs(60),
        watch_across_fault(Transport::H2, Fault::Kill),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_watch_resumes_after_the_endpoint_in_use_hangs() -> Result<()> {
    bounded(
        Duration::from_secs(60),
        watch_across_fault(Transport::H2, Fault::Hang),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_watch_resumes_after_the_endpoint_in_use_is_killed() -> Result<()> {
    bounded(
        Duration::from_secs(60),
        watch_across_fault(Transport::Http1, Fault::Kill),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_watch_resumes_after_the_endpoint_in_use_hangs() -> Result<()> {
    bounded(
        Duration::from_secs(60),
        watch_across_fault(Transport::Http1, Fault::Hang),
    )
    .await
}
