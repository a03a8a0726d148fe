//! Active checks as configured and validated: a TCP connect, or an HTTPS
//! `GET` of a path such as `/readyz` that must answer 2xx, with rise and
//! fall thresholds. The tasks that run them are [`super::checker`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::tls::TlsClientOptions;

/// What a health check does.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// A TCP connect succeeds.
    Tcp,
    /// An HTTPS `GET path` answers 2xx.
    Https,
    /// No active check (passive ejection still applies).
    None,
}

/// Whether a check sends a PROXY header before its probe, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendProxy {
    /// A v1 `PROXY UNKNOWN` line.
    V1,
    /// A v2 `LOCAL` header (the form meant for health checks).
    V2,
    /// Never, even when the route sends one.
    None,
}

/// The PROXY header of a validated check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckProxy {
    /// Whatever the route or upstream sends its connections (none when it
    /// sends none): the default, like HAProxy's `check-send-proxy`, so a
    /// backend behind `accept-proxy` can be checked at all.
    Route,
    /// No header.
    Never,
    /// This version (v1 `UNKNOWN`, v2 `LOCAL`).
    Send(apiway_wire::proxy::Version),
}

impl CheckProxy {
    /// Resolves [`CheckProxy::Route`] with the header the route sends.
    pub fn for_route(self, route: Option<apiway_wire::proxy::Version>) -> CheckProxy {
        match (self, route) {
            (CheckProxy::Route, Some(v)) => CheckProxy::Send(v),
            (CheckProxy::Route, None) => CheckProxy::Never,
            (other, _) => other,
        }
    }

    /// The bytes to send first: empty for none.
    pub fn preface(self) -> Vec<u8> {
        use apiway_wire::proxy::{Command, ProxyHeader, Version};
        let CheckProxy::Send(version) = self else {
            return Vec::new();
        };
        let rendered = match version {
            // v1 has no LOCAL: `PROXY UNKNOWN` says the same (use the
            // connection's own addresses).
            Version::V1 => ProxyHeader {
                version: Version::V1,
                command: Command::Proxy,
                addresses: None,
                tlvs: Default::default(),
            }
            .render_v1(),
            Version::V2 => ProxyHeader::local().render_v2(&Default::default()),
        };
        rendered.unwrap_or_default()
    }
}

/// The defaults a role gives the fields a health check leaves out. The
/// schema is one for every role; the defaults differ on purpose: an agent
/// on a node fails over between a few API servers and wants to leave a hung
/// one within a second or two, a gateway in front of many clusters checks
/// less often and wants two failures before it moves load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckDefaults {
    /// Time between checks.
    pub interval: Duration,
    /// The timeout is the interval, at most this.
    pub max_timeout: Duration,
    /// Passes that bring an endpoint up.
    pub rise: u32,
    /// Failures that take it down.
    pub fall: u32,
}

impl CheckDefaults {
    /// The gateway's: every 2 s, down after 2 failures.
    pub const GATEWAY: CheckDefaults = CheckDefaults {
        interval: Duration::from_secs(2),
        max_timeout: Duration::from_secs(2),
        rise: 1,
        fall: 2,
    };
    /// The agent's: every 1 s, down after 1 failure.
    pub const AGENT: CheckDefaults = CheckDefaults {
        interval: Duration::from_secs(1),
        max_timeout: Duration::from_secs(1),
        rise: 1,
        fall: 1,
    };
}

/// An active health check as written in configuration.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// `tcp`, `https` or `none`.
    pub kind: CheckKind,
    /// Path for `https` (default `/readyz`).
    #[serde(default)]
    pub path: Option<String>,
    /// Time between checks (default: the role's).
    #[serde(default, with = "crate::duration::option")]
    pub interval: Option<Duration>,
    /// Time a check may take (default: the interval, at most the role's
    /// maximum).
    #[serde(default, with = "crate::duration::option")]
    pub timeout: Option<Duration>,
    /// Consecutive passes that bring a down endpoint up (default 1).
    #[serde(default)]
    pub rise: Option<u32>,
    /// Consecutive failures that take an up endpoint down (default: the
    /// role's).
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
    /// `v1`, `v2` or `none`: the PROXY header sent before the probe
    /// [default: the one the route sends its connections].
    #[serde(default)]
    pub send_proxy: Option<SendProxy>,
    /// PEM client certificate for `https` checks of a server that requires
    /// one (with `client_key`).
    #[serde(default)]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
    /// File holding a bearer token sent with `https` checks (re-read for
    /// every check, so a rotated token is used at once).
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
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
    /// The PROXY header sent first.
    pub send_proxy: CheckProxy,
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
        /// TLS settings (with the client certificate, if any).
        tls: TlsClientOptions,
        /// A file holding a bearer token to send, read for every check.
        bearer_token_file: Option<PathBuf>,
    },
}

impl HealthCheckConfig {
    /// A check of `kind` with every other field left to the defaults.
    pub fn of_kind(kind: CheckKind) -> HealthCheckConfig {
        HealthCheckConfig {
            kind,
            path: None,
            interval: None,
            timeout: None,
            rise: None,
            fall: None,
            server_name: None,
            ca_file: None,
            insecure_skip_verify: false,
            send_proxy: None,
            client_cert: None,
            client_key: None,
            bearer_token_file: None,
        }
    }

    /// Validates with the gateway's defaults; `kind: none` is an error here
    /// (use [`HealthCheckConfig::validate_with`] where it is allowed).
    pub fn validate(&self) -> Result<HealthCheck, String> {
        self.validate_with(&CheckDefaults::GATEWAY)?
            .ok_or_else(|| "health_check.kind: none is not a check".to_owned())
    }

    /// Validates into a [`HealthCheck`] (`None` for `kind: none`) with a
    /// role's defaults; the error names the bad field.
    pub fn validate_with(&self, defaults: &CheckDefaults) -> Result<Option<HealthCheck>, String> {
        if self.kind == CheckKind::None {
            let set = self.path.is_some()
                || self.interval.is_some()
                || self.timeout.is_some()
                || self.rise.is_some()
                || self.fall.is_some()
                || self.server_name.is_some()
                || self.ca_file.is_some()
                || self.insecure_skip_verify
                || self.send_proxy.is_some()
                || self.client_cert.is_some()
                || self.client_key.is_some()
                || self.bearer_token_file.is_some();
            if set {
                return Err("health_check: kind: none takes no other field".into());
            }
            return Ok(None);
        }
        let interval = self.interval.unwrap_or(defaults.interval);
        if interval < Duration::from_millis(50) {
            return Err(format!(
                "health_check.interval {interval:?} is too short; use at least 50ms"
            ));
        }
        let timeout = self
            .timeout
            .unwrap_or_else(|| interval.min(defaults.max_timeout));
        if timeout.is_zero() {
            return Err("health_check.timeout must be more than 0".into());
        }
        let rise = self.rise.unwrap_or(defaults.rise);
        let fall = self.fall.unwrap_or(defaults.fall);
        if rise == 0 || fall == 0 {
            return Err("health_check.rise and health_check.fall must be at least 1".into());
        }
        let probe = match self.kind {
            CheckKind::None => return Ok(None),
            CheckKind::Tcp => {
                if self.path.is_some()
                    || self.ca_file.is_some()
                    || self.server_name.is_some()
                    || self.client_cert.is_some()
                    || self.client_key.is_some()
                    || self.bearer_token_file.is_some()
                {
                    return Err(
                        "health_check: path, ca_file, server_name, client_cert, client_key and bearer_token_file only apply to kind: https"
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
                if let Some(ca) = &self.ca_file {
                    crate::tls::load_certs(ca).map_err(|e| format!("health_check.ca_file: {e}"))?;
                }
                let client_cert = match (&self.client_cert, &self.client_key) {
                    (Some(c), Some(k)) => {
                        crate::tls::load_certs(c)
                            .map_err(|e| format!("health_check.client_cert: {e}"))?;
                        crate::tls::load_key(k)
                            .map_err(|e| format!("health_check.client_key: {e}"))?;
                        Some((c.clone(), k.clone()))
                    }
                    (None, None) => None,
                    _ => return Err("health_check: client_cert and client_key go together".into()),
                };
                if let Some(t) = &self.bearer_token_file {
                    read_token(t).map_err(|e| format!("health_check.bearer_token_file: {e}"))?;
                }
                Probe::Https {
                    path,
                    tls: TlsClientOptions {
                        server_name: self.server_name.clone(),
                        ca_file: self.ca_file.clone(),
                        client_cert,
                    },
                    bearer_token_file: self.bearer_token_file.clone(),
                }
            }
        };
        let send_proxy = match self.send_proxy {
            None => CheckProxy::Route,
            Some(SendProxy::None) => CheckProxy::Never,
            Some(SendProxy::V1) => CheckProxy::Send(apiway_wire::proxy::Version::V1),
            Some(SendProxy::V2) => CheckProxy::Send(apiway_wire::proxy::Version::V2),
        };
        Ok(Some(HealthCheck {
            probe,
            interval,
            timeout,
            rise,
            fall,
            send_proxy,
        }))
    }
}

/// The token in `path`: its content without surrounding whitespace, which
/// must not be empty.
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{}: empty", path.display()));
    }
    Ok(token.to_owned())
}

/// How often DNS names are re-resolved when no health check is configured.
pub const DNS_REFRESH: Duration = Duration::from_secs(10);

/// How long one DNS resolution may take.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(2);

#[cfg(test)]
impl HealthCheck {
    /// A TCP check with the default timing and these thresholds.
    pub(crate) fn tcp(rise: u32, fall: u32) -> HealthCheck {
        HealthCheck {
            probe: Probe::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            rise,
            fall,
            send_proxy: CheckProxy::Route,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: CheckKind) -> HealthCheckConfig {
        HealthCheckConfig::of_kind(kind)
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
        c.client_cert = Some("/nonexistent.pem".into());
        assert!(c.validate().unwrap_err().contains("go together"));
        let mut c = cfg(CheckKind::Https);
        c.ca_file = Some("/nonexistent-ca.pem".into());
        let err = c.validate().unwrap_err();
        assert!(
            err.contains("health_check.ca_file") && err.contains("/nonexistent-ca.pem"),
            "{err}"
        );
        let mut c = cfg(CheckKind::Https);
        c.path = Some("readyz".into());
        assert!(c.validate().unwrap_err().contains("must start with /"));
        let mut c = cfg(CheckKind::Https);
        c.interval = Some(Duration::from_millis(1));
        assert!(c.validate().unwrap_err().contains("too short"));
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    #[test]
    fn one_schema_with_each_roles_defaults() {
        let tcp: HealthCheckConfig = crate::config_text::deserialize("kind: tcp\n").unwrap();
        let gateway = tcp.validate_with(&CheckDefaults::GATEWAY).unwrap().unwrap();
        assert_eq!(
            (gateway.interval, gateway.fall),
            (Duration::from_secs(2), 2)
        );
        let agent = tcp.validate_with(&CheckDefaults::AGENT).unwrap().unwrap();
        assert_eq!(
            (agent.interval, agent.timeout, agent.fall),
            (Duration::from_secs(1), Duration::from_secs(1), 1)
        );
        let none: HealthCheckConfig = crate::config_text::deserialize("kind: none\n").unwrap();
        assert_eq!(none.validate_with(&CheckDefaults::AGENT), Ok(None));
        assert!(
            none.validate().is_err(),
            "where a check is required, none is refused"
        );
        let odd: HealthCheckConfig =
            crate::config_text::deserialize("kind: none\ninterval: 1s\n").unwrap();
        assert!(odd
            .validate_with(&CheckDefaults::GATEWAY)
            .unwrap_err()
            .contains("kind: none takes no other field"));
    }
}
