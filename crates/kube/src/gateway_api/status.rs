//! Status for the Gateway API objects, written by one replica at a time.
//!
//! Every replica serves; only the holder of a `coordination.k8s.io` Lease
//! (`apiway-gateway-<gateway name>` in the Gateway's namespace) writes
//! status. The holder renews it every `lease / 3`; another replica takes it
//! over once the record has not changed for a whole lease duration, as
//! observed on its own clock (so clocks need not agree).
//!
//! Writes are JSON merge patches of the `status` subresource, sent only when
//! what the object shows differs from what the translation says (condition
//! times aside). A condition keeps its `lastTransitionTime` while its status
//! stays the same. A route keeps the `parents` entries of other controllers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::translate::{Settings, Translation};
use super::types::{ConditionsStatus, Gateway, GatewayClass, GatewayStatus, RouteStatus, TlsRoute};
use super::Stores;

/// How status is written.
#[derive(Clone, Debug)]
pub struct StatusOptions {
    /// This replica's name in the Lease.
    pub identity: String,
    /// How long a Lease lasts without renewal.
    pub lease_duration: Duration,
}

impl StatusOptions {
    /// The identity from `$POD_NAME`, else the host name and process id.
    pub fn default_identity() -> String {
        if let Ok(pod) = std::env::var("POD_NAME") {
            if !pod.is_empty() {
                return pod;
            }
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "apiway".to_owned());
        format!("{host}-{}", std::process::id())
    }
}

/// `{kind,result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    kind: String,
    result: String,
}

/// Status metrics.
#[derive(Clone, Debug, Default)]
pub struct StatusMetrics {
    /// `apiway_kubernetes_status_writes_total{kind,result}`.
    pub writes: Family<ResultLabels, Counter>,
    /// `apiway_kubernetes_status_leader`: 1 while this replica writes status.
    pub leader: Gauge,
}

impl StatusMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubernetes_status_writes",
            "Status writes to Gateway API objects, by kind and result",
            self.writes.clone(),
        );
        registry.register(
            "kubernetes_status_leader",
            "1 while this replica holds the status Lease",
            self.leader.clone(),
        );
    }

    fn count(&self, kind: &str, ok: bool) {
        self.writes
            .get_or_create(&ResultLabels {
                kind: kind.to_owned(),
                result: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
    }
}

/// The Lease name for a Gateway.
pub fn lease_name(gateway: &str) -> String {
    format!("apiway-gateway-{gateway}")
}

/// Holds or tries to take the Lease.
struct Election {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The other holder's record and when it was first seen unchanged.
    observed: Option<(String, Instant)>,
}

impl Election {
    /// Whether this replica holds the Lease after one round.
    async fn round(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = self.duration.as_secs().max(1) as i32;
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            // Someone else's: expired once unchanged for a lease duration.
            let record = format!(
                "{holder}/{:?}",
                spec.renew_time.as_ref().map(|t| t.0.to_string())
            );
            let seen_at = match &self.observed {
                Some((r, at)) if *r == record => *at,
                _ => {
                    self.observed = Some((record, Instant::now()));
                    return Ok(false);
                }
            };
            let their = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(1) as u64))
                .unwrap_or(self.duration);
            if seen_at.elapsed() < their {
                return Ok(false);
            }
        }
        let mut taken = lease.clone();
        taken.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + if mine { 0 } else { 1 }),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &taken)
            .await
        {
            Ok(_) => {
                if !mine {
                    tracing::info!(lease = %self.name, identity = %self.identity, "took the status Lease; this replica writes Gateway API status");
                }
                self.observed = None;
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (at stop), so another replica need not wait.
    async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
            if let Some(spec) = lease.spec.as_mut() {
                if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                    spec.holder_identity = None;
                    let _ = self
                        .api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await;
                }
            }
        }
    }
}

/// `new` with the `lastTransitionTime` of `old`'s same-typed condition when
/// its status did not change.
pub fn carry_times(old: &[Condition], new: &mut [Condition]) {
    for c in new.iter_mut() {
        if let Some(o) = old
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            c.last_transition_time = o.last_transition_time.clone();
        }
    }
}

/// Whether two condition lists say the same, times aside.
fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

/// Writes status from the latest translation while this replica leads.
pub(super) async fn run(
    client: kube::Client,
    settings: Settings,
    options: StatusOptions,
    stores: Stores,
    mut translations: watch::Receiver<Arc<Translation>>,
    metrics: StatusMetrics,
    stop: CancellationToken,
) {
    let mut election = Election {
        api: Api::namespaced(client.clone(), &settings.namespace),
        name: lease_name(&settings.name),
        identity: options.identity.clone(),
        duration: options.lease_duration,
        observed: None,
    };
    let renew = options.lease_duration / 3;
    let mut leading = false;
    let mut election_failing = false;
    let mut next_round = Instant::now();
    loop {
        if Instant::now() >= next_round {
            match election.round().await {
                Ok(now_leading) => {
                    if leading && !now_leading {
                        tracing::warn!(lease = %election.name, "lost the status Lease; another replica writes status");
                    }
                    leading = now_leading;
                    election_failing = false;
                }
                Err(e) => {
                    if !election_failing {
                        tracing::warn!(lease = %election.name, "cannot read or renew the status Lease: {e}");
                    }
                    election_failing = true;
                    leading = false;
                }
            }
            metrics.leader.set(i64::from(leading));
            next_round = Instant::now()
                + if leading {
                    renew
                } else {
                    renew.min(Duration::from_secs(2))
                };
        }
        if leading {
            let translation = translations.borrow_and_update().clone();
            write_all(&client, &stores, &translation, &metrics).await;
        }
        let wait = next_round.saturating_duration_since(Instant::now());
        tokio::select! {
            _ = stop.cancelled() => {
                if leading {
                    election.release().await;
                }
                return;
            }
            changed = translations.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn write_all(
    client: &kube::Client,
    stores: &Stores,
    translation: &Translation,
    metrics: &StatusMetrics,
) {
    let params = PatchParams::default();
    if let Some(class) = &translation.class {
        let current = stores.class(&class.name);
        let old = current
            .as_ref()
            .and_then(|c| c.status.clone())
            .unwrap_or_default();
        let mut new = class.status.clone();
        carry_times(&old.conditions, &mut new.conditions);
        if !same_conditions(&old.conditions, &new.conditions) {
            let api: Api<GatewayClass> = Api::all(client.clone());
            let patch = json!({ "status": ConditionsStatus { conditions: new.conditions } });
            let ok = api
                .patch_status(&class.name, &params, &Patch::Merge(&patch))
                .await
                .inspect_err(
                    |e| tracing::warn!(gatewayclass = %class.name, "status write failed: {e}"),
                )
                .is_ok();
            metrics.count("GatewayClass", ok);
        }
    }
    if let Some(gw) = &translation.gateway {
        let old = stores
            .gateway(&gw.namespace, &gw.name)
            .and_then(|g| g.status.clone())
            .unwrap_or_default();
        let mut new = gw.status.clone();
        carry_times(&old.conditions, &mut new.conditions);
        for l in &mut new.listeners {
            if let Some(o) = old.listeners.iter().find(|o| o.name == l.name) {
                carry_times(&o.conditions, &mut l.conditions);
            }
        }
        if !same_gateway(&old, &new) {
            let api: Api<Gateway> = Api::namespaced(client.clone(), &gw.namespace);
            let patch = json!({ "status": new });
            let ok = api
                .patch_status(&gw.name, &params, &Patch::Merge(&patch))
                .await
                .inspect_err(|e| tracing::warn!(gateway = %gw.name, "status write failed: {e}"))
                .is_ok();
            metrics.count("Gateway", ok);
        }
    }
    for route in &translation.routes {
        let Some(current) = stores.route(&route.namespace, &route.name) else {
            continue;
        };
        let empty = RouteStatus::default();
        let old = current.status.as_ref().unwrap_or(&empty);
        let controller = route
            .status
            .first()
            .map(|p| p.controller_name.clone())
            .unwrap_or_default();
        let mut ours = route.status.clone();
        for p in &mut ours {
            if let Some(o) = old
                .parents
                .iter()
                .find(|o| o.controller_name == controller && o.parent_ref == p.parent_ref)
            {
                carry_times(&o.conditions, &mut p.conditions);
            }
        }
        let old_ours: Vec<_> = old
            .parents
            .iter()
            .filter(|p| p.controller_name == controller)
            .collect();
        let unchanged = old_ours.len() == ours.len()
            && old_ours.iter().zip(&ours).all(|(a, b)| {
                a.parent_ref == b.parent_ref && same_conditions(&a.conditions, &b.conditions)
            });
        if unchanged {
            continue;
        }
        let mut parents: Vec<_> = old
            .parents
            .iter()
            .filter(|p| p.controller_name != controller)
            .cloned()
            .collect();
        parents.extend(ours);
        let api: Api<TlsRoute> = Api::namespaced(client.clone(), &route.namespace);
        let patch = json!({ "status": RouteStatus { parents } });
        let ok = api
            .patch_status(&route.name, &params, &Patch::Merge(&patch))
            .await
            .inspect_err(|e| tracing::debug!(tlsroute = %route.name, "status write failed: {e}"))
            .is_ok();
        metrics.count("TLSRoute", ok);
    }
}

fn same_gateway(a: &GatewayStatus, b: &GatewayStatus) -> bool {
    same_conditions(&a.conditions, &b.conditions)
        && a.listeners.len() == b.listeners.len()
        && a.listeners.iter().zip(&b.listeners).all(|(x, y)| {
            x.name == y.name
                && x.attached_routes == y.attached_routes
                && x.supported_kinds == y.supported_kinds
                && same_conditions(&x.conditions, &y.conditions)
        })
}
