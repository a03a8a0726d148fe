//! `apiway standin --advertise`: the flags as documented, and what curl,
//! connecting from different loopback source addresses, is told.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_standin::pki::Ca;
use apiway_test_support::peers::{free_port, output_within, require_binary, StandinProcess};
use tokio::process::Command;

const APIWAY: &str = env!("CARGO_BIN_EXE_apiway");

async fn output(command: &mut Command) -> Result<Output> {
    output_within(command, Duration::from_secs(15)).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `GET /whoami` from `source` with curl: the `Alt-Svc` header and the
/// peer address the stand-in saw.
async fn whoami_from(source: &str, port: u16, ca: &Path) -> Result<(Option<String>, String)> {
    let out = output(
        Command::new(require_binary("curl")?)
            .args(["-sS", "-i", "--max-time", "10", "--interface", source])
            .arg("--cacert")
            .arg(ca)
            .arg("--resolve")
            .arg(format!("kubernetes.default:{port}:127.0.0.1"))
            .arg(format!("https://kubernetes.default:{port}/whoami")),
    )
    .await?;
    ensure!(
        out.status.success(),
        "curl from {source}: {}",
        text(&out.stderr)
    );
    let response = text(&out.stdout);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no header/body split")?;
    let alt_svc = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("alt-svc")
            .then(|| value.trim().to_owned())
    });
    let report: serde_json::Value = serde_json::from_str(body).context("whoami body")?;
    Ok((
        alt_svc,
        report["peer"].as_str().unwrap_or_default().to_owned(),
    ))
}

#[tokio::test]
async fn help_documents_each_advertise_flag_with_its_default() -> Result<()> {
    let out = output(Command::new(APIWAY).args(["standin", "--help"])).await?;
    ensure!(out.status.success());
    let help = text(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for expected in [
        "--advertise <HOST:PORT> Advertise this API server endpoint",
        "[default: none: no Alt-Svc header]",
        "--advertise-max-age <DURATION>",
        "[default: 70s]",
        "--advertise-rule <CLIENT_CIDR=ENDPOINT_CIDR>",
        "[default: none: every client gets every endpoint]",
    ] {
        ensure!(help.contains(expected), "missing {expected:?} in:\n{help}");
    }
    Ok(())
}

#[tokio::test]
async fn bad_advertise_flags_are_refused_with_the_fix() -> Result<()> {
    for (args, says) in [
        (
            &[
                "--advertise",
                "10.0.0.1:6443",
                "--advertise-rule",
                "10.1.0.1/16=10.0.0.0/24",
            ][..],
            "has host bits set (write 10.1.0.0/16)",
        ),
        (&["--advertise", "10.0.0.1"][..], "write it as host:port"),
        (
            &["--advertise-rule", "10.1.0.0/16=10.0.0.0/24"][..],
            "--advertise <HOST:PORT>",
        ),
    ] {
        let out = output(
            Command::new(APIWAY)
                .args(["standin", "--cert", "/nonexistent", "--key", "/nonexistent"])
                .args(args),
        )
        .await?;
        let stderr = text(&out.stderr);
        ensure!(out.status.code() == Some(2), "{args:?}: {out:?}");
        ensure!(stderr.contains(says), "{args:?}: {stderr}");
    }
    Ok(())
}

#[tokio::test]
async fn each_source_address_is_told_the_endpoints_it_reaches() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("standin advertise CA")?;
    let cert = ca.issue_server(&["kubernetes.default"], &[])?;
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.cert_pem())?;
    let port = free_port()?;
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let own_address = listen.to_string();
    let _standin = StandinProcess::start_with_args(
        Path::new(APIWAY),
        "advertising",
        listen,
        &cert,
        None,
        &[
            "--advertise",
            &own_address,
            "--advertise",
            "127.0.0.2:6443",
            "--advertise-max-age",
            "45s",
            "--advertise-rule",
            "127.0.0.1=127.0.0.1",
            "--advertise-rule",
            "127.0.0.5/32=127.0.0.0/24",
        ],
        None,
    )
    .await?;

    let own = format!(r#"h2="{listen}"; ma=45"#);
    let (alt_svc, peer) = whoami_from("127.0.0.1", port, &ca_path).await?;
    ensure!(peer.starts_with("127.0.0.1:"), "{peer}");
    ensure!(alt_svc.as_deref() == Some(own.as_str()), "{alt_svc:?}");

    let (alt_svc, peer) = whoami_from("127.0.0.5", port, &ca_path).await?;
    ensure!(peer.starts_with("127.0.0.5:"), "{peer}");
    let both = format!(r#"{own}, h2="127.0.0.2:6443"; ma=45"#);
    ensure!(alt_svc.as_deref() == Some(both.as_str()), "{alt_svc:?}");

    let (alt_svc, peer) = whoami_from("127.0.0.6", port, &ca_path).await?;
    ensure!(peer.starts_with("127.0.0.6:"), "{peer}");
    ensure!(alt_svc.as_deref() == Some("clear"), "{alt_svc:?}");
    Ok(())
}
