//! The simulated control plane: Deployment and DaemonSet controllers, a scheduler, a
//! kubelet, garbage collection and PodDisruptionBudget status.
//!
//! Each is a loop woken by store events (debounced) and by a slow tick, that reads a
//! snapshot and writes back through the store like any client would. Writes that change
//! nothing are no-ops in the store, so a loop never feeds itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::eviction::{budget, pod_is_ready};
use crate::quantity;
use crate::resources::ResourceType;
pub use crate::scheduler::{reconcile_scheduler, Explain};
use crate::selectors::Requirement;
use crate::store::{
    name_of, namespace_of, now_rfc3339, random_suffix, DeleteOptions, Store, Write,
};

/// Which simulated controllers run.
#[derive(Debug, Clone)]
pub struct ControllerSet {
    pub deployments: bool,
    pub daemonsets: bool,
    pub scheduler: bool,
    pub kubelet: bool,
    pub garbage_collector: bool,
    pub disruption: bool,
    /// StatefulSets' pods and claims ([`crate::statefulsets`]).
    pub statefulsets: bool,
    /// The PV controller and provisioner ([`crate::volumes`]), and CSI attachment
    /// ([`crate::attach`]).
    pub volumes: bool,
    /// Log with every new Unschedulable verdict whether the pod's workload would have fit in
    /// another order ([`crate::scheduler`]): a search per verdict, for tests that ask.
    pub explain_unschedulable: bool,
}

impl Default for ControllerSet {
    fn default() -> Self {
        ControllerSet {
            deployments: true,
            daemonsets: true,
            scheduler: true,
            kubelet: true,
            garbage_collector: true,
            disruption: true,
            statefulsets: true,
            volumes: true,
            explain_unschedulable: false,
        }
    }
}

impl ControllerSet {
    pub fn none() -> Self {
        ControllerSet {
            deployments: false,
            daemonsets: false,
            scheduler: false,
            kubelet: false,
            garbage_collector: false,
            disruption: false,
            statefulsets: false,
            volumes: false,
            explain_unschedulable: false,
        }
    }
}

/// Sets (or replaces) a status condition, keeping lastTransitionTime when status is unchanged.
pub fn set_condition(obj: &mut Value, ty: &str, status: &str, reason: &str, message: &str) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    let conds = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::with_capacity(conds.len() + 1);
    let mut found = false;
    for c in conds {
        if c["type"] == ty {
            found = true;
            let same = c["status"] == status
                && c["reason"].as_str().unwrap_or("") == reason
                && c["message"].as_str().unwrap_or("") == message;
            if same {
                out.push(c);
            } else {
                let ltt = if c["status"] == status {
                    c["lastTransitionTime"].clone()
                } else {
                    json!(now_rfc3339())
                };
                out.push(condition(ty, status, reason, message, ltt));
            }
        } else {
            out.push(c);
        }
    }
    if !found {
        out.push(condition(ty, status, reason, message, json!(now_rfc3339())));
    }
    obj["status"]["conditions"] = Value::Array(out);
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, ltt: Value) -> Value {
    let mut c =
        json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": ltt});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

pub fn condition_status<'a>(obj: &'a Value, ty: &str) -> Option<&'a str> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?["status"]
        .as_str()
}

pub fn node_is_ready(node: &Value) -> bool {
    condition_status(node, "Ready") == Some("True")
}

pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    )
}

pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj["metadata"].get("deletionTimestamp").is_some()
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

/// Runs `reconcile` whenever the store changes (coalescing bursts) and every `tick`.
pub fn spawn_loop(
    store: Arc<Store>,
    name: &'static str,
    tick: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    reconcile: impl Fn(&Store) + Send + 'static,
) {
    let mut rx = store.subscribe();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = interval.tick() => {}
                r = rx.recv() => {
                    if matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)) { return; }
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    while rx.try_recv().is_ok() {}
                }
            }
            let s = store.clone();
            let started = std::time::Instant::now();
            reconcile(&s);
            tracing::trace!(
                controller = name,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "reconciled"
            );
        }
    });
}

pub(crate) struct Types {
    pub(crate) pods: Arc<ResourceType>,
    pub(crate) nodes: Arc<ResourceType>,
    deployments: Arc<ResourceType>,
    daemonsets: Arc<ResourceType>,
    pdbs: Arc<ResourceType>,
}

pub(crate) fn types(store: &Store) -> Types {
    Types {
        pods: store.find_type("", "v1", "pods").expect("pods"),
        nodes: store.find_type("", "v1", "nodes").expect("nodes"),
        deployments: store
            .find_type("apps", "v1", "deployments")
            .expect("deployments"),
        daemonsets: store
            .find_type("apps", "v1", "daemonsets")
            .expect("daemonsets"),
        pdbs: store
            .find_type("policy", "v1", "poddisruptionbudgets")
            .expect("pdbs"),
    }
}

pub(crate) fn template_hash(template: &Value) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(template.to_string().as_bytes());
    hex::encode(&h[..5])
}

pub(crate) fn pod_from_template(
    owner: &Value,
    owner_kind: &str,
    template: &Value,
    name: String,
    extra_labels: &[(&str, String)],
) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["namespace"] = owner["metadata"]["namespace"].clone();
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = json!({});
    }
    for (k, v) in extra_labels {
        pod["metadata"]["labels"][*k] = json!(v);
    }
    pod["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": owner_kind,
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    }]);
    pod
}

/// The pods each Deployment is about to create: `spec.replicas` less its live pods of the
/// current template in `pods`, as unbound pods of that template. What the scheduler's
/// explanation counts among a workload's pods still to place.
pub(crate) fn missing_replicas(store: &Store, pods: &[Arc<Value>]) -> Vec<Value> {
    let t = types(store);
    let (deps, _) = store.list(&t.deployments, None);
    let mut out = Vec::new();
    for d in deps.iter().filter(|d| !is_deleting(d)) {
        let uid = d["metadata"]["uid"].as_str().unwrap_or("");
        let template = &d["spec"]["template"];
        let hash = template_hash(template);
        let want = d["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let live = pods
            .iter()
            .filter(|p| owned_by(p, uid) && !is_deleting(p) && !is_terminal(p))
            .filter(|p| p["metadata"]["labels"]["pod-template-hash"] == hash.as_str())
            .count();
        for k in live..want {
            let name = format!("{}-{hash}-coming-{k}", name_of(d));
            out.push(pod_from_template(
                d,
                "Deployment",
                template,
                name,
                &[("pod-template-hash", hash.clone())],
            ));
        }
    }
    out
}

/// Keeps `spec.replicas` pods per Deployment (directly owned: no ReplicaSets), and its status.
pub fn reconcile_deployments(store: &Store) {
    let t = types(store);
    let (deps, _) = store.list(&t.deployments, None);
    let (pods, _) = store.list(&t.pods, None);
    let mut by_owner: HashMap<&str, Vec<&Arc<Value>>> = HashMap::new();
    for p in &pods {
        if let Some(refs) = p["metadata"]["ownerReferences"].as_array() {
            for r in refs {
                if r["kind"] == "Deployment" {
                    if let Some(uid) = r["uid"].as_str() {
                        by_owner.entry(uid).or_default().push(p);
                    }
                }
            }
        }
    }
    for d in &deps {
        if is_deleting(d) {
            continue;
        }
        let ns = namespace_of(d);
        let uid = d["metadata"]["uid"].as_str().unwrap_or("");
        let want = d["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let active: Vec<&Arc<Value>> = by_owner
            .get(uid)
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|p| !is_deleting(p) && !is_terminal(p))
                    .collect()
            })
            .unwrap_or_default();
        let template = &d["spec"]["template"];
        let hash = template_hash(template);
        // A template change rolls: pods of older templates go as new ones become ready.
        let (current, old): (Vec<&Arc<Value>>, Vec<&Arc<Value>>) = active
            .into_iter()
            .partition(|p| p["metadata"]["labels"]["pod-template-hash"] == hash.as_str());
        // Old pods that never got a node go at once: the Deployment controller scales an
        // old ReplicaSet's unhealthy replicas down first, without waiting for new ones.
        let (unscheduled_old, old): (Vec<&Arc<Value>>, Vec<&Arc<Value>>) = old
            .into_iter()
            .partition(|p| p["spec"]["nodeName"].as_str().is_none_or(str::is_empty));
        for p in &unscheduled_old {
            let _ = store.delete(&t.pods, Some(ns), name_of(p), &DeleteOptions::default());
        }
        let new_ready = current.iter().filter(|p| pod_is_ready(p)).count();
        let surplus_old = (old.len() + new_ready).saturating_sub(want).min(old.len());
        let mut old = old;
        old.sort_by_key(|p| pod_is_ready(p));
        for p in old.iter().take(surplus_old) {
            let _ = store.delete(&t.pods, Some(ns), name_of(p), &DeleteOptions::default());
        }
        let mut active = current;
        if active.len() < want {
            for _ in active.len()..want {
                let name = format!("{}-{hash}-{}", name_of(d), random_suffix(5));
                let pod = pod_from_template(
                    d,
                    "Deployment",
                    template,
                    name,
                    &[("pod-template-hash", hash.clone())],
                );
                if let Err(e) = store.create(&t.pods, Some(ns), pod) {
                    tracing::warn!(deployment = name_of(d), "create pod: {}", e.message);
                }
            }
        } else if active.len() > want {
            // The ReplicaSet controller's ranking: unscheduled, then not ready, then newest.
            active.sort_by_key(|p| {
                let scheduled = p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty());
                let ready = pod_is_ready(p);
                let created = p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let rv = crate::store::rv_of(p);
                (
                    scheduled,
                    ready,
                    std::cmp::Reverse(created),
                    std::cmp::Reverse(rv),
                )
            });
            for p in &active[..active.len() - want] {
                let _ = store.delete(&t.pods, Some(ns), name_of(p), &DeleteOptions::default());
            }
        }
        let (pods_now, _) = store.list(&t.pods, Some(ns));
        let mine: Vec<&Arc<Value>> = pods_now
            .iter()
            .filter(|p| owned_by(p, uid) && !is_deleting(p) && !is_terminal(p))
            .collect();
        let ready = mine.iter().filter(|p| pod_is_ready(p)).count() as i64;
        let total = mine.len() as i64;
        let _ = store.modify(
            &t.deployments,
            Some(ns),
            name_of(d),
            Write::Internal,
            |cur| {
                let mut n = cur.clone();
                let gen = cur["metadata"]["generation"].clone();
                let mut status = cur["status"].clone();
                if !status.is_object() {
                    status = json!({});
                }
                status["observedGeneration"] = gen;
                status["replicas"] = json!(total);
                status["updatedReplicas"] = json!(total);
                status["readyReplicas"] = json!(ready);
                status["availableReplicas"] = json!(ready);
                status["unavailableReplicas"] = json!((want as i64 - ready).max(0));
                n["status"] = status;
                let available = ready >= want as i64;
                set_condition(
                    &mut n,
                    "Available",
                    if available { "True" } else { "False" },
                    if available {
                        "MinimumReplicasAvailable"
                    } else {
                        "MinimumReplicasUnavailable"
                    },
                    if available {
                        "Deployment has minimum availability."
                    } else {
                        "Deployment does not have minimum availability."
                    },
                );
                set_condition(
                    &mut n,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    "kube-sim manages pods directly",
                );
                Ok(n)
            },
        );
    }
}

/// One pod per eligible node for each DaemonSet, bound directly to the node.
pub fn reconcile_daemonsets(store: &Store) {
    let t = types(store);
    let (dss, _) = store.list(&t.daemonsets, None);
    if dss.is_empty() {
        return;
    }
    let (nodes, _) = store.list(&t.nodes, None);
    let (pods, _) = store.list(&t.pods, None);
    for ds in &dss {
        if is_deleting(ds) {
            continue;
        }
        let ns = namespace_of(ds);
        let uid = ds["metadata"]["uid"].as_str().unwrap_or("");
        let template = &ds["spec"]["template"];
        let mine: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| owned_by(p, uid) && !is_deleting(p))
            .collect();
        let mut desired = 0;
        for node in &nodes {
            let probe = json!({"spec": template["spec"], "metadata": template["metadata"]});
            let selected = node_selector_ok(&probe, node);
            let untolerated = untolerated_taint(&probe, node, true);
            let eligible = selected && untolerated.is_none();
            // kube-controller-manager's daemon controller (`NodeShouldRunDaemonPod`): a pod
            // already there keeps running on a node it no longer fits for a NoSchedule taint;
            // only a NoExecute taint it does not tolerate, or a selector it no longer
            // matches, takes it off.
            let keep = selected && untolerated_no_execute(&probe, node).is_none();
            let node_name = name_of(node);
            let has = mine.iter().any(|p| p["spec"]["nodeName"] == node_name);
            if eligible {
                desired += 1;
                if !has {
                    let name = format!("{}-{}", name_of(ds), random_suffix(5));
                    let mut pod = pod_from_template(ds, "DaemonSet", template, name, &[]);
                    pod["spec"]["nodeName"] = json!(node_name);
                    let _ = store.create(&t.pods, Some(ns), pod);
                }
            } else if has && !keep {
                for p in mine.iter().filter(|p| p["spec"]["nodeName"] == node_name) {
                    let _ = store.delete(&t.pods, Some(ns), name_of(p), &DeleteOptions::default());
                }
            }
        }
        let ready = mine.iter().filter(|p| pod_is_ready(p)).count();
        let _ = store.modify(&t.daemonsets, Some(ns), name_of(ds), Write::Internal, |cur| {
            let mut n = cur.clone();
            n["status"] = json!({
                "desiredNumberScheduled": desired, "currentNumberScheduled": mine.len(),
                "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": mine.len(),
                "numberMisscheduled": 0, "observedGeneration": cur["metadata"]["generation"],
            });
            Ok(n)
        });
    }
}

/// Requests of a pod: the sum over containers (limits stand in for missing requests),
/// at least the largest init container, plus overhead. Keys: cpu (cores), memory (bytes), pods.
pub fn pod_requests(pod: &Value) -> BTreeMap<String, f64> {
    let mut sum: BTreeMap<String, f64> = BTreeMap::new();
    let add = |acc: &mut BTreeMap<String, f64>, c: &Value| {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        let mut keys: HashSet<String> = HashSet::new();
        for m in [req, lim] {
            if let Some(o) = m.as_object() {
                keys.extend(o.keys().cloned());
            }
        }
        for k in keys {
            let v = quantity::from_json(&req[&k])
                .or_else(|| quantity::from_json(&lim[&k]))
                .unwrap_or(0.0);
            *acc.entry(k).or_default() += v;
        }
    };
    if let Some(cs) = pod["spec"]["containers"].as_array() {
        for c in cs {
            add(&mut sum, c);
        }
    }
    if let Some(cs) = pod["spec"]["initContainers"].as_array() {
        for c in cs {
            let mut one = BTreeMap::new();
            add(&mut one, c);
            for (k, v) in one {
                let e = sum.entry(k).or_default();
                *e = e.max(v);
            }
        }
    }
    if let Some(o) = pod["spec"]["overhead"].as_object() {
        for (k, v) in o {
            *sum.entry(k.clone()).or_default() += quantity::from_json(v).unwrap_or(0.0);
        }
    }
    sum.insert("pods".into(), 1.0);
    sum
}

fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t["effect"]
            .as_str()
            .is_none_or(|e| e.is_empty() || Some(e) == taint["effect"].as_str());
        let key = t["key"].as_str().unwrap_or("");
        let op = t["operator"].as_str().unwrap_or("Equal");
        let key_ok = key.is_empty() && op == "Exists" || Some(key) == taint["key"].as_str();
        let value_ok = op == "Exists"
            || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
        effect_ok && key_ok && value_ok
    })
}

/// The first taint of the node (NoSchedule / NoExecute) the pod does not tolerate.
pub(crate) fn untolerated_taint(pod: &Value, node: &Value, daemon: bool) -> Option<Value> {
    let mut tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if daemon {
        for key in [
            "node.kubernetes.io/unschedulable",
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            tolerations.push(json!({"key": key, "operator": "Exists"}));
        }
    }
    node["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|taint| taint["effect"] != "PreferNoSchedule" && !tolerates(&tolerations, taint))
        .cloned()
}

/// The first NoExecute taint of the node a DaemonSet's pod does not tolerate.
fn untolerated_no_execute(pod: &Value, node: &Value) -> Option<Value> {
    let mut only = node.clone();
    if let Some(taints) = only["spec"]["taints"].as_array_mut() {
        taints.retain(|t| t["effect"] == "NoExecute");
    }
    untolerated_taint(pod, &only, true)
}

pub(crate) fn node_selector_term_matches(term: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let exprs_ok = term["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let vals: Vec<String> = e["values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let actual = labels[key].as_str();
            match e["operator"].as_str().unwrap_or("") {
                "In" => Requirement::In(key.into(), vals).matches(labels),
                "NotIn" => Requirement::NotIn(key.into(), vals).matches(labels),
                "Exists" => actual.is_some(),
                "DoesNotExist" => actual.is_none(),
                "Gt" => actual
                    .and_then(|a| a.parse::<i64>().ok())
                    .zip(vals.first().and_then(|v| v.parse::<i64>().ok()))
                    .is_some_and(|(a, v)| a > v),
                "Lt" => actual
                    .and_then(|a| a.parse::<i64>().ok())
                    .zip(vals.first().and_then(|v| v.parse::<i64>().ok()))
                    .is_some_and(|(a, v)| a < v),
                _ => false,
            }
        })
    });
    let fields_ok = term["matchFields"].as_array().is_none_or(|fs| {
        fs.iter().all(|f| {
            let vals: Vec<&str> = f["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let is_in = f["key"] == "metadata.name" && vals.contains(&name_of(node));
            match f["operator"].as_str() {
                Some("In") => is_in,
                Some("NotIn") => !is_in,
                _ => false,
            }
        })
    });
    exprs_ok && fields_ok
}

/// nodeSelector and required node affinity.
pub(crate) fn node_selector_ok(pod: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let sel_ok = pod["spec"]["nodeSelector"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels[k] == *v));
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let aff_ok = terms
        .as_array()
        .is_none_or(|ts| ts.is_empty() || ts.iter().any(|t| node_selector_term_matches(t, node)));
    sel_ok && aff_ok
}

/// Bound pods on Ready nodes run; pods on NotReady nodes lose readiness; pods bound to
/// nodes that no longer exist are deleted (pod garbage collection).
pub fn reconcile_kubelet(store: &Store) {
    reconcile_kubelet_except(store, &|_| false);
}

/// Decides which pods the process runner owns: the simulated kubelet leaves their status
/// alone (it still removes them when their node goes).
pub type Claimed = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// The simulated kubelet for every pod that `claimed` does not select.
pub fn reconcile_kubelet_except(store: &Store, claimed: &dyn Fn(&Value) -> bool) {
    let t = types(store);
    let (pods, _) = store.list(&t.pods, None);
    let (nodes, _) = store.list(&t.nodes, None);
    let by_name: HashMap<&str, &Arc<Value>> = nodes.iter().map(|n| (name_of(n), n)).collect();
    for pod in &pods {
        let Some(node_name) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        let ns = namespace_of(pod);
        let name = name_of(pod);
        let Some(node) = by_name.get(node_name) else {
            let _ = store.delete(&t.pods, Some(ns), name, &DeleteOptions::default());
            continue;
        };
        if is_deleting(pod) || is_terminal(pod) || claimed(pod) {
            continue;
        }
        // The kubelet starts a pod's containers once its volumes are attached to the node.
        let ready = node_is_ready(node)
            && (pod["status"]["phase"] == "Running"
                || crate::attach::volumes_attached(store, pod, node_name));
        let pod_ready = condition_status(pod, "Ready") == Some("True");
        if (ready && pod["status"]["phase"] == "Running" && pod_ready) || (!ready && !pod_ready) {
            continue;
        }
        let host_ip = node["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("10.0.0.1")
            .to_string();
        let _ = store.modify(&t.pods, Some(ns), name, Write::Internal, |cur| {
            let mut p = cur.clone();
            if ready {
                if p["status"]["phase"] != "Running" {
                    use rand::Rng;
                    let mut r = rand::rng();
                    let ip = format!("10.{}.{}.{}", r.random_range(1..250), r.random_range(0..250), r.random_range(1..250));
                    p["status"]["phase"] = json!("Running");
                    p["status"]["hostIP"] = json!(host_ip);
                    p["status"]["hostIPs"] = json!([{"ip": host_ip}]);
                    p["status"]["podIP"] = json!(ip);
                    p["status"]["podIPs"] = json!([{"ip": ip}]);
                    p["status"]["startTime"] = json!(now_rfc3339());
                }
                let statuses: Vec<Value> = p["spec"]["containers"].as_array().map(|cs| cs.iter().map(|c| json!({
                    "name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": p["status"]["startTime"]}},
                })).collect()).unwrap_or_default();
                p["status"]["containerStatuses"] = json!(statuses);
                for ty in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
                    set_condition(&mut p, ty, "True", "", "");
                }
            } else if p["status"]["phase"] == "Running" {
                set_condition(&mut p, "Ready", "False", "NodeNotReady", "");
                set_condition(&mut p, "ContainersReady", "False", "NodeNotReady", "");
            }
            Ok(p)
        });
    }
}

/// Background cascading deletion: objects whose every owner is gone are deleted.
pub fn reconcile_gc(store: &Store) {
    let all = store.types();
    let mut seen_keys = HashSet::new();
    let mut uids: HashSet<String> = HashSet::new();
    let mut owned: Vec<(Arc<ResourceType>, Arc<Value>)> = Vec::new();
    for rt in all {
        if !seen_keys.insert(rt.key()) {
            continue;
        }
        let (items, _) = store.list(&rt, None);
        for o in items {
            if let Some(uid) = o["metadata"]["uid"].as_str() {
                uids.insert(uid.to_string());
            }
            if o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
            {
                owned.push((rt.clone(), o));
            }
        }
    }
    for (rt, o) in owned {
        let refs = o["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if refs
            .iter()
            .all(|r| !uids.contains(r["uid"].as_str().unwrap_or("")))
        {
            let ns = rt.namespaced.then(|| namespace_of(&o));
            let _ = store.delete(&rt, ns, name_of(&o), &DeleteOptions::default());
        }
    }
}

/// PodDisruptionBudget status, as the disruption controller maintains it.
pub fn reconcile_disruption(store: &Store) {
    let t = types(store);
    let (pdbs, _) = store.list(&t.pdbs, None);
    if pdbs.is_empty() {
        return;
    }
    let (pods, _) = store.list(&t.pods, None);
    for pdb in &pdbs {
        let (expected, healthy, desired) = budget(store, pdb, &pods);
        let allowed = (healthy - desired).max(0);
        let _ = store.modify(&t.pdbs, Some(namespace_of(pdb)), name_of(pdb), Write::Internal, |cur| {
            let mut n = cur.clone();
            let conds = cur["status"]["conditions"].clone();
            n["status"] = json!({
                "observedGeneration": cur["metadata"]["generation"], "expectedPods": expected,
                "currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed,
                "conditions": conds,
            });
            if n["status"]["conditions"].is_null() {
                n["status"]["conditions"] = json!([]);
            }
            let (s, r) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
            set_condition(&mut n, "DisruptionAllowed", s, r, "");
            Ok(n)
        });
    }
}

/// Starts the enabled controllers.
pub fn start(
    store: &Arc<Store>,
    set: &ControllerSet,
    shutdown: &tokio::sync::watch::Receiver<bool>,
    runner_claims: Claimed,
) {
    let tick = Duration::from_secs(1);
    if set.deployments {
        spawn_loop(
            store.clone(),
            "deployments",
            tick,
            shutdown.clone(),
            reconcile_deployments,
        );
    }
    if set.daemonsets {
        spawn_loop(
            store.clone(),
            "daemonsets",
            tick,
            shutdown.clone(),
            reconcile_daemonsets,
        );
    }
    if set.scheduler {
        let explain = if set.explain_unschedulable {
            Explain::On
        } else {
            Explain::Off
        };
        spawn_loop(
            store.clone(),
            "scheduler",
            tick,
            shutdown.clone(),
            move |s| reconcile_scheduler(s, explain),
        );
    }
    if set.kubelet {
        spawn_loop(store.clone(), "kubelet", tick, shutdown.clone(), move |s| {
            reconcile_kubelet_except(s, &*runner_claims)
        });
    }
    if set.garbage_collector {
        spawn_loop(store.clone(), "gc", tick, shutdown.clone(), reconcile_gc);
    }
    if set.statefulsets {
        spawn_loop(
            store.clone(),
            "statefulsets",
            tick,
            shutdown.clone(),
            crate::statefulsets::reconcile_statefulsets,
        );
    }
    if set.volumes {
        spawn_loop(
            store.clone(),
            "volumes",
            tick,
            shutdown.clone(),
            crate::volumes::reconcile_volumes,
        );
        spawn_loop(
            store.clone(),
            "attach-detach",
            tick,
            shutdown.clone(),
            crate::attach::reconcile_attach_detach,
        );
    }
    if set.disruption {
        spawn_loop(
            store.clone(),
            "disruption",
            tick,
            shutdown.clone(),
            reconcile_disruption,
        );
    }
}
