//! The pod watch's store: one compact record per pod, indexed by the node it is bound to.
//!
//! The agent holds every pod of the cluster for its whole life, so what it keeps per pod is
//! paid a hundred thousand times in a large cluster. A whole `Pod` (k8s-openapi's structs,
//! even trimmed) took about 9 kB; a [`PodRecord`] keeps what the loops read (the
//! scheduler's view, already parsed, and a dozen scalars) and nothing else. The scheduler's
//! view, less the pod's name, is the same for every pod of a workload (its template), so
//! the store keeps one copy per distinct view and the records share it. Parsing once on
//! arrival also takes the requests' quantities and the affinity terms out of every round
//! and disruption pass, which read the parsed form.
//!
//! The by-node index answers "which pods run on this node" (draining, interruption, the
//! capacity check, the disruption pass) without a pass over every pod.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use super::{classify, Change, PodClass};
use crate::scheduler;

/// A pod as the agent's loops read it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    pub uid: String,
    pub version: String,
    pub name: String,
    /// The scheduler's view with no name (see [`Self::scheduler_pod`]): namespace and
    /// labels always, the rest when the spec reads (see `unreadable`). Shared by the
    /// records of every pod that reads the same.
    pub shape: Arc<scheduler::Pod>,
    /// Why the spec cannot be read for scheduling; such a pod is counted and reported, and
    /// never planned.
    pub unreadable: Option<String>,
    pub node: Option<String>,
    pub class: PodClass,
    /// Succeeded or Failed.
    pub finished: bool,
    pub deleting: bool,
    /// A DaemonSet's pod or a static pod's mirror: it lives and dies with its node.
    pub goes_with_node: bool,
    /// When a drain evicts it; None for a static pod's mirror, which no API call removes.
    pub drain_group: Option<DrainGroup>,
    pub created: Option<i64>,
    pub started: Option<i64>,
    pub grace_seconds: Option<i64>,
    pub priority: Option<i32>,
    /// Only the annotations a loop reads: do-not-disrupt, the deletion cost, Fargate's
    /// compute type. Most pods have none, and an empty map allocates nothing.
    pub annotations: BTreeMap<String, String>,
    /// The PersistentVolumeClaims its volumes use, apart from the shared view: a
    /// StatefulSet's pods differ only by them. Most pods have none (no allocation).
    pub claims: Box<[String]>,
}

/// A drain's order, Karpenter's (`terminator.go`, after Kubernetes' graceful node
/// shutdown): ordinary pods, then DaemonSet pods, then critical pods (priority class
/// `system-cluster-critical` or `system-node-critical`), then critical DaemonSet pods. A
/// group is evicted only once every pod of the groups before it is gone, so the node's
/// logging agents, CNI and DNS outlive the workloads they serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DrainGroup {
    Workload,
    Daemon,
    CriticalWorkload,
    CriticalDaemon,
}

impl DrainGroup {
    /// None for a static pod's mirror.
    pub fn of(p: &Pod) -> Option<DrainGroup> {
        let daemon = super::owned_by_daemonset(p);
        if super::goes_with_node(p) && !daemon {
            return None;
        }
        let critical = p
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .is_some_and(|c| c == "system-cluster-critical" || c == "system-node-critical");
        Some(match (critical, daemon) {
            (false, false) => DrainGroup::Workload,
            (false, true) => DrainGroup::Daemon,
            (true, false) => DrainGroup::CriticalWorkload,
            (true, true) => DrainGroup::CriticalDaemon,
        })
    }
}

/// The annotations [`PodRecord`] keeps.
fn kept_annotation(key: &str) -> bool {
    crate::labels::is_do_not_disrupt(key)
        || key == POD_DELETION_COST
        || key == crate::fargate::COMPUTE_TYPE_ANNOTATION
}

/// The annotation Kubernetes' ReplicaSet controller reads, and Karpenter's EvictionCost.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

impl PodRecord {
    pub fn from_pod(p: &Pod) -> PodRecord {
        let meta = &p.metadata;
        let (mut shape, unreadable) = match scheduler::convert::pod(p) {
            Ok(s) => (s, None),
            Err(e) => (
                scheduler::Pod {
                    namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
                    labels: meta.labels.clone().unwrap_or_default(),
                    ..Default::default()
                },
                Some(e),
            ),
        };
        shape.name = String::new();
        let status = p.status.as_ref();
        let pod_spec = p.spec.as_ref();
        PodRecord {
            uid: meta.uid.clone().unwrap_or_default(),
            version: meta.resource_version.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            shape: Arc::new(shape),
            unreadable,
            node: pod_spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            class: classify(p),
            finished: matches!(
                status.and_then(|s| s.phase.as_deref()),
                Some("Succeeded") | Some("Failed")
            ),
            deleting: meta.deletion_timestamp.is_some(),
            goes_with_node: super::goes_with_node(p),
            drain_group: DrainGroup::of(p),
            created: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            started: status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second()),
            grace_seconds: pod_spec.and_then(|s| s.termination_grace_period_seconds),
            priority: pod_spec.and_then(|s| s.priority),
            annotations: meta
                .annotations
                .iter()
                .flatten()
                .filter(|(k, _)| kept_annotation(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            claims: scheduler::volumes::claim_names(p).into_boxed_slice(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.shape.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.shape.labels
    }

    /// The pod as the scheduler reads it, named (its view copied: a round owns its pods).
    pub fn scheduler_pod(&self) -> scheduler::Pod {
        self.movable().to_pod()
    }

    /// The pod as a disruption candidate holds it: named, its view shared.
    pub fn movable(&self) -> scheduler::MovablePod {
        scheduler::MovablePod {
            name: self.name.clone(),
            view: scheduler::BoundPod::shared(self.shape.clone()),
        }
    }

    /// The pod as the scheduler reads it, held to where its volumes can be reached: the one
    /// way every path that places a pod (provisioning, the replacement of disrupted nodes,
    /// consolidation's simulation) reads one, its EBS volumes among its requests (a node
    /// attaches only so many). Err: why it cannot be placed yet.
    pub fn scheduler_pod_with(
        &self,
        volumes: &impl scheduler::volumes::VolumeLookup,
    ) -> Result<scheduler::Pod, String> {
        let mut pod = self.scheduler_pod();
        if !self.claims.is_empty() {
            let alternatives =
                scheduler::volumes::requirements(self.namespace(), &self.claims, volumes)?;
            scheduler::volumes::constrain(&mut pod, &alternatives);
            let ebs = scheduler::volumes::ebs_claims(self.namespace(), &self.claims, volumes);
            scheduler::volumes::request_attachments(&mut pod, ebs.len() as i64);
        }
        Ok(pod)
    }

    /// [`Self::movable`] held to where its volumes can be reached (a view of its own when
    /// it has claims). Err: why it cannot be placed yet.
    pub fn movable_with(
        &self,
        volumes: &impl scheduler::volumes::VolumeLookup,
    ) -> Result<scheduler::MovablePod, String> {
        if self.claims.is_empty() {
            return Ok(self.movable());
        }
        let mut view = self.scheduler_pod_with(volumes)?;
        view.name = String::new();
        Ok(scheduler::MovablePod {
            name: self.name.clone(),
            view: scheduler::BoundPod::shared(Arc::new(view)),
        })
    }

    /// Whether the pod needs a place elsewhere when its node goes (the rule of
    /// [`crate::scheduler::convert::reschedulable`], on the record).
    pub fn reschedulable(&self) -> bool {
        !(self.goes_with_node || self.finished || self.deleting)
    }

    /// The pod as an Event's subject.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(self.name().to_string()),
            namespace: Some(self.namespace().to_string()),
            uid: Some(self.uid.clone()),
            resource_version: Some(self.version.clone()),
            ..Default::default()
        }
    }

    /// What its watch event announces.
    fn change(&self) -> Change {
        Change::Pod {
            uid: self.uid.clone(),
            version: self.version.clone(),
            provisionable: self.class == PodClass::Provisionable,
            node: self.node.clone(),
        }
    }
}

/// `namespace/name`: neither part can hold a `/`. Shared by the map and the node index.
type Key = Arc<str>;

fn key_of(p: &Pod) -> Key {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    let name = p.metadata.name.as_deref().unwrap_or_default();
    Arc::from(format!("{ns}/{name}"))
}

#[derive(Default)]
struct Index {
    pods: HashMap<Key, Arc<PodRecord>>,
    /// Keys by node, in key order, so that a node's pods come out the same way each time.
    by_node: HashMap<String, BTreeSet<Key>>,
}

impl Index {
    fn insert(&mut self, key: Key, record: PodRecord) {
        let node = record.node.clone();
        if let Some(old) = self.pods.insert(key.clone(), Arc::new(record)) {
            if old.node != node {
                self.unbind(&key, old.node.as_deref());
            }
        }
        if let Some(node) = node {
            self.by_node.entry(node).or_default().insert(key);
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.pods.remove(key) {
            self.unbind(key, old.node.as_deref());
        }
    }

    fn unbind(&mut self, key: &Key, node: Option<&str>) {
        let Some(node) = node else { return };
        if let Some(set) = self.by_node.get_mut(node) {
            set.remove(key);
            if set.is_empty() {
                self.by_node.remove(node);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    live: Index,
    /// A relist in progress, built apart and swapped in when complete: until then the last
    /// complete picture answers, as kube-runtime's reflector store does.
    relist: Option<Index>,
    shapes: Shapes,
}

/// One copy of each distinct scheduler's view the records hold.
#[derive(Default)]
struct Shapes {
    held: HashSet<Arc<scheduler::Pod>>,
    /// The size after the last sweep; the next sweep comes when the set has doubled, so
    /// sweeping costs O(1) per pod, amortised.
    swept_at: usize,
}

impl Shapes {
    /// The record with its shape replaced by the held copy, if one reads the same.
    fn share(&mut self, mut record: PodRecord) -> PodRecord {
        match self.held.get(&record.shape) {
            Some(held) => record.shape = held.clone(),
            None => {
                if self.held.len() >= 2 * self.swept_at + 64 {
                    // Shapes no record holds any more (only this set does).
                    self.held.retain(|s| Arc::strong_count(s) > 1);
                    self.swept_at = self.held.len();
                }
                self.held.insert(record.shape.clone());
            }
        }
        record
    }
}

/// Every pod of the cluster as a [`PodRecord`], kept from the pod watch's events.
pub struct PodStore {
    inner: RwLock<Inner>,
    synced: watch::Sender<bool>,
}

impl Default for PodStore {
    fn default() -> Self {
        PodStore {
            inner: RwLock::default(),
            synced: watch::channel(false).0,
        }
    }
}

impl PodStore {
    /// Follows one event of the pod watch; returns the change to announce, if any.
    pub fn apply(&self, event: Event<Pod>) -> Option<Change> {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Apply(p) => {
                let record = inner.shapes.share(PodRecord::from_pod(&p));
                let change = record.change();
                inner.live.insert(key_of(&p), record);
                Some(change)
            }
            Event::Delete(p) => {
                let change = PodRecord::from_pod(&p).change();
                inner.live.remove(&key_of(&p));
                Some(change)
            }
            Event::Init => {
                inner.relist = Some(Index::default());
                None
            }
            Event::InitApply(p) => {
                let record = inner.shapes.share(PodRecord::from_pod(&p));
                let change = record.change();
                inner
                    .relist
                    .get_or_insert_with(Index::default)
                    .insert(key_of(&p), record);
                Some(change)
            }
            Event::InitDone => {
                if let Some(fresh) = inner.relist.take() {
                    inner.live = fresh;
                }
                drop(inner);
                self.synced.send_replace(true);
                None
            }
        }
    }

    /// Waits until the watch has listed once.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Every pod, in no particular order.
    pub fn list(&self) -> Vec<Arc<PodRecord>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.live.pods.values().cloned().collect()
    }

    /// Every pod in namespace/name order: the same cluster always reads the same way, so
    /// what is built from it (a round's input, the disruption pass's world) compares equal.
    pub fn in_name_order(&self) -> Vec<Arc<PodRecord>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<(&Key, &Arc<PodRecord>)> = inner.live.pods.iter().collect();
        all.sort_unstable_by(|a, b| {
            (a.1.namespace(), a.1.name()).cmp(&(b.1.namespace(), b.1.name()))
        });
        all.into_iter().map(|(_, r)| r.clone()).collect()
    }

    /// The unfinished pods bound to `node`.
    pub fn on(&self, node: &str) -> Vec<Arc<PodRecord>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let live = &inner.live;
        live.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| live.pods.get(k))
            .filter(|p| !p.finished)
            .cloned()
            .collect()
    }

    /// The unfinished pods of every node, each node's in a fixed order: one pass for all
    /// nodes.
    pub fn by_node(&self) -> HashMap<String, Vec<Arc<PodRecord>>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let live = &inner.live;
        live.by_node
            .iter()
            .map(|(node, keys)| {
                let pods = keys
                    .iter()
                    .filter_map(|k| live.pods.get(k))
                    .filter(|p| !p.finished)
                    .cloned()
                    .collect();
                (node.clone(), pods)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [], "nodeName": node},
        }))
        .unwrap()
    }

    fn names(s: &PodStore, node: &str) -> Vec<String> {
        s.on(node).iter().map(|r| r.name().to_string()).collect()
    }

    #[test]
    fn binding_moving_and_deleting_follow_the_events() {
        let s = PodStore::default();
        s.apply(Event::Apply(pod("a", None)));
        assert!(s.on("n1").is_empty(), "pending pods are on no node");
        s.apply(Event::Apply(pod("b", Some("n1"))));
        s.apply(Event::Apply(pod("a", Some("n1"))));
        assert_eq!(names(&s, "n1"), ["a", "b"], "in name order");
        // A pod recreated under the same name elsewhere (a StatefulSet's) moves.
        s.apply(Event::Apply(pod("a", Some("n2"))));
        assert_eq!(names(&s, "n1"), ["b"]);
        assert_eq!(names(&s, "n2"), ["a"]);
        s.apply(Event::Delete(pod("b", Some("n1"))));
        assert!(s.on("n1").is_empty());
        assert!(
            !s.by_node().contains_key("n1"),
            "an emptied node leaves the index"
        );
        assert_eq!(s.list().len(), 1);
    }

    #[test]
    fn pods_that_read_the_same_share_one_view() {
        let s = PodStore::default();
        for name in ["a", "b", "c"] {
            s.apply(Event::Apply(pod(name, Some("n1"))));
        }
        let mut other = pod("d", Some("n1"));
        other.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        s.apply(Event::Apply(other));
        let on = s.on("n1");
        assert!(Arc::ptr_eq(&on[0].shape, &on[1].shape));
        assert!(Arc::ptr_eq(&on[1].shape, &on[2].shape));
        assert!(
            !Arc::ptr_eq(&on[0].shape, &on[3].shape),
            "other labels, another view"
        );
        assert_eq!(on[1].scheduler_pod().name, "b", "each named as it is");
        assert_eq!(on[3].labels()["app"], "web");
        // A disruption candidate's pods point at the same view, and come back whole.
        let (a, b) = (on[0].movable(), on[1].movable());
        assert!(std::ptr::eq(&*a.view, &*b.view));
        assert_eq!(b.to_pod(), on[1].scheduler_pod());
        assert_eq!(b.key(), "default/b");
    }

    #[test]
    fn a_relist_replaces_the_picture_only_when_complete() {
        let s = PodStore::default();
        s.apply(Event::Apply(pod("gone", Some("n1"))));
        s.apply(Event::Apply(pod("stays", Some("n1"))));
        s.apply(Event::Init);
        s.apply(Event::InitApply(pod("stays", Some("n1"))));
        // Until the relist is done, the last complete picture answers.
        assert_eq!(names(&s, "n1"), ["gone", "stays"]);
        s.apply(Event::InitDone);
        assert_eq!(names(&s, "n1"), ["stays"], "a pod deleted while unwatched");
    }

    #[test]
    fn finished_pods_are_on_no_node() {
        let s = PodStore::default();
        let mut done = pod("job", Some("n1"));
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        s.apply(Event::Apply(done));
        s.apply(Event::Apply(pod("web", Some("n1"))));
        assert_eq!(names(&s, "n1"), ["web"]);
        assert_eq!(s.by_node()["n1"].len(), 1);
    }

    /// Every path that places a pod reads it through `scheduler_pod_with` or
    /// `movable_with`: both hold it to its volume's zone, or say why it cannot be placed.
    #[test]
    fn a_pods_claims_hold_it_to_its_volumes_zone() {
        use crate::scheduler::volumes::{ClaimView, VolumeMaps, VolumeView};
        let mut p = pod("db-0", Some("n1"));
        p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
            serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}),
        )
        .unwrap()]);
        let r = PodRecord::from_pod(&p);
        assert_eq!(&*r.claims, ["data-db-0".to_string()]);
        let mut volumes = VolumeMaps::default();
        assert!(r
            .scheduler_pod_with(&volumes)
            .unwrap_err()
            .contains("default/data-db-0 not found"));
        let mut zone = crate::requirements::Requirements::new();
        zone.add(
            crate::labels::ZONE,
            crate::requirements::Requirement::one("us-east-1c"),
        );
        volumes.claims.insert(
            "default/data-db-0".into(),
            Arc::new(ClaimView {
                volume_name: Some("pv-1".into()),
                bind_completed: true,
                ..Default::default()
            }),
        );
        volumes.volumes.insert(
            "pv-1".into(),
            Arc::new(Ok(VolumeView {
                terms: vec![zone.clone()],
                deleting: false,
                driver: Some("ebs.csi.aws.com".into()),
            })),
        );
        let placed = r.scheduler_pod_with(&volumes).unwrap();
        assert_eq!(placed.required_node_affinity, [zone.clone()]);
        assert_eq!(
            placed.requests.extended[crate::catalog::volume_limits::EBS_ATTACH_RESOURCE],
            1,
            "its EBS volume counts against the node's attach limit"
        );
        let moved = r.movable_with(&volumes).unwrap();
        assert_eq!(moved.to_pod(), placed);
        assert!(
            !std::ptr::eq(&*moved.view, &*r.shape),
            "a view of its own, the shared one untouched"
        );
        assert!(r.shape.required_node_affinity.is_empty());
        let plain = PodRecord::from_pod(&pod("web", Some("n1")));
        assert!(std::ptr::eq(
            &*plain.movable_with(&volumes).unwrap().view,
            &*plain.shape
        ));
    }

    #[test]
    fn an_unreadable_spec_keeps_the_pods_name_and_says_why() {
        let mut p = pod("bad", None);
        p.spec.as_mut().unwrap().tolerations = Some(vec![Default::default()]);
        p.spec.as_mut().unwrap().tolerations.as_mut().unwrap()[0].operator =
            Some("Sometimes".into());
        let r = PodRecord::from_pod(&p);
        assert_eq!((r.namespace(), r.name()), ("default", "bad"));
        assert!(
            r.unreadable
                .as_deref()
                .is_some_and(|e| e.contains("spec.tolerations[0].operator")),
            "{:?}",
            r.unreadable
        );
    }
}
