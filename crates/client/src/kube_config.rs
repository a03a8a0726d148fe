//! A [`ClientConfig`] from a `kube::Config` (feature `kube`): what a
//! kubeconfig file or the in-cluster service account says, carried over
//! where the HTTP/2 client can honour it, refused with a clear error where
//! it cannot.

use std::sync::Arc;

use kube::client::ConfigExt;
use secrecy::ExposeSecret;

use crate::config::ClientConfig;
use crate::error::Error;

impl ClientConfig {
    /// The settings of `config` (as `kube::Config::infer`,
    /// `from_kubeconfig` or `incluster` make it):
    ///
    /// - the origin is `cluster_url`, and `tls_server_name` its TLS name;
    /// - TLS is kube's own rustls config: the cluster's CA (or the system
    ///   roots when the kubeconfig names none) and the client certificate
    ///   and key, if any;
    /// - `token`, or else the contents of `token_file`, is sent as a bearer
    ///   token. The file is read once, here: a rotating service-account
    ///   token needs a new client before it expires, or the HTTP/1.1 path
    ///   ([`Client::http1_kube_client`](crate::Client::http1_kube_client)),
    ///   whose kube auth layer re-reads it;
    /// - extra `headers` are sent with every request; `connect_timeout`
    ///   is used for TCP connects.
    ///
    /// Refused with [`Error::KubeConfig`]: exec plugins and auth providers
    /// (use the HTTP/1.1 path), basic auth, impersonation, a proxy URL and
    /// `insecure-skip-tls-verify` (give the cluster's CA instead).
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
            let token = std::fs::read_to_string(path)
                .map_err(|e| Error::KubeConfig(format!("reading the token file {path}: {e}")))?;
            out = out.with_bearer_token(&token)?;
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
            auth.exec.is_some(),
            "exec credential plugins are not supported on the HTTP/2 path: use Client::http1_kube_client, whose kube auth layer runs them",
        ),
        (
            auth.auth_provider.is_some(),
            "auth-provider is not supported on the HTTP/2 path: use Client::http1_kube_client",
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

    #[tokio::test]
    async fn reads_the_token_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "file-token\n").expect("write token");
        let text = kubeconfig(dir.path(), &format!("{{tokenFile: {}}}", path.display()));
        let config =
            ClientConfig::from_kube_config(&kube_config(&text).await).expect("supported config");
        assert_eq!(
            config
                .headers
                .get(http::header::AUTHORIZATION)
                .expect("token"),
            "Bearer file-token"
        );
    }

    #[tokio::test]
    async fn refuses_what_it_cannot_carry() {
        let cases = [
            (
                r#"{exec: {apiVersion: client.authentication.k8s.io/v1, command: get-token}}"#,
                "exec credential plugins",
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
