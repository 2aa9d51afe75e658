//! The EBS CSI driver's external-provisioner, for a real control plane, which has
//! kube-controller-manager's PV controller but no CSI driver: for a claim the PV controller
//! handed to `ebs.csi.aws.com` (its `volume.kubernetes.io/storage-provisioner` annotation)
//! and kube-scheduler placed (`volume.kubernetes.io/selected-node`), it creates the volume
//! the driver would: a PersistentVolume named `pvc-<claim uid>`, pre-bound to the claim,
//! reachable from the selected node's zone only (its `nodeAffinity`). The PV controller then
//! binds the claim, and kube-scheduler's VolumeBinding binds the pod.
//!
//! kube-sim provisions in its own controller (`kube_sim::volumes`); this module is the test
//! harness playing the same part against the real API server.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

pub const DRIVER: &str = "ebs.csi.aws.com";
const ZONE: &str = "topology.kubernetes.io/zone";
/// Set by the PV controller on a claim whose class names an external provisioner (the
/// beta key first, as the external-provisioner reads them).
const STORAGE_PROVISIONER: [&str; 2] = [
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
];
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The provisioner, running until dropped.
pub struct EbsProvisioner {
    task: tokio::task::JoinHandle<()>,
}

impl EbsProvisioner {
    /// Starts watching every claim; each one to provision is provisioned as it is seen.
    pub fn start(client: kube::Client) -> EbsProvisioner {
        let task = tokio::spawn(async move {
            let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
            let mut events = watcher(claims, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(ev) = events.next().await {
                let Ok(claim) = ev else { continue };
                if let Err(e) = provision(&client, &claim).await {
                    eprintln!(
                        "ebs provisioner: claim {}/{}: {e}",
                        claim.namespace().unwrap_or_default(),
                        claim.name_any()
                    );
                }
            }
        });
        EbsProvisioner { task }
    }
}

impl Drop for EbsProvisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The selected node's name, when `claim` waits for this driver to provision it.
fn to_provision(claim: &PersistentVolumeClaim) -> Option<String> {
    let a = claim.metadata.annotations.as_ref()?;
    let ours = STORAGE_PROVISIONER
        .iter()
        .any(|k| a.get(*k).map(String::as_str) == Some(DRIVER));
    let unbound = claim
        .spec
        .as_ref()
        .is_none_or(|s| s.volume_name.as_deref().unwrap_or("").is_empty());
    let node = a.get(SELECTED_NODE)?;
    (ours && unbound && claim.metadata.deletion_timestamp.is_none()).then(|| node.clone())
}

/// Creates the claim's volume in its selected node's zone; a volume already made for it
/// (a repeated event) is left alone.
async fn provision(client: &kube::Client, claim: &PersistentVolumeClaim) -> Result<(), String> {
    let Some(node) = to_provision(claim) else {
        return Ok(());
    };
    let uid = claim.uid().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    if volumes
        .get_opt(&name)
        .await
        .map_err(|e| format!("get PersistentVolume {name}: {e}"))?
        .is_some()
    {
        return Ok(());
    }
    let node: Node = Api::all(client.clone())
        .get(&node)
        .await
        .map_err(|e| format!("get Node {node}: {e}"))?;
    let zone = node
        .labels()
        .get(ZONE)
        .cloned()
        .ok_or_else(|| format!("Node {} has no {ZONE} label", node.name_any()))?;
    let spec = claim.spec.clone().unwrap_or_default();
    let class_name = spec.storage_class_name.clone().unwrap_or_default();
    let reclaim = Api::<StorageClass>::all(client.clone())
        .get_opt(&class_name)
        .await
        .map_err(|e| format!("get StorageClass {class_name}: {e}"))?
        .and_then(|c| c.reclaim_policy)
        .unwrap_or_else(|| "Delete".into());
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .ok_or("the claim requests no storage")?;
    // An EBS volume ID: "vol-" and 17 hex digits, here from the claim's uid.
    let handle: String = uid
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(17)
        .collect();
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.access_modes.unwrap_or_default(),
            "volumeMode": spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
            "persistentVolumeReclaimPolicy": reclaim,
            "storageClassName": class_name,
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": claim.namespace(), "name": claim.name_any(), "uid": uid,
                "resourceVersion": claim.resource_version()},
            "csi": {"driver": DRIVER, "volumeHandle": format!("vol-{handle}"), "fsType": "ext4"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": [zone]}]}]}},
        }
    }))
    .map_err(|e| format!("PersistentVolume {name}: {e}"))?;
    match volumes.create(&PostParams::default(), &pv).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("create PersistentVolume {name}: {e}")),
    }
}
