//! The sections every role's configuration has, written once: the admin
//! endpoint, graceful drain and the reload interval. Each derives both
//! `serde::Deserialize` (the file) and `clap::Args` (flags), so a role that
//! takes flags for them overlays its file without a third copy of the fields.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::drain::DrainTiming;

/// `admin:` — where `/healthz`, `/livez`, `/readyz` and `/metrics` are served.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Admin endpoint ip:port (/healthz /livez /readyz /metrics) [default:
    /// none: no admin endpoint].
    #[arg(long = "admin", value_name = "IP:PORT")]
    #[serde(default)]
    pub address: Option<String>,
    /// Open admin connections at most; more are closed at once, so
    /// scrapers and probes can never take the descriptors the data path
    /// needs [default: 64].
    #[arg(
        id = "admin_max_connections",
        long = "admin-max-connections",
        value_name = "N"
    )]
    #[serde(default)]
    pub max_connections: Option<usize>,
}

impl AdminSection {
    /// `later`'s address where it has one, else this one's.
    pub fn overlay(self, later: AdminSection) -> AdminSection {
        AdminSection {
            address: later.address.or(self.address),
            max_connections: later.max_connections.or(self.max_connections),
        }
    }

    /// The validated address; the error names the field as `field` (how
    /// the role's users write it: `admin.address`, or `--admin /
    /// admin.address` where a flag sets it too).
    pub fn validate(&self, field: &str) -> Result<Option<SocketAddr>, String> {
        self.address
            .as_deref()
            .map(|a| socket_addr(field, a))
            .transpose()
    }
}

/// `drain:` — what happens on SIGTERM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct DrainSection {
    /// After SIGTERM, keep accepting this long while /healthz fails
    /// [default: 5s].
    #[arg(long = "drain-delay", value_name = "DURATION", value_parser = crate::duration::parse)]
    #[serde(default, with = "crate::duration::option")]
    pub delay: Option<Duration>,
    /// Then wait this long for open connections to finish [default: 30s].
    #[arg(long = "grace-period", value_name = "DURATION", value_parser = crate::duration::parse)]
    #[serde(default, with = "crate::duration::option")]
    pub grace_period: Option<Duration>,
}

impl DrainSection {
    /// Each of `later`'s values where it has one, else this one's.
    pub fn overlay(self, later: DrainSection) -> DrainSection {
        DrainSection {
            delay: later.delay.or(self.delay),
            grace_period: later.grace_period.or(self.grace_period),
        }
    }

    /// The timing with defaults filled in.
    pub fn timing(&self) -> DrainTiming {
        let default = DrainTiming::default();
        DrainTiming {
            drain_delay: self.delay.unwrap_or(default.drain_delay),
            grace_period: self.grace_period.unwrap_or(default.grace_period),
        }
    }
}

/// Where a role finds Kubernetes and which Node it runs on. Flags only
/// (shared by every long-running role), since none of it can change while
/// the role runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct KubernetesArgs {
    /// The Node this process runs on: with it, /healthz fails while the
    /// Node is being deleted or tainted for scale-down (KEP-3836)
    /// [default: none: node-unaware].
    #[arg(long = "node-name", env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// kubeconfig for reaching the Kubernetes API [default: in-cluster].
    #[arg(long = "kubeconfig", value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Also fail /healthz while the Node has a taint with this key, as for
    /// `ToBeDeletedByClusterAutoscaler` (repeatable; e.g.
    /// `karpenter.sh/disrupted`).
    #[arg(long = "drain-on-taint", value_name = "KEY")]
    pub drain_on_taint: Vec<String>,
}

/// The validated shared part of every role's snapshot: what the runtime
/// itself reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Common {
    /// Where the admin endpoint listens; `None` serves none.
    pub admin: Option<SocketAddr>,
    /// Open admin connections at most.
    pub admin_max_connections: usize,
    /// Shutdown timing.
    pub drain: DrainTiming,
    /// How often file sources look for changes.
    pub reload_interval: Duration,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            admin: None,
            admin_max_connections: DEFAULT_ADMIN_MAX_CONNECTIONS,
            drain: DrainTiming::default(),
            reload_interval: DEFAULT_RELOAD_INTERVAL,
        }
    }
}

/// Open admin connections at most, unless `admin.max_connections` says.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 64;

/// How often a file is checked for changes unless `reload_interval` says.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

impl Common {
    /// Validates the shared sections; errors name the field (the admin
    /// address as `admin_field`) and the fix.
    pub fn validate(
        admin: &AdminSection,
        admin_field: &str,
        drain: &DrainSection,
        reload_interval: Option<Duration>,
    ) -> Result<Common, String> {
        let reload_interval = reload_interval.unwrap_or(DEFAULT_RELOAD_INTERVAL);
        if reload_interval < Duration::from_millis(100) {
            return Err("reload_interval must be at least 100ms".into());
        }
        Ok(Common {
            admin: admin.validate(admin_field)?,
            admin_max_connections: match admin.max_connections {
                Some(0) => return Err("admin.max_connections must be at least 1".into()),
                Some(n) => n,
                None => DEFAULT_ADMIN_MAX_CONNECTIONS,
            },
            drain: drain.timing(),
            reload_interval,
        })
    }
}

/// Parses an `ip:port` socket address; the error names `field` and shows
/// the two forms.
pub fn socket_addr(field: &str, text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("{field}: `{text}` is not an ip:port address (write 127.0.0.1:8443 or [::1]:8443)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shape_for_file_and_flags() {
        let file: AdminSection = crate::config_text::deserialize("address: 127.0.0.1:9\n").unwrap();
        assert_eq!(
            file.validate("admin.address").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        let flags = AdminSection {
            address: Some("127.0.0.1:10".into()),
            ..AdminSection::default()
        };
        assert_eq!(
            file.clone()
                .overlay(flags)
                .validate("admin.address")
                .unwrap(),
            Some("127.0.0.1:10".parse().unwrap())
        );
        assert_eq!(file.clone().overlay(AdminSection::default()), file);
        let bad = AdminSection {
            address: Some("nowhere".into()),
            ..AdminSection::default()
        };
        assert!(bad
            .validate("admin.address")
            .unwrap_err()
            .starts_with("admin.address: `nowhere` is not an ip:port"));
    }

    #[test]
    fn drain_defaults_and_overlay() {
        let d: DrainSection = crate::config_text::deserialize("delay: 1s\n").unwrap();
        let t = d
            .clone()
            .overlay(DrainSection {
                delay: None,
                grace_period: Some(Duration::from_secs(3)),
            })
            .timing();
        assert_eq!(t.drain_delay, Duration::from_secs(1));
        assert_eq!(t.grace_period, Duration::from_secs(3));
        assert_eq!(DrainSection::default().timing(), DrainTiming::default());
        assert!(Common::validate(
            &AdminSection::default(),
            "admin.address",
            &d,
            Some(Duration::from_millis(10))
        )
        .unwrap_err()
        .contains("reload_interval"));
    }
}
