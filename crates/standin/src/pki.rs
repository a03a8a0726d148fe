//! A throw-away certificate authority for tests and the demo.
//!
//! [`Ca`] issues server certificates (with DNS and IP subject alternative
//! names) and client certificates (CN = user, O = groups, as Kubernetes reads
//! them). [`server_config`] and [`client_config`] turn them into rustls
//! configurations that always use the `ring` crypto provider explicitly, so
//! nothing depends on a process-wide default provider.
//!
//! Keys are ECDSA P-256; certificates are valid from 2020 to 2100.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN protocol id for HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN protocol id for HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// A self-signed certificate authority that can issue leaf certificates.
pub struct Ca {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A certificate and its private key, both PEM-encoded.
#[derive(Clone)]
pub struct Issued {
    /// The certificate (a single PEM `CERTIFICATE` block).
    pub cert_pem: String,
    /// The private key (a PEM `PRIVATE KEY` block, PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

impl Ca {
    /// Creates a new CA with a fresh key and the given common name.
    pub fn new(common_name: &str) -> Result<Ca> {
        let mut params = base_params(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().context("generating the CA key")?;
        let cert = params
            .self_signed(&key)
            .context("self-signing the CA certificate")?;
        let key_pem = key.serialize_pem();
        Ok(Ca {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate in PEM form (what clients and servers trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate in DER form.
    pub fn cert_der(&self) -> Result<CertificateDer<'static>> {
        cert_der_from_pem(&self.cert_pem)
    }

    /// Issues a server certificate valid for the given DNS names and IPs.
    ///
    /// The common name is the first DNS name (or the first IP). The
    /// certificate carries the `serverAuth` extended key usage only.
    pub fn issue_server(&self, dns_names: &[&str], ips: &[IpAddr]) -> Result<Issued> {
        self.issue_leaf(dns_names, ips, &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// Issues a certificate usable both as a server and as a client
    /// certificate (`serverAuth` and `clientAuth`), as etcd wants for its
    /// own cert (its gRPC gateway dials itself with it).
    pub fn issue_peer(&self, dns_names: &[&str], ips: &[IpAddr]) -> Result<Issued> {
        self.issue_leaf(
            dns_names,
            ips,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// Issues a client certificate with the given common name and
    /// organizations (Kubernetes maps them to user name and groups).
    ///
    /// At most two organizations are supported (a limit of rcgen's
    /// distinguished-name type).
    pub fn issue_client(&self, common_name: &str, organizations: &[&str]) -> Result<Issued> {
        // rcgen keeps one value per attribute type; the O attribute spelled
        // as a custom OID is a second type, which gives two O entries.
        const ORGANIZATION_OID: &[u64] = &[2, 5, 4, 10];
        let org_types = [
            DnType::OrganizationName,
            DnType::CustomDnType(ORGANIZATION_OID.to_vec()),
        ];
        if organizations.len() > org_types.len() {
            return Err(anyhow!(
                "at most {} organizations (Kubernetes groups) per client certificate, got {}",
                org_types.len(),
                organizations.len()
            ));
        }
        let mut params = base_params(common_name);
        for (ty, org) in org_types.into_iter().zip(organizations) {
            params.distinguished_name.push(ty, *org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    /// A client certificate for `common_name` that expired on 2021-01-01
    /// (for tests of expired credentials).
    pub fn issue_expired_client(&self, common_name: &str) -> Result<Issued> {
        let mut params = base_params(common_name);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    /// Writes `stem.crt` and `stem.key` into `dir` and returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf)> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }

    fn issue_leaf(
        &self,
        dns_names: &[&str],
        ips: &[IpAddr],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Result<Issued> {
        let common_name = match (dns_names.first(), ips.first()) {
            (Some(name), _) => (*name).to_string(),
            (None, Some(ip)) => ip.to_string(),
            (None, None) => {
                return Err(anyhow!(
                    "a server certificate needs at least one DNS name or IP address"
                ))
            }
        };
        let mut params = base_params(&common_name);
        for name in dns_names {
            let name = (*name)
                .to_string()
                .try_into()
                .with_context(|| format!("invalid DNS name {name:?} for a certificate"))?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        for ip in ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        params.extended_key_usages = usages.to_vec();
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Issued> {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().context("generating a leaf key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a leaf certificate")?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl Issued {
    /// Loads a certificate and key from PEM files.
    pub fn from_files(cert_path: &Path, key_path: &Path) -> Result<Issued> {
        let cert_pem = fs::read_to_string(cert_path)
            .with_context(|| format!("reading certificate {}", cert_path.display()))?;
        let key_pem = fs::read_to_string(key_path)
            .with_context(|| format!("reading private key {}", key_path.display()))?;
        Ok(Issued { cert_pem, key_pem })
    }

    /// Writes `stem.crt` and `stem.key` into `dir` and returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf)> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }

    /// The certificate chain in DER form.
    pub fn cert_chain(&self) -> Result<Vec<CertificateDer<'static>>> {
        certs_from_pem(&self.cert_pem)
    }

    /// The private key in DER form.
    pub fn key_der(&self) -> Result<PrivateKeyDer<'static>> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| anyhow!("parsing a PEM private key: {e}"))
    }
}

/// Builds a rustls server configuration serving `issued`.
///
/// With `client_ca`, a client certificate signed by that CA is required.
/// `alpn` lists the protocols to offer, most preferred first (e.g.
/// `&[ALPN_H2, ALPN_HTTP11]`).
pub fn server_config(
    issued: &Issued,
    client_ca: Option<&Ca>,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>> {
    server_config_from_pem(issued, client_ca.map(Ca::cert_pem), alpn)
}

/// Like [`server_config`], with the client CA given as PEM (one or more
/// certificates), e.g. read from a file.
pub fn server_config_from_pem(
    issued: &Issued,
    client_ca_pem: Option<&str>,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?;
    let builder = match client_ca_pem {
        Some(pem) => {
            let roots = root_store(pem)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("building the client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(issued.cert_chain()?, issued.key_der()?)
        .context("loading the server certificate and key")?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// Builds a rustls client configuration trusting `ca`, optionally presenting
/// `client_cert`, offering the `alpn` protocols (empty: no ALPN extension).
pub fn client_config(
    ca: &Ca,
    client_cert: Option<&Issued>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>> {
    client_config_from_pem(ca.cert_pem(), client_cert, alpn)
}

/// Like [`client_config`], with the trusted CA given as PEM.
pub fn client_config_from_pem(
    ca_pem: &str,
    client_cert: Option<&Issued>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_root_certificates(root_store(ca_pem)?);
    let mut config = match client_cert {
        Some(issued) => builder
            .with_client_auth_cert(issued.cert_chain()?, issued.key_der()?)
            .context("loading the client certificate and key")?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// Parses every `CERTIFICATE` block in `pem`; at least one is required.
pub fn certs_from_pem(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("parsing PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(anyhow!("no PEM certificate found"));
    }
    Ok(certs)
}

fn cert_der_from_pem(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| anyhow!("parsing a PEM certificate: {e}"))
}

fn root_store(ca_pem: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(ca_pem)? {
        roots
            .add(cert)
            .context("adding a CA certificate to the trust store")?;
    }
    Ok(roots)
}

fn base_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
    params
}

fn write_pair(dir: &Path, stem: &str, cert_pem: &str, key_pem: &str) -> Result<(PathBuf, PathBuf)> {
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    fs::write(&cert_path, cert_pem).with_context(|| format!("writing {}", cert_path.display()))?;
    fs::write(&key_path, key_pem).with_context(|| format!("writing {}", key_path.display()))?;
    Ok((cert_path, key_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_parse_into_rustls_configs() -> Result<()> {
        let ca = Ca::new("test ca")?;
        let server = ca.issue_server(&["api.example"], &["127.0.0.1".parse()?])?;
        let client = ca.issue_client("alice", &["system:masters"])?;
        server_config(&server, Some(&ca), &[ALPN_H2, ALPN_HTTP11])?;
        client_config(&ca, Some(&client), &[ALPN_H2])?;
        assert_eq!(server.cert_chain()?.len(), 1);
        Ok(())
    }

    #[test]
    fn client_certificate_takes_up_to_two_organizations() -> Result<()> {
        let ca = Ca::new("test ca")?;
        assert!(ca.issue_client("a", &["g1", "g2"]).is_ok());
        assert!(ca.issue_client("a", &["g1", "g2", "g3"]).is_err());
        Ok(())
    }

    #[test]
    fn server_certificate_needs_a_name() -> Result<()> {
        let ca = Ca::new("test ca")?;
        assert!(ca.issue_server(&[], &[]).is_err());
        Ok(())
    }

    #[test]
    fn write_creates_crt_and_key() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let ca = Ca::new("test ca")?;
        let (crt, key) = ca.write(dir.path(), "ca")?;
        assert!(fs::read_to_string(crt)?.contains("BEGIN CERTIFICATE"));
        assert!(fs::read_to_string(key)?.contains("PRIVATE KEY"));
        Ok(())
    }
}
