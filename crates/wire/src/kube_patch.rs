//! The three patch formats of `PATCH` requests, applied to JSON documents:
//! JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the Kubernetes
//! strategic merge patch, as far as `kubectl taint`, `label`, `annotate`,
//! `patch` and client-side `apply` use it.
//!
//! Strategic merge, as the real API server does it for built-in kinds,
//! except that list strategies come from a small table keyed by field name
//! ([`merge_key`]) instead of the Go types' struct tags: lists of objects
//! named there merge by that key, `finalizers` merges as a set, every other
//! list is replaced. Directives understood: `$patch: replace|delete` (on
//! maps and list elements), `$deleteFromPrimitiveList/<field>`,
//! `$retainKeys`; `$setElementOrder/<field>` is accepted and ignored (the
//! fixture keeps the stored order and appends new elements).
//!
//! Patches are untrusted input: every function returns an error instead of
//! panicking, and recursion is bounded by the depth of the patch document
//! (which `serde_json` limits to 128 when it parses the body).

use serde_json::{Map, Value};

/// Why a patch does not apply: one line naming what in the patch is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

impl From<String> for PatchError {
    fn from(text: String) -> Self {
        PatchError(text)
    }
}

impl From<&str> for PatchError {
    fn from(text: &str) -> Self {
        PatchError(text.to_owned())
    }
}

/// The patch formats, by the request's `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

impl PatchKind {
    /// The kind a `Content-Type` names (parameters ignored); `None` for
    /// anything else, such as server-side apply's
    /// `application/apply-patch+yaml`, which the fixture does not serve.
    pub fn from_content_type(content_type: &str) -> Option<PatchKind> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            _ => None,
        }
    }
}

/// Applies `patch` (the request body) of `kind` to `target`; the error is
/// one line saying what in the patch is wrong.
pub fn apply(kind: PatchKind, target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let patch: Value =
        serde_json::from_slice(patch).map_err(|e| format!("the patch is not JSON: {e}"))?;
    let mut out = target.clone();
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(PatchError::from("a merge patch must be a JSON object"));
            }
            merge(&mut out, &patch);
        }
        PatchKind::Json => json_patch(&mut out, &patch).map_err(PatchError)?,
        PatchKind::Strategic => {
            let Value::Object(patch) = patch else {
                return Err(PatchError::from(
                    "a strategic merge patch must be a JSON object",
                ));
            };
            strategic(&mut out, &patch).map_err(PatchError)?;
        }
    }
    Ok(out)
}

/// RFC 7386: objects merge key by key, `null` removes, anything else
/// replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            fields.remove(key);
        } else {
            merge(fields.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// RFC 6902: the operations in order; the first that fails fails the patch
/// and leaves `target` as it was.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        json_patch_op(&mut doc, op).map_err(|e| format!("operation {i}: {e}"))?;
    }
    *target = doc;
    Ok(())
}

fn json_patch_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let field = |name: &str| -> Result<&str, String> {
        op.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{name}` is missing or not a string"))
    };
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| "`value` is missing".to_string())
    };
    let path = pointer(field("path")?)?;
    match field("op")? {
        "add" => add(doc, &path, value()?),
        "remove" => remove(doc, &path).map(drop),
        "replace" => {
            let slot = resolve(doc, &path)?;
            *slot = value()?;
            Ok(())
        }
        "move" => {
            let from = pointer(field("from")?)?;
            if path.len() > from.len() && path[..from.len()] == from[..] {
                return Err("cannot move a value into itself".into());
            }
            let moved = remove(doc, &from)?;
            add(doc, &path, moved)
        }
        "copy" => {
            let from = pointer(field("from")?)?;
            let copied = resolve(doc, &from)?.clone();
            add(doc, &path, copied)
        }
        "test" => {
            if *resolve(doc, &path)? == value()? {
                Ok(())
            } else {
                Err(format!("test failed at {}", field("path")?))
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

/// A JSON pointer's tokens, unescaped (`~1` is `/`, `~0` is `~`).
fn pointer(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!("path {text:?} does not start with /"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index(token: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if token == "-" && allow_end {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let i: usize = if valid {
        token.parse().map_err(|_| format!("bad index {token:?}"))?
    } else {
        return Err(format!("bad index {token:?}"));
    };
    let limit = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > limit || (!allow_end && len == 0) {
        return Err(format!("index {i} is out of range"));
    }
    Ok(i)
}

/// The value at `path`.
fn resolve<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    let mut here = doc;
    for token in path {
        here = match here {
            Value::Object(fields) => fields
                .get_mut(token)
                .ok_or_else(|| format!("no field {token:?}"))?,
            Value::Array(items) => {
                let i = index(token, items.len(), false)?;
                &mut items[i]
            }
            _ => return Err(format!("cannot descend into a scalar at {token:?}")),
        };
    }
    Ok(here)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match resolve(doc, parent)? {
        Value::Object(fields) => {
            fields.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let i = index(last, items.len(), true)?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err("the parent of the path is a scalar".into()),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = path.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match resolve(doc, parent)? {
        Value::Object(fields) => fields
            .remove(last)
            .ok_or_else(|| format!("no field {last:?}")),
        Value::Array(items) => {
            let i = index(last, items.len(), false)?;
            Ok(items.remove(i))
        }
        _ => Err("the parent of the path is a scalar".into()),
    }
}

/// How the list in field `name` merges in a strategic merge patch: by the
/// key of its elements, as a set of scalars, or (`None`) replaced whole.
fn merge_key(name: &str, sample: Option<&Value>) -> ListMerge {
    match name {
        "conditions" | "addresses" => ListMerge::Key("type"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => ListMerge::Key("name"),
        "volumeMounts" => ListMerge::Key("mountPath"),
        "ownerReferences" => ListMerge::Key("uid"),
        // Service ports merge by `port`, container ports by `containerPort`.
        "ports" if sample.is_some_and(|s| s.get("containerPort").is_some()) => {
            ListMerge::Key("containerPort")
        }
        "ports" => ListMerge::Key("port"),
        "finalizers" => ListMerge::Set,
        _ => ListMerge::Replace,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListMerge {
    Key(&'static str),
    Set,
    Replace,
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// A strategic merge patch of a map into `target`.
fn strategic(target: &mut Value, patch: &Map<String, Value>) -> Result<(), String> {
    match patch.get("$patch").map(|p| p.as_str()) {
        None => {}
        Some(Some("replace")) => {
            *target = Value::Object(without_directives(patch));
            return Ok(());
        }
        Some(Some("delete")) => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) => return Err(format!("unknown $patch directive {other:?} on a map")),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else {
        return Ok(());
    };
    for (key, value) in patch {
        if key == "$patch" || key.starts_with(SET_ORDER) {
            continue;
        }
        if key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_FROM) {
            let drop_these = value
                .as_array()
                .ok_or_else(|| format!("{key} must be a list"))?;
            if let Some(Value::Array(items)) = fields.get_mut(field) {
                items.retain(|item| !drop_these.contains(item));
            }
            continue;
        }
        match value {
            Value::Null => {
                fields.remove(key);
            }
            Value::Object(inner) => {
                let slot = fields.entry(key.clone()).or_insert(Value::Null);
                strategic(slot, inner)?;
                if slot.is_null() {
                    fields.remove(key);
                }
            }
            Value::Array(items) => {
                let merged = strategic_list(key, fields.get(key), items)?;
                fields.insert(key.clone(), merged);
            }
            other => {
                fields.insert(key.clone(), other.clone());
            }
        }
    }
    if let Some(retain) = patch.get("$retainKeys") {
        let retain = retain
            .as_array()
            .ok_or("$retainKeys must be a list of field names")?;
        fields.retain(|k, _| retain.iter().any(|r| r.as_str() == Some(k)));
    }
    Ok(())
}

fn without_directives(patch: &Map<String, Value>) -> Map<String, Value> {
    patch
        .iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The list in field `name` after merging `patch` into `current`.
fn strategic_list(name: &str, current: Option<&Value>, patch: &[Value]) -> Result<Value, String> {
    let current: Vec<Value> = match current {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    // `{"$patch": "replace"}` as an element: the rest of the patch list is
    // the new list.
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(Value::Array(
            patch
                .iter()
                .filter(|item| item.get("$patch").is_none())
                .cloned()
                .collect(),
        ));
    }
    match merge_key(name, patch.first().or(current.first())) {
        ListMerge::Replace => Ok(Value::Array(patch.to_vec())),
        ListMerge::Set => {
            let mut out = current;
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListMerge::Key(merge_key) => {
            let mut out = current;
            for item in patch {
                let Value::Object(fields) = item else {
                    return Err(format!(
                        "list {name} merges by {merge_key}: its elements must be objects"
                    ));
                };
                let key = fields
                    .get(merge_key)
                    .ok_or_else(|| format!("an element of {name} has no merge key {merge_key}"))?;
                let found = out.iter().position(|o| o.get(merge_key) == Some(key));
                let delete = fields.get("$patch").and_then(Value::as_str) == Some("delete");
                match (found, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic(&mut out[i], fields)?,
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        strategic(&mut fresh, fields)?;
                        out.push(fresh);
                    }
                }
            }
            Ok(Value::Array(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(kind: PatchKind, target: Value, patch: Value) -> Result<Value, PatchError> {
        apply(kind, &target, patch.to_string().as_bytes())
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
            Some(PatchKind::Strategic)
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            None
        );
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        // The examples' shape from RFC 7386 section 3.
        let target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        let out = run(
            PatchKind::Merge,
            target,
            json!({"a": "z", "c": {"f": null}, "l": [3]}),
        )
        .unwrap();
        assert_eq!(out, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
        assert!(run(PatchKind::Merge, json!({}), json!([1])).is_err());
    }

    #[test]
    fn json_patch_operations() {
        let target = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]});
        let out = run(
            PatchKind::Json,
            target.clone(),
            json!([
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "remove", "path": "/list/0"},
                {"op": "add", "path": "/list/-", "value": 4},
                {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
                {"op": "copy", "from": "/list", "path": "/copy"},
                {"op": "move", "from": "/copy", "path": "/moved"},
                {"op": "test", "path": "/moved/2", "value": 4},
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a": "9", "b/c": "2"}}, "list": [2, 3, 4], "moved": [2, 3, 4]})
        );
        for bad in [
            json!([{"op": "test", "path": "/list/0", "value": 7}]),
            json!([{"op": "remove", "path": "/nope"}]),
            json!([{"op": "add", "path": "/list/9", "value": 1}]),
            json!([{"op": "add", "path": "/list/01", "value": 1}]),
            json!([{"op": "move", "from": "/metadata", "path": "/metadata/x"}]),
            json!([{"op": "frobnicate", "path": ""}]),
            json!({"op": "add"}),
        ] {
            assert!(run(PatchKind::Json, target.clone(), bad).is_err());
        }
    }

    #[test]
    fn strategic_merge_of_taints_replaces_the_list() {
        // What `kubectl taint` sends: the whole new list.
        let node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let out = run(
            PatchKind::Strategic,
            node,
            json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["taints"].as_array().unwrap().len(), 1);
        assert_eq!(
            out["spec"]["taints"][0]["key"],
            "ToBeDeletedByClusterAutoscaler"
        );
    }

    #[test]
    fn strategic_merge_directives() {
        let svc = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "spec": {"ports": [{"port": 443, "name": "https"}, {"port": 80, "name": "http"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        });
        let out = run(
            PatchKind::Strategic,
            svc,
            json!({
                "metadata": {"finalizers": ["b"], "labels": {"x": null}, "$setElementOrder/finalizers": ["a", "b"]},
                "spec": {"ports": [{"port": 443, "name": "tls"}, {"port": 80, "$patch": "delete"}, {"port": 22}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 443, "name": "tls"}, {"port": 22}])
        );
        assert_eq!(out["status"]["conditions"][0]["status"], "True");

        let out = run(
            PatchKind::Strategic,
            out,
            json!({
                "$deleteFromPrimitiveList/finalizers": ["a"],
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"$patch": "replace", "z": "3"}},
                "spec": {"$retainKeys": ["ports"], "type": "ClusterIP", "ports": [{"$patch": "replace"}, {"port": 1}]},
            }),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["metadata"]["labels"], json!({"z": "3"}));
        assert_eq!(out["spec"], json!({"ports": [{"port": 1}]}));
        assert!(run(PatchKind::Strategic, json!({}), json!({"$patch": "merge?"})).is_err());
        assert!(run(PatchKind::Strategic, json!({}), json!({"conditions": [1]})).is_err());
    }
}
