//! The four PATCH content types a Kubernetes server accepts.
//!
//! Strategic merge patch and server-side apply need to know which lists are keyed maps
//! (containers by `name`, conditions by `type`...). The real server reads that from the Go
//! types; kube-sim keeps the same table for the fields clients patch in practice, and treats
//! every other list as atomic, which is also what the real server does for custom resources.

use serde_json::{json, Map, Value};

use crate::status::{ApiError, ApiResult};
use crate::store::now_rfc3339;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Option<PatchKind> {
        let ct = ct.split(';').next().unwrap_or("").trim();
        match ct {
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// The merge key of a list field, by field name (and, for `ports`, by what the items hold:
/// container ports merge on `containerPort`, service ports on `port`).
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "taints" => "key",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Lists of scalars merged as sets rather than replaced.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

pub fn parse_body(kind: PatchKind, body: &[u8]) -> ApiResult<Value> {
    let parsed: Result<Value, String> = serde_json::from_slice(body).map_err(|e| e.to_string());
    match (kind, parsed) {
        (_, Ok(v)) => Ok(v),
        (PatchKind::Apply, Err(_)) => serde_yaml::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        (_, Err(e)) => Err(ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

/// Applies a JSON, merge or strategic patch to `current`.
pub fn apply_patch(kind: PatchKind, current: &Value, patch: &Value) -> ApiResult<Value> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        PatchKind::Merge => json_patch::merge(&mut doc, patch),
        PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(&mut doc, patch);
        }
        PatchKind::Apply => unreachable!("apply is handled by server_side_apply"),
    }
    Ok(doc)
}

/// Strategic merge: maps merge recursively, keyed lists merge item by item, `null` deletes,
/// and the `$patch`, `$retainKeys`, `$deleteFromPrimitiveList` and `$setElementOrder`
/// directives kubectl sends are honoured.
pub fn strategic_merge(orig: &mut Value, patch: &Value) {
    let Some(pm) = patch.as_object() else {
        *orig = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = pm.clone();
        p.remove("$patch");
        *orig = Value::Object(p);
        return;
    }
    if !orig.is_object() {
        *orig = json!({});
    }
    let mut order: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            if let Some(a) = pv.as_array() {
                order.push((field.to_string(), a.clone()));
            }
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (orig[field].as_array_mut(), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k == "$retainKeys" || k == "$patch" {
            continue;
        }
        let om = orig.as_object_mut().expect("object");
        if pv.is_null() {
            om.remove(k);
            continue;
        }
        match (om.get_mut(k), pv) {
            (Some(ov @ Value::Object(_)), Value::Object(_)) => strategic_merge(ov, pv),
            (Some(Value::Array(ol)), Value::Array(pl)) => {
                if let Some(key) = merge_key(k, pl).or_else(|| merge_key(k, ol)) {
                    merge_keyed_list(ol, pl, key);
                } else if is_set_list(k) {
                    for item in pl {
                        if !ol.contains(item) {
                            ol.push(item.clone());
                        }
                    }
                } else {
                    *ol = strip_directives_list(pl);
                }
            }
            (_, Value::Object(_)) => {
                let mut fresh = json!({});
                strategic_merge(&mut fresh, pv);
                om.insert(k.clone(), fresh);
            }
            (_, Value::Array(pl)) => {
                om.insert(k.clone(), Value::Array(strip_directives_list(pl)));
            }
            _ => {
                om.insert(k.clone(), pv.clone());
            }
        }
    }
    if let Some(keep) = pm.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        if let Some(om) = orig.as_object_mut() {
            om.retain(|k, _| keep.contains(&k.as_str()));
        }
    }
    for (field, wanted) in order {
        reorder(orig, &field, &wanted);
    }
}

fn strip_directives_list(list: &[Value]) -> Vec<Value> {
    list.iter()
        .filter(|i| i.get("$patch").is_none())
        .cloned()
        .collect()
}

fn merge_keyed_list(orig: &mut Vec<Value>, patch: &[Value], key: &str) {
    if patch
        .iter()
        .any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *orig = strip_directives_list(patch);
        return;
    }
    for p in patch {
        let Some(kv) = p.get(key) else {
            orig.push(p.clone());
            continue;
        };
        let pos = orig.iter().position(|o| o.get(key) == Some(kv));
        let delete = p.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                orig.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut orig[i], p),
            (None, false) => {
                let mut fresh = json!({});
                strategic_merge(&mut fresh, p);
                orig.push(fresh);
            }
        }
    }
}

/// `$setElementOrder`: items named in the directive come first, in its order.
fn reorder(orig: &mut Value, field: &str, wanted: &[Value]) {
    let Some(list) = orig.get_mut(field).and_then(Value::as_array_mut) else {
        return;
    };
    let key = merge_key(field, list).map(str::to_string);
    let pos = |item: &Value| -> usize {
        wanted
            .iter()
            .position(|w| match (&key, w) {
                (Some(k), Value::Object(_)) => item.get(k) == w.get(k),
                _ => item == w,
            })
            .unwrap_or(usize::MAX)
    };
    list.sort_by_key(|i| pos(i));
}

/// The managed-fields set (`fieldsV1`) of an applied configuration.
pub fn field_set(applied: &Value) -> Value {
    let mut out = Map::new();
    if let Some(m) = applied.as_object() {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            if k == "metadata" {
                let mut meta = Map::new();
                for mk in ["labels", "annotations"] {
                    if let Some(x) = v.get(mk) {
                        meta.insert(format!("f:{mk}"), field_set(x));
                    }
                }
                if v.get("finalizers").is_some() {
                    meta.insert("f:finalizers".into(), json!({}));
                }
                if !meta.is_empty() {
                    out.insert("f:metadata".into(), Value::Object(meta));
                }
                continue;
            }
            out.insert(format!("f:{k}"), sub_set(k, v));
        }
    }
    Value::Object(out)
}

fn sub_set(field: &str, v: &Value) -> Value {
    match v {
        Value::Object(_) => field_set(v),
        Value::Array(items) => match merge_key(field, items) {
            Some(key) => {
                let mut m = Map::new();
                for i in items {
                    if let Some(kv) = i.get(key) {
                        let mut entry = field_set(i);
                        entry
                            .as_object_mut()
                            .expect("object")
                            .insert(".".into(), json!({}));
                        m.insert(format!("k:{}", json!({ key: kv })), entry);
                    }
                }
                Value::Object(m)
            }
            None => json!({}),
        },
        _ => json!({}),
    }
}

/// Removes from `obj` the fields in `old` (a manager's previous set) missing from `new`.
fn remove_dropped(obj: &mut Value, old: &Value, new: &Value) {
    let (Some(om), Some(nm)) = (old.as_object(), new.as_object()) else {
        return;
    };
    for (k, ov) in om {
        if k == "." {
            continue;
        }
        let nv = nm.get(k);
        if let Some(name) = k.strip_prefix("f:") {
            match nv {
                None if name == "metadata" => {
                    if let Some(child) = obj.get_mut(name) {
                        remove_dropped(child, ov, &json!({}));
                    }
                }
                None => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove(name);
                    }
                }
                Some(nv) => {
                    if let Some(child) = obj.get_mut(name) {
                        remove_dropped(child, ov, nv);
                    }
                }
            }
        } else if let Some(sel) = k.strip_prefix("k:") {
            let Ok(sel) = serde_json::from_str::<Map<String, Value>>(sel) else {
                continue;
            };
            let Some(list) = obj.as_array_mut() else {
                continue;
            };
            let matches = |i: &Value| sel.iter().all(|(sk, sv)| i.get(sk) == Some(sv));
            match nv {
                None => list.retain(|i| !matches(i)),
                Some(nv) => {
                    if let Some(item) = list.iter_mut().find(|i| matches(i)) {
                        remove_dropped(item, ov, nv);
                    }
                }
            }
        }
    }
}

/// Server-side apply: merges the applied configuration into the live object, removes the
/// fields this manager applied before and no longer applies, and records the manager's set
/// in `metadata.managedFields`. Field conflicts between managers are not detected.
pub fn server_side_apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
) -> ApiResult<Value> {
    if !applied.is_object() {
        return Err(ApiError::bad_request("apply patch must be an object"));
    }
    // The real server cannot decode such a body into ObjectMeta; kube-sim used to index into
    // it and panic.
    if applied.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ApiError::bad_request(
            "error decoding apply patch: metadata must be an object",
        ));
    }
    let new_set = field_set(applied);
    let mut obj = match current {
        None => json!({}),
        Some(c) => c.clone(),
    };
    let mut others: Vec<Value> = Vec::new();
    if let Some(prev) = current.and_then(|c| c["metadata"]["managedFields"].as_array()) {
        for entry in prev {
            if entry["manager"] == manager && entry["operation"] == "Apply" {
                remove_dropped(&mut obj, &entry["fieldsV1"], &new_set);
            } else {
                others.push(entry.clone());
            }
        }
    }
    let mut body = applied.clone();
    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    strategic_merge(&mut obj, &body);
    others.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": new_set,
    }));
    // The merge left an object (the body is one); its metadata may still be the current
    // object's, which only a store holding garbage could make anything but an object.
    if let Some(o) = obj.as_object_mut() {
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
    }
    obj["metadata"]["managedFields"] = Value::Array(others);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merges_containers_by_name_and_replaces_tolerations() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
            "tolerations": [{"key": "x", "operator": "Exists"}]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {
            "containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}],
            "tolerations": [{"key": "y", "operator": "Exists"}]}}),
        );
        let names: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(pod["spec"]["containers"][1]["image"], "b:2");
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([{"key": "y", "operator": "Exists"}])
        );
    }

    #[test]
    fn strategic_delete_directive_and_null() {
        let mut node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}, "metadata": {"labels": {"x": "1", "y": "2"}}});
        strategic_merge(
            &mut node,
            &json!({"spec": {"taints": [{"key": "a", "$patch": "delete"}]}, "metadata": {"labels": {"x": null}}}),
        );
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "b", "effect": "NoSchedule"}])
        );
        assert_eq!(node["metadata"]["labels"], json!({"y": "2"}));
    }

    /// Found by fuzzing (fuzz/fuzz_targets/kube_sim_patch.rs): an apply body whose
    /// `metadata` is not an object panicked the handler instead of answering 400.
    #[test]
    fn apply_with_metadata_that_is_not_an_object() {
        let e = server_side_apply(None, &json!({"metadata": "x"}), "m", "v1").unwrap_err();
        assert_eq!(e.code, 400, "{e:?}");
        let current = json!({"metadata": "x", "data": {"k": "v"}});
        let merged =
            server_side_apply(Some(&current), &json!({"data": {"k": "w"}}), "m", "v1").unwrap();
        assert_eq!(merged["data"], json!({"k": "w"}));
        assert_eq!(merged["metadata"]["managedFields"][0]["manager"], "m");
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying() {
        let first = server_side_apply(None, &json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "data": {"k": "v", "old": "o"}}), "m", "v1").unwrap();
        let second = server_side_apply(
            Some(&first),
            &json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k": "v2"}}),
            "m",
            "v1",
        )
        .unwrap();
        assert_eq!(second["data"], json!({"k": "v2"}));
        assert_eq!(second["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(
            second["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
