//! Who an agent is: the subject of the client certificate it proved it
//! holds, never a name it chose. And the server's TLS settings, re-read
//! when their files change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;

/// The server's TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Serving chain.
    pub cert: PathBuf,
    /// Serving key.
    pub key: PathBuf,
    /// Client CA; `None`: agents authenticate with tokens only.
    pub client_ca: Option<PathBuf>,
}

/// The TLS server settings for `files`: the serving chain and key, client
/// certificates verified against the client CA (required unless
/// `tokens_too`: then an agent may present a bearer token instead), ALPN
/// `h2`.
pub fn server_config(files: &TlsFiles, tokens_too: bool) -> Result<Arc<ServerConfig>, String> {
    use apiway_core::tls::{load_certs, load_key, provider};
    let chain = load_certs(&files.cert).map_err(|e| format!("--cert {e}"))?;
    let key = load_key(&files.key).map_err(|e| format!("--key {e}"))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &files.client_ca {
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in load_certs(ca_file).map_err(|e| format!("--client-ca {e}"))? {
                roots
                    .add(ca)
                    .map_err(|e| format!("--client-ca {}: {e}", ca_file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = if tokens_too {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("--client-ca {}: {e}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "--cert {} / --key {}: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The identity a verified client certificate proves: its subject's CN,
/// else its first DNS, URI or IP SAN.
pub fn of_certificate(cert: &CertificateDer<'_>) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    if let Some(cn) = cert
        .subject()
        .iter_common_name()
        .find_map(|a| a.as_str().ok())
        .filter(|cn| !cn.is_empty())
    {
        return Some(cn.to_owned());
    }
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        GeneralName::DNSName(d) => Some((*d).to_owned()),
        GeneralName::URI(u) => Some((*u).to_owned()),
        GeneralName::IPAddress(b) => match b.len() {
            4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*b).ok()?).to_string()),
            16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*b).ok()?).to_string()),
            _ => None,
        },
        _ => None,
    })
}

/// The current TLS settings, swapped when the files change.
pub struct ReloadingTls {
    current: ArcSwap<ServerConfig>,
    tokens_too: bool,
}

impl ReloadingTls {
    /// Reads the files once.
    pub fn new(files: &TlsFiles, tokens_too: bool) -> Result<Arc<ReloadingTls>, String> {
        Ok(Arc::new(ReloadingTls {
            current: ArcSwap::new(server_config(files, tokens_too)?),
            tokens_too,
        }))
    }

    /// What a new connection uses.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Re-reads `files` every `interval` when one of them changed; a
    /// change that does not load is logged and the running settings stay.
    pub fn watch(self: &Arc<Self>, files: TlsFiles, interval: Duration, stop: CancellationToken) {
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            let stamp = |files: &TlsFiles| -> Vec<Option<SystemTime>> {
                [
                    Some(&files.cert),
                    Some(&files.key),
                    files.client_ca.as_ref(),
                ]
                .into_iter()
                .flatten()
                .map(|p| modified(p))
                .collect()
            };
            let mut seen = stamp(&files);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let Some(this) = this.upgrade() else { return };
                let now = stamp(&files);
                if now == seen {
                    continue;
                }
                seen = now;
                match server_config(&files, this.tokens_too) {
                    Ok(config) => {
                        this.current.store(config);
                        tracing::info!(
                            "TLS certificate, key or client CA changed; new connections use them"
                        );
                    }
                    Err(e) => tracing::warn!(
                        "TLS files changed but do not load; keeping the running ones: {e}"
                    ),
                }
            }
        });
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
