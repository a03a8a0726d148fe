//! The gateway configured from Kubernetes: a [`Source`] of the gateway's
//! spec built from Gateway API objects (GatewayClass, Gateway, TLSRoute,
//! ReferenceGrant) and the Services and EndpointSlices they name, watched
//! with kube-rs reflectors; and the status those objects get back
//! ([`status`]), written by one replica at a time.
//!
//! Every change is translated whole ([`translate`]) after a short pause
//! that lets a burst of events settle, and handed to the runtime only when
//! the listeners or routes differ: the runtime swaps the routing table and
//! binds or closes only the ports that changed, so established connections
//! are never touched. Watch errors keep the last good routing; they are
//! logged when they start and stop, and counted.

pub mod status;
pub mod translate;
pub mod types;

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiway_core::config::source::{Source, SourceSender, Trigger};
use apiway_gateway::config::{GatewaySpec, ListenerDef, RouteDef};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

pub use translate::{Settings, Translation, World, CONTROLLER};
use types::{Gateway, GatewayClass, ReferenceGrant, TlsRoute};

/// How long a burst of changes may settle before it is translated.
const SETTLE: Duration = Duration::from_millis(20);

/// `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    kind: String,
}

/// The source's metrics.
#[derive(Clone, Debug, Default)]
pub struct KubeMetrics {
    /// `apiway_kubernetes_watch_errors_total{kind}`.
    pub watch_errors: Family<KindLabels, Counter>,
    /// `apiway_kubernetes_synced`: 1 once every watch has listed once.
    pub synced: Gauge,
    /// `apiway_kubernetes_translations_total`.
    pub translations: Counter,
    /// `apiway_kubernetes_tlsroutes`: TLSRoutes the Gateway serves.
    pub routes: Gauge,
    /// Status writes and leadership (see [`status`]).
    pub status: status::StatusMetrics,
}

impl KubeMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubernetes_watch_errors",
            "Errors of the Kubernetes watches, by kind (the last good configuration stays)",
            self.watch_errors.clone(),
        );
        for kind in KINDS {
            let _ = self.watch_errors.get_or_create(&KindLabels {
                kind: (*kind).to_owned(),
            });
        }
        registry.register(
            "kubernetes_synced",
            "1 once every Kubernetes watch has listed once",
            self.synced.clone(),
        );
        registry.register(
            "kubernetes_translations",
            "Translations of the Gateway API objects into the gateway's configuration",
            self.translations.clone(),
        );
        registry.register(
            "kubernetes_tlsroutes",
            "TLSRoutes served from the Gateway",
            self.routes.clone(),
        );
        self.status.register(registry);
    }
}

const KINDS: &[&str] = &[
    "GatewayClass",
    "Gateway",
    "TLSRoute",
    "ReferenceGrant",
    "Service",
    "EndpointSlice",
    "Namespace",
];

/// The Gateway API source of `apiway gateway --kubernetes-gateway`.
pub struct GatewaySource {
    client: kube::Client,
    settings: Settings,
    status: Option<status::StatusOptions>,
    metrics: KubeMetrics,
}

impl GatewaySource {
    /// Serves the Gateway of `settings`; `status` (when given) writes the
    /// objects' status, one replica at a time.
    pub fn new(
        client: kube::Client,
        settings: Settings,
        status: Option<status::StatusOptions>,
    ) -> GatewaySource {
        GatewaySource {
            client,
            settings,
            status,
            metrics: KubeMetrics::default(),
        }
    }
}

/// The reflector stores of every kind.
#[derive(Clone)]
pub struct Stores {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    routes: Store<TlsRoute>,
    grants: Store<ReferenceGrant>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    namespaces: Store<Namespace>,
}

impl Stores {
    /// What the stores hold now.
    pub fn world(&self) -> World {
        World {
            classes: self.classes.state(),
            gateways: self.gateways.state(),
            routes: self.routes.state(),
            services: self.services.state(),
            slices: self.slices.state(),
            grants: self.grants.state(),
            namespaces: self.namespaces.state(),
        }
    }

    /// The Gateway `namespace/name`, as stored.
    pub fn gateway(&self, namespace: &str, name: &str) -> Option<Arc<Gateway>> {
        self.gateways
            .get(&reflector::ObjectRef::new(name).within(namespace))
    }

    /// The GatewayClass `name`, as stored.
    pub fn class(&self, name: &str) -> Option<Arc<GatewayClass>> {
        self.classes.get(&reflector::ObjectRef::new(name))
    }

    /// The TLSRoute `namespace/name`, as stored.
    pub fn route(&self, namespace: &str, name: &str) -> Option<Arc<TlsRoute>> {
        self.routes
            .get(&reflector::ObjectRef::new(name).within(namespace))
    }

    async fn wait_synced(&self) {
        // Errors only when the writer is gone (the watch task ended).
        let _ = self.classes.wait_until_ready().await;
        let _ = self.gateways.wait_until_ready().await;
        let _ = self.routes.wait_until_ready().await;
        let _ = self.grants.wait_until_ready().await;
        let _ = self.services.wait_until_ready().await;
        let _ = self.slices.wait_until_ready().await;
        let _ = self.namespaces.wait_until_ready().await;
    }
}

/// Runs a reflector of `api` until `stop`, poking `changed` after every
/// change once the first list is complete.
fn reflect<K>(
    api: Api<K>,
    changed: Arc<Notify>,
    errors: Counter,
    stop: CancellationToken,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).into_owned();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
        .default_backoff();
    tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        let mut failing = false;
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.next() => match item {
                    Some(item) => item,
                    None => return,
                },
            };
            match item {
                Err(e) => {
                    errors.inc();
                    if !failing {
                        tracing::warn!(
                            kind,
                            "Kubernetes watch failing, keeping the last good configuration: {e}"
                        );
                        failing = true;
                    }
                }
                Ok(event) => {
                    if failing {
                        tracing::info!(kind, "Kubernetes watch recovered");
                        failing = false;
                    }
                    if matches!(event, Event::InitDone | Event::Apply(_) | Event::Delete(_)) {
                        changed.notify_one();
                    }
                }
            }
        }
    });
    reader
}

impl Source<GatewaySpec> for GatewaySource {
    fn label(&self) -> String {
        format!(
            "Kubernetes Gateway {}/{}",
            self.settings.namespace, self.settings.name
        )
    }

    fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    fn run(
        self: Box<Self>,
        out: SourceSender<GatewaySpec>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let GatewaySource {
                client,
                settings,
                status,
                metrics,
            } = *self;
            let changed = Arc::new(Notify::new());
            let stop = out.stop.clone();
            let errors = |kind: &str| {
                metrics.watch_errors.get_or_create_owned(&KindLabels {
                    kind: kind.to_owned(),
                })
            };
            let stores = Stores {
                classes: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("GatewayClass"),
                    stop.clone(),
                ),
                gateways: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("Gateway"),
                    stop.clone(),
                ),
                routes: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("TLSRoute"),
                    stop.clone(),
                ),
                grants: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("ReferenceGrant"),
                    stop.clone(),
                ),
                services: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("Service"),
                    stop.clone(),
                ),
                slices: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("EndpointSlice"),
                    stop.clone(),
                ),
                namespaces: reflect(
                    Api::all(client.clone()),
                    changed.clone(),
                    errors("Namespace"),
                    stop.clone(),
                ),
            };
            // Until the first full sync: no Kubernetes listeners or routes,
            // and `/readyz` says so.
            let empty = GatewaySpec {
                kubernetes: true,
                ..GatewaySpec::default()
            };
            if !out
                .send_synced(Ok(empty), Trigger::Start, Duration::ZERO, false)
                .await
            {
                return;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = stores.wait_synced() => {}
            }
            metrics.synced.set(1);
            let (status_tx, status_rx) = watch::channel(Arc::new(Translation::default()));
            if let Some(options) = status {
                tokio::spawn(status::run(
                    client.clone(),
                    settings.clone(),
                    options,
                    stores.clone(),
                    status_rx,
                    metrics.status.clone(),
                    stop.clone(),
                ));
            }
            let mut last: Option<(Vec<ListenerDef>, Vec<RouteDef>)> = None;
            let mut first = true;
            let mut idle_logged: Option<String> = None;
            loop {
                let started = Instant::now();
                let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                );
                let translation = translate::translate(&stores.world(), &settings, &now);
                metrics.translations.inc();
                metrics.routes.set(translation.routes.len() as i64);
                if translation.idle_reason != idle_logged {
                    if let Some(reason) = &translation.idle_reason {
                        tracing::warn!("serving nothing from Kubernetes: {reason}");
                    }
                    idle_logged = translation.idle_reason.clone();
                }
                let mut translation = translation;
                let listeners = std::mem::take(&mut translation.spec.listeners);
                let routes = std::mem::take(&mut translation.spec.routes);
                let took = started.elapsed();
                tracing::debug!(took = ?took, routes = translation.routes.len(), "translated the Gateway API objects");
                status_tx.send_replace(Arc::new(translation));
                let differs = last
                    .as_ref()
                    .is_none_or(|(l, r)| *l != listeners || *r != routes);
                if differs {
                    let spec = GatewaySpec {
                        listeners: listeners.clone(),
                        routes: routes.clone(),
                        kubernetes: true,
                        ..GatewaySpec::default()
                    };
                    let trigger = if first {
                        Trigger::Start
                    } else {
                        Trigger::Change
                    };
                    if !out.send_synced(Ok(spec), trigger, took, true).await {
                        return;
                    }
                    last = Some((listeners, routes));
                }
                first = false;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = changed.notified() => {}
                }
                // Let a burst settle.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(SETTLE) => {}
                }
            }
        })
    }
}
