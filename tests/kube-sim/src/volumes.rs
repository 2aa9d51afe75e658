//! Persistent volumes: the PV controller and the scheduler's volume filters.
//!
//! The controller does what kube-controller-manager's PV binder
//! (`pkg/controller/volume/persistentvolume/pv_controller.go`) and the EBS CSI driver's
//! external-provisioner do for a claim, reduced to what scheduling sees:
//! - a claim whose class binds `WaitForFirstConsumer` is provisioned once the scheduler has
//!   picked a node for a pod using it (the claim's `volume.kubernetes.io/selected-node`
//!   annotation), in that node's zone;
//! - a claim whose class binds `Immediate` is provisioned at once, in the first zone the
//!   class's `allowedTopologies` allow (else the first zone of the nodes, by name);
//! - a provisioned volume gets `nodeAffinity` on `topology.kubernetes.io/zone` and is bound
//!   to its claim; a claim naming a volume (or a volume whose `claimRef` names a claim) is
//!   bound to it. Binding sets the claim's `volumeName`, `pv.kubernetes.io/bind-completed`
//!   and both phases `Bound`.
//! - a bound volume whose claim is gone is deleted (reclaim policy `Delete`) or `Released`.
//!
//! The filters are kube-scheduler's VolumeBinding (`pkg/scheduler/framework/plugins/
//! volumebinding`: PreFilter refuses a pod whose claims are missing, lost, being deleted or
//! unbound Immediate; Filter refuses a node a bound volume's node affinity excludes, or
//! outside an unbound WaitForFirstConsumer claim's allowed topologies) and VolumeZone
//! (`plugins/volumezone`: a volume's zone labels against the node's).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::controllers::node_selector_term_matches;
use crate::resources::ResourceType;
use crate::store::{name_of, namespace_of, random_suffix, DeleteOptions, Store, Write};

/// The annotation the scheduler sets on a WaitForFirstConsumer claim for the node it chose.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PV controller once a claim is bound to its volume.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const ZONE: &str = "topology.kubernetes.io/zone";
/// Zone labels VolumeZone reads on a volume.
const VOLUME_ZONE_LABELS: &[&str] = &[ZONE, "failure-domain.beta.kubernetes.io/zone"];

/// kube-scheduler's VolumeBinding reasons (`volumebinding/binder.go`).
pub const NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// VolumeZone's reason (`volumezone/volume_zone.go`).
pub const ZONE_CONFLICT: &str = "node(s) had no available volume zone";

struct Kinds {
    claims: Arc<ResourceType>,
    volumes: Arc<ResourceType>,
    classes: Arc<ResourceType>,
    nodes: Arc<ResourceType>,
}

fn kinds(store: &Store) -> Kinds {
    Kinds {
        claims: store
            .find_type("", "v1", "persistentvolumeclaims")
            .expect("persistentvolumeclaims"),
        volumes: store
            .find_type("", "v1", "persistentvolumes")
            .expect("persistentvolumes"),
        classes: store
            .find_type("storage.k8s.io", "v1", "storageclasses")
            .expect("storageclasses"),
        nodes: store.find_type("", "v1", "nodes").expect("nodes"),
    }
}

/// The claims, volumes and classes as one pass reads them.
#[derive(Default)]
pub struct Volumes {
    claims: HashMap<(String, String), Arc<Value>>,
    volumes: HashMap<String, Arc<Value>>,
    classes: HashMap<String, Arc<Value>>,
}

/// What a pod's claims ask of a node, read once per pod.
pub enum PodVolumes {
    /// The pod cannot be scheduled anywhere yet: PreFilter's reason.
    Refused(String),
    /// Per claim: a bound volume, or an unbound WaitForFirstConsumer claim's class.
    Check(Vec<ClaimCheck>),
}

pub enum ClaimCheck {
    Bound(Arc<Value>),
    Provision(Arc<Value>),
}

fn is_wffc(class: &Value) -> bool {
    class["volumeBindingMode"] == "WaitForFirstConsumer"
}

/// A pod's claims: each `persistentVolumeClaim` volume's, and each generic ephemeral
/// volume's (`<pod>-<volume>`).
pub fn claim_names(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = v["persistentVolumeClaim"]["claimName"].as_str() {
                Some(c.to_string())
            } else if v["ephemeral"].is_object() {
                Some(format!(
                    "{}-{}",
                    name_of(pod),
                    v["name"].as_str().unwrap_or("")
                ))
            } else {
                None
            }
        })
        .collect()
}

impl Volumes {
    pub fn load(store: &Store) -> Volumes {
        let k = kinds(store);
        let key = |o: &Arc<Value>| (namespace_of(o).to_string(), name_of(o).to_string());
        Volumes {
            claims: store
                .list(&k.claims, None)
                .0
                .into_iter()
                .map(|c| (key(&c), c))
                .collect(),
            volumes: store
                .list(&k.volumes, None)
                .0
                .into_iter()
                .map(|v| (name_of(&v).to_string(), v))
                .collect(),
            classes: store
                .list(&k.classes, None)
                .0
                .into_iter()
                .map(|c| (name_of(&c).to_string(), c))
                .collect(),
        }
    }

    /// VolumeBinding's PreFilter: the pod's claims, or why no node can take it now.
    pub fn for_pod(&self, pod: &Value) -> PodVolumes {
        let ns = namespace_of(pod);
        let mut checks = Vec::new();
        let mut immediate = false;
        for name in claim_names(pod) {
            let Some(claim) = self.claims.get(&(ns.to_string(), name.clone())) else {
                return PodVolumes::Refused(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            let volume = claim["spec"]["volumeName"].as_str().unwrap_or("");
            if claim["status"]["phase"] == "Lost" {
                return PodVolumes::Refused(format!(
                    "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{volume}\""
                ));
            }
            if claim["metadata"].get("deletionTimestamp").is_some() {
                return PodVolumes::Refused(format!(
                    "persistentvolumeclaim \"{name}\" is being deleted"
                ));
            }
            let bound =
                !volume.is_empty() && claim["metadata"]["annotations"][BIND_COMPLETED].is_string();
            if bound {
                match self.volumes.get(volume) {
                    Some(v) => checks.push(ClaimCheck::Bound(v.clone())),
                    None => {
                        return PodVolumes::Refused(format!(
                            "persistentvolume \"{volume}\" not found"
                        ))
                    }
                }
                continue;
            }
            let class = claim["spec"]["storageClassName"]
                .as_str()
                .and_then(|c| self.classes.get(c));
            match class {
                Some(c) if volume.is_empty() && is_wffc(c) => {
                    checks.push(ClaimCheck::Provision(c.clone()))
                }
                _ => immediate = true,
            }
        }
        if immediate {
            return PodVolumes::Refused(UNBOUND_IMMEDIATE.to_string());
        }
        PodVolumes::Check(checks)
    }
}

/// VolumeBinding's and VolumeZone's Filter: why `node` cannot take a pod with these claims.
pub fn refusal(checks: &[ClaimCheck], node: &Value) -> Option<&'static str> {
    for c in checks {
        match c {
            ClaimCheck::Bound(v) => {
                let terms = &v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"];
                let reachable = terms.as_array().is_none_or(|ts| {
                    ts.is_empty() || ts.iter().any(|t| node_selector_term_matches(t, node))
                });
                if !reachable {
                    return Some(NODE_CONFLICT);
                }
            }
            ClaimCheck::Provision(class) => {
                if !allowed_topology(class, node) {
                    return Some(BIND_CONFLICT);
                }
            }
        }
    }
    for c in checks {
        if let ClaimCheck::Bound(v) = c {
            if !zone_labels_match(v, node) {
                return Some(ZONE_CONFLICT);
            }
        }
    }
    None
}

/// Whether the node's labels satisfy one of the class's allowed topology terms (each term
/// all of its expressions, each expression one of its values); no terms: anywhere.
fn allowed_topology(class: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    class["allowedTopologies"].as_array().is_none_or(|terms| {
        terms.is_empty()
            || terms.iter().any(|t| {
                t["matchLabelExpressions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|e| {
                        let have = labels[e["key"].as_str().unwrap_or("")].as_str();
                        have.is_some_and(|h| {
                            e["values"]
                                .as_array()
                                .is_some_and(|vs| vs.iter().any(|v| v == h))
                        })
                    })
            })
    })
}

/// VolumeZone: a volume labelled with zones (`a__b` for several) is reachable only from a
/// node in one of them.
fn zone_labels_match(volume: &Value, node: &Value) -> bool {
    VOLUME_ZONE_LABELS.iter().all(|key| {
        let Some(want) = volume["metadata"]["labels"][*key].as_str() else {
            return true;
        };
        let have = node["metadata"]["labels"][*key]
            .as_str()
            .or_else(|| node["metadata"]["labels"][ZONE].as_str());
        have.is_some_and(|h| want.split("__").any(|z| z == h))
    })
}

/// What the scheduler does for the chosen node before it binds the pod (VolumeBinding's
/// PreBind): each unbound WaitForFirstConsumer claim is annotated with the node. Returns
/// whether the pod must wait: PreBind binds the pod only once the PV controller has bound
/// those claims, so the pod is bound in a later pass (to a node its new volumes reach).
pub fn select_node(store: &Store, pod: &Value, checks: &[ClaimCheck], node: &str) -> bool {
    if !checks.iter().any(|c| matches!(c, ClaimCheck::Provision(_))) {
        return false;
    }
    let k = kinds(store);
    let ns = namespace_of(pod);
    for name in claim_names(pod) {
        let _ = store.modify(&k.claims, Some(ns), &name, Write::Internal, |cur| {
            let mut c = cur.clone();
            let unbound = cur["spec"]["volumeName"].as_str().is_none_or(str::is_empty);
            if unbound && cur["metadata"]["annotations"][SELECTED_NODE].is_null() {
                if !c["metadata"]["annotations"].is_object() {
                    c["metadata"]["annotations"] = json!({});
                }
                c["metadata"]["annotations"][SELECTED_NODE] = json!(node);
            }
            Ok(c)
        });
    }
    true
}

/// The PV controller and provisioner: provisions, binds and reclaims (module docs).
pub fn reconcile_volumes(store: &Store) {
    let k = kinds(store);
    let (claims, _) = store.list(&k.claims, None);
    let (volumes, _) = store.list(&k.volumes, None);
    if claims.is_empty() && volumes.is_empty() {
        return;
    }
    let v = Volumes::load(store);
    let (nodes, _) = store.list(&k.nodes, None);
    for claim in &claims {
        if claim["metadata"].get("deletionTimestamp").is_some() {
            continue;
        }
        let named = claim["spec"]["volumeName"].as_str().unwrap_or("");
        if !named.is_empty() {
            if claim["metadata"]["annotations"][BIND_COMPLETED].is_null() {
                if let Some(pv) = v.volumes.get(named) {
                    bind(store, &k, claim, pv);
                }
            }
            continue;
        }
        // A volume already meant for this claim (provisioned for it, or pre-bound by name).
        let meant = volumes.iter().find(|pv| {
            let r = &pv["spec"]["claimRef"];
            r["name"] == name_of(claim)
                && r["namespace"] == namespace_of(claim)
                && (r["uid"].is_null() || r["uid"] == claim["metadata"]["uid"])
        });
        if let Some(pv) = meant {
            bind(store, &k, claim, pv);
            continue;
        }
        mark_pending(store, &k, claim);
        let Some(class) = claim["spec"]["storageClassName"]
            .as_str()
            .and_then(|c| v.classes.get(c))
        else {
            continue;
        };
        if let Some(zone) = provisioning_zone(claim, class, &nodes) {
            provision(store, &k, claim, class, &zone);
        }
    }
    reclaim(store, &k, &volumes, &v);
}

/// Where a claim's volume is to be made, once it may be: the selected node's zone for
/// WaitForFirstConsumer, else the class's first allowed zone or the nodes' first.
fn provisioning_zone(claim: &Value, class: &Value, nodes: &[Arc<Value>]) -> Option<String> {
    if class["provisioner"] == "kubernetes.io/no-provisioner" {
        return None;
    }
    if is_wffc(class) {
        let node = claim["metadata"]["annotations"][SELECTED_NODE].as_str()?;
        let node = nodes.iter().find(|n| name_of(n) == node)?;
        return node["metadata"]["labels"][ZONE]
            .as_str()
            .map(str::to_string);
    }
    let allowed = class["allowedTopologies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["matchLabelExpressions"].as_array().into_iter().flatten())
        .filter(|e| e["key"] == ZONE || e["key"] == "topology.ebs.csi.aws.com/zone")
        .find_map(|e| e["values"][0].as_str().map(str::to_string));
    allowed.or_else(|| {
        let mut zones: Vec<&str> = nodes
            .iter()
            .filter_map(|n| n["metadata"]["labels"][ZONE].as_str())
            .collect();
        zones.sort();
        zones.first().map(|z| z.to_string())
    })
}

fn mark_pending(store: &Store, k: &Kinds, claim: &Value) {
    if claim["status"]["phase"] == "Pending" {
        return;
    }
    let _ = store.modify(
        &k.claims,
        Some(namespace_of(claim)),
        name_of(claim),
        Write::Internal,
        |cur| {
            let mut c = cur.clone();
            c["status"] = json!({"phase": "Pending"});
            Ok(c)
        },
    );
}

/// The external-provisioner's volume for a claim, in `zone`, pre-bound to the claim.
fn provision(store: &Store, k: &Kinds, claim: &Value, class: &Value, zone: &str) {
    let uid = claim["metadata"]["uid"].as_str().unwrap_or("");
    let name = format!("pvc-{uid}");
    let size = claim["spec"]["resources"]["requests"]["storage"].clone();
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {
            "pv.kubernetes.io/provisioned-by": class["provisioner"],
        }},
        "spec": {
            "capacity": {"storage": if size.is_null() { json!("1Gi") } else { size }},
            "accessModes": claim["spec"]["accessModes"],
            "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
            "storageClassName": class["metadata"]["name"],
            "volumeMode": claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem"),
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": namespace_of(claim), "name": name_of(claim), "uid": uid},
            "csi": {"driver": class["provisioner"], "fsType": "ext4",
                "volumeHandle": format!("vol-{}", random_suffix(17))},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
            ]}},
        },
    });
    if let Err(e) = store.create(&k.volumes, None, pv) {
        if e.code != 409 {
            tracing::warn!(claim = name_of(claim), "provision volume: {}", e.message);
        }
        return;
    }
    tracing::debug!(
        "provisioned {name} in {zone} for {}/{}",
        namespace_of(claim),
        name_of(claim)
    );
}

/// Binds a claim and a volume both ways, as the PV controller's bind does.
fn bind(store: &Store, k: &Kinds, claim: &Value, pv: &Value) {
    let pv_name = name_of(pv).to_string();
    let claim_ref = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "namespace": namespace_of(claim), "name": name_of(claim), "uid": claim["metadata"]["uid"]});
    let _ = store.modify(&k.volumes, None, &pv_name, Write::Internal, |cur| {
        let mut p = cur.clone();
        p["spec"]["claimRef"] = claim_ref.clone();
        p["status"] = json!({"phase": "Bound"});
        Ok(p)
    });
    let capacity = pv["spec"]["capacity"].clone();
    let modes = pv["spec"]["accessModes"].clone();
    let _ = store.modify(
        &k.claims,
        Some(namespace_of(claim)),
        name_of(claim),
        Write::Internal,
        |cur| {
            let mut c = cur.clone();
            c["spec"]["volumeName"] = json!(pv_name);
            if !c["metadata"]["annotations"].is_object() {
                c["metadata"]["annotations"] = json!({});
            }
            c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
            c["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
            c["status"] = json!({"phase": "Bound", "capacity": capacity, "accessModes": modes});
            Ok(c)
        },
    );
}

/// Volumes whose claim is gone: deleted (`Delete`) or `Released`.
fn reclaim(store: &Store, k: &Kinds, volumes: &[Arc<Value>], v: &Volumes) {
    for pv in volumes {
        let r = &pv["spec"]["claimRef"];
        let Some(claim) = r["name"].as_str() else {
            continue;
        };
        let ns = r["namespace"].as_str().unwrap_or("");
        let live = v
            .claims
            .get(&(ns.to_string(), claim.to_string()))
            .is_some_and(|c| r["uid"].is_null() || c["metadata"]["uid"] == r["uid"]);
        if live || pv["status"]["phase"] != "Bound" {
            continue;
        }
        if pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
            let _ = store.delete(&k.volumes, None, name_of(pv), &DeleteOptions::default());
        } else {
            let _ = store.modify(&k.volumes, None, name_of(pv), Write::Internal, |cur| {
                let mut p = cur.clone();
                p["status"] = json!({"phase": "Released"});
                Ok(p)
            });
        }
    }
}
