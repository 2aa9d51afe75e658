//! The StatefulSet controller, as far as scheduling sees it (kube-controller-manager's
//! `pkg/controller/statefulset`: `stateful_set_control.go`, `stateful_set_utils.go`):
//! - pods named `<set>-<ordinal>`, labelled `statefulset.kubernetes.io/pod-name` and
//!   `apps.kubernetes.io/pod-index`, with the set's `serviceName` as their subdomain;
//! - for each `volumeClaimTemplates` entry a claim `<template>-<set>-<ordinal>`, created
//!   before the pod and kept when the pod goes (the default retention, `Retain`), and a
//!   volume of the template's name that uses it;
//! - `OrderedReady` (the default) creates pod N only once pods 0..N are Running and Ready;
//!   `Parallel` creates them all at once;
//! - a pod deleted or finished is recreated under the same name, so it finds its claims;
//! - scaling down deletes the highest ordinals; status counts replicas and ready ones.
//!
//! Rolling updates of the template are not simulated: pods of an older template stay.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::controllers::{is_deleting, is_terminal, pod_from_template};
use crate::eviction::pod_is_ready;
use crate::store::{name_of, namespace_of, DeleteOptions, Store, Write};

/// The claim a template gives the pod of `ordinal`.
pub fn claim_name(template: &str, set: &str, ordinal: usize) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// Keeps each StatefulSet's pods and claims (module docs).
pub fn reconcile_statefulsets(store: &Store) {
    let Some(sets_type) = store.find_type("apps", "v1", "statefulsets") else {
        return;
    };
    let (sets, _) = store.list(&sets_type, None);
    if sets.is_empty() {
        return;
    }
    let pods_type = store.find_type("", "v1", "pods").expect("pods");
    let claims_type = store
        .find_type("", "v1", "persistentvolumeclaims")
        .expect("persistentvolumeclaims");
    let (pods, _) = store.list(&pods_type, None);
    for set in sets.iter().filter(|s| !is_deleting(s)) {
        let ns = namespace_of(set);
        let uid = set["metadata"]["uid"].as_str().unwrap_or("");
        let mine: HashMap<&str, &Arc<Value>> = pods
            .iter()
            .filter(|p| namespace_of(p) == ns && owned_by(p, uid))
            .map(|p| (name_of(p), p))
            .collect();
        let want = set["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let parallel = set["spec"]["podManagementPolicy"] == "Parallel";
        for ordinal in 0..want {
            let name = format!("{}-{ordinal}", name_of(set));
            match mine.get(name.as_str()) {
                Some(p) if is_terminal(p) && !is_deleting(p) => {
                    let _ = store.delete(&pods_type, Some(ns), &name, &DeleteOptions::default());
                }
                Some(p) => {
                    if !parallel && (!pod_is_ready(p) || p["status"]["phase"] != "Running") {
                        break;
                    }
                }
                None => {
                    ensure_claims(store, &claims_type, set, ordinal);
                    let pod = pod_for(set, ordinal);
                    if let Err(e) = store.create(&pods_type, Some(ns), pod) {
                        if e.code != 409 {
                            tracing::warn!(statefulset = name_of(set), "create pod: {}", e.message);
                        }
                    }
                    if !parallel {
                        break;
                    }
                }
            }
        }
        for (name, p) in &mine {
            let beyond = name
                .rsplit_once('-')
                .and_then(|(_, o)| o.parse::<usize>().ok())
                .is_some_and(|o| o >= want);
            if beyond && !is_deleting(p) {
                let _ = store.delete(&pods_type, Some(ns), name, &DeleteOptions::default());
            }
        }
        status(store, &sets_type, set, &mine);
    }
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
}

/// The set's pod of `ordinal`: its template, named and labelled, with a volume per claim
/// template (replacing a template volume of the same name, as the controller does).
fn pod_for(set: &Value, ordinal: usize) -> Value {
    let set_name = name_of(set);
    let name = format!("{set_name}-{ordinal}");
    let mut pod = pod_from_template(
        set,
        "StatefulSet",
        &set["spec"]["template"],
        name.clone(),
        &[
            ("statefulset.kubernetes.io/pod-name", name.clone()),
            ("apps.kubernetes.io/pod-index", ordinal.to_string()),
        ],
    );
    pod["spec"]["hostname"] = json!(name);
    if let Some(service) = set["spec"]["serviceName"].as_str() {
        pod["spec"]["subdomain"] = json!(service);
    }
    let templates = claim_templates(set);
    let mut volumes: Vec<Value> = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| !templates.iter().any(|t| t["metadata"]["name"] == v["name"]))
        .collect();
    for t in &templates {
        let template = t["metadata"]["name"].as_str().unwrap_or("");
        volumes.push(json!({"name": template, "persistentVolumeClaim": {
            "claimName": claim_name(template, set_name, ordinal)}}));
    }
    if !volumes.is_empty() {
        pod["spec"]["volumes"] = json!(volumes);
    }
    pod
}

fn claim_templates(set: &Value) -> Vec<Value> {
    set["spec"]["volumeClaimTemplates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Creates the claims of the pod of `ordinal` that do not exist yet, labelled with the
/// set's selector labels as the controller labels them.
fn ensure_claims(
    store: &Store,
    claims: &crate::resources::ResourceType,
    set: &Value,
    ordinal: usize,
) {
    let ns = namespace_of(set);
    for t in claim_templates(set) {
        let template = t["metadata"]["name"].as_str().unwrap_or("");
        let name = claim_name(template, name_of(set), ordinal);
        if store.get(claims, Some(ns), &name).is_ok() {
            continue;
        }
        let mut labels = t["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        for (k, v) in set["spec"]["selector"]["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
        {
            labels[k] = v.clone();
        }
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": t["spec"],
        });
        if t["metadata"]["annotations"].is_object() {
            claim["metadata"]["annotations"] = t["metadata"]["annotations"].clone();
        }
        if let Err(e) = store.create(claims, Some(ns), claim) {
            if e.code != 409 {
                tracing::warn!(
                    statefulset = name_of(set),
                    "create claim {name}: {}",
                    e.message
                );
            }
        }
    }
}

fn status(
    store: &Store,
    sets: &crate::resources::ResourceType,
    set: &Value,
    mine: &HashMap<&str, &Arc<Value>>,
) {
    let live: Vec<&&Arc<Value>> = mine
        .values()
        .filter(|p| !is_deleting(p) && !is_terminal(p))
        .collect();
    let ready = live.iter().filter(|p| pod_is_ready(p)).count();
    let _ = store.modify(sets, Some(namespace_of(set)), name_of(set), Write::Internal, |cur| {
        let mut s = cur.clone();
        s["status"] = json!({
            "observedGeneration": cur["metadata"]["generation"],
            "replicas": live.len(), "currentReplicas": live.len(), "updatedReplicas": live.len(),
            "readyReplicas": ready, "availableReplicas": ready,
        });
        Ok(s)
    });
}
