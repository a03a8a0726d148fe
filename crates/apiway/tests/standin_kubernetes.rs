//! `apiway standin --kubernetes-api`, driven by real kubectl the way a user
//! would: applies and re-applies (client-side apply's strategic merge
//! patches), labels, annotates, JSON and merge patches, status
//! subresources, finalizers, paging, watches, TokenReview and bearer-token
//! authentication. Where the fixture departs from a real API server the
//! test says so.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use apiway_test_support::peers::KubeApiProcess;
use serde_json::Value;

const APIWAY: &str = env!("CARGO_BIN_EXE_apiway");

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("not JSON: {text}"))
}

const GATEWAY_API: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: apiway}
spec: {controllerName: apiway.dev/gateway}
---
apiVersion: v1
kind: Namespace
metadata: {name: seed}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: api, namespace: seed}
spec:
  gatewayClassName: apiway
  listeners:
  - {name: tls, port: 443, protocol: TLS, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: cluster-a, namespace: seed}
spec:
  parentRefs: [{name: api}]
  hostnames: [api.a.example.com]
  rules: [{backendRefs: [{name: kube-apiserver, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: allow, namespace: seed}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: seed}]
  to: [{group: "", kind: Service}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-apiserver, namespace: seed, labels: {app: api}}
spec:
  ports: [{name: https, port: 443, targetPort: 6443}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-apiserver-1
  namespace: seed
  labels: {kubernetes.io/service-name: kube-apiserver}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1], conditions: {ready: true}}]
ports: [{name: https, port: 6443}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: apiway-status, namespace: seed}
spec: {holderIdentity: a, leaseDurationSeconds: 15}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_every_kind_apiway_uses() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    let applied = kube.apply(GATEWAY_API).await?;
    ensure!(applied.matches("created").count() == 8, "{applied}");
    // Short names from discovery; cluster-scoped and namespaced kinds.
    let gc = json(
        &kube
            .kubectl(&["get", "gatewayclass", "apiway", "-o", "json"])
            .await?,
    )?;
    ensure!(gc["spec"]["controllerName"] == "apiway.dev/gateway");
    let routes = kube
        .kubectl(&["get", "tlsroutes", "-n", "seed", "-o", "name"])
        .await?;
    ensure!(
        routes.trim() == "tlsroute.gateway.networking.k8s.io/cluster-a",
        "{routes}"
    );
    ensure!(kube
        .kubectl(&["get", "gtw", "-n", "seed", "-o", "name"])
        .await?
        .contains("gateway"));

    // Re-apply with a change: client-side apply's three-way patch.
    let changed = GATEWAY_API.replace(
        "hostnames: [api.a.example.com]",
        "hostnames: [api.b.example.com]",
    );
    let reapplied = kube.apply(&changed).await?;
    ensure!(
        reapplied.contains("tlsroute.gateway.networking.k8s.io/cluster-a configured"),
        "{reapplied}"
    );
    let route = json(
        &kube
            .kubectl(&["get", "tlsroute", "cluster-a", "-n", "seed", "-o", "json"])
            .await?,
    )?;
    ensure!(route["spec"]["hostnames"][0] == "api.b.example.com");
    ensure!(
        route["metadata"]["generation"] == 2,
        "generation follows spec changes: {route}"
    );

    // Status is a subresource: a write of the object keeps it, a write of
    // /status changes only it.
    kube.kubectl(&[
        "patch", "tlsroute", "cluster-a", "-n", "seed", "--subresource=status", "--type=merge",
        "-p", r#"{"status":{"parents":[{"parentRef":{"name":"api"},"controllerName":"apiway.dev/gateway","conditions":[{"type":"Accepted","status":"True","reason":"Accepted","message":"","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":2}]}]},"spec":{"hostnames":["ignored.example.com"]}}"#,
    ])
    .await?;
    let route = json(
        &kube
            .kubectl(&["get", "tlsroute", "cluster-a", "-n", "seed", "-o", "json"])
            .await?,
    )?;
    ensure!(
        route["status"]["parents"][0]["conditions"][0]["type"] == "Accepted",
        "{route}"
    );
    ensure!(
        route["spec"]["hostnames"][0] == "api.b.example.com",
        "a status write changed spec"
    );
    kube.kubectl(&["label", "tlsroute", "cluster-a", "-n", "seed", "team=a"])
        .await?;
    let route = json(
        &kube
            .kubectl(&["get", "tlsroute", "cluster-a", "-n", "seed", "-o", "json"])
            .await?,
    )?;
    ensure!(
        route["status"]["parents"].is_array(),
        "a write of the object dropped its status"
    );
    // A strategic merge patch of a custom resource is refused, as on a real
    // API server.
    let refused = kube
        .kubectl(&[
            "patch",
            "tlsroute",
            "cluster-a",
            "-n",
            "seed",
            "--type=strategic",
            "-p",
            "{}",
        ])
        .await
        .expect_err("strategic merge on a custom resource");
    ensure!(
        refused
            .to_string()
            .contains("strategic merge patch is not supported"),
        "{refused}"
    );

    // A Service's status (what a cloud controller writes), JSON patch.
    kube.kubectl(&[
        "patch", "service", "kube-apiserver", "-n", "seed", "--subresource=status", "--type=json",
        "-p", r#"[{"op":"add","path":"/status","value":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}]"#,
    ])
    .await?;
    let ip = kube
        .kubectl(&[
            "get",
            "svc",
            "kube-apiserver",
            "-n",
            "seed",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ])
        .await?;
    ensure!(ip == "192.0.2.10", "{ip}");
    kube.kubectl(&["annotate", "svc", "kube-apiserver", "-n", "seed", "note=x"])
        .await?;
    let svc = json(
        &kube
            .kubectl(&["get", "svc", "kube-apiserver", "-n", "seed", "-o", "json"])
            .await?,
    )?;
    ensure!(
        svc["metadata"]["annotations"]["note"] == "x"
            && svc["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.10"
    );

    // Paging: kubectl's --chunk-size sends limit and follows continue.
    for i in 0..7 {
        kube.kubectl(&["create", "configmap", &format!("cm-{i}"), "-n", "seed"])
            .await?;
    }
    let names = kube
        .kubectl(&[
            "get",
            "configmaps",
            "-n",
            "seed",
            "--chunk-size=2",
            "-o",
            "name",
        ])
        .await?;
    ensure!(names.lines().count() == 7, "{names}");

    // Finalizers: delete marks, removal of the last finalizer deletes.
    kube.apply(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, finalizers: [example.com/hold]}\n",
    )
    .await?;
    kube.kubectl(&["delete", "node", "n1", "--wait=false"])
        .await?;
    let ts = kube
        .kubectl(&[
            "get",
            "node",
            "n1",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await?;
    ensure!(!ts.is_empty(), "deletionTimestamp is set");
    kube.kubectl(&[
        "patch",
        "node",
        "n1",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await?;
    ensure!(
        kube.kubectl(&["get", "node", "n1"]).await.is_err(),
        "n1 is gone"
    );

    // A watch sees a change.
    let mut watch = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kube.kubeconfig())
        .args([
            "get",
            "leases",
            "-n",
            "seed",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    kube.kubectl(&[
        "patch",
        "lease",
        "apiway-status",
        "-n",
        "seed",
        "--type=merge",
        "-p",
        r#"{"spec":{"holderIdentity":"b"}}"#,
    ])
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.kill().await?;
    let out = watch.wait_with_output().await?;
    let seen = String::from_utf8_lossy(&out.stdout);
    ensure!(
        seen.contains("\"MODIFIED\"") && seen.contains("\"holderIdentity\":\"b\""),
        "{seen}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_authenticate_and_token_reviews_answer() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admin-token,admin,1,\"system:masters\"\nagent-token,system:serviceaccount:kube-system:apiway-agent,2,\"system:serviceaccounts\",\"apiway-tunnel\"\n",
    )?;
    let tokens = tokens.to_string_lossy().into_owned();
    let kube = KubeApiProcess::start_with(
        APIWAY.as_ref(),
        &["--token-file", &tokens],
        Some("admin-token"),
    )
    .await?;
    kube.kubectl(&["get", "nodes"]).await?;

    // A kubeconfig with an unknown token: 401, in kubectl's words.
    let bad = dir.path().join("bad-kubeconfig");
    std::fs::write(
        &bad,
        apiway_test_support::peers::kubeconfig_text(kube.addr(), kube.ca_file(), "wrong"),
    )?;
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&bad)
        .args(["get", "nodes"])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("Unauthorized"),
        "{stderr}"
    );

    let review = |token: &str, audience: &str| {
        format!(
            "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nmetadata: {{name: r}}\nspec: {{token: {token}, audiences: [{audience}]}}\n"
        )
    };
    let answer = |text: String| -> Result<Value> { json(&text) };
    let ok = answer(
        kube.kubectl_with_input(
            &["create", "--validate=false", "-o", "json", "-f", "-"],
            Some(&review("agent-token", "apiway-tunnel")),
        )
        .await?,
    )?;
    ensure!(ok["status"]["authenticated"] == true, "{ok}");
    ensure!(ok["status"]["user"]["username"] == "system:serviceaccount:kube-system:apiway-agent");
    ensure!(ok["status"]["audiences"][0] == "apiway-tunnel");
    let wrong_audience = answer(
        kube.kubectl_with_input(
            &["create", "--validate=false", "-o", "json", "-f", "-"],
            Some(&review("agent-token", "other")),
        )
        .await?,
    )?;
    ensure!(
        wrong_audience["status"]["authenticated"] == false,
        "{wrong_audience}"
    );
    let unknown = answer(
        kube.kubectl_with_input(
            &["create", "--validate=false", "-o", "json", "-f", "-"],
            Some(&review("nope", "apiway-tunnel")),
        )
        .await?,
    )?;
    ensure!(unknown["status"]["authenticated"] == false, "{unknown}");
    // Departure from a real API server: TokenReviews are not stored, and
    // a `get` of one is refused the same way (405 instead of 404).
    ensure!(kube.kubectl(&["get", "tokenreviews"]).await.is_err());
    Ok(())
}

/// The manifests in `deploy/` apply (the fixture stores them; it runs no
/// pods), and the roles that watch their Node get `NODE_NAME` from the
/// downward API and the RBAC to read Nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_manifests_apply_with_node_name_and_rbac() -> Result<()> {
    let kube = KubeApiProcess::start(APIWAY.as_ref()).await?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    kube.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system}\n")
        .await?;
    for (manifest, namespace, kind, name) in [
        (
            "deploy/gateway/gateway.yaml",
            "apiway",
            "deployment",
            "apiway-gateway",
        ),
        (
            "deploy/agent/daemonset.yaml",
            "kube-system",
            "daemonset",
            "apiway-agent",
        ),
    ] {
        let text = std::fs::read_to_string(root.join(manifest))?;
        kube.apply(&text)
            .await
            .with_context(|| manifest.to_owned())?;
        let workload = json(
            &kube
                .kubectl(&["get", kind, name, "-n", namespace, "-o", "json"])
                .await?,
        )?;
        let env = &workload["spec"]["template"]["spec"]["containers"][0]["env"];
        ensure!(
            env.as_array()
                .is_some_and(|e| e.iter().any(|v| v["name"] == "NODE_NAME"
                    && v["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName")),
            "{manifest}: NODE_NAME from the downward API: {env}"
        );
        let account = workload["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let bindings = json(
            &kube
                .kubectl(&["get", "clusterrolebindings", "-o", "json"])
                .await?,
        )?;
        let roles = json(&kube.kubectl(&["get", "clusterroles", "-o", "json"]).await?)?;
        let bound = bindings["items"].as_array().into_iter().flatten().any(|b| {
            b["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == account.as_str())
                && roles["items"].as_array().into_iter().flatten().any(|r| {
                    r["metadata"]["name"] == b["roleRef"]["name"]
                        && r["rules"].as_array().into_iter().flatten().any(|rule| {
                            rule["resources"]
                                .as_array()
                                .is_some_and(|x| x.contains(&"nodes".into()))
                                && rule["verbs"]
                                    .as_array()
                                    .is_some_and(|v| v.contains(&"watch".into()))
                        })
                })
        });
        ensure!(bound, "{manifest}: {account} may not watch nodes");
    }
    Ok(())
}

/// `apiway standin --self-signed --pki-dir PKI` with `extra` on a free
/// port: the process and its address.
async fn self_signed_standin(
    pki: &std::path::Path,
    extra: &[&str],
) -> Result<(
    apiway_test_support::process::ChildProcess,
    std::net::SocketAddr,
)> {
    let mut command = std::process::Command::new(APIWAY);
    command
        .args(["standin", "--self-signed", "--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--pki-dir")
        .arg(pki);
    let mut process = apiway_test_support::process::Launcher::new(command)
        .ready_file()
        .spawn()?;
    let report = process.wait_for_ready_file(Duration::from_secs(10)).await?;
    let addr = report.listener("https").context("https listener")?;
    Ok((process, addr))
}

/// `apiway standin --self-signed`: no certificate files needed; it writes
/// its CA and a kubeconfig that curl and kubectl use as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_writes_a_ca_and_a_kubeconfig_that_work() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = dir.path().join("pki");
    let (process, addr) = self_signed_standin(&pki, &["--kubernetes-api"]).await?;
    let kubeconfig = pki.join("kubeconfig");
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["create", "namespace", "tried"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg(format!("https://localhost:{}/version/", addr.port()))
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(String::from_utf8_lossy(&out.stdout).contains("gitVersion"));
    let log = process.log_text();
    ensure!(
        log.contains(&kubeconfig.display().to_string()),
        "the kubeconfig's path is printed: {log}"
    );
    Ok(())
}

/// `apiway endpoints` against `apiway standin --self-signed` (no API
/// behind it): each problem said once, in kubectl's words where kubectl
/// has them, and the stand-in answers API groups it does not serve like an
/// API server (404), not with a body that fails to parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_says_each_problem_once_in_kubectls_words() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = dir.path().join("pki");
    let (process, addr) = self_signed_standin(&pki, &[]).await?;
    let good = std::fs::read_to_string(pki.join("kubeconfig"))?;
    let endpoints = |name: &str, text: String| -> Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        let out = std::process::Command::new(APIWAY)
            .args(["endpoints", "--kubeconfig"])
            .arg(&path)
            .output()?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    };

    let out = endpoints("good", good.clone())?;
    ensure!(
        out.contains("does not serve discovery.k8s.io/v1 EndpointSlices"),
        "{out}"
    );
    ensure!(!out.contains("does not parse"), "{out}");
    ensure!(
        out.matches("EndpointSlice discovery:").count() == 1,
        "the prefix said more than once: {out}"
    );

    // A CA that did not sign the server's certificate.
    let other = dir.path().join("other-ca.pem");
    std::fs::write(
        &other,
        apiway_standin::pki::Ca::new("another CA")?.cert_pem(),
    )?;
    let wrong_ca = good.replace(
        &pki.join("ca.crt").display().to_string(),
        &other.display().to_string(),
    );
    let out = endpoints("wrong-ca", wrong_ca)?;
    ensure!(
        out.contains("x509: certificate signed by unknown authority"),
        "{out}"
    );

    // Nothing listens: the address is said once per line.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?
    };
    let out = endpoints(
        "closed",
        good.replace(&addr.to_string(), &closed.to_string()),
    )?;
    ensure!(out.contains("Connection refused"), "{out}");
    ensure!(
        !out.contains(&format!("{closed}: {closed}")),
        "the address said twice: {out}"
    );

    // A plain-HTTP server where the kubeconfig says https.
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let plain_addr = plain.local_addr()?;
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = plain.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    let out = endpoints(
        "plain",
        good.replace(&addr.to_string(), &plain_addr.to_string()),
    )?;
    ensure!(
        out.contains("server gave HTTP response to HTTPS client"),
        "{out}"
    );
    drop(process);
    Ok(())
}

/// `apiway endpoints` with a kubeconfig whose user is an exec credential
/// plugin (what EKS, GKE and AKS kubeconfigs hold): the plugin's token
/// authenticates discovery against a stand-in that requires tokens, and
/// kubectl with the same kubeconfig agrees; a plugin that fails is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_runs_exec_credential_plugins() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = dir.path().join("pki");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "plugin-token,alice,1,\"system:masters\"\n")?;
    let tokens = tokens.to_string_lossy().into_owned();
    let (process, _addr) =
        self_signed_standin(&pki, &["--kubernetes-api", "--token-file", &tokens]).await?;
    let written = std::fs::read_to_string(pki.join("kubeconfig"))?;
    ensure!(written.contains("    token: standin\n"), "{written}");
    // A kubeconfig whose user runs `plugin`, which prints `token`.
    let with_plugin = |name: &str, token: &str, exit: u8| -> Result<std::path::PathBuf> {
        let plugin = dir.path().join(format!("{name}.sh"));
        let runs = dir.path().join(format!("{name}.runs"));
        std::fs::write(
            &plugin,
            format!(
                "#!/bin/sh\necho run >> {runs}\n[ {exit} = 0 ] || {{ echo 'token service unavailable' >&2; exit {exit}; }}\nprintf '%s' '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\",\"expirationTimestamp\":\"2999-01-01T00:00:00Z\"}}}}'\n",
                runs = runs.display()
            ),
        )?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755))?;
        let path = dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            written.replace(
                "    token: standin\n",
                &format!(
                    "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
                    plugin.display()
                ),
            ),
        )?;
        Ok(path)
    };
    let endpoints = |kubeconfig: &std::path::Path| -> Result<(bool, Value, String)> {
        let out = std::process::Command::new(APIWAY)
            .args(["endpoints", "--output", "json", "--kubeconfig"])
            .arg(kubeconfig)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        Ok((out.status.success(), report, format!("{stdout}{stderr}")))
    };

    let good = with_plugin("good", "plugin-token", 0)?;
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&good)
        .args(["get", "endpointslices", "-n", "default"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl with the plugin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, report, text) = endpoints(&good)?;
    ensure!(ok, "{text}");
    ensure!(
        report["discovery"]["endpoints"].is_u64(),
        "discovery listed EndpointSlices with the plugin's token: {text}"
    );
    ensure!(dir.path().join("good.runs").exists(), "the plugin ran");

    // The same through a token the API server does not know: discovery is
    // refused, so the token in use is the plugin's.
    let wrong = with_plugin("wrong", "unknown-token", 0)?;
    let (_, report, text) = endpoints(&wrong)?;
    let error = report["discovery"]["error"].as_str().unwrap_or_default();
    ensure!(
        error.contains("401") || error.contains("Unauthorized"),
        "{text}"
    );

    // A plugin that fails: its command and its words are in the error.
    let failing = with_plugin("failing", "x", 3)?;
    let (ok, _, text) = endpoints(&failing)?;
    ensure!(!ok, "{text}");
    ensure!(text.contains("failing.sh"), "the plugin is named: {text}");
    ensure!(text.contains("token service unavailable"), "{text}");
    drop(process);
    Ok(())
}
