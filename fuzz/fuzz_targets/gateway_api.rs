//! Fuzzes the Gateway API translation: any set of objects (a JSON array;
//! each element decoded by its `kind` into the type the watches use) must
//! translate without panicking, and what the translation hands the runtime
//! must always validate: one bad object may only affect itself, never make
//! the gateway refuse the whole Kubernetes configuration.
#![no_main]

use std::sync::Arc;

use apiway_kube::gateway_api::translate::{translate, Settings, World};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Option<Arc<T>> {
    serde_json::from_value(v.clone()).ok().map(Arc::new)
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut world = World::default();
    for item in &items {
        match item["kind"].as_str() {
            Some("GatewayClass") => world.classes.extend(decode(item)),
            Some("Gateway") => world.gateways.extend(decode(item)),
            Some("TLSRoute") => world.routes.extend(decode(item)),
            Some("ReferenceGrant") => world.grants.extend(decode(item)),
            Some("Service") => world.services.extend(decode(item)),
            Some("EndpointSlice") => world.slices.extend(decode(item)),
            Some("Namespace") => world.namespaces.extend(decode(item)),
            _ => {}
        }
    }
    let settings = Settings {
        controller: "apiway.dev/gateway".into(),
        namespace: "seed".into(),
        name: "api".into(),
        listen_address: [127, 0, 0, 1].into(),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let t = translate(&world, &settings, &now);
    let spec = apiway_gateway::config::GatewaySpec {
        listeners: t.spec.listeners,
        routes: t.spec.routes,
        kubernetes: true,
        ..Default::default()
    };
    if let Err(e) = apiway_gateway::config::validate(spec) {
        panic!("a translation did not validate: {e}");
    }
});
