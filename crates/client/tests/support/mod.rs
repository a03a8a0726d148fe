//! Helpers the client's integration tests share.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_client::Client;
use bytes::Bytes;

/// Every test finishes within this or fails.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// GETs `path` and returns the stand-in's JSON report; any failure is an
/// error naming the request.
pub async fn get_report(client: &Client, path: &str) -> Result<serde_json::Value> {
    let request = http::Request::get(path).body(Bytes::new())?;
    let response = client
        .fetch(request)
        .await
        .with_context(|| format!("GET {path}"))?;
    ensure!(
        response.status() == 200,
        "GET {path}: {}",
        response.status()
    );
    Ok(serde_json::from_slice(response.body())?)
}

/// The client's metrics in the Prometheus text format.
pub fn metrics_text(client: &Client) -> Result<String> {
    let mut registry = prometheus_client::registry::Registry::default();
    client.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The value of the sample `name{labels}` in `text`, if present.
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

/// Runs `test`, failing it when it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<F: std::future::Future<Output = Result<()>>>(test: F) -> Result<()> {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .context("test took longer than its bound")?
}

/// GETs `/stream/0` to `/stream/{count - 1}` one after another in a task
/// and, once `kill_after` have been answered, runs `kill`. Returns the
/// name of the stand-in that answered each; a GET that fails is an error.
pub async fn gets_across(
    client: &Client,
    count: usize,
    kill_after: usize,
    kill: impl Future<Output = ()>,
) -> Result<Vec<String>> {
    let done = Arc::new(AtomicUsize::new(0));
    let stream = tokio::spawn({
        let client = client.clone();
        let done = done.clone();
        async move {
            let mut servers = Vec::new();
            for i in 0..count {
                let report = get_report(&client, &format!("/stream/{i}")).await?;
                servers.push(report["server"].as_str().unwrap_or("?").to_owned());
                done.fetch_add(1, Ordering::SeqCst);
            }
            anyhow::Ok(servers)
        }
    });
    while done.load(Ordering::SeqCst) < kill_after {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    kill.await;
    stream.await?
}
