//! CSI attachment: what the EBS CSI driver's node plugin, kube-controller-manager's
//! attach-detach controller and the CSI external-attacher do, reduced to the objects the
//! scheduler and the agent read.
//!
//! - Each Node the EC2 bridge registers gets its CSINode (as the kubelet writes it when the
//!   driver registers): one driver, `ebs.csi.aws.com`, with the volume count the driver
//!   reports for the instance ([`ebs_allocatable_count`], from the emulator's
//!   DescribeInstanceTypes answer), owned by the Node.
//! - Attach: for each CSI PersistentVolume a pod bound to an existing Node uses, a
//!   VolumeAttachment (`spec.attacher`, `spec.nodeName`, `spec.source.persistentVolumeName`)
//!   named as the CSI plugin names it (`csi-` and the SHA-256 of volume handle, driver and
//!   node), which the external-attacher takes (its finalizer) and marks `status.attached`.
//! - Detach: once no pod on that Node uses the volume, the attach-detach controller deletes
//!   the VolumeAttachment; the external-attacher's finalizer holds it until the driver has
//!   detached the volume, which takes the Node's detach delay
//!   ([`DETACH_DELAY_ANNOTATION`], none by default), counted from the deletion.
//!
//! - Multi-attach: a volume whose PersistentVolume allows one node at a time
//!   (`ReadWriteOnce`, `ReadWriteOncePod`) is not attached to a second node while an
//!   attachment to another remains, being deleted or not, as the attach-detach controller
//!   refuses it ("Multi-Attach error ... Volume is already exclusively attached to one node",
//!   `pkg/controller/volume/attachdetach/reconciler/reconciler.go`). The kubelet starts a
//!   pod only once every such volume is attached to its node ([`volumes_attached`]), so a
//!   pod moved off a node whose volume has not detached yet waits, as on EKS.
//!
//! Not modelled: the kubelet's volumesInUse report (the controller detaches as soon as the
//! pod is gone, not once the volume is unmounted), inline CSI volumes, the Multi-Attach
//! Event on the waiting pod.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Context;
use serde_json::{json, Value};

use crate::aws::NodeSink;
use crate::controllers::is_terminal;
use crate::resources::ResourceType;
use crate::store::{name_of, namespace_of, DeleteOptions, Store, Write};
use crate::volumes::claim_names;

/// The EBS CSI driver's name.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// A test hook on a Node: how many seconds the driver takes to detach a volume from it
/// (its VolumeAttachment stays, being deleted, that long). Changing it takes effect at once:
/// a large value holds every detachment, removing it releases them.
pub const DETACH_DELAY_ANNOTATION: &str = "kube-sim.joiner.dev/detach-delay-seconds";

/// What EC2 says of a type's EBS attachments (DescribeInstanceTypes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EbsFacts {
    /// `xen` for the types before Nitro.
    pub hypervisor: String,
    /// `EbsInfo.MaximumEbsAttachments`.
    pub max_attachments: Option<i64>,
    /// `EbsInfo.AttachmentLimitType: dedicated`.
    pub dedicated: bool,
}

/// The count the EBS CSI driver's node plugin reports (aws-ebs-csi-driver
/// `pkg/driver/node.go`, `getVolumesLimit`): 39 on a Xen type; else EC2's figure for the
/// type (27, shared, when it gives none); less the root volume and the other EBS volumes
/// mapped at launch; on a shared limit, less the network interfaces past the first; at
/// least 1.
pub fn ebs_allocatable_count(facts: &EbsFacts, enis: i64, extra_volumes: i64) -> i64 {
    let (base, shared) = if facts.hypervisor == "xen" {
        (39, false)
    } else {
        match facts.max_attachments {
            Some(n) if n > 0 => (n, !facts.dedicated),
            _ => (27, true),
        }
    };
    let mut count = base - (extra_volumes + 1);
    if shared {
        count -= enis.max(1) - 1;
    }
    count.max(1)
}

/// The type's EBS facts from the emulator.
pub async fn describe_ebs(client: &aws_sdk_ec2::Client, itype: &str) -> anyhow::Result<EbsFacts> {
    let out = client
        .describe_instance_types()
        .instance_types(aws_sdk_ec2::types::InstanceType::from(itype))
        .send()
        .await
        .with_context(|| format!("EC2 DescribeInstanceTypes {itype}"))?;
    let Some(t) = out.instance_types().first() else {
        anyhow::bail!("EC2 DescribeInstanceTypes: no such type {itype}");
    };
    let ebs = t.ebs_info();
    Ok(EbsFacts {
        hypervisor: t
            .hypervisor()
            .map(|h| h.as_str().to_string())
            .unwrap_or_default(),
        max_attachments: ebs.and_then(|e| e.maximum_ebs_attachments()).map(i64::from),
        dedicated: ebs
            .and_then(|e| e.attachment_limit_type())
            .map(|t| t.as_str())
            == Some("dedicated"),
    })
}

/// The CSINode the kubelet writes once the EBS CSI driver has registered on the Node.
pub fn csi_node_object(node: &str, node_uid: &str, instance_id: &str, count: i64) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": node, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]},
        "spec": {"drivers": [{
            "name": EBS_CSI_DRIVER, "nodeID": instance_id,
            "topologyKeys": ["kubernetes.io/os", "topology.ebs.csi.aws.com/zone", "topology.kubernetes.io/zone"],
            "allocatable": {"count": count},
        }]},
    })
}

/// Writes the Node's CSINode where the bridge registers Nodes; one already there stays.
pub async fn register_csi_node(
    sink: &NodeSink,
    node: &str,
    instance_id: &str,
    count: i64,
) -> anyhow::Result<()> {
    match sink {
        NodeSink::Store(store) => {
            let nodes = store.find_type("", "v1", "nodes").expect("nodes");
            let csi = store
                .find_type("storage.k8s.io", "v1", "csinodes")
                .expect("csinodes");
            let uid = store
                .get(&nodes, None, node)
                .map_err(|e| anyhow::anyhow!("get node {node}: {}", e.message))?["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match store.create(&csi, None, csi_node_object(node, &uid, instance_id, count)) {
                Ok(_) => Ok(()),
                Err(e) if e.code == 409 => Ok(()),
                Err(e) => anyhow::bail!("create csinode {node}: {}", e.message),
            }
        }
        NodeSink::Api { client, .. } => {
            use k8s_openapi::api::core::v1::Node;
            use k8s_openapi::api::storage::v1::CSINode;
            let n = kube::Api::<Node>::all(client.clone())
                .get(node)
                .await
                .with_context(|| format!("get Node {node}"))?;
            let uid = n.metadata.uid.unwrap_or_default();
            let obj: CSINode =
                serde_json::from_value(csi_node_object(node, &uid, instance_id, count))?;
            match kube::Api::<CSINode>::all(client.clone())
                .create(&kube::api::PostParams::default(), &obj)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e).with_context(|| format!("create CSINode {node}")),
            }
        }
    }
}

/// A VolumeAttachment's name as the CSI volume plugin makes it (`csi_attacher.go`,
/// `getAttachmentName`): `csi-` and the hex SHA-256 of volume handle, driver and node.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(format!("{handle}{driver}{node}").as_bytes());
    format!("csi-{}", hex::encode(h))
}

/// The external-attacher's finalizer for a driver (its name, every character that is not a
/// letter or digit made `-`).
fn attacher_finalizer(driver: &str) -> String {
    let clean: String = driver
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("external-attacher/{clean}")
}

struct Kinds {
    pods: Arc<ResourceType>,
    nodes: Arc<ResourceType>,
    claims: Arc<ResourceType>,
    volumes: Arc<ResourceType>,
    attachments: Arc<ResourceType>,
}

fn kinds(store: &Store) -> Option<Kinds> {
    Some(Kinds {
        pods: store.find_type("", "v1", "pods")?,
        nodes: store.find_type("", "v1", "nodes")?,
        claims: store.find_type("", "v1", "persistentvolumeclaims")?,
        volumes: store.find_type("", "v1", "persistentvolumes")?,
        attachments: store.find_type("storage.k8s.io", "v1", "volumeattachments")?,
    })
}

/// One attachment the cluster wants: a CSI volume on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Wanted {
    /// The PersistentVolume allows one node at a time.
    exclusive: bool,
    volume: String,
    driver: String,
    handle: String,
    node: String,
}

/// The attachments pods bound to existing Nodes need (the attach-detach controller's
/// desired state of the world).
fn desired(store: &Store, k: &Kinds, nodes: &BTreeSet<String>) -> BTreeSet<Wanted> {
    let claims: BTreeMap<(String, String), Arc<Value>> = store
        .list(&k.claims, None)
        .0
        .into_iter()
        .map(|c| ((namespace_of(&c).to_string(), name_of(&c).to_string()), c))
        .collect();
    let volumes: BTreeMap<String, Arc<Value>> = store
        .list(&k.volumes, None)
        .0
        .into_iter()
        .map(|v| (name_of(&v).to_string(), v))
        .collect();
    let mut out = BTreeSet::new();
    for pod in store.list(&k.pods, None).0 {
        let Some(node) = pod["spec"]["nodeName"]
            .as_str()
            .filter(|n| nodes.contains(*n))
        else {
            continue;
        };
        if is_terminal(&pod) {
            continue;
        }
        for claim in claim_names(&pod) {
            let Some(c) = claims.get(&(namespace_of(&pod).to_string(), claim)) else {
                continue;
            };
            let Some(pv) = c["spec"]["volumeName"]
                .as_str()
                .and_then(|v| volumes.get(v))
            else {
                continue;
            };
            let csi = &pv["spec"]["csi"];
            let (Some(driver), Some(handle)) =
                (csi["driver"].as_str(), csi["volumeHandle"].as_str())
            else {
                continue;
            };
            out.insert(Wanted {
                exclusive: exclusive(pv),
                volume: name_of(pv).to_string(),
                driver: driver.to_string(),
                handle: handle.to_string(),
                node: node.to_string(),
            });
        }
    }
    out
}

/// How long the driver takes to detach from `node`: its [`DETACH_DELAY_ANNOTATION`].
fn detach_delay(node: Option<&Arc<Value>>) -> jiff::SignedDuration {
    let secs = node
        .and_then(|n| n["metadata"]["annotations"][DETACH_DELAY_ANNOTATION].as_str())
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0);
    jiff::SignedDuration::from_secs(secs.max(0))
}

/// Attaches what is wanted and not attached: the controller creates the VolumeAttachment,
/// the external-attacher takes it and reports it attached.
fn attach(store: &Store, k: &Kinds, w: &Wanted) {
    let name = attachment_name(&w.handle, &w.driver, &w.node);
    let va = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": w.driver, "nodeName": w.node,
                 "source": {"persistentVolumeName": w.volume}},
    });
    match store.create(&k.attachments, None, va) {
        Ok(_) => {}
        Err(e) if e.code == 409 => return,
        Err(e) => {
            tracing::warn!(volumeattachment = %name, "attach-detach: create failed: {}", e.message);
            return;
        }
    }
    let finalizer = attacher_finalizer(&w.driver);
    let _ = store.modify(&k.attachments, None, &name, Write::Internal, |cur| {
        let mut v = cur.clone();
        v["metadata"]["finalizers"] = json!([finalizer]);
        v["status"] = json!({"attached": true});
        Ok(v)
    });
}

/// Whether a PersistentVolume may be attached to one node only (no `ReadWriteMany` or
/// `ReadOnlyMany` among its access modes).
fn exclusive(pv: &Value) -> bool {
    !pv["spec"]["accessModes"].as_array().is_some_and(|modes| {
        modes
            .iter()
            .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany")
    })
}

/// Whether every CSI volume of `pod` is attached to `node` (the kubelet's wait before it
/// starts the pod's containers). Pods without such volumes are never held.
pub fn volumes_attached(store: &Store, pod: &Value, node: &str) -> bool {
    let Some(k) = kinds(store) else { return true };
    let ns = namespace_of(pod);
    claim_names(pod).into_iter().all(|claim| {
        let Ok(c) = store.get(&k.claims, Some(ns), &claim) else {
            return true;
        };
        let Some(pv) = c["spec"]["volumeName"]
            .as_str()
            .and_then(|v| store.get(&k.volumes, None, v).ok())
        else {
            return true;
        };
        let csi = &pv["spec"]["csi"];
        let (Some(driver), Some(handle)) = (csi["driver"].as_str(), csi["volumeHandle"].as_str())
        else {
            return true;
        };
        store
            .get(&k.attachments, None, &attachment_name(handle, driver, node))
            .is_ok_and(|va| {
                va["status"]["attached"] == true && va["metadata"]["deletionTimestamp"].is_null()
            })
    })
}

/// The attach-detach controller and the external-attacher, one pass.
pub fn reconcile_attach_detach(store: &Store) {
    let Some(k) = kinds(store) else { return };
    let nodes: BTreeMap<String, Arc<Value>> = store
        .list(&k.nodes, None)
        .0
        .into_iter()
        .map(|n| (name_of(&n).to_string(), n))
        .collect();
    let names: BTreeSet<String> = nodes.keys().cloned().collect();
    let wanted = desired(store, &k, &names);
    let (existing, _) = store.list(&k.attachments, None);
    let mut attached: BTreeSet<String> = BTreeSet::new();
    let now = jiff::Timestamp::now();
    for va in &existing {
        let name = name_of(va).to_string();
        let node = va["spec"]["nodeName"].as_str().unwrap_or_default();
        let volume = va["spec"]["source"]["persistentVolumeName"]
            .as_str()
            .unwrap_or_default();
        let still = wanted.iter().any(|w| w.node == node && w.volume == volume);
        match va["metadata"]["deletionTimestamp"].as_str() {
            None if still => {
                attached.insert(name);
            }
            None => {
                let _ = store.delete(&k.attachments, None, &name, &DeleteOptions::default());
            }
            Some(since) => {
                let since: jiff::Timestamp = since.parse().unwrap_or(now);
                if now.duration_since(since) >= detach_delay(nodes.get(node)) {
                    let _ = store.modify(&k.attachments, None, &name, Write::Internal, |cur| {
                        let mut v = cur.clone();
                        v["metadata"]["finalizers"] = json!([]);
                        Ok(v)
                    });
                }
            }
        }
    }
    // Volumes still attached (or detaching) somewhere: an exclusive one waits for that.
    let held: BTreeMap<&str, BTreeSet<&str>> =
        existing.iter().fold(BTreeMap::new(), |mut m, va| {
            if let (Some(v), Some(n)) = (
                va["spec"]["source"]["persistentVolumeName"].as_str(),
                va["spec"]["nodeName"].as_str(),
            ) {
                m.entry(v).or_default().insert(n);
            }
            m
        });
    for w in &wanted {
        if attached.contains(&attachment_name(&w.handle, &w.driver, &w.node)) {
            continue;
        }
        let elsewhere = held
            .get(w.volume.as_str())
            .is_some_and(|on| on.iter().any(|n| *n != w.node));
        if elsewhere && w.exclusive {
            tracing::debug!(volume = %w.volume, node = %w.node, "attach-detach: Multi-Attach: the volume is still attached to another node");
            continue;
        }
        attach(store, &k, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_as_the_driver_reports_them() {
        let nitro = |n, dedicated| EbsFacts {
            hypervisor: "nitro".into(),
            max_attachments: Some(n),
            dedicated,
        };
        // m5.large (27 shared), c5d.large (26: one NVMe instance-store volume), m7i.large
        // (32 dedicated), m4.large (Xen).
        assert_eq!(ebs_allocatable_count(&nitro(27, false), 1, 0), 26);
        assert_eq!(ebs_allocatable_count(&nitro(26, false), 1, 0), 25);
        assert_eq!(ebs_allocatable_count(&nitro(32, true), 3, 0), 31);
        assert_eq!(ebs_allocatable_count(&nitro(27, false), 3, 1), 23);
        let xen = EbsFacts {
            hypervisor: "xen".into(),
            max_attachments: Some(40),
            dedicated: false,
        };
        assert_eq!(ebs_allocatable_count(&xen, 2, 0), 38);
        assert_eq!(ebs_allocatable_count(&EbsFacts::default(), 1, 0), 26);
        assert_eq!(ebs_allocatable_count(&nitro(27, false), 60, 0), 1);
    }

    fn create(store: &Store, group: &str, plural: &str, ns: Option<&str>, obj: Value) {
        let t = store.find_type(group, "v1", plural).expect(plural);
        store.create(&t, ns, obj).expect("create");
    }

    fn attachments(store: &Store) -> Vec<Arc<Value>> {
        let t = store
            .find_type("storage.k8s.io", "v1", "volumeattachments")
            .unwrap();
        store.list(&t, None).0
    }

    /// A node, a CSI volume bound to a claim, and a pod on the node using it.
    fn world() -> Arc<Store> {
        let store = Store::new(100);
        create(
            &store,
            "",
            "nodes",
            None,
            json!({"metadata": {"name": "n1",
            "annotations": {DETACH_DELAY_ANNOTATION: "3600"}}}),
        );
        create(
            &store,
            "",
            "persistentvolumes",
            None,
            json!({"metadata": {"name": "pv-1"},
            "spec": {"csi": {"driver": EBS_CSI_DRIVER, "volumeHandle": "vol-1"},
                     "claimRef": {"namespace": "default", "name": "data"}}}),
        );
        create(
            &store,
            "",
            "persistentvolumeclaims",
            Some("default"),
            json!({
            "metadata": {"name": "data"}, "spec": {"volumeName": "pv-1"}}),
        );
        create(
            &store,
            "",
            "pods",
            Some("default"),
            json!({"metadata": {"name": "db-0"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
        );
        store
    }

    #[test]
    fn a_used_volume_is_attached_and_detached_after_the_nodes_delay() {
        let store = world();
        reconcile_attach_detach(&store);
        let va = attachments(&store);
        assert_eq!(va.len(), 1);
        assert_eq!(
            name_of(&va[0]),
            attachment_name("vol-1", EBS_CSI_DRIVER, "n1")
        );
        assert_eq!(va[0]["spec"]["attacher"], EBS_CSI_DRIVER);
        assert_eq!(va[0]["spec"]["source"]["persistentVolumeName"], "pv-1");
        assert_eq!(va[0]["status"]["attached"], true);
        reconcile_attach_detach(&store);
        assert_eq!(attachments(&store).len(), 1, "attached once");
        // The pod goes: detach is asked for, and held by the node's delay.
        let pods = store.find_type("", "v1", "pods").unwrap();
        store
            .delete(&pods, Some("default"), "db-0", &DeleteOptions::default())
            .unwrap();
        reconcile_attach_detach(&store);
        reconcile_attach_detach(&store);
        let va = attachments(&store);
        assert_eq!(va.len(), 1, "held by the external-attacher");
        assert!(va[0]["metadata"]["deletionTimestamp"].is_string());
        let nodes = store.find_type("", "v1", "nodes").unwrap();
        store
            .modify(&nodes, None, "n1", Write::Internal, |n| {
                let mut n = n.clone();
                n["metadata"]["annotations"] = json!({});
                Ok(n)
            })
            .unwrap();
        reconcile_attach_detach(&store);
        assert!(attachments(&store).is_empty(), "detached");
    }

    #[test]
    fn attachment_names_are_the_csi_plugins() {
        let n = attachment_name("vol-1", EBS_CSI_DRIVER, "ip-10-0-0-1");
        assert!(n.starts_with("csi-") && n.len() == 4 + 64, "{n}");
        assert_eq!(n, attachment_name("vol-1", EBS_CSI_DRIVER, "ip-10-0-0-1"));
        assert_ne!(n, attachment_name("vol-1", EBS_CSI_DRIVER, "ip-10-0-0-2"));
        assert_eq!(
            attacher_finalizer(EBS_CSI_DRIVER),
            "external-attacher/ebs-csi-aws-com"
        );
    }
}
