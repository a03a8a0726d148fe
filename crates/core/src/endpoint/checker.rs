//! The tasks that keep a set's members current: one per endpoint set
//! probes every endpoint each interval ([`super::check`]) and re-resolves
//! DNS names; another keeps membership in step with DNS.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http_body_util::Empty;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::address::{Address, Host};
use super::check::{HealthCheck, Probe, DNS_REFRESH, DNS_TIMEOUT};
use super::member::Endpoint;
use super::set::{EndpointSet, EndpointSetSpec};
use crate::tls::{cached_client_config, TlsClientOptions};

/// Keeps `set`'s membership in step with DNS: every `interval` each name in
/// `template` is resolved and the set gets one endpoint per address
/// ([`EndpointSetSpec::expand`]), so every A/AAAA record has its own health
/// and latency. A name that stops resolving keeps its last addresses; one
/// that never resolved stays a single endpoint that is down until it does.
/// Endpoints whose address stays keep their state across changes. Runs
/// until `stop` fires or the set is dropped; returns at once when the
/// template has no names.
///
/// [`EndpointSetSpec::expand`]: EndpointSetSpec::expand
pub fn spawn_resolver(
    set: &Arc<EndpointSet>,
    template: EndpointSetSpec,
    interval: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let weak: Weak<EndpointSet> = Arc::downgrade(set);
    tokio::spawn(async move {
        let names: Vec<Address> = template.names().cloned().collect();
        if names.is_empty() {
            return;
        }
        let mut known: std::collections::HashMap<Address, Vec<std::net::IpAddr>> =
            std::collections::HashMap::new();
        let mut applied: Option<EndpointSetSpec> = None;
        loop {
            for name in &names {
                let Host::Name(host) = &name.host else {
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
pub fn needs_checker(spec: &EndpointSetSpec) -> bool {
    spec.health_check.is_some()
        || spec
            .endpoints
            .iter()
            .any(|a| matches!(a.host, Host::Name(_)))
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
    let preface = check.send_proxy.preface();
    match &check.probe {
        Probe::Tcp => connect_with(addr, &preface).await.map(drop),
        Probe::Https {
            path,
            tls,
            bearer_token_file,
        } => {
            let host = match &endpoint.address().host {
                Host::Name(n) => n.clone(),
                Host::Ip(ip) => ip.to_string(),
            };
            let token = bearer_token_file
                .as_deref()
                .map(super::check::read_token)
                .transpose()
                .map_err(|e| format!("bearer_token_file {e}"))?;
            https_get_with(&host, addr, path, tls, &preface, token.as_deref()).await
        }
    }
}

/// One HTTPS `GET path` on `addr` that must answer 2xx: the probe of an
/// `https` health check, for a program that probes once (`apiway
/// bootstrap wait --probe`). The server name is `tls.server_name`, else
/// `host`. The error says what failed (connect, TLS, HTTP, the status).
pub async fn https_get(
    host: &str,
    addr: SocketAddr,
    path: &str,
    tls: &TlsClientOptions,
) -> Result<(), String> {
    https_get_with(host, addr, path, tls, &[], None).await
}

/// [`https_get`] that first sends `preface` (a PROXY header) on the TCP
/// connection and sends `bearer` as an `Authorization: Bearer` token. A
/// failure names its cause where the server told it: a TLS alert (a client
/// certificate required or refused), 401 or 403.
pub async fn https_get_with(
    host: &str,
    addr: SocketAddr,
    path: &str,
    tls: &TlsClientOptions,
    preface: &[u8],
    bearer: Option<&str>,
) -> Result<(), String> {
    let config = cached_client_config(tls, &[b"http/1.1"]).map_err(|e| e.to_string())?;
    let name = tls.server_name.clone().unwrap_or_else(|| host.to_owned());
    let server_name = rustls_pki_types::ServerName::try_from(name.clone())
        .map_err(|e| format!("server name `{name}`: {e}"))?;
    let tcp = connect_with(addr, preface).await?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS with {addr}: {}", explain(&e)))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP with {addr}: {}", explain(&e)))?;
    let driver = tokio::spawn(conn);
    let mut request = http::Request::get(path)
        .header(http::header::HOST, name)
        .header(http::header::USER_AGENT, "apiway-health-check");
    if let Some(token) = bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let result = sender.send_request(request).await;
    driver.abort();
    let response = result.map_err(|e| format!("GET {path} on {addr}: {}", explain(&e)))?;
    let status = response.status();
    match status.as_u16() {
        200..=299 => Ok(()),
        401 => Err(format!(
            "GET {path} on {addr} answered {status}: the server wants credentials (health_check.bearer_token_file, or client_cert and client_key)"
        )),
        403 => Err(format!(
            "GET {path} on {addr} answered {status}: the check's credentials may not GET {path}"
        )),
        _ => Err(format!("GET {path} on {addr} answered {status}")),
    }
}

/// A TCP connection to `addr` with `preface` (a PROXY header, or nothing)
/// already sent: what every probe starts with.
async fn connect_with(addr: SocketAddr, preface: &[u8]) -> Result<TcpStream, String> {
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    if !preface.is_empty() {
        tcp.write_all(preface)
            .await
            .map_err(|e| format!("PROXY header to {addr}: {e}"))?;
    }
    Ok(tcp)
}

/// An error with its causes (hyper's own message is often just
/// "connection error"), and what a TLS alert from the server means.
fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let text = crate::causes::with_causes(e);
    let hint = if text.contains("CertificateRequired") {
        " (the server requires a client certificate: set health_check.client_cert and client_key)"
    } else if text.contains("BadCertificate")
        || text.contains("UnknownCA")
        || text.contains("CertificateUnknown")
    {
        " (the server refused the check's client certificate)"
    } else {
        ""
    };
    format!("{text}{hint}")
}
