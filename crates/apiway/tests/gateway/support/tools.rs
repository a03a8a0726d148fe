//! Real clients as separate processes: curl and openssl s_client.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use apiway_test_support::peers::require_binary;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::Pki;

/// A finished command's output.
#[derive(Debug)]
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command`, feeding `stdin` and keeping stdin open until the command
/// exits (s_client would otherwise stop at stdin's EOF), with a timeout.
pub async fn run(mut command: Command, stdin: &[u8], timeout: Duration) -> Result<Ran> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("starting a client")?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin).await?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .with_context(|| format!("{command:?} did not finish within {timeout:?}"))??;
    drop(input);
    Ok(Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// An HTTP answer as curl printed it (`-i`).
#[derive(Debug)]
pub struct CurlAnswer {
    pub status_line: String,
    pub headers: String,
    pub body: String,
}

impl CurlAnswer {
    /// The `x-apiway-standin` header.
    pub fn standin(&self) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-apiway-standin").then(|| v.trim())
        })
    }

    /// A string field of the JSON body.
    pub fn json_field(&self, key: &str) -> Option<String> {
        let json: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        json[key].as_str().map(str::to_owned)
    }
}

/// `curl --resolve host:PORT:127.0.0.1 --cacert ca.pem https://host:PORT/path`
/// through `gateway`, over HTTP/2 or HTTP/1.1, with `extra` arguments.
pub async fn curl(
    gateway: SocketAddr,
    host: &str,
    path: &str,
    pki: &Pki,
    http2: bool,
    extra: &[&str],
) -> Result<CurlAnswer> {
    let port = gateway.port();
    let mut command = Command::new(require_binary("curl")?);
    command
        .args(["-sS", "-i", "--max-time", "5"])
        .arg(if http2 { "--http2" } else { "--http1.1" })
        .arg("--resolve")
        .arg(format!("{host}:{port}:{}", gateway.ip()))
        .arg("--cacert")
        .arg(&pki.ca_pem)
        .args(extra)
        .arg(format!("https://{host}:{port}{path}"));
    let ran = run(command, b"", Duration::from_secs(10)).await?;
    if !ran.success {
        bail!(
            "curl https://{host}:{port}{path} failed: {}",
            ran.stderr.trim()
        );
    }
    let (head, body) = ran
        .stdout
        .split_once("\r\n\r\n")
        .with_context(|| format!("no header end in curl output {:?}", ran.stdout))?;
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Ok(CurlAnswer {
        status_line: status_line.to_string(),
        headers: headers.to_string(),
        body: body.to_string(),
    })
}

/// `openssl s_client -connect ADDR [-servername NAME | -noservername] EXTRA`
/// sending a `GET path` over HTTP/1.1; `-ign_eof` keeps it reading until the
/// server closes. stdout holds the answer (with `-quiet`) or the session
/// report; stderr holds alerts ("SSL alert number 112").
pub async fn openssl_get(
    addr: SocketAddr,
    servername: Option<&str>,
    path: &str,
    extra: &[&str],
) -> Result<Ran> {
    let mut command = Command::new(require_binary("openssl")?);
    command
        .arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .args(["-quiet", "-ign_eof"]);
    match servername {
        Some(name) => command.arg("-servername").arg(name),
        None => command.arg("-noservername"),
    };
    command.args(extra);
    let host = servername.unwrap_or("gateway");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    run(command, request.as_bytes(), Duration::from_secs(10)).await
}

/// The JSON body of an HTTP/1.1 answer printed by `openssl s_client -quiet`.
pub fn answer_json(stdout: &str) -> Option<serde_json::Value> {
    let (_, body) = stdout.split_once("\r\n\r\n")?;
    serde_json::from_str(body.trim()).ok()
}

/// `http/1.1` and 20 long made-up protocols: a ClientHello of ~1.5 KB.
pub fn long_alpn_list() -> String {
    let mut list = vec!["http/1.1".to_string()];
    list.extend((0..20).map(|i| format!("apiway-proto-{i:02}-{}", "x".repeat(40))));
    list.join(",")
}
