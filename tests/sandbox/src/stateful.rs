//! The StatefulSet beside the seed's Deployment: pods that each claim an EBS volume through
//! a `WaitForFirstConsumer` StorageClass, so every node the agent launches, replaces or
//! removes is also judged by where those volumes are. Once a claim is provisioned its
//! volume lives in one zone, and its pod may only run there.
//!
//! One pod watch follows the set from its creation to the end of the run: the pods placed,
//! those replaced (recreated under their name after the storm or consolidation took their
//! node, and placed again), and every verdict of the scheduler that refused a node for its
//! reach to a pod's volume. Such a verdict alone is no fault: while a pod waits for a node
//! in its volume's zone, every node of the other zones refuses it so. A pod is stranded by
//! its volume's zone when it is still unbound, its latest verdict naming that reach, once
//! the run is over: the agent put or left capacity where it cannot go, and the run fails
//! naming the pod and the verdict. Verdicts are read from the watch's events, so one that
//! stood for a moment between two samples still counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};

use crate::cluster::NAMESPACE;

pub const NAME: &str = "ledger";
/// The StorageClass its claims use: the EBS CSI driver's, binding at the first consumer, as
/// the EKS docs' gp3 example does; no allowedTopologies, so the first pod's node picks the
/// zone.
pub const CLASS: &str = "ebs-gp3";
const PROVISIONER: &str = "ebs.csi.aws.com";
const IMAGE: &str = "public.ecr.aws/eks-distro/kubernetes/pause:3.7";

/// kube-scheduler's reasons for refusing a node that cannot reach a pod's volumes, as
/// v1.37 words them (`pkg/scheduler/framework/plugins/volumebinding/binder.go`'s
/// `ErrReasonNodeConflict` and `ErrReasonBindConflict`, `plugins/volumezone`'s
/// `ErrReasonConflict`); kube-sim's scheduler writes the same texts
/// (`kube_sim::volumes`).
const VOLUME_ZONE_REASONS: [&str; 3] = [
    "node(s) didn't match PersistentVolume's node affinity",
    "node(s) didn't find available persistent volumes to bind",
    "node(s) had no available volume zone",
];

/// The StorageClass and the StatefulSet of `replicas` pods (250m / 512Mi, 8 GiB each),
/// created all at once (`Parallel`) and going at once (grace 0, as the Deployment's pods).
pub async fn create(client: &Client, replicas: i32) -> Result<()> {
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": CLASS},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": {"type": "gp3"},
    }))?;
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .with_context(|| format!("create storageclass {CLASS}"))?;
    let set: StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "serviceName": NAME,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "terminationGracePeriodSeconds": crate::cluster::GRACE_SECS,
                    "containers": [{"name": "ledger", "image": IMAGE,
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]
                }
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": CLASS, "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "8Gi"}}}}]
        }
    }))?;
    Api::<StatefulSet>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &set)
        .await
        .with_context(|| format!("create statefulset {NAME}"))?;
    Ok(())
}

pub async fn scale(client: &Client, replicas: i32) -> Result<()> {
    Api::<StatefulSet>::namespaced(client.clone(), NAMESPACE)
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .with_context(|| format!("scale statefulset {NAME} to {replicas}"))?;
    Ok(())
}

/// A verdict that refused nodes for their reach to a pod's volume, and its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneWait {
    pub pod: String,
    pub message: String,
}

/// What the watch saw of the set.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Pods bound to a node (each pod object once).
    pub placed: usize,
    /// Of those, pods recreated under a name already placed before: replacements.
    pub replaced: usize,
    pub zone_waits: Vec<ZoneWait>,
    /// Pods unbound whose latest verdict names their volume's reach (see the module docs).
    pub stranded: Vec<ZoneWait>,
    /// The watch had to list again: events in between may be missing.
    pub relisted: bool,
}

#[derive(Default)]
struct State {
    /// Each pod object (by uid) once bound: its name.
    bound: HashMap<String, String>,
    /// The pods as they stand, by name: (uid, node when Running and not going).
    pods: BTreeMap<String, (String, Option<String>)>,
    zone_waits: Vec<ZoneWait>,
    /// The last verdict message per uid: a status rewrite repeating it is no new verdict.
    last_verdict: HashMap<String, String>,
    lists: usize,
}

/// The set's pods, from one watch (module docs).
#[derive(Clone)]
pub struct VolumePods {
    state: Arc<Mutex<State>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

/// The message of the pod's `Unschedulable` verdict, when that is its latest
/// `PodScheduled`.
fn verdict(p: &Pod) -> Option<String> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    (c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .then(|| c.message.clone().unwrap_or_default())
}

impl State {
    fn seen(&mut self, p: &Pod) {
        let uid = p.uid().unwrap_or_default();
        let name = p.name_any();
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        if node.is_some() {
            self.bound
                .entry(uid.clone())
                .or_insert_with(|| name.clone());
        }
        if let Some(m) = verdict(p) {
            if self.last_verdict.get(&uid) != Some(&m) {
                self.last_verdict.insert(uid.clone(), m.clone());
                if VOLUME_ZONE_REASONS.iter().any(|r| m.contains(r)) {
                    self.zone_waits.push(ZoneWait {
                        pod: format!("{NAMESPACE}/{name}"),
                        message: m,
                    });
                }
            }
        }
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            && p.metadata.deletion_timestamp.is_none();
        self.pods.insert(name, (uid, node.filter(|_| running)));
    }
}

impl VolumePods {
    /// Starts the watch; returns once its first list is in, so nothing after is missed.
    pub async fn start(client: Client) -> VolumePods {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let config = watcher::Config::default().labels(&format!("app={NAME}"));
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            let mut tx = Some(tx);
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => st.lists += 1,
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => st.seen(&p),
                    watcher::Event::Delete(p) => {
                        let uid = p.uid().unwrap_or_default();
                        if st.pods.get(&p.name_any()).is_some_and(|(u, _)| *u == uid) {
                            st.pods.remove(&p.name_any());
                        }
                    }
                    watcher::Event::InitDone => {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    }
                }
            }
        });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), rx).await;
        VolumePods {
            state,
            task: Arc::new(task),
        }
    }

    /// Pods Running and not going.
    pub fn running(&self) -> usize {
        self.state.lock().unwrap().running()
    }

    /// The nodes the set's Running pods are on.
    pub fn nodes(&self) -> BTreeSet<String> {
        self.state.lock().unwrap().nodes()
    }

    pub fn figures(&self) -> Figures {
        self.state.lock().unwrap().figures()
    }
}

impl State {
    fn running(&self) -> usize {
        self.pods.values().filter(|(_, n)| n.is_some()).count()
    }

    fn nodes(&self) -> BTreeSet<String> {
        self.pods.values().filter_map(|(_, n)| n.clone()).collect()
    }

    fn figures(&self) -> Figures {
        let mut per_name: HashMap<&str, usize> = HashMap::new();
        for name in self.bound.values() {
            *per_name.entry(name).or_default() += 1;
        }
        Figures {
            placed: self.bound.len(),
            replaced: per_name.values().map(|n| n - 1).sum(),
            zone_waits: self.zone_waits.clone(),
            stranded: self
                .pods
                .iter()
                .filter(|(_, (uid, _))| !self.bound.contains_key(uid))
                .filter_map(|(name, (uid, _))| {
                    let m = self.last_verdict.get(uid)?;
                    VOLUME_ZONE_REASONS
                        .iter()
                        .any(|r| m.contains(r))
                        .then(|| ZoneWait {
                            pod: format!("{NAMESPACE}/{name}"),
                            message: m.clone(),
                        })
                })
                .collect(),
            relisted: self.lists > 1,
        }
    }
}

impl Drop for VolumePods {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, node: Option<&str>, verdict: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" },
                "conditions": verdict.map(|m| vec![serde_json::json!({"type": "PodScheduled",
                    "status": "False", "reason": "Unschedulable", "message": m})])}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_recreated_under_its_name_counts_as_replaced_and_only_an_unbound_one_as_stranded() {
        let mut st = State::default();
        st.seen(&pod(
            "ledger-0",
            "a",
            None,
            Some("0/3 nodes are available: 3 Insufficient cpu."),
        ));
        st.seen(&pod("ledger-0", "a", Some("n1"), None));
        st.seen(&pod("ledger-1", "b", Some("n1"), None));
        let waited = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match PersistentVolume's node affinity.";
        st.seen(&pod("ledger-0", "c", None, Some(waited)));
        st.seen(&pod("ledger-0", "c", None, Some(waited)));
        st.seen(&pod("ledger-0", "c", Some("n2"), None));
        let f = st.figures();
        assert_eq!((f.placed, f.replaced), (3, 1));
        assert_eq!(
            f.zone_waits,
            [ZoneWait {
                pod: "default/ledger-0".into(),
                message: waited.into()
            }],
            "one verdict, counted once, the capacity one not at all"
        );
        assert!(f.stranded.is_empty(), "ledger-0 was placed after it");
        st.seen(&pod("ledger-2", "d", None, Some(waited)));
        assert_eq!(
            st.figures().stranded,
            [ZoneWait {
                pod: "default/ledger-2".into(),
                message: waited.into()
            }],
            "unbound, its latest verdict naming its volume's reach"
        );
        assert_eq!(st.running(), 2);
        assert_eq!(
            st.nodes(),
            BTreeSet::from(["n1".to_string(), "n2".to_string()])
        );
    }
}
