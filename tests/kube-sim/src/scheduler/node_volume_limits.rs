//! NodeVolumeLimits for CSI volumes, as kube-scheduler's `plugins/nodevolumelimits/csi.go`:
//! a node's CSINode (`spec.drivers[].allocatable.count`) caps how many distinct volumes of
//! each driver its pods may use. A claim counts by its bound volume's `spec.csi` driver and
//! handle, or, unbound (or bound to a volume not there), by its class's provisioner, as a
//! volume of its own. The volumes of the node's VolumeAttachments count too (a volume still
//! attached after its pod is gone): kube-scheduler v1.37 reads them, by their
//! `spec.source.persistentVolumeName`. No CSINode, or no count for a driver: no limit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::store::{name_of, namespace_of, Store};
use crate::volumes::claim_names;

pub const MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// A volume's CSI driver and unique name (`driver/handle`).
fn csi_source(pv: &Value) -> Option<(String, String)> {
    let csi = &pv["spec"]["csi"];
    let (d, h) = (csi["driver"].as_str()?, csi["volumeHandle"].as_str()?);
    Some((d.to_string(), format!("{d}/{h}")))
}

/// The storage objects the filter reads, as one pass sees them.
#[derive(Default)]
pub struct Storage {
    claims: HashMap<(String, String), Arc<Value>>,
    volumes: HashMap<String, Arc<Value>>,
    classes: HashMap<String, Arc<Value>>,
    /// Per node, each driver's count.
    limits: HashMap<String, HashMap<String, i64>>,
    /// Per node, the volumes its VolumeAttachments name.
    attached: HashMap<String, Vec<String>>,
}

fn by_name(store: &Store, group: &str, plural: &str) -> HashMap<String, Arc<Value>> {
    let Some(t) = store.find_type(group, "v1", plural) else {
        return HashMap::new();
    };
    let (items, _) = store.list(&t, None);
    items
        .into_iter()
        .map(|o| (name_of(&o).to_string(), o))
        .collect()
}

impl Storage {
    pub fn load(store: &Store) -> Storage {
        let claims = store
            .find_type("", "v1", "persistentvolumeclaims")
            .map(|t| store.list(&t, None).0)
            .unwrap_or_default()
            .into_iter()
            .map(|c| ((namespace_of(&c).to_string(), name_of(&c).to_string()), c))
            .collect();
        let limits = by_name(store, "storage.k8s.io", "csinodes")
            .into_iter()
            .map(|(node, csi)| {
                let drivers = csi["spec"]["drivers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| {
                        let count = d["allocatable"]["count"].as_i64()?;
                        Some((d["name"].as_str()?.to_string(), count))
                    })
                    .collect();
                (node, drivers)
            })
            .collect();
        let mut attached: HashMap<String, Vec<String>> = HashMap::new();
        for va in by_name(store, "storage.k8s.io", "volumeattachments").values() {
            let (Some(node), Some(pv)) = (
                va["spec"]["nodeName"].as_str(),
                va["spec"]["source"]["persistentVolumeName"].as_str(),
            ) else {
                continue;
            };
            attached
                .entry(node.to_string())
                .or_default()
                .push(pv.to_string());
        }
        Storage {
            claims,
            attached,
            volumes: by_name(store, "", "persistentvolumes"),
            classes: by_name(store, "storage.k8s.io", "storageclasses"),
            limits,
        }
    }

    /// The pod's CSI volumes as (driver, unique name).
    pub fn csi_volumes(&self, pod: &Value) -> Vec<(String, String)> {
        let ns = namespace_of(pod);
        let mut out = Vec::new();
        for name in claim_names(pod) {
            let Some(claim) = self.claims.get(&(ns.to_string(), name.clone())) else {
                continue;
            };
            let bound = claim["spec"]["volumeName"]
                .as_str()
                .filter(|v| !v.is_empty())
                .and_then(|v| self.volumes.get(v));
            if let Some(pv) = bound {
                out.extend(csi_source(pv));
                continue;
            }
            let class = claim["spec"]["storageClassName"]
                .as_str()
                .or_else(|| {
                    claim["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
                        .as_str()
                })
                .and_then(|c| self.classes.get(c));
            if let Some(p) = class.and_then(|c| c["provisioner"].as_str()) {
                out.push((p.to_string(), format!("{p}/claim:{ns}/{name}")));
            }
        }
        out
    }

    /// Filter: whether adding `new` to the volumes of the pods bound on the node goes over
    /// one of its drivers' counts.
    pub fn refusal(
        &self,
        node: &Value,
        new: &[(String, String)],
        on_node: &[&Value],
    ) -> Option<&'static str> {
        if new.is_empty() {
            return None;
        }
        let limits = self.limits.get(name_of(node))?;
        let by_attachment = self
            .attached
            .get(name_of(node))
            .into_iter()
            .flatten()
            .filter_map(|pv| self.volumes.get(pv))
            .filter_map(|pv| csi_source(pv));
        let attached: HashSet<(String, String)> = on_node
            .iter()
            .flat_map(|p| self.csi_volumes(p))
            .chain(by_attachment)
            .collect();
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for (driver, _) in &attached {
            *counts.entry(driver.as_str()).or_default() += 1;
        }
        let fresh: HashSet<&(String, String)> =
            new.iter().filter(|v| !attached.contains(*v)).collect();
        let mut adding: HashMap<&str, i64> = HashMap::new();
        for (driver, _) in fresh {
            *adding.entry(driver.as_str()).or_default() += 1;
        }
        let over = adding.iter().any(|(driver, n)| {
            limits
                .get(*driver)
                .is_some_and(|max| counts.get(driver).copied().unwrap_or(0) + n > *max)
        });
        over.then_some(MAX_VOLUME_COUNT)
    }
}
