//! The `pods/eviction` subresource: deletes a pod unless that would break a
//! PodDisruptionBudget, answering 429 TooManyRequests the way `kubectl drain` and the agent
//! expect (they retry).

use std::sync::Mutex;

use serde_json::{json, Value};

use crate::selectors::label_selector_matches;
use crate::status::{ApiError, ApiResult};
use crate::store::{DeleteOptions, Store};

/// Evictions are decided one at a time, so that two concurrent evictions cannot both see
/// the same spare disruption.
static EVICTION_LOCK: Mutex<()> = Mutex::new(());

pub fn pod_is_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["metadata"].get("deletionTimestamp").is_none()
        && pod["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p
                .parse::<f64>()
                .ok()
                .map(|p| ((p / 100.0) * total as f64).ceil() as i64),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// The scale the pods' controllers ask for, when every pod has a Deployment controller:
/// the real disruption controller counts expected pods that way, not by what exists.
fn expected_from_owners(store: &Store, pods: &[&Value]) -> Option<i64> {
    let deployments = store.find_type("apps", "v1", "deployments")?;
    let mut owners = std::collections::BTreeSet::new();
    for p in pods {
        let owner = p["metadata"]["ownerReferences"]
            .as_array()?
            .iter()
            .find(|r| r["controller"] == true && r["kind"] == "Deployment")?;
        owners.insert((
            p["metadata"]["namespace"].as_str()?.to_string(),
            owner["name"].as_str()?.to_string(),
        ));
    }
    if owners.is_empty() {
        return None;
    }
    let mut total = 0;
    for (ns, name) in owners {
        total += store.get(&deployments, Some(&ns), &name).ok()?["spec"]["replicas"].as_i64()?;
    }
    Some(total)
}

/// A PDB's budget over the pods it selects: (expected, healthy, desired healthy).
pub fn budget(store: &Store, pdb: &Value, pods: &[std::sync::Arc<Value>]) -> (i64, i64, i64) {
    let ns = pdb["metadata"]["namespace"].as_str().unwrap_or("");
    let selected: Vec<&Value> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p["metadata"]["namespace"] == ns)
        .filter(|p| {
            !matches!(
                p["status"]["phase"].as_str(),
                Some("Succeeded") | Some("Failed")
            )
        })
        .filter(|p| {
            label_selector_matches(&pdb["spec"]["selector"], &p["metadata"]["labels"])
                .unwrap_or(false)
        })
        .collect();
    let expected = expected_from_owners(store, &selected).unwrap_or(selected.len() as i64);
    let healthy = selected.iter().filter(|p| pod_is_ready(p)).count() as i64;
    let desired = if let Some(min) = scaled(&pdb["spec"]["minAvailable"], expected) {
        min
    } else if let Some(max) = scaled(&pdb["spec"]["maxUnavailable"], expected) {
        (expected - max).max(0)
    } else {
        0
    };
    (expected, healthy, desired)
}

pub fn evict(store: &Store, ns: &str, name: &str, body: &Value) -> ApiResult<()> {
    let _guard = EVICTION_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let pods_t = store.find_type("", "v1", "pods").expect("pods type");
    let pdb_t = store
        .find_type("policy", "v1", "poddisruptionbudgets")
        .expect("pdb type");
    let pod = store.get(&pods_t, Some(ns), name)?;
    let opts = DeleteOptions {
        uid: body["deleteOptions"]["preconditions"]["uid"]
            .as_str()
            .map(str::to_string),
        resource_version: body["deleteOptions"]["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    };
    let terminal_or_pending = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed") | Some("Pending") | None
    );
    if terminal_or_pending || pod["metadata"].get("deletionTimestamp").is_some() {
        store.delete(&pods_t, Some(ns), name, &opts)?;
        return Ok(());
    }
    let (pdbs, _) = store.list(&pdb_t, Some(ns));
    let matching: Vec<_> = pdbs
        .iter()
        .filter(|p| {
            label_selector_matches(&p["spec"]["selector"], &pod["metadata"]["labels"])
                .unwrap_or(false)
        })
        .collect();
    if matching.len() > 1 {
        return Err(ApiError::new(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    if let Some(pdb) = matching.first() {
        let (pods, _) = store.list(&pods_t, Some(ns));
        let (_, healthy, desired) = budget(store, pdb, &pods);
        let after = if pod_is_ready(&pod) {
            healthy - 1
        } else {
            healthy
        };
        if after < desired {
            let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or("");
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(json!({"causes": [{
                "reason": "DisruptionBudget",
                "message": format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently"),
            }]}));
            return Err(e);
        }
    }
    store.delete(&pods_t, Some(ns), name, &opts)?;
    Ok(())
}
