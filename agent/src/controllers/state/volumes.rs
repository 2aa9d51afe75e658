//! The storage watches: PersistentVolumeClaims, PersistentVolumes and StorageClasses, each
//! kept as the few fields volume topology reads ([`crate::scheduler::volumes`]), so that a
//! pod's volumes can be turned into where it may run without a call to the API server; and
//! CSINodes (how many volumes each node's drivers attach) and VolumeAttachments (which
//! volumes are attached where: termination waits for a drained node's to go).
//!
//! The agent does not wait for these watches to list before it acts: until they have, a
//! pod with claims reads as "claim not found" and is left out of the round with that
//! reason, never placed without its volumes' zones; and a watch the agent's role does not
//! allow would otherwise keep every loop from starting.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;

use super::Change;
use crate::scheduler::volumes::{ClaimView, ClassView, VolumeLookup, VolumeView};

/// One kind's views by key, kept from its watch's events; a relist is built apart and
/// swapped in when complete, as the pod store does.
struct Views<V> {
    /// The live views, and a relist in progress.
    inner: RwLock<(ByKey<V>, Option<ByKey<V>>)>,
}

type ByKey<V> = HashMap<String, Arc<V>>;

impl<V> Default for Views<V> {
    fn default() -> Self {
        Views {
            inner: RwLock::new((HashMap::new(), None)),
        }
    }
}

impl<V> Views<V> {
    fn apply<K>(&self, event: Event<K>, key: fn(&K) -> String, view: fn(&K) -> V) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Apply(o) => {
                inner.0.insert(key(&o), Arc::new(view(&o)));
            }
            Event::Delete(o) => {
                inner.0.remove(&key(&o));
            }
            Event::Init => inner.1 = Some(HashMap::new()),
            Event::InitApply(o) => {
                inner
                    .1
                    .get_or_insert_with(HashMap::new)
                    .insert(key(&o), Arc::new(view(&o)));
            }
            Event::InitDone => {
                if let Some(fresh) = inner.1.take() {
                    inner.0 = fresh;
                }
            }
        }
    }

    fn get(&self, key: &str) -> Option<Arc<V>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.0.get(key).cloned()
    }

    fn values(&self) -> Vec<Arc<V>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.0.values().cloned().collect()
    }
}

/// A CSINode as attach limits read it: each driver's count (None: the driver sets none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsiNodeView {
    pub limits: std::collections::BTreeMap<String, Option<i64>>,
}

impl CsiNodeView {
    pub fn from_api(c: &CSINode) -> CsiNodeView {
        CsiNodeView {
            limits: c
                .spec
                .drivers
                .iter()
                .map(|d| {
                    let count = d.allocatable.as_ref().and_then(|a| a.count).map(i64::from);
                    (d.name.clone(), count)
                })
                .collect(),
        }
    }
}

/// A VolumeAttachment as termination reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttachmentView {
    pub name: String,
    pub node: String,
    /// The CSI driver that attaches it.
    pub attacher: String,
    /// The PersistentVolume attached (None for an inline volume).
    pub volume: Option<String>,
}

impl AttachmentView {
    pub fn from_api(a: &VolumeAttachment) -> AttachmentView {
        AttachmentView {
            name: a.name_any(),
            node: a.spec.node_name.clone(),
            attacher: a.spec.attacher.clone(),
            volume: a.spec.source.persistent_volume_name.clone(),
        }
    }
}

/// Every claim, volume and class of the cluster, as volume topology reads them; every
/// CSINode and VolumeAttachment.
#[derive(Default)]
pub struct VolumeStore {
    claims: Views<ClaimView>,
    volumes: Views<Result<VolumeView, String>>,
    classes: Views<Result<ClassView, String>>,
    csi_nodes: Views<CsiNodeView>,
    attachments: Views<AttachmentView>,
}

impl VolumeStore {
    /// The node's CSINode, once its kubelet has written one.
    pub fn csi_node(&self, node: &str) -> Option<Arc<CsiNodeView>> {
        self.csi_nodes.get(node)
    }

    /// The VolumeAttachments that name `node`.
    pub fn attachments_on(&self, node: &str) -> Vec<Arc<AttachmentView>> {
        let mut out: Vec<Arc<AttachmentView>> = self
            .attachments
            .values()
            .into_iter()
            .filter(|a| a.node == node)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

impl VolumeLookup for VolumeStore {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ClaimView>> {
        self.claims.get(&format!("{namespace}/{name}"))
    }
    fn volume(&self, name: &str) -> Option<Arc<Result<VolumeView, String>>> {
        self.volumes.get(name)
    }
    fn class(&self, name: &str) -> Option<Arc<Result<ClassView, String>>> {
        self.classes.get(name)
    }
}

fn claim_key(c: &PersistentVolumeClaim) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

impl VolumeStore {
    /// Starts the watches; each change is announced as [`Change::Volume`], a
    /// VolumeAttachment's as [`Change::VolumeAttachment`] with its node.
    pub fn start(self: &Arc<Self>, client: &Client, tx: &broadcast::Sender<Change>) {
        let me = self.clone();
        watch_views(client, "persistentvolumeclaim", tx.clone(), move |e| {
            me.claims.apply(e, claim_key, ClaimView::from_api);
            Change::Volume
        });
        let me = self.clone();
        watch_views(client, "persistentvolume", tx.clone(), move |e| {
            me.volumes
                .apply(e, |v: &PersistentVolume| v.name_any(), VolumeView::from_api);
            Change::Volume
        });
        let me = self.clone();
        watch_views(client, "storageclass", tx.clone(), move |e| {
            me.classes
                .apply(e, |c: &StorageClass| c.name_any(), ClassView::from_api);
            Change::Volume
        });
        let me = self.clone();
        watch_views(client, "csinode", tx.clone(), move |e| {
            me.csi_nodes
                .apply(e, |c: &CSINode| c.name_any(), CsiNodeView::from_api);
            Change::Volume
        });
        let me = self.clone();
        watch_views(
            client,
            "volumeattachment",
            tx.clone(),
            move |e: Event<VolumeAttachment>| {
                let node = match &e {
                    Event::Apply(a) | Event::Delete(a) | Event::InitApply(a) => {
                        a.spec.node_name.clone()
                    }
                    Event::Init | Event::InitDone => String::new(),
                };
                me.attachments.apply(
                    e,
                    |a: &VolumeAttachment| a.name_any(),
                    AttachmentView::from_api,
                );
                Change::VolumeAttachment(node)
            },
        );
    }
}

/// Watches every `K`, handing each event to `apply` and announcing the change it returns. A failed watch is
/// logged and retried with backoff.
fn watch_views<K>(
    client: &Client,
    what: &'static str,
    tx: broadcast::Sender<Change>,
    apply: impl Fn(Event<K>) -> Change + Send + 'static,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(
        watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .for_each(move |r| {
                match r {
                    Ok(event) => {
                        let _ = tx.send(apply(event));
                    }
                    Err(e) => tracing::warn!(error = %e, "{what} watch failed; retrying"),
                }
                futures::future::ready(())
            }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "db",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": volume, "storageClassName": "gp3"},
        }))
        .unwrap()
    }

    #[test]
    fn csinodes_and_attachments_read_as_limits_and_attachments_per_node() {
        let s = VolumeStore::default();
        let csi: CSINode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "efs.csi.aws.com", "nodeID": "i-1"},
            ]},
        }))
        .unwrap();
        s.csi_nodes.apply(
            Event::Apply(csi),
            |c: &CSINode| c.name_any(),
            CsiNodeView::from_api,
        );
        let limits = &s.csi_node("n1").unwrap().limits;
        assert_eq!(limits["ebs.csi.aws.com"], Some(25));
        assert_eq!(limits["efs.csi.aws.com"], None, "a driver with no count");
        let va = |name: &str, node: &str| -> VolumeAttachment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node,
                         "source": {"persistentVolumeName": format!("pv-{name}")}},
            }))
            .unwrap()
        };
        let apply = |e| {
            s.attachments.apply(
                e,
                |a: &VolumeAttachment| a.name_any(),
                AttachmentView::from_api,
            )
        };
        apply(Event::Apply(va("b", "n1")));
        apply(Event::Apply(va("a", "n1")));
        apply(Event::Apply(va("c", "n2")));
        let on: Vec<(String, Option<String>)> = s
            .attachments_on("n1")
            .iter()
            .map(|a| (a.name.clone(), a.volume.clone()))
            .collect();
        assert_eq!(
            on,
            [
                ("a".to_string(), Some("pv-a".to_string())),
                ("b".to_string(), Some("pv-b".to_string()))
            ]
        );
        apply(Event::Delete(va("a", "n1")));
        assert_eq!(s.attachments_on("n1").len(), 1);
    }

    #[test]
    fn claims_follow_their_events_and_a_relist_replaces_them_whole() {
        let s = VolumeStore::default();
        let apply = |e| s.claims.apply(e, claim_key, ClaimView::from_api);
        apply(Event::Apply(claim("a", None)));
        apply(Event::Apply(claim("gone", None)));
        assert_eq!(s.claim("db", "a").unwrap().volume_name, None);
        apply(Event::Apply(claim("a", Some("pv-1"))));
        let a = s.claim("db", "a").unwrap();
        assert_eq!(a.volume_name.as_deref(), Some("pv-1"));
        assert!(a.bind_completed);
        apply(Event::Init);
        apply(Event::InitApply(claim("a", Some("pv-1"))));
        assert!(
            s.claim("db", "gone").is_some(),
            "the last full picture until done"
        );
        apply(Event::InitDone);
        assert!(s.claim("db", "gone").is_none());
        apply(Event::Delete(claim("a", Some("pv-1"))));
        assert!(s.claim("db", "a").is_none());
    }
}
