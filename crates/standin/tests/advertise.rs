//! The stand-in advertising through the client crate's `Alt-Svc` layer,
//! seen by real clients: curl (what each source address is told, and that
//! readiness flips and list updates show in the next response) and kubectl
//! (client-go), which must keep working against a server that advertises
//! alternatives, several of them or `clear`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_advertise::Address;
use apiway_advertise::{AdvertisedEndpoint, Advertiser, Reachability, ReachabilityRule};
use apiway_standin::pki::Ca;
use apiway_standin::{StandinConfig, StandinServer};
use apiway_test_support::peers::{output_within, require_binary};
use tokio::process::Command;

/// What a test needs to talk to one stand-in: the CA file curl and
/// kubectl trust, and a kubeconfig for kubectl.
struct Setup {
    dir: tempfile::TempDir,
    ca_path: PathBuf,
    kubeconfig: PathBuf,
    server: StandinServer,
}

fn endpoints(list: &[(&str, bool)]) -> Result<Vec<AdvertisedEndpoint>> {
    list.iter()
        .map(|(text, ready)| {
            Ok(AdvertisedEndpoint {
                address: Address::parse(text).map_err(anyhow::Error::msg)?,
                ready: *ready,
            })
        })
        .collect()
}

impl Setup {
    async fn start(advertiser: Advertiser) -> Result<Setup> {
        let ca = Ca::new("advertise test CA")?;
        let cert = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
        let config = StandinConfig::new("api", SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), cert)
            .with_advertiser(advertiser);
        let server = StandinServer::start(config).await?;
        let dir = tempfile::tempdir()?;
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.cert_pem())?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\n\
                 kind: Config\n\
                 clusters:\n\
                 - name: standin\n  \
                   cluster:\n    \
                     server: https://{addr}\n    \
                     certificate-authority: {ca}\n    \
                     tls-server-name: kubernetes.default\n\
                 users:\n\
                 - name: tester\n  \
                   user: {{token: test-token}}\n\
                 contexts:\n\
                 - name: standin\n  \
                   context: {{cluster: standin, user: tester}}\n\
                 current-context: standin\n",
                addr = server.addr(),
                ca = ca_path.display(),
            ),
        )?;
        Ok(Setup {
            dir,
            ca_path,
            kubeconfig,
            server,
        })
    }

    /// The `Alt-Svc` header of `GET path` as curl, over HTTP/2 from
    /// `source`, receives it (`None` when absent).
    async fn curl_alt_svc(&self, source: &str, path: &str) -> Result<Option<String>> {
        let port = self.server.addr().port();
        let mut command = Command::new(require_binary("curl")?);
        command
            .args([
                "-sS",
                "--http2",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
                "-D",
                "-",
            ])
            .args(["--interface", source])
            .arg("--cacert")
            .arg(&self.ca_path)
            .arg("--resolve")
            .arg(format!("kubernetes.default:{port}:127.0.0.1"))
            .arg(format!("https://kubernetes.default:{port}{path}"));
        let out = run(&mut command).await?;
        ensure!(out.status.success(), "curl: {}", text(&out.stderr));
        let headers = text(&out.stdout);
        ensure!(headers.starts_with("HTTP/2 "), "not HTTP/2: {headers}");
        Ok(headers.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("alt-svc")
                .then(|| value.trim().to_owned())
        }))
    }

    async fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let mut command = Command::new(require_binary("kubectl")?);
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            // kubectl caches discovery under $HOME/.kube.
            .env("HOME", self.dir.path());
        run(&mut command).await
    }

    /// `kubectl version -o json` and `kubectl get --raw /readyz` both
    /// succeed and reach this stand-in, and kubectl received
    /// `Alt-Svc: alt_svc` (its `-v=8` log lists the response headers).
    async fn kubectl_works(&self, alt_svc: &str) -> Result<()> {
        let before = self.server.requests_served();
        let out = self.kubectl(&["version", "-o", "json"]).await?;
        ensure!(
            out.status.success(),
            "kubectl version: {}",
            text(&out.stderr)
        );
        let version: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("kubectl version output")?;
        ensure!(
            version["serverVersion"]["gitVersion"] == "v1.31.0-apiway-standin",
            "{version}"
        );
        let out = self.kubectl(&["get", "--raw", "/readyz", "-v=8"]).await?;
        let log = text(&out.stderr);
        ensure!(out.status.success(), "kubectl get --raw /readyz: {log}");
        ensure!(text(&out.stdout) == "ok", "{}", text(&out.stdout));
        ensure!(
            log.lines()
                .any(|l| l.trim_end().ends_with(&format!(" Alt-Svc: {alt_svc}"))),
            "kubectl did not log Alt-Svc: {alt_svc}:\n{log}"
        );
        ensure!(self.server.requests_served() >= before + 2);
        Ok(())
    }
}

async fn run(command: &mut Command) -> Result<Output> {
    output_within(command, Duration::from_secs(20)).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_against_a_standin_advertising_alternatives_or_clear() -> Result<()> {
    let advertiser = Advertiser::new(
        endpoints(&[
            ("127.0.0.2:6443", true),
            ("[::1]:6443", true),
            ("api-3.example:6443", true),
        ])?,
        Duration::from_secs(60),
        Reachability::everyone(),
    );
    let setup = Setup::start(advertiser.clone()).await?;
    let several =
        r#"h2="127.0.0.2:6443"; ma=60, h2="[::1]:6443"; ma=60, h2="api-3.example:6443"; ma=60"#;
    ensure!(
        setup
            .curl_alt_svc("127.0.0.1", "/version")
            .await?
            .as_deref()
            == Some(several)
    );
    setup
        .kubectl_works(several)
        .await
        .context("several alternatives")?;

    advertiser.set_endpoints(endpoints(&[("127.0.0.2:6443", false)])?);
    ensure!(
        setup
            .curl_alt_svc("127.0.0.1", "/version")
            .await?
            .as_deref()
            == Some("clear")
    );
    setup.kubectl_works("clear").await.context("clear")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_source_address_gets_its_alternatives_and_changes_show_at_once() -> Result<()> {
    let rule = |text: &str| ReachabilityRule::parse(text).map_err(anyhow::Error::msg);
    // The stand-in lists itself (added once its port is known), 127.0.0.2
    // and 127.0.0.3; 127.0.0.1 reaches 127.0.0.1-2, 127.0.0.5 reaches all.
    let advertiser = Advertiser::new(
        Vec::new(),
        Duration::from_secs(90),
        Reachability::new(vec![
            rule("127.0.0.1/32=127.0.0.0/31")?,
            rule("127.0.0.1/32=127.0.0.2/32")?,
            rule("127.0.0.5/32=127.0.0.0/24")?,
        ]),
    );
    let setup = Setup::start(advertiser.clone()).await?;
    let own = setup.server.addr();
    advertiser.set_endpoints(endpoints(&[
        (&own.to_string(), true),
        ("127.0.0.2:6443", true),
        ("127.0.0.3:6443", true),
    ])?);
    let own_h2 = format!(r#"h2="{own}"; ma=90"#);
    let two = format!(r#"{own_h2}, h2="127.0.0.2:6443"; ma=90"#);
    let three = format!(r#"{two}, h2="127.0.0.3:6443"; ma=90"#);
    ensure!(setup.curl_alt_svc("127.0.0.1", "/readyz").await? == Some(two.clone()));
    ensure!(setup.curl_alt_svc("127.0.0.5", "/readyz").await? == Some(three));
    ensure!(setup.curl_alt_svc("127.0.0.6", "/readyz").await?.as_deref() == Some("clear"));

    // Not ready: the stand-in drops itself from what it advertises, on
    // every response, the failing /readyz included; kubectl sees the 503.
    setup.server.set_ready(false);
    let others = r#"h2="127.0.0.2:6443"; ma=90, h2="127.0.0.3:6443"; ma=90"#;
    ensure!(setup.curl_alt_svc("127.0.0.5", "/readyz").await?.as_deref() == Some(others));
    ensure!(
        setup
            .curl_alt_svc("127.0.0.1", "/version")
            .await?
            .as_deref()
            == Some(r#"h2="127.0.0.2:6443"; ma=90"#)
    );
    let out = setup.kubectl(&["get", "--raw", "/readyz"]).await?;
    ensure!(!out.status.success(), "kubectl should see the 503");
    setup.server.set_ready(true);
    ensure!(setup.curl_alt_svc("127.0.0.1", "/readyz").await? == Some(two.clone()));
    setup.kubectl_works(&two).await?;

    // A new list applies to the next response.
    advertiser.set_endpoints(endpoints(&[("127.0.0.9:443", true)])?);
    ensure!(
        setup.curl_alt_svc("127.0.0.5", "/").await?.as_deref()
            == Some(r#"h2="127.0.0.9:443"; ma=90"#)
    );
    ensure!(setup.curl_alt_svc("127.0.0.1", "/").await?.as_deref() == Some("clear"));
    Ok(())
}

#[tokio::test]
async fn a_fixed_value_is_still_sent_as_is() -> Result<()> {
    let ca = Ca::new("fixed alt-svc CA")?;
    let cert = ca.issue_server(&["kubernetes.default"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
    let odd = r#"h3=":443"; ma=5; persist=1; foo=bar"#;
    let config = StandinConfig::new("fixed", SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), cert)
        .with_alt_svc(odd);
    let server = StandinServer::start(config).await?;
    ensure!(server.advertiser().is_none());
    let response = apiway_standin::https_get(
        server.addr(),
        "kubernetes.default",
        "/version",
        &ca,
        None,
        true,
    )
    .await?;
    ensure!(
        response.header("alt-svc") == Some(odd),
        "{:?}",
        response.header("alt-svc")
    );
    Ok(())
}
