//! Active health checks: a TCP connect, or an HTTPS `GET` of a path such as
//! `/readyz` that must answer 2xx. One task per endpoint set probes every
//! endpoint each interval and re-resolves DNS names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http_body_util::Empty;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::endpoint::{Endpoint, EndpointSet};
use crate::tls::{client_config, TlsClientOptions};

/// What a health check does.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// A TCP connect succeeds.
    Tcp,
    /// An HTTPS `GET path` answers 2xx.
    Https,
}

/// An active health check as written in configuration.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// `tcp` or `https`.
    pub kind: CheckKind,
    /// Path for `https` (default `/readyz`).
    #[serde(default)]
    pub path: Option<String>,
    /// Time between checks (default 2s).
    #[serde(default, with = "crate::duration::option")]
    pub interval: Option<Duration>,
    /// Time a check may take (default: the interval, at most 2s).
    #[serde(default, with = "crate::duration::option")]
    pub timeout: Option<Duration>,
    /// Consecutive passes that bring a down endpoint up (default 1).
    #[serde(default)]
    pub rise: Option<u32>,
    /// Consecutive failures that take an up endpoint down (default 2).
    #[serde(default)]
    pub fall: Option<u32>,
    /// TLS server name for `https` (default: the endpoint's host).
    #[serde(default)]
    pub server_name: Option<String>,
    /// PEM file of CA certificates that must sign the endpoint's certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Do not verify the certificate (the default when no `ca_file` is given:
    /// the check then proves only that TLS and HTTP work).
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// A validated health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// What to probe.
    pub probe: Probe,
    /// Time between checks.
    pub interval: Duration,
    /// Time a check may take.
    pub timeout: Duration,
    /// Consecutive passes that bring a down endpoint up.
    pub rise: u32,
    /// Consecutive failures that take an up endpoint down.
    pub fall: u32,
}

/// The probe of a health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// TCP connect.
    Tcp,
    /// HTTPS GET.
    Https {
        /// Request path.
        path: String,
        /// TLS settings.
        tls: TlsClientOptions,
    },
}

impl HealthCheckConfig {
    /// Validates into a [`HealthCheck`]; the error names the bad field.
    pub fn validate(&self) -> Result<HealthCheck, String> {
        let interval = self.interval.unwrap_or(Duration::from_secs(2));
        if interval < Duration::from_millis(50) {
            return Err(format!(
                "health_check.interval {interval:?} is too short; use at least 50ms"
            ));
        }
        let timeout = self
            .timeout
            .unwrap_or_else(|| interval.min(Duration::from_secs(2)));
        if timeout.is_zero() {
            return Err("health_check.timeout must be more than 0".into());
        }
        let rise = self.rise.unwrap_or(1);
        let fall = self.fall.unwrap_or(2);
        if rise == 0 || fall == 0 {
            return Err("health_check.rise and health_check.fall must be at least 1".into());
        }
        let probe = match self.kind {
            CheckKind::Tcp => {
                if self.path.is_some() || self.ca_file.is_some() || self.server_name.is_some() {
                    return Err(
                        "health_check: path, ca_file and server_name only apply to kind: https"
                            .into(),
                    );
                }
                Probe::Tcp
            }
            CheckKind::Https => {
                let path = self.path.clone().unwrap_or_else(|| "/readyz".into());
                if !path.starts_with('/') || path.contains(char::is_whitespace) {
                    return Err(format!(
                        "health_check.path `{path}` must start with / and contain no spaces"
                    ));
                }
                if self.ca_file.is_some() && self.insecure_skip_verify {
                    return Err(
                        "health_check: set either ca_file or insecure_skip_verify, not both".into(),
                    );
                }
                Probe::Https {
                    path,
                    tls: TlsClientOptions {
                        server_name: self.server_name.clone(),
                        ca_file: self.ca_file.clone(),
                        client_cert: None,
                    },
                }
            }
        };
        Ok(HealthCheck {
            probe,
            interval,
            timeout,
            rise,
            fall,
        })
    }
}

/// How often DNS names are re-resolved when no health check is configured.
pub const DNS_REFRESH: Duration = Duration::from_secs(10);

/// How long one DNS resolution may take.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// Keeps `set`'s membership in step with DNS: every `interval` each name in
/// `template` is resolved and the set gets one endpoint per address
/// ([`EndpointSetSpec::expand`]), so every A/AAAA record has its own health
/// and latency. A name that stops resolving keeps its last addresses; one
/// that never resolved stays a single endpoint that is down until it does.
/// Endpoints whose address stays keep their state across changes. Runs
/// until `stop` fires or the set is dropped; returns at once when the
/// template has no names.
///
/// [`EndpointSetSpec::expand`]: crate::endpoint::EndpointSetSpec::expand
pub fn spawn_resolver(
    set: &Arc<EndpointSet>,
    template: crate::endpoint::EndpointSetSpec,
    interval: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let weak: Weak<EndpointSet> = Arc::downgrade(set);
    tokio::spawn(async move {
        let names: Vec<crate::endpoint::Address> = template.names().cloned().collect();
        if names.is_empty() {
            return;
        }
        let mut known: std::collections::HashMap<crate::endpoint::Address, Vec<std::net::IpAddr>> =
            std::collections::HashMap::new();
        let mut applied: Option<crate::endpoint::EndpointSetSpec> = None;
        loop {
            for name in &names {
                let crate::endpoint::Host::Name(host) = &name.host else {
                    continue;
                };
                let lookup = tokio::net::lookup_host((host.as_str(), name.port));
                let ips: Option<Vec<std::net::IpAddr>> =
                    match tokio::time::timeout(DNS_TIMEOUT, lookup).await {
                        Ok(Ok(found)) => {
                            let mut ips: Vec<std::net::IpAddr> = Vec::new();
                            for a in found {
                                if !ips.contains(&a.ip()) {
                                    ips.push(a.ip());
                                }
                            }
                            (!ips.is_empty()).then_some(ips)
                        }
                        _ => None,
                    };
                if let Some(mut ips) = ips {
                    // Resolvers rotate answers; a stable order keeps the set
                    // (and its metrics) from churning.
                    ips.sort();
                    known.insert(name.clone(), ips);
                }
            }
            let expanded = template.expand(&known);
            if applied.as_ref() != Some(&expanded) {
                let Some(set) = weak.upgrade() else { return };
                let list: Vec<String> = expanded.endpoints.iter().map(|a| a.to_string()).collect();
                tracing::info!(set = set.name(), endpoints = ?list, "endpoints from DNS");
                set.apply(&expanded);
                applied = Some(expanded);
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    })
}

/// Whether a set needs a checker task: it has an active health check or an
/// endpoint named by DNS (re-resolved). Sets of literal addresses with no
/// check need none, which keeps 10,000 plain routes cheap.
pub fn needs_checker(spec: &crate::endpoint::EndpointSetSpec) -> bool {
    spec.health_check.is_some()
        || spec
            .endpoints
            .iter()
            .any(|a| matches!(a.host, crate::endpoint::Host::Name(_)))
}

/// Runs health checks and DNS refreshes for `set` until `stop` fires or the
/// set is dropped. Reads the set's current members each round, so a reload
/// takes effect on the next round.
pub fn spawn_checker(
    set: &Arc<EndpointSet>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let weak: Weak<EndpointSet> = Arc::downgrade(set);
    tokio::spawn(async move {
        loop {
            let Some(set) = weak.upgrade() else { return };
            let members = set.members_full();
            drop(set);
            let wait = members
                .health_check
                .as_ref()
                .map_or(DNS_REFRESH, |c| c.interval);
            let mut round = tokio::task::JoinSet::new();
            for endpoint in &members.endpoints {
                let endpoint = endpoint.clone();
                let check = members.health_check.clone();
                round.spawn(async move { check_endpoint(&endpoint, check.as_ref()).await });
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = async { while round.join_next().await.is_some() {} } => {}
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    })
}

async fn check_endpoint(endpoint: &Arc<Endpoint>, check: Option<&HealthCheck>) {
    let resolved = tokio::time::timeout(DNS_TIMEOUT, endpoint.resolve())
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {DNS_TIMEOUT:?}"),
            ))
        });
    match resolved {
        // Logged when the outcome changes, not every round: an unresolvable
        // name would otherwise fill the log.
        Err(e) if endpoint.note_dns_outcome(true) => {
            if endpoint.resolved().is_empty() {
                tracing::warn!(backend = endpoint.name(), error = %e, "DNS resolution failed; the endpoint is down until it resolves");
            } else {
                tracing::warn!(backend = endpoint.name(), error = %e, "DNS resolution failed; keeping the previous addresses");
            }
        }
        Err(_) => {}
        Ok(_) => {
            if endpoint.note_dns_outcome(false) {
                tracing::info!(backend = endpoint.name(), "DNS resolution works again");
            }
            // Interfaces change (an agent adds the address it serves).
            endpoint.refresh_locality();
        }
    }
    let Some(check) = check else { return };
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(check.timeout, probe(endpoint, check)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    };
    let ok = result.is_ok();
    if ok {
        endpoint.record_latency(started.elapsed());
    }
    if let Some(up) = endpoint.record_check(ok, check) {
        match (&result, up) {
            (_, true) => {
                tracing::info!(backend = endpoint.name(), "health check passed; backend up")
            }
            (Err(e), false) => {
                tracing::warn!(backend = endpoint.name(), reason = %e, "health check failed; backend down")
            }
            (Ok(()), false) => {}
        }
    } else if let Err(e) = &result {
        tracing::debug!(backend = endpoint.name(), reason = %e, "health check failed");
    }
}

async fn probe(endpoint: &Endpoint, check: &HealthCheck) -> Result<(), String> {
    let addrs = endpoint.resolved();
    let Some(addr) = addrs.first().copied() else {
        return Err("no resolved address".into());
    };
    match &check.probe {
        Probe::Tcp => TcpStream::connect(addr)
            .await
            .map(drop)
            .map_err(|e| format!("connect {addr}: {e}")),
        Probe::Https { path, tls } => https_get(endpoint, addr, path, tls).await,
    }
}

async fn https_get(
    endpoint: &Endpoint,
    addr: SocketAddr,
    path: &str,
    tls: &TlsClientOptions,
) -> Result<(), String> {
    let config = client_config(tls, &[b"http/1.1"]).map_err(|e| e.to_string())?;
    let host = match &endpoint.address().host {
        crate::endpoint::Host::Name(n) => n.clone(),
        crate::endpoint::Host::Ip(ip) => ip.to_string(),
    };
    let name = tls.server_name.clone().unwrap_or(host);
    let server_name = rustls_pki_types::ServerName::try_from(name.clone())
        .map_err(|e| format!("server name `{name}`: {e}"))?;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS with {addr}: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP with {addr}: {e}"))?;
    let driver = tokio::spawn(conn);
    let request = http::Request::get(path)
        .header(http::header::HOST, name)
        .header(http::header::USER_AGENT, "apiway-health-check")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let result = sender.send_request(request).await;
    driver.abort();
    let response = result.map_err(|e| format!("GET {path} on {addr}: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "GET {path} on {addr} answered {}",
            response.status()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml_kind: CheckKind) -> HealthCheckConfig {
        HealthCheckConfig {
            kind: yaml_kind,
            path: None,
            interval: None,
            timeout: None,
            rise: None,
            fall: None,
            server_name: None,
            ca_file: None,
            insecure_skip_verify: false,
        }
    }

    #[test]
    fn defaults() {
        let c = cfg(CheckKind::Https).validate().unwrap();
        assert_eq!(c.interval, Duration::from_secs(2));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!((c.rise, c.fall), (1, 2));
        assert!(matches!(c.probe, Probe::Https { ref path, .. } if path == "/readyz"));
    }

    #[test]
    fn rejects_nonsense() {
        let mut c = cfg(CheckKind::Tcp);
        c.path = Some("/x".into());
        assert!(c
            .validate()
            .unwrap_err()
            .contains("only apply to kind: https"));
        let mut c = cfg(CheckKind::Https);
        c.path = Some("readyz".into());
        assert!(c.validate().unwrap_err().contains("must start with /"));
        let mut c = cfg(CheckKind::Https);
        c.interval = Some(Duration::from_millis(1));
        assert!(c.validate().unwrap_err().contains("too short"));
    }
}
