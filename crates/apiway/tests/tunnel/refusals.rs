//! What the tunnel server refuses, and that it says so: destinations not
//! allowed (none at all, not listed, listed for another identity), and
//! agents whose certificates are untrusted or expired.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Result};
use apiway_standin::pki::Ca;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tunnel_support::{
    strings, tunnel_agent, tunnel_agent_with, tunnel_server, Behaviour, Destination, TunnelPki,
};

/// Sends a ping through `local` and returns what came back before the
/// connection closed (up to 4 bytes).
async fn ping(local: SocketAddr) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect(local).await?;
    s.write_all(b"ping").await?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4];
    while got.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => anyhow::bail!("neither an answer nor a close within 10 s"),
        }
    }
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_are_allowed_per_identity_and_refusals_are_counted() -> Result<()> {
    let open = Destination::start(Behaviour::Echo).await?;
    let unlisted = Destination::start(Behaviour::Echo).await?;
    let scoped = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let config = pki.path("tunnel-server.yaml");
    std::fs::write(
        &config,
        format!(
            "allowed_destinations:\n  - address: {}\n    identities: [node-b]\n",
            scoped.addr
        ),
    )?;
    let server = tunnel_server(
        &pki,
        &[
            "--config".into(),
            config.display().to_string(),
            "--allowed-destination".into(),
            open.addr.to_string(),
        ],
    )
    .await?;
    let targets: Vec<String> = [&open, &unlisted, &scoped]
        .iter()
        .map(|d| d.addr.to_string())
        .collect();
    let tunnel = server.listener("tunnel");
    let a = tunnel_agent(&pki, "node-a", &[tunnel], &targets, &[]).await?;
    let local = |agent: &crate::tunnel_support::Role, d: &Destination| {
        agent.listener(&format!(">{}", d.addr))
    };
    ensure!(ping(local(&a, &open)).await? == b"ping");
    ensure!(
        ping(local(&a, &unlisted)).await?.is_empty(),
        "an unlisted destination answered"
    );
    ensure!(
        ping(local(&a, &scoped)).await?.is_empty(),
        "node-a reached node-b's destination"
    );
    let b = tunnel_agent(&pki, "node-b", &[tunnel], &targets, &[]).await?;
    ensure!(
        ping(local(&b, &scoped)).await? == b"ping",
        "node-b could not reach its destination"
    );

    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "refused")]) == 2.0);
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) == 2.0);
    let am = a.metrics().await?;
    ensure!(am.count("apiway_tunnel_dials_total", &[("result", "refused")]) == 2.0);
    let refused_line = server
        .process
        .log_lines()
        .into_iter()
        .any(|l| l.contains("not allowed for agent `node-a`"));
    ensure!(
        refused_line,
        "the server did not name the identity it refused"
    );

    // With no allowed destination at all, every dial is refused.
    let empty = tunnel_server(&pki, &[]).await?;
    let c = tunnel_agent(
        &pki,
        "node-c",
        &[empty.listener("tunnel")],
        &targets[..1],
        &[],
    )
    .await?;
    ensure!(ping(c.listener(">")).await?.is_empty());
    empty
        .wait_metric(
            "apiway_tunnel_dials_total",
            &[("result", "refused")],
            Duration::from_secs(5),
            |v| v == 1.0,
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_and_expired_agents_are_refused() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let server = tunnel_server(
        &pki,
        &["--allowed-destination".into(), echo.addr.to_string()],
    )
    .await?;
    let tunnel = server.listener("tunnel");
    let targets = [echo.addr.to_string()];
    let fast = ["--dial-timeout".to_owned(), "1s".to_owned()];

    // A certificate from another CA.
    let stranger = Ca::new("someone else's CA")?;
    let dir = tempfile::tempdir()?;
    let pair = stranger
        .issue_client("node-x", &[])?
        .write(dir.path(), "x")?;
    let x = tunnel_agent_with(&pki, pair, &[tunnel], &targets, &fast).await?;
    ensure!(ping(x.listener(">")).await?.is_empty());
    server
        .wait_metric(
            "apiway_tunnel_auth_failures_total",
            &[("reason", "untrusted_certificate")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;

    // An expired one.
    let y = tunnel_agent_with(
        &pki,
        pki.expired_agent("node-y")?,
        &[tunnel],
        &targets,
        &fast,
    )
    .await?;
    ensure!(ping(y.listener(">")).await?.is_empty());
    server
        .wait_metric(
            "apiway_tunnel_auth_failures_total",
            &[("reason", "expired_certificate")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;
    let m = server.metrics().await?;
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) == 0.0);
    ensure!(m.count("apiway_tunnel_connections", &[("peer", "node-x")]) == 0.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_are_checked_by_token_review() -> Result<()> {
    use apiway_test_support::peers::KubeApiProcess;
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    let tokens = pki.path("tokens.csv");
    std::fs::write(
        &tokens,
        concat!(
            "admin-token,admin,1,\"system:masters\"\n",
            "agent-token,system:serviceaccount:kube-system:apiway-agent,2,\"system:serviceaccounts\",\"tunnel\"\n",
            "other-audience,system:serviceaccount:kube-system:apiway-agent,3,\"system:serviceaccounts\",\"someone-else\"\n",
            "stranger-token,system:serviceaccount:default:stranger,4,\"system:serviceaccounts\",\"tunnel\"\n",
        ),
    )?;
    let api = KubeApiProcess::start_with(
        std::path::Path::new(crate::support::process::APIWAY),
        &["--token-file", &tokens.display().to_string()],
        Some("admin-token"),
    )
    .await?;
    // Tokens only: no --client-ca.
    let mut args = strings(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        &pki.server_cert.display().to_string(),
        "--key",
        &pki.server_key.display().to_string(),
        "--token-review",
        "--token-audience",
        "tunnel",
        "--allowed-service-account",
        "kube-system/apiway-agent",
        "--kubeconfig",
        &api.kubeconfig().display().to_string(),
        "--allowed-destination",
        &echo.addr.to_string(),
    ]);
    args.extend(["--drain-delay".to_owned(), "0s".to_owned()]);
    let server = crate::tunnel_support::Role::start("tunnel-server", &args).await?;
    let tunnel = server.listener("tunnel");

    let agent_with_token = |token: &'static str, file: &str| {
        let path = pki.path(file);
        let pki = &pki;
        async move {
            std::fs::write(&path, format!("{token}\n"))?;
            let mut args: Vec<String> = vec![
                "--upstream".into(),
                "tunnel".into(),
                "--tunnel-ca".into(),
                pki.ca_pem.display().to_string(),
                "--tunnel-token-file".into(),
                path.display().to_string(),
                "--tunnel-server".into(),
                tunnel.to_string(),
                "--target".into(),
                format!("0:{}", echo.addr),
                "--dial-timeout".into(),
                "2s".into(),
            ];
            args.extend(["--drain-delay".to_owned(), "0s".to_owned()]);
            let agent = crate::tunnel_support::Role::start("agent", &args).await?;
            anyhow::Ok((agent, path))
        }
    };
    let (good, good_file) = agent_with_token("agent-token", "good.token").await?;
    ensure!(ping(good.listener(">")).await? == b"ping");
    let (bad, _) = agent_with_token("not-a-token", "bad.token").await?;
    ensure!(ping(bad.listener(">")).await?.is_empty());
    let (aud, _) = agent_with_token("other-audience", "aud.token").await?;
    ensure!(ping(aud.listener(">")).await?.is_empty());
    let (stranger, _) = agent_with_token("stranger-token", "stranger.token").await?;
    ensure!(ping(stranger.listener(">")).await?.is_empty());

    let m = server.metrics().await?;
    for reason in ["bad_token", "wrong_audience", "service_account_not_allowed"] {
        ensure!(
            m.count("apiway_tunnel_auth_failures_total", &[("reason", reason)]) >= 1.0,
            "no {reason} refusal counted:\n{}",
            m.matching("apiway_tunnel_auth_failures_total")
        );
    }
    ensure!(m.count("apiway_tunnel_dials_total", &[("result", "ok")]) == 1.0);
    // The identity logged is the one the token proves.
    ensure!(server
        .process
        .log_lines()
        .iter()
        .any(|l| l.contains("system:serviceaccount:default:stranger")));

    // A rotated token file is read again: the stranger's token is refused
    // on the good agent too, and the good token works again after.
    std::fs::write(&good_file, "stranger-token\n")?;
    ensure!(ping(good.listener(">")).await?.is_empty());
    std::fs::write(&good_file, "agent-token\n")?;
    ensure!(ping(good.listener(">")).await? == b"ping");
    Ok(())
}

/// SHA-256 fingerprint of a PEM certificate file, or of the certificate
/// the TLS server at `addr` presents when `addr` is given.
fn fingerprint(file: Option<&std::path::Path>, addr: Option<SocketAddr>) -> Result<String> {
    let script = match (file, addr) {
        (Some(f), _) => format!(
            "openssl x509 -noout -fingerprint -sha256 -in {}",
            f.display()
        ),
        (None, Some(a)) => format!(
            "openssl s_client -connect {a} -servername localhost </dev/null 2>/dev/null \
             | openssl x509 -noout -fingerprint -sha256"
        ),
        (None, None) => anyhow::bail!("nothing to fingerprint"),
    };
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    ensure!(
        out.status.success() && text.contains('='),
        "openssl: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(text.trim().to_owned())
}

/// Replaces `path` by writing a sibling and renaming it over, as a
/// Secret volume or cert-manager's writer does.
fn replace(path: &std::path::Path, contents: &str) -> Result<()> {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_and_the_client_ca_are_reread_when_their_files_change() -> Result<()> {
    let echo = Destination::start(Behaviour::Echo).await?;
    let pki = TunnelPki::new()?;
    // The server's own copies of its files, which the test rotates.
    let (cert, key, client_ca) = (
        pki.path("rotating-server.pem"),
        pki.path("rotating-server-key.pem"),
        pki.path("rotating-client-ca.pem"),
    );
    std::fs::copy(&pki.server_cert, &cert)?;
    std::fs::copy(&pki.server_key, &key)?;
    std::fs::copy(&pki.ca_pem, &client_ca)?;
    let args = strings(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        &cert.display().to_string(),
        "--key",
        &key.display().to_string(),
        "--client-ca",
        &client_ca.display().to_string(),
        "--allowed-destination",
        &echo.addr.to_string(),
        "--drain-delay",
        "0s",
    ]);
    let server = crate::tunnel_support::Role::start("tunnel-server", &args).await?;
    let tunnel = server.listener("tunnel");
    let targets = [echo.addr.to_string()];
    let a = tunnel_agent(&pki, "node-a", &[tunnel], &targets, &[]).await?;
    ensure!(ping(a.listener(">")).await? == b"ping");
    ensure!(fingerprint(None, Some(tunnel))? == fingerprint(Some(&pki.server_cert), None)?);

    // Rotate: a new server certificate (same CA, so agents still trust
    // it) and a new client CA that signs a new generation of agents.
    let rotated = pki.ca.issue_server(
        &["localhost", "rotated.internal"],
        &[crate::support::LOCALHOST],
    )?;
    let next_ca = Ca::new("next agents CA")?;
    replace(&key, &rotated.key_pem)?;
    replace(&cert, &rotated.cert_pem)?;
    replace(&client_ca, next_ca.cert_pem())?;
    let (rotated_file, _) = rotated.write(&pki.path(""), "rotated-copy")?;
    let want = fingerprint(Some(&rotated_file), None)?;
    let started = std::time::Instant::now();
    while fingerprint(None, Some(tunnel))? != want {
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "the server still presents its old certificate 10 s after the rotation"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The tunnel that was up keeps working: rotation does not cut it.
    ensure!(ping(a.listener(">")).await? == b"ping");
    // An agent of the new CA gets in; a new one of the old CA does not.
    let dir = tempfile::tempdir()?;
    let next = next_ca
        .issue_client("node-c", &[])?
        .write(dir.path(), "c")?;
    let c = crate::tunnel_support::tunnel_agent_with(&pki, next, &[tunnel], &targets, &[]).await?;
    ensure!(
        ping(c.listener(">")).await? == b"ping",
        "an agent of the new client CA was refused"
    );
    let fast = ["--dial-timeout".to_owned(), "1s".to_owned()];
    let b = tunnel_agent(&pki, "node-b", &[tunnel], &targets, &fast).await?;
    ensure!(
        ping(b.listener(">")).await?.is_empty(),
        "a new agent of the old client CA got in after the rotation"
    );
    server
        .wait_metric(
            "apiway_tunnel_auth_failures_total",
            &[("reason", "untrusted_certificate")],
            Duration::from_secs(5),
            |v| v >= 1.0,
        )
        .await?;
    Ok(())
}
