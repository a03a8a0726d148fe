//! A [`ClientConfig`] from a `kube::Config` (feature `kube`): what a
//! kubeconfig file or the in-cluster service account says, carried over
//! where the HTTP/2 client can honour it, refused with a clear error where
//! it cannot.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use kube::client::ConfigExt;
use secrecy::ExposeSecret;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

use crate::config::ClientConfig;
use crate::credentials::{AuthorizationFuture, Credentials, TokenFile};
use crate::error::Error;

impl ClientConfig {
    /// The settings of `config` (as `kube::Config::infer`,
    /// `from_kubeconfig` or `incluster` make it):
    ///
    /// - the origin is `cluster_url`, and `tls_server_name` its TLS name;
    /// - TLS is kube's own rustls config: the cluster's CA (or the system
    ///   roots when the kubeconfig names none) and the client certificate
    ///   and key, if any;
    /// - `token` is sent as a bearer token; a `token_file` becomes a
    ///   [`TokenFile`] (read again once a minute, so a rotated
    ///   service-account token is picked up); an `exec` credential plugin
    ///   (the kind EKS, GKE and AKS kubeconfigs use) runs through kube's own
    ///   auth layer: here, and again when its token is a minute from its
    ///   `expirationTimestamp`. A plugin that returns a client certificate
    ///   instead is run here for the TLS settings; the certificate is not
    ///   renewed while the client runs;
    /// - extra `headers` are sent with every request; `connect_timeout`
    ///   is used for TCP connects.
    ///
    /// Refused with [`Error::KubeConfig`]: auth providers (use an exec
    /// plugin or the HTTP/1.1 path), basic auth, impersonation, a proxy URL
    /// and `insecure-skip-tls-verify` (give the cluster's CA instead).
    pub fn from_kube_config(config: &kube::Config) -> Result<ClientConfig, Error> {
        refuse_unsupported(config)?;
        let tls = config
            .rustls_client_config()
            .map_err(|e| Error::KubeConfig(format!("TLS settings: {e}")))?;
        let mut out = ClientConfig::new(&config.cluster_url.to_string(), Arc::new(tls))?;
        out.origin_server_name = config.tls_server_name.clone();
        if let Some(timeout) = config.connect_timeout {
            out.connect_timeout = timeout;
        }
        let auth = &config.auth_info;
        if let Some(token) = &auth.token {
            out = out.with_bearer_token(token.expose_secret())?;
        } else if let Some(path) = &auth.token_file {
            let file = TokenFile::new(path).map_err(|e| Error::KubeConfig(e.to_string()))?;
            out.credentials = Some(Arc::new(file));
        } else if let Some(exec) = &auth.exec {
            out.credentials = exec_credentials(config).map_err(|e| {
                let command = exec.command.as_deref().unwrap_or("?");
                Error::KubeConfig(format!("exec credential plugin `{command}`: {e}"))
            })?;
        }
        for (name, value) in &config.headers {
            out.headers.append(name.clone(), value.clone());
        }
        Ok(out)
    }
}

/// Every setting the HTTP/2 client cannot honour, with what to do instead.
fn refuse_unsupported(config: &kube::Config) -> Result<(), Error> {
    let auth = &config.auth_info;
    let refusals = [
        (
            config.accept_invalid_certs,
            "insecure-skip-tls-verify is not supported: give the cluster's CA (certificate-authority) instead",
        ),
        (
            config.proxy_url.is_some(),
            "proxy-url is not supported: the client dials API server endpoints directly",
        ),
        (
            auth.auth_provider.is_some(),
            "auth-provider is not supported: use an exec credential plugin (kubelogin, gke-gcloud-auth-plugin, aws eks get-token) instead",
        ),
        (
            auth.username.is_some() || auth.password.is_some(),
            "basic auth (username/password) is not supported: use a token or a client certificate",
        ),
        (
            auth.impersonate.is_some()
                || auth.impersonate_uid.is_some()
                || auth.impersonate_groups.is_some()
                || auth.impersonate_user_extra.is_some(),
            "impersonation (as, as-uid, as-groups, as-user-extra) is not supported on the HTTP/2 path: use Client::http1_kube_client",
        ),
    ];
    match refusals.into_iter().find(|(refused, _)| *refused) {
        Some((_, reason)) => Err(Error::KubeConfig(reason.to_owned())),
        None => Ok(()),
    }
}

/// kube's auth layer for `config` (an exec plugin), as [`Credentials`];
/// `None` when it adds no header (the plugin gave a client certificate).
fn exec_credentials(config: &kube::Config) -> Result<Option<Arc<dyn Credentials>>, String> {
    let Some(layer) = config.auth_layer().map_err(|e| error_chain(&e))? else {
        return Ok(None);
    };
    // The layer adds the header to a request; the service under it hands
    // the header back (as a response, which is what kube's layers wrap).
    let header = tower::service_fn(|request: http::Request<Empty<Bytes>>| async move {
        Ok::<_, tower::BoxError>(http::Response::new(
            request.headers().get(http::header::AUTHORIZATION).cloned(),
        ))
    });
    let service = layer.layer(header).map_response(http::Response::into_body);
    Ok(Some(Arc::new(KubeCredentials {
        service: BoxCloneSyncService::new(service),
    })))
}

/// `Authorization` values from kube's auth layer for an exec plugin, which
/// caches them and runs the plugin again when they are about to expire.
struct KubeCredentials {
    service: BoxCloneSyncService<
        http::Request<Empty<Bytes>>,
        Option<http::HeaderValue>,
        tower::BoxError,
    >,
}

impl std::fmt::Debug for KubeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeCredentials")
    }
}

impl Credentials for KubeCredentials {
    fn authorization(&self) -> AuthorizationFuture<'_> {
        let service = self.service.clone();
        Box::pin(async move {
            let mut value = service
                .oneshot(http::Request::new(Empty::new()))
                .await
                .map_err(|e| error_chain(&*e))?;
            if let Some(value) = &mut value {
                value.set_sensitive(true);
            }
            Ok(value)
        })
    }
}

/// An error and its sources, each said once
/// ([`with_causes`](apiway_core::causes::with_causes)); a plugin that
/// failed is said as its exit status and what it wrote to stderr.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(kube::client::AuthError::AuthExecRun { out, .. }) = e.downcast_ref() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stderr = stderr.trim();
            return match stderr.is_empty() {
                true => format!("the plugin failed ({})", out.status),
                false => format!("the plugin failed ({}): {stderr}", out.status),
            };
        }
        next = e.source();
    }
    apiway_core::causes::with_causes(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig for `https://api-int.example:6443` trusting a fresh
    /// CA (written into `dir`), with `user` as the user entry.
    fn kubeconfig(dir: &std::path::Path, user: &str) -> String {
        let ca = apiway_standin::Ca::new("kube config test CA").expect("CA");
        let ca_path = dir.join("ca.pem");
        std::fs::write(&ca_path, ca.cert_pem()).expect("write CA");
        format!(
            r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://api-int.example:6443
    certificate-authority: {}
    tls-server-name: kubernetes.default
contexts:
- name: c
  context: {{cluster: c, user: u, namespace: team-a}}
current-context: c
users:
- name: u
  user: {user}
"#,
            ca_path.display()
        )
    }

    async fn kube_config(text: &str) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(text).expect("kubeconfig parses");
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kube config")
    }

    #[tokio::test]
    async fn carries_origin_server_name_and_token() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = kubeconfig(dir.path(), r#"{token: "secret-token"}"#);
        let config =
            ClientConfig::from_kube_config(&kube_config(&text).await).expect("supported config");
        assert_eq!(config.origin.to_string(), "api-int.example:6443");
        assert_eq!(
            config.origin_server_name.as_deref(),
            Some("kubernetes.default")
        );
        let authorization = config
            .headers
            .get(http::header::AUTHORIZATION)
            .expect("a bearer token");
        assert_eq!(authorization, "Bearer secret-token");
        assert!(authorization.is_sensitive());
    }

    async fn authorization(config: &ClientConfig) -> String {
        let credentials = config.credentials.as_deref().expect("credentials");
        crate::credentials::tests::header(credentials).await
    }

    #[tokio::test]
    async fn reads_the_token_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "file-token\n").expect("write token");
        let text = kubeconfig(dir.path(), &format!("{{tokenFile: {}}}", path.display()));
        let config =
            ClientConfig::from_kube_config(&kube_config(&text).await).expect("supported config");
        assert_eq!(authorization(&config).await, "Bearer file-token");
    }

    /// An exec plugin that counts its runs and gives token N on run N,
    /// expiring at `expiry` (shell words: a timestamp or a `$(date ...)`).
    fn exec_plugin(dir: &std::path::Path, expiry: &str) -> String {
        let script = dir.join("plugin.sh");
        let count = dir.join("count");
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 ))
echo $n > {count}
printf '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"exec-%s","expirationTimestamp":"%s"}}}}' $n "{expiry}"
"#,
                count = count.display()
            ),
        )
        .expect("write plugin");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        format!(
            "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {}, interactiveMode: Never}}}}",
            script.display()
        )
    }

    fn runs(dir: &std::path::Path) -> u32 {
        std::fs::read_to_string(dir.join("count"))
            .map(|t| t.trim().parse().expect("count"))
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn exec_plugin_token_is_cached_until_it_expires() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = kubeconfig(dir.path(), &exec_plugin(dir.path(), "2999-01-01T00:00:00Z"));
        let config =
            ClientConfig::from_kube_config(&kube_config(&text).await).expect("supported config");
        let first = authorization(&config).await;
        assert!(first.starts_with("Bearer exec-"), "{first}");
        let before = runs(dir.path());
        assert_eq!(authorization(&config).await, first);
        assert_eq!(
            runs(dir.path()),
            before,
            "a valid token is not fetched again"
        );
    }

    #[tokio::test]
    async fn exec_plugin_runs_again_when_the_token_is_about_to_expire() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Within the minute before expiry, so each request asks again.
        let soon = "$(date -u -d '+30 seconds' +%Y-%m-%dT%H:%M:%SZ)";
        let text = kubeconfig(dir.path(), &exec_plugin(dir.path(), soon));
        let config =
            ClientConfig::from_kube_config(&kube_config(&text).await).expect("supported config");
        let first = authorization(&config).await;
        let before = runs(dir.path());
        let second = authorization(&config).await;
        assert_eq!(runs(dir.path()), before + 1);
        assert_ne!(first, second);
        assert_eq!(second, format!("Bearer exec-{}", before + 1));
    }

    #[tokio::test]
    async fn a_failing_exec_plugin_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = kubeconfig(
            dir.path(),
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /nonexistent/get-token}}",
        );
        let err = ClientConfig::from_kube_config(&kube_config(&text).await)
            .expect_err("the plugin cannot run");
        assert!(err.to_string().contains("/nonexistent/get-token"), "{err}");
    }

    #[tokio::test]
    async fn refuses_what_it_cannot_carry() {
        let cases = [
            (
                r#"{auth-provider: {name: oidc, config: {}}}"#,
                "exec credential plugin",
            ),
            (r#"{username: a, password: b}"#, "basic auth"),
            (r#"{token: t, as: someone}"#, "impersonation"),
        ];
        let dir = tempfile::tempdir().expect("temp dir");
        for (user, expected) in cases {
            let text = kubeconfig(dir.path(), user);
            let err =
                ClientConfig::from_kube_config(&kube_config(&text).await).expect_err("refused");
            assert!(err.to_string().contains(expected), "{user}: {err}");
        }
        let mut insecure = kube_config(&kubeconfig(dir.path(), "{token: t}")).await;
        insecure.accept_invalid_certs = true;
        let err = ClientConfig::from_kube_config(&insecure).expect_err("refused");
        assert!(
            err.to_string().contains("insecure-skip-tls-verify"),
            "{err}"
        );
    }
}
