//! The cluster as the agent sees it: one watch per kind (no polling), kept in memory and
//! shared by every controller. Watches run on every replica, leader or not, so a follower
//! that takes over has warm caches and acts at once.
//!
//! Objects are cut down as they arrive to keep memory low: each pod to a compact record
//! ([`pods::PodRecord`]), Nodes and the rest trimmed of what no loop reads ([`trim_node`]).
//! Every change is also announced on a broadcast channel ([`Change`]) that controllers
//! use as their trigger.

pub mod crd_store;
pub mod pods;
pub mod volumes;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;

pub use crd_store::{CrdStore, Source};
pub use pods::{PodRecord, PodStore};
pub use volumes::VolumeStore;

use crate::api::served::{ClassCloud, Served};
use crate::api::{NodeClaim, NodeClass, NodeOverlay, NodePool};
use crate::controllers::operator::metrics::Metrics;
use crate::labels;

/// Changes a receiver may fall behind by before it lags. The ring is allocated whole at
/// start (16,384 slots took 1.7 MB of heap); a lagged receiver treats the gap as "anything
/// may have changed", which costs a round, not a missed pod. A quarter of that still holds
/// a scale-out's burst of pod events between two reads of a busy loop.
const CHANGE_SLOTS: usize = 4_096;

/// What changed. Controllers treat a lagged receiver as "anything may have changed".
#[derive(Debug, Clone)]
pub enum Change {
    /// A pod changed. `provisionable` when it now waits for capacity the agent may launch;
    /// `version` is its resourceVersion, so a rewrite can be told from a relist's replay.
    Pod {
        uid: String,
        version: String,
        provisionable: bool,
        node: Option<String>,
    },
    Node(String),
    NodeClaim(String),
    NodePool(String),
    NodeClass(String),
    NodeOverlay(String),
    DaemonSet,
    Pdb,
    /// A PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode changed.
    Volume,
    /// A VolumeAttachment naming this node changed (empty: a relist).
    VolumeAttachment(String),
}

pub struct ClusterState {
    pub pods: Arc<PodStore>,
    pub nodes: Store<Node>,
    pub daemonsets: Store<DaemonSet>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub node_pools: Arc<CrdStore<NodePool>>,
    pub node_classes: Arc<CrdStore<NodeClass>>,
    pub node_claims: Arc<CrdStore<NodeClaim>>,
    /// Price and capacity overlays on the catalogue (NodeOverlays).
    pub node_overlays: Arc<CrdStore<NodeOverlay>>,
    /// Claims, volumes and classes: where volume pods may run.
    pub volumes: Arc<VolumeStore>,
    /// The API the stores above are read from.
    pub served: Served,
    changes: broadcast::Sender<Change>,
}

/// Where a pod stands for provisioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodClass {
    /// Bound, finished, being deleted, or not yet tried by kube-scheduler.
    NotPending,
    /// Pending but not the agent's business (the reason is a metric label).
    Ignored(&'static str),
    /// kube-scheduler found no node for it: the agent plans capacity.
    Provisionable,
}

// Which pods move when their node goes is the pure half's: the plan preview asks it too.
pub use crate::scheduler::convert::{goes_with_node, owned_by_daemonset, reschedulable};

/// Karpenter's rule: a pod is provisionable when kube-scheduler marked it
/// `PodScheduled=False, reason Unschedulable`. DaemonSet pods (they follow nodes), pods for
/// another scheduler (`fargate-scheduler` on EKS Fargate profiles, or custom) are ignored.
pub fn classify(p: &Pod) -> PodClass {
    let Some(spec) = p.spec.as_ref() else {
        return PodClass::NotPending;
    };
    if spec.node_name.as_ref().is_some_and(|n| !n.is_empty())
        || p.metadata.deletion_timestamp.is_some()
    {
        return PodClass::NotPending;
    }
    let status = p.status.as_ref();
    if status
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
    {
        return PodClass::NotPending;
    }
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    if owned_by_daemonset(p) {
        return PodClass::Ignored("daemonset");
    }
    if spec
        .scheduler_name
        .as_deref()
        .is_some_and(|s| !s.is_empty() && s != "default-scheduler")
    {
        return PodClass::Ignored("scheduler-name");
    }
    if unschedulable {
        PodClass::Provisionable
    } else {
        PodClass::NotPending
    }
}

fn no_managed_fields<K: kube::Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

pub fn trim_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
    }
}

/// Watches every `K` into `writer`, trimmed by `trim` to what the agent reads, and
/// announces each object it touches as `change(obj)`. A failed watch is logged and retried
/// with backoff; it never ends the stream.
fn watch_into<K>(
    client: &Client,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    trim: fn(&mut K),
    tx: broadcast::Sender<Change>,
    change: fn(&K) -> Change,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(
        watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(trim)
            .reflect(writer)
            .touched_objects()
            .for_each(move |r| {
                match r {
                    Ok(obj) => {
                        let _ = tx.send(change(&obj));
                    }
                    Err(e) => tracing::warn!(error = %e, "{what} watch failed; retrying"),
                }
                futures::future::ready(())
            }),
    );
}

/// Watches every Pod into `store` as records, announcing each change.
fn watch_pods(client: &Client, store: Arc<PodStore>, tx: broadcast::Sender<Change>) {
    let api: Api<Pod> = Api::all(client.clone());
    tokio::spawn(
        watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .for_each(move |r| {
                match r {
                    Ok(event) => {
                        if let Some(change) = store.apply(event) {
                            let _ = tx.send(change);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                }
                futures::future::ready(())
            }),
    );
}

impl ClusterState {
    /// Starts the watches on the current runtime.
    pub fn start(client: Client, metrics: Arc<Metrics>, served: Served) -> Arc<ClusterState> {
        let (changes, _) = broadcast::channel(CHANGE_SLOTS);
        let (nodes, nodes_w) = reflector::store();
        let (daemonsets, ds_w) = reflector::store();
        let (pdbs, pdbs_w) = reflector::store();
        let state = Arc::new(ClusterState {
            pods: Arc::default(),
            nodes,
            daemonsets,
            pdbs,
            node_pools: Arc::default(),
            node_classes: Arc::default(),
            node_claims: Arc::default(),
            node_overlays: Arc::default(),
            volumes: Arc::default(),
            served,
            changes: changes.clone(),
        });
        let tx = || changes.clone();
        let class_reader: crd_store::Reader = match served.cloud {
            ClassCloud::Kwok if served.is_karpenter() => crd_store::kwok_node_class,
            _ => crd_store::as_is,
        };
        watch_pods(&client, state.pods.clone(), tx());
        state.volumes.start(&client, &changes);
        watch_into(&client, nodes_w, "node", trim_node, tx(), |n| {
            Change::Node(n.name_any())
        });
        watch_into(&client, ds_w, "daemonset", no_managed_fields, tx(), |_| {
            Change::DaemonSet
        });
        watch_into(&client, pdbs_w, "pdb", no_managed_fields, tx(), |_| {
            Change::Pdb
        });
        tokio::spawn(crd_store::run(
            client.clone(),
            Source {
                resource: served.node_pools(),
                read: crd_store::as_is,
            },
            state.node_pools.clone(),
            metrics.clone(),
            changes.clone(),
            Change::NodePool,
        ));
        tokio::spawn(crd_store::run(
            client.clone(),
            Source {
                resource: served.node_classes(),
                read: class_reader,
            },
            state.node_classes.clone(),
            metrics.clone(),
            changes.clone(),
            Change::NodeClass,
        ));
        tokio::spawn(crd_store::run(
            client.clone(),
            Source {
                resource: served.node_overlays(),
                read: crd_store::as_is,
            },
            state.node_overlays.clone(),
            metrics.clone(),
            changes.clone(),
            Change::NodeOverlay,
        ));
        tokio::spawn(crd_store::run(
            client,
            Source {
                resource: served.node_claims(),
                read: crd_store::as_is,
            },
            state.node_claims.clone(),
            metrics,
            changes,
            Change::NodeClaim,
        ));
        state
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Announces a change the agent made itself (a claim it gave up on, for example).
    pub fn notify(&self, change: Change) {
        let _ = self.changes.send(change);
    }

    /// Waits until every watch has listed once.
    pub async fn wait_synced(&self) {
        self.pods.wait_synced().await;
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.daemonsets.wait_until_ready().await;
        let _ = self.pdbs.wait_until_ready().await;
        self.node_pools.wait_ready().await;
        self.node_classes.wait_ready().await;
        self.node_claims.wait_ready().await;
        self.node_overlays.wait_ready().await;
    }

    /// The Node of that name, by the store's key (a lookup, where a scan of every Node per
    /// pod event was most of the lifecycle trigger's work in a busy cluster).
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&reflector::ObjectRef::new(name))
    }

    /// The Node carrying a provider ID.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        self.nodes.find(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p == provider_id)
        })
    }

    /// The Node of a NodeClaim: the Node its status names, when that Node carries the claim's
    /// provider ID (a lookup by key: the disruption pass asks for every claim, and a scan of
    /// every Node per claim was a pass's largest cost at 10,000 nodes); else by the provider
    /// ID; else by the `joiner.dev/nodeclaim` label the kubelet registered with.
    pub fn node_for_claim(&self, claim: &NodeClaim) -> Option<Arc<Node>> {
        let name = claim.name_any();
        let status = claim.status.as_ref();
        if let Some(pid) = status.and_then(|s| s.provider_id.as_deref()) {
            let named = status
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| self.node(n))
                .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid));
            if let Some(n) = named.or_else(|| self.node_by_provider_id(pid)) {
                return Some(n);
            }
        }
        self.nodes.find(|n| {
            n.labels()
                .get(labels::JOINER_NODECLAIM)
                .is_some_and(|c| *c == name)
        })
    }

    /// The NodeClaim a Node belongs to.
    pub fn claim_for_node(&self, node: &Node) -> Option<Arc<NodeClaim>> {
        if let Some(c) = node
            .labels()
            .get(labels::JOINER_NODECLAIM)
            .and_then(|c| self.node_claims.get(c))
        {
            return Some(c);
        }
        let pid = node.spec.as_ref()?.provider_id.as_deref()?;
        self.node_claims
            .list()
            .into_iter()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
    }

    /// Unfinished pods bound to each node, each node's in a fixed order: one pass over the
    /// index for every node, and an order that is the same from call to call, so what is
    /// built from it (the disruption pass's world) compares equal when the cluster did not
    /// change.
    pub fn pods_by_node(&self) -> HashMap<String, Vec<Arc<PodRecord>>> {
        self.pods.by_node()
    }

    /// Unfinished pods bound to `node`, from the by-node index.
    pub fn pods_on(&self, node: &str) -> Vec<Arc<PodRecord>> {
        self.pods.on(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as a real cluster stores it: admission's service-account volume, env,
    /// probes, an init container and a sidecar.
    fn rich_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", "checksum/config": "abc"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r", "controller": true}]},
            "spec": {
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}},
                "priority": 1000,
                "terminationGracePeriodSeconds": 45,
                "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
                "initContainers": [
                    {"name": "migrate", "image": "shop/migrate:1", "command": ["/migrate"], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
                ],
                "containers": [{"name": "web", "image": "shop/web:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                    "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}}]
            },
            "status": {"phase": "Pending", "message": "waiting", "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                               {"type": "Initialized", "status": "True"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_record_reads_as_the_pod_does() {
        let pod = rich_pod();
        let r = PodRecord::from_pod(&pod);
        assert_eq!(Ok(r.scheduler_pod()), crate::scheduler::convert::pod(&pod));
        assert_eq!(r.unreadable, None);
        assert_eq!(r.class, classify(&pod));
        assert_eq!(r.class, PodClass::Provisionable);
        assert_eq!(r.reschedulable(), reschedulable(&pod));
        assert_eq!(r.goes_with_node, goes_with_node(&pod));
        assert_eq!(
            (r.namespace(), r.name(), r.uid.as_str()),
            ("shop", "web-1", "u1")
        );
        assert_eq!(r.grace_seconds, Some(45));
        assert_eq!(r.priority, Some(1000));
        assert!(crate::controllers::do_not_disrupt::pod_has_do_not_disrupt(
            &r
        ));
        assert_eq!(
            r.annotations.keys().collect::<Vec<_>>(),
            ["karpenter.sh/do-not-disrupt"],
            "only the annotations a loop reads"
        );
    }
}
