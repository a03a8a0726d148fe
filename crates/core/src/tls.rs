//! TLS client settings for probes and dialers, built on rustls with the ring
//! provider. Certificates are read from PEM with `rustls-pki-types`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// TLS settings of a client connection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsClientOptions {
    /// Server name to send and verify (default: chosen by the caller).
    pub server_name: Option<String>,
    /// CA certificates (PEM) to verify the server against; without it the
    /// certificate is not verified.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) to present.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// A TLS setting that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or held nothing usable.
    #[error("{path}: {problem}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The crypto provider used everywhere (never the process default).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_err = |problem: String| TlsError::Pem {
        path: path.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_err("holds no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// Reads the private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        problem: format!("no usable private key: {e}"),
    })
}

/// Builds a client configuration offering `alpn`.
pub fn client_config(
    opts: &TlsClientOptions,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match &opts.ca_file {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(ca)? {
                roots.add(cert)?;
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider()))),
    };
    let mut config = match &opts.client_cert {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// What identifies a version of a file: its size and modification time.
type FileStamp = Option<(u64, Option<SystemTime>)>;

fn file_stamp(path: &Path) -> FileStamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()))
}

fn stamps(opts: &TlsClientOptions) -> Vec<FileStamp> {
    let files = opts
        .ca_file
        .iter()
        .chain(opts.client_cert.iter().flat_map(|(c, k)| [c, k]));
    files.map(|f| file_stamp(f)).collect()
}

type CacheKey = (TlsClientOptions, Vec<Vec<u8>>);
type Cache = Mutex<HashMap<CacheKey, (Vec<FileStamp>, Arc<ClientConfig>)>>;

/// [`client_config`], built once and built again only when one of its
/// files (CA, certificate, key) changes: rotated certificates (a renewed
/// Secret, a CA bundle update) are picked up without a restart, and a
/// caller that connects often does not read and parse PEM every time.
pub fn cached_client_config(
    opts: &TlsClientOptions,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, TlsError> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (opts.clone(), alpn.iter().map(|p| p.to_vec()).collect());
    let now = stamps(opts);
    if let Some((seen, config)) = crate::sync::lock(cache).get(&key) {
        if *seen == now {
            return Ok(config.clone());
        }
    }
    let config = client_config(opts, alpn)?;
    crate::sync::lock(cache).insert(key, (now, config.clone()));
    Ok(config)
}

/// Accepts any certificate but still checks the handshake signatures, so the
/// peer must hold the key of the certificate it shows. Used only when the
/// operator gave no CA: the check then proves TLS works, not who answers.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_ca(path: &Path) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["ca".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(path, cert.pem()).unwrap();
    }

    #[test]
    fn cached_configs_are_rebuilt_when_a_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        write_ca(&ca);
        let opts = TlsClientOptions {
            ca_file: Some(ca.clone()),
            ..TlsClientOptions::default()
        };
        let a = cached_client_config(&opts, &[b"h2"]).unwrap();
        let b = cached_client_config(&opts, &[b"h2"]).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "unchanged files: the same config");
        let other_alpn = cached_client_config(&opts, &[b"http/1.1"]).unwrap();
        assert!(!Arc::ptr_eq(&a, &other_alpn));
        // A rotated CA (a different size is a sure change even on coarse
        // modification-time clocks).
        std::fs::write(&ca, format!("{}\n", std::fs::read_to_string(&ca).unwrap())).unwrap();
        let c = cached_client_config(&opts, &[b"h2"]).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "a changed CA file: read again");
        std::fs::write(&ca, "garbage").unwrap();
        assert!(cached_client_config(&opts, &[b"h2"]).is_err());
    }
}
