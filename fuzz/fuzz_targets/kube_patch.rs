//! Fuzzes the three patch formats of the fixture Kubernetes API: any bytes
//! as a patch of each kind, applied to a Node-like document and to a
//! document the first input bytes shape, must never panic; a patch that
//! applies gives a document that serializes, and a merge patch applied
//! twice gives what it gave once (RFC 7386 patches are idempotent).
#![no_main]

use apiway_wire::kube_patch::{apply, PatchKind};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"a": "b"}, "finalizers": ["x"]},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
        "list": [1, 2, 3],
    });
    // The first half (when it is JSON) as the target, the rest as patch.
    let split = data.len() / 2;
    let target: Value = serde_json::from_slice(&data[..split]).unwrap_or(node.clone());
    for patch in [data, &data[split..]] {
        for kind in [PatchKind::Merge, PatchKind::Json, PatchKind::Strategic] {
            for doc in [&node, &target] {
                if let Ok(out) = apply(kind, doc, patch) {
                    let text = serde_json::to_string(&out).expect("serializes");
                    if kind == PatchKind::Merge {
                        let again = apply(kind, &out, patch).expect("applies again");
                        assert_eq!(again, out, "merge patch not idempotent: {text}");
                    }
                }
            }
        }
    }
});
