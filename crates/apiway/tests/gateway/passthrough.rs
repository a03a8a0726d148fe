//! TLS passthrough: the gateway never terminates TLS, so a backend that
//! requires client certificates sees the client's own certificate.

use anyhow::{ensure, Context, Result};

use crate::support::tools::{answer_json, curl, openssl_get};
use crate::support::{GatewayProcess, Pki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_requiring_client_certificates_sees_the_clients_certificate() -> Result<()> {
    let pki = Pki::new()?;
    let standin = pki
        .standin("cluster-m", &["api.m.example.com"], true)
        .await?;
    let gateway = GatewayProcess::start(&format!(
        r#"
admin: {{address: 127.0.0.1:0}}
listeners: [{{name: public, address: 127.0.0.1:0, kind: tls}}]
routes:
  - name: cluster-m
    hostnames: [api.m.example.com]
    backends: [{{address: {}}}]
"#,
        standin.addr()
    ))
    .await?;
    let ca = pki.ca_pem.to_string_lossy().into_owned();
    let cert = pki.client_cert.to_string_lossy().into_owned();
    let key = pki.client_key.to_string_lossy().into_owned();

    // openssl with the client certificate: the handshake completes with the
    // backend, which reports the certificate's CN.
    let ran = openssl_get(
        gateway.addr(),
        Some("api.m.example.com"),
        "/whoami",
        &[
            "-CAfile",
            &ca,
            "-cert",
            &cert,
            "-key",
            &key,
            "-verify_return_error",
        ],
    )
    .await?;
    let json = answer_json(&ran.stdout).with_context(|| format!("no answer: {ran:?}"))?;
    ensure!(json["server"] == "cluster-m", "{json}");
    ensure!(
        json["client_cn"] == "alice",
        "the backend did not see the client certificate: {json}"
    );
    ensure!(
        json["client_organizations"][0] == "system:masters",
        "{json}"
    );

    // Without a certificate the backend refuses (TLS 1.3 reports it after
    // the client's Finished, as the certificate_required alert).
    let ran = openssl_get(
        gateway.addr(),
        Some("api.m.example.com"),
        "/whoami",
        &["-CAfile", &ca],
    )
    .await?;
    ensure!(
        answer_json(&ran.stdout).is_none(),
        "answered without a client certificate: {ran:?}"
    );
    ensure!(
        ran.stderr.contains("certificate required") || ran.stderr.contains("alert number 116"),
        "expected the backend's certificate_required alert: {ran:?}"
    );

    // curl with the certificate, over HTTP/2.
    let answer = curl(
        gateway.addr(),
        "api.m.example.com",
        "/whoami",
        &pki,
        true,
        &["--cert", &cert, "--key", &key],
    )
    .await?;
    ensure!(answer.status_line.starts_with("HTTP/2 200"), "{answer:?}");
    ensure!(
        answer.json_field("client_cn").as_deref() == Some("alice"),
        "{answer:?}"
    );
    Ok(())
}
