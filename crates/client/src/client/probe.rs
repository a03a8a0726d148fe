//! Probing every endpoint the client knows, the way it would check one
//! before first use, for operators (`apiway endpoints`) and diagnostics.

use std::time::{Duration, Instant};

use apiway_core::endpoint::choice::Block;
use apiway_core::endpoint::Address;
use tokio::task::JoinSet;

use super::{is_local, Client};
use crate::connect::ConnectError;

/// How far a probe of one endpoint got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// An earlier stage failed, so this one was not tried.
    NotReached,
    /// It passed.
    Passed,
    /// It failed, for this reason.
    Failed(String),
}

/// What probing one endpoint found: TCP connect, a TLS handshake that
/// verifies the certificate for the name the client would use there, the
/// HTTP/2 handshake and `GET /readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// `host:port`.
    pub address: String,
    /// Whether it is the origin.
    pub origin: bool,
    /// Whether its address is on a local interface.
    pub local: bool,
    /// TCP connect.
    pub connect: Stage,
    /// TLS handshake with certificate verification, and ALPN `h2`.
    pub tls: Stage,
    /// `GET /readyz` answered 200.
    pub readyz: Stage,
    /// Time from the start of the connect to the end of the last stage
    /// tried.
    pub latency: Duration,
    /// The block on the endpoint after the probe, if any: a failed probe
    /// blocks it as a failed request would.
    pub blocked: Option<Block>,
    /// Whether the client would send its next request here.
    pub chosen: bool,
}

impl ProbeReport {
    /// Whether every stage passed.
    pub fn healthy(&self) -> bool {
        self.readyz == Stage::Passed
    }

    /// How long the endpoint stays blocked, from `now`; `None` when it is
    /// not blocked, `Some(None)` when it is blocked for good.
    pub fn blocked_for(&self, now: Instant) -> Option<Option<Duration>> {
        match self.blocked? {
            Block::Forever => Some(None),
            Block::Until(at) => Some(Some(at.saturating_duration_since(now))),
        }
    }
}

impl Client {
    /// Probes every endpoint the client knows (the origin first, then the
    /// alternatives), all at once, each bounded by the connect and check
    /// timeouts. A failure blocks the endpoint as a failed request would; a
    /// connection that passes is kept for the next request. The in-use
    /// endpoint is not changed, so a probe never makes the client flap.
    pub async fn probe(&self) -> Vec<ProbeReport> {
        let keys: Vec<Address> = {
            let now = Instant::now();
            let mut state = self.state();
            state.choice.expire(now);
            let origin = state.choice.origin().clone();
            let mut keys = vec![origin.clone()];
            keys.extend(
                state
                    .choice
                    .alternatives()
                    .into_iter()
                    .map(|l| l.key.clone())
                    .filter(|k| *k != origin),
            );
            keys
        };
        let mut probes = JoinSet::new();
        for (index, key) in keys.iter().cloned().enumerate() {
            let client = self.clone();
            probes.spawn(async move { (index, client.probe_one(key).await) });
        }
        let mut outcomes: Vec<Option<(Result<(), ConnectError>, Duration)>> =
            keys.iter().map(|_| None).collect();
        while let Some(joined) = probes.join_next().await {
            if let Ok((index, outcome)) = joined {
                outcomes[index] = Some(outcome);
            }
        }
        let now = Instant::now();
        let state = self.state();
        let chosen = state.choice.pick(now, &[]);
        let origin = state.choice.origin().clone();
        keys.into_iter()
            .zip(outcomes)
            .map(|(key, outcome)| {
                let (outcome, latency) = outcome.unwrap_or_else(|| {
                    (
                        Err(ConnectError {
                            failure: apiway_core::endpoint::choice::Failure::Network,
                            kind: "probe",
                            reason: "the probe task failed".into(),
                        }),
                        Duration::ZERO,
                    )
                });
                let (connect, tls, readyz) = stages(&outcome);
                ProbeReport {
                    address: key.to_string(),
                    origin: key == origin,
                    local: is_local(&key),
                    connect,
                    tls,
                    readyz,
                    latency,
                    blocked: state.choice.block(&key, now),
                    chosen: chosen.as_ref() == Some(&key),
                }
            })
            .collect()
    }

    async fn probe_one(&self, key: Address) -> (Result<(), ConnectError>, Duration) {
        let alternative = key != self.inner.config.origin;
        let started = Instant::now();
        let target = match self.target(&key, alternative) {
            Ok(target) => target,
            Err(e) => {
                let error = ConnectError {
                    failure: apiway_core::endpoint::choice::Failure::Network,
                    kind: "probe",
                    reason: e.to_string(),
                };
                return (Err(error), Duration::ZERO);
            }
        };
        let outcome = self.inner.dialer.connect(&key, &target, true).await;
        let latency = started.elapsed();
        match outcome {
            Ok(sender) => {
                self.state().connections.insert(key, sender);
                (Ok(()), latency)
            }
            Err(e) => {
                self.fail(&key, e.failure, e.kind, &e.reason);
                (Err(e), latency)
            }
        }
    }
}

/// The connect, TLS and readyz stages of a probe outcome.
fn stages(outcome: &Result<(), ConnectError>) -> (Stage, Stage, Stage) {
    use Stage::{Failed, NotReached, Passed};
    let e = match outcome {
        Ok(()) => return (Passed, Passed, Passed),
        Err(e) => e,
    };
    let failed = || Failed(e.reason.clone());
    match e.kind {
        "connect" | "probe" => (failed(), NotReached, NotReached),
        "tls" | "certificate" | "no_h2" | "http2" => (Passed, failed(), NotReached),
        "not_ready" => (Passed, Passed, failed()),
        // The check timeout covers TLS, the HTTP/2 handshake and /readyz.
        _ => (Passed, failed(), NotReached),
    }
}
