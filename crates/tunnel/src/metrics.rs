//! Tunnel metrics, the same families on the agent and on the server.

use apiway_relay::{Direction, Observer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `{identity}` (server) or `{server}` (agent).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// The agent's proven identity, or the tunnel server's address.
    pub peer: String,
}

/// `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok`, `refused`, `failed`, `timeout`, `cancelled`.
    pub result: &'static str,
}

/// `{direction}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// `into_tunnel` (read from the local TCP socket, sent to the peer) or
    /// `out_of_tunnel`.
    pub direction: &'static str,
}

/// `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: &'static str,
}

/// The tunnel's families.
#[derive(Clone)]
pub struct TunnelMetrics {
    /// HTTP/2 connections up, per agent identity (server) or per tunnel
    /// server (agent).
    pub tunnels: Family<PeerLabels, Gauge>,
    /// Dials by result.
    pub dials: Family<ResultLabels, Counter>,
    /// From DIAL_REQ to DIAL_RSP.
    pub dial_seconds: Histogram,
    /// Tunneled connections open.
    pub open: Gauge,
    /// Bytes relayed.
    pub bytes: Family<DirectionLabels, Counter>,
    /// Refused agent connections and streams, by reason (server).
    pub auth_failures: Family<ReasonLabels, Counter>,
}

impl Default for TunnelMetrics {
    fn default() -> Self {
        TunnelMetrics {
            tunnels: Family::default(),
            dials: Family::default(),
            dial_seconds: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            open: Gauge::default(),
            bytes: Family::default(),
            auth_failures: Family::default(),
        }
    }
}

impl TunnelMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tunnel_connections",
            "HTTP/2 tunnel connections up, per agent identity (server) or tunnel server (agent)",
            self.tunnels.clone(),
        );
        registry.register(
            "tunnel_dials",
            "Dials through the tunnel by result: ok, refused, failed, timeout, cancelled",
            self.dials.clone(),
        );
        registry.register(
            "tunnel_dial_duration_seconds",
            "Time from DIAL_REQ to DIAL_RSP",
            self.dial_seconds.clone(),
        );
        registry.register(
            "tunnel_open_streams",
            "Tunneled connections open",
            self.open.clone(),
        );
        registry.register(
            "tunnel_bytes",
            "Bytes relayed: into_tunnel (from the local socket) and out_of_tunnel",
            self.bytes.clone(),
        );
        registry.register(
            "tunnel_auth_failures",
            "Agent connections or streams refused, by reason",
            self.auth_failures.clone(),
        );
    }

    /// Counts one dial.
    pub fn dial(&self, result: &'static str) {
        self.dials.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts one refusal.
    pub fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The relay observer.
    pub fn observer(&self) -> BytesObserver {
        BytesObserver {
            into: self.bytes.get_or_create_owned(&DirectionLabels {
                direction: "into_tunnel",
            }),
            out: self.bytes.get_or_create_owned(&DirectionLabels {
                direction: "out_of_tunnel",
            }),
        }
    }
}

/// Counts relayed bytes (TCP side = relay client).
pub struct BytesObserver {
    into: Counter,
    out: Counter,
}

impl Observer for BytesObserver {
    fn on_bytes(&self, dir: Direction, n: u64) {
        match dir {
            Direction::ClientToBackend => self.into.inc_by(n),
            Direction::BackendToClient => self.out.inc_by(n),
        };
    }
}
