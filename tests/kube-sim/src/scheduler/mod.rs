//! The simulated kube-scheduler: binds each pending pod to the best-scored node that passes
//! its filters, or writes the `Unschedulable` verdict kube-scheduler writes. One module per
//! in-tree plugin of the default profile, each following that plugin's source and words
//! (`docs/kube-sim.md` lists them, with what is left out):
//! [`node_filters`] (NodeUnschedulable, TaintToleration, NodeAffinity),
//! [`node_resources_fit`] (NodeResourcesFit and BalancedAllocation, filter and scores),
//! [`node_volume_limits`] (CSI), `crate::volumes` (VolumeBinding, VolumeZone),
//! [`pod_topology_spread`], [`inter_pod_affinity`]; [`verdict`] writes the message.
//!
//! Like kube-scheduler it takes pods one at a time in queue order, runs the filters on each
//! node in the profile's order, stopping at the first that refuses, and counts only bound
//! pods for topology spread and pod affinity. So while several pods of one workload are
//! unbound, a required spread can refuse one of them for an attempt although all of them
//! fit once taken in another order: two zones short at once, with `maxSkew: 1`, admit their
//! pods only alternately. The verdict is the real one either way. With [`Explain::On`],
//! every new verdict is also logged with `fits_in_some_order`: whether the pod and the
//! unbound pods its spreads count (those its Deployment is about to create too: a drain's
//! evictions are recreated one by one) could all be bound to the nodes as they stood, in
//! some order. Tests use it to tell a pod waiting for room from one waiting for its turn.

mod explain;
mod inter_pod_affinity;
mod node_filters;
mod node_resources_fit;
mod node_volume_limits;
mod pod_topology_spread;
mod verdict;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::controllers::{is_deleting, is_terminal, missing_replicas, set_condition, types};
use crate::store::{name_of, namespace_of, Store, Write};
use crate::volumes::{ClaimCheck, PodVolumes};
use node_resources_fit::Amounts;
use node_volume_limits::Storage;

/// Whether new verdicts are explained in the log (a search per verdict: off unless asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Explain {
    #[default]
    Off,
    On,
}

/// How an explained verdict's log line starts; then `uid=`, `pod=` and `fits_in_some_order=`
/// (`true`, `false` or `unknown`), space-separated.
pub const VERDICT_LOG: &str = "unschedulable verdict explained";

/// What one pass reads besides nodes and pods: namespaces (for affinity terms'
/// `namespaceSelector`) and the storage objects NodeVolumeLimits counts.
#[derive(Default)]
struct Context {
    namespaces: HashMap<String, Value>,
    storage: Storage,
}

impl Context {
    fn load(store: &Store) -> Context {
        let namespaces = store
            .find_type("", "v1", "namespaces")
            .map(|t| store.list(&t, None).0)
            .unwrap_or_default()
            .into_iter()
            .map(|n| (name_of(&n).to_string(), (*n).clone()))
            .collect();
        Context {
            namespaces,
            storage: Storage::load(store),
        }
    }
}

/// The cluster as one pass sees it: nodes, what is requested on each (as the filter and as
/// scoring count it), and the bound pods (what spread, affinity and volume limits read).
#[derive(Clone)]
struct Cluster<'a> {
    nodes: &'a [Arc<Value>],
    ctx: &'a Context,
    used: Vec<Amounts>,
    nonzero: Vec<(i64, i64)>,
    bound: Vec<(usize, Value)>,
}

/// What the PreFilters computed for one pod.
struct PodView {
    req: Amounts,
    nonzero: (i64, i64),
    spread: Vec<pod_topology_spread::Spread>,
    affinity: inter_pod_affinity::Affinity,
    csi: Vec<(String, String)>,
}

/// Binds pending pods to Ready, schedulable nodes, or marks them Unschedulable.
pub fn reconcile_scheduler(store: &Store, explain: Explain) {
    let t = types(store);
    let (pods, _) = store.list(&t.pods, None);
    let pending = queue(&pods);
    if pending.is_empty() {
        return;
    }
    let (nodes, _) = store.list(&t.nodes, None);
    let ctx = Context::load(store);
    let mut cluster = Cluster::new(&nodes, &pods, &ctx);
    // Pods bound earlier in this pass: no longer waiting, whatever the listed copy says.
    let mut bound_now: HashSet<(&str, &str)> = HashSet::new();
    let mut explained: HashMap<String, (usize, Option<bool>)> = HashMap::new();
    // The pods Deployments are about to create, read once a verdict needs explaining.
    let mut coming: Option<Vec<Value>> = None;
    let volumes = crate::volumes::Volumes::load(store);
    for pod in pending.iter().copied() {
        let claims = match volumes.for_pod(pod) {
            PodVolumes::Check(claims) => claims,
            PodVolumes::Refused(why) => {
                refuse_before_filters(store, pod, nodes.len(), &why);
                continue;
            }
        };
        let (best, reasons) = cluster.pick(pod, &claims);
        let name = name_of(pod);
        let ns = namespace_of(pod);
        match best {
            Some(i) => {
                let node_name = name_of(&nodes[i]).to_string();
                if crate::volumes::select_node(store, pod, &claims, &node_name) {
                    continue;
                }
                let res = store.modify(&t.pods, Some(ns), name, Write::Internal, |cur| {
                    if !cur["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
                        return Ok(cur.clone());
                    }
                    let mut p = cur.clone();
                    p["spec"]["nodeName"] = json!(node_name);
                    set_condition(&mut p, "PodScheduled", "True", "", "");
                    Ok(p)
                });
                if res.is_ok() {
                    tracing::debug!("bound {ns}/{name} to {node_name}");
                    cluster.bind(i, pod);
                    bound_now.insert((ns, name));
                }
            }
            None => {
                let message = verdict::filters_refused(nodes.len(), &reasons);
                if explain == Explain::On && !has_verdict(pod, &message) {
                    // Pods of one shape refused with nothing bound in between share an answer.
                    let key = explain::shape_key(pod);
                    let fits = match explained.get(&key) {
                        Some((at, fits)) if *at == bound_now.len() => *fits,
                        _ => {
                            let coming =
                                coming.get_or_insert_with(|| missing_replicas(store, &pods));
                            let waiting: Vec<&Value> = pending
                                .iter()
                                .filter(|p| !bound_now.contains(&(namespace_of(p), name_of(p))))
                                .map(|p| p.as_ref())
                                .chain(coming.iter())
                                .collect();
                            let fits = cluster.fits_in_some_order(pod, &waiting);
                            explained.insert(key, (bound_now.len(), fits));
                            fits
                        }
                    };
                    log_explained(pod, fits);
                }
                let _ = store.modify(&t.pods, Some(ns), name, Write::Internal, |cur| {
                    let mut p = cur.clone();
                    if !has_verdict(cur, &message) {
                        set_condition(&mut p, "PodScheduled", "False", "Unschedulable", &message);
                    }
                    Ok(p)
                });
            }
        }
    }
}

/// A PreFilter's refusal (VolumeBinding's, for a pod whose claims no node can serve yet):
/// kube-scheduler tries no node, and its message carries the plugin's reason alone.
fn refuse_before_filters(store: &Store, pod: &Value, nodes: usize, why: &str) {
    let t = types(store);
    let message = verdict::prefilter_refused(nodes, why);
    let _ = store.modify(
        &t.pods,
        Some(namespace_of(pod)),
        name_of(pod),
        Write::Internal,
        |cur| {
            let mut p = cur.clone();
            if !has_verdict(cur, &message)
                && cur["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
            {
                set_condition(&mut p, "PodScheduled", "False", "Unschedulable", &message);
            }
            Ok(p)
        },
    );
}

/// The default scheduler's unbound pods, oldest first (then by name).
fn queue(pods: &[Arc<Value>]) -> Vec<&Arc<Value>> {
    let mut pending: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
                && !is_deleting(p)
                && !is_terminal(p)
                && p["spec"]["schedulerName"]
                    .as_str()
                    .unwrap_or("default-scheduler")
                    == "default-scheduler"
        })
        .collect();
    pending.sort_by_key(|p| {
        (
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            name_of(p).to_string(),
        )
    });
    pending
}

fn has_verdict(pod: &Value, message: &str) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "PodScheduled" && c["status"] == "False" && c["message"] == message
        })
    })
}

/// Logs a new verdict with whether the pod's workload would have fit in another order.
fn log_explained(pod: &Value, fits: Option<bool>) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let answer = match fits {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    };
    tracing::info!(
        "{VERDICT_LOG}: uid={uid} pod={}/{} fits_in_some_order={answer}",
        namespace_of(pod),
        name_of(pod)
    );
}

/// What the filters of other pods read of a bound pod.
fn summary(pod: &Value) -> Value {
    json!({
        "metadata": {
            "name": pod["metadata"]["name"],
            "namespace": pod["metadata"]["namespace"],
            "labels": pod["metadata"]["labels"],
        },
        "spec": {"affinity": pod["spec"]["affinity"], "volumes": pod["spec"]["volumes"]},
    })
}

impl<'a> Cluster<'a> {
    fn new(nodes: &'a [Arc<Value>], pods: &[Arc<Value>], ctx: &'a Context) -> Cluster<'a> {
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (name_of(n), i))
            .collect();
        let mut cluster = Cluster {
            nodes,
            ctx,
            used: vec![Amounts::new(); nodes.len()],
            nonzero: vec![(0, 0); nodes.len()],
            bound: Vec::new(),
        };
        for p in pods {
            let Some(i) = p["spec"]["nodeName"].as_str().and_then(|n| index.get(n)) else {
                continue;
            };
            if is_terminal(p) || is_deleting(p) {
                continue;
            }
            cluster.bind(*i, p);
        }
        cluster
    }

    fn bind(&mut self, i: usize, pod: &Value) {
        for (k, v) in node_resources_fit::requests(pod) {
            *self.used[i].entry(k).or_default() += v;
        }
        let (cpu, mem) = node_resources_fit::nonzero_requests(pod);
        self.nonzero[i].0 += cpu;
        self.nonzero[i].1 += mem;
        self.bound.push((i, summary(pod)));
    }

    /// Undoes the latest [`Cluster::bind`], which was of `pod` on node `i`.
    fn unbind_last(&mut self, i: usize, pod: &Value) {
        for (k, v) in node_resources_fit::requests(pod) {
            *self.used[i].entry(k).or_default() -= v;
        }
        let (cpu, mem) = node_resources_fit::nonzero_requests(pod);
        self.nonzero[i].0 -= cpu;
        self.nonzero[i].1 -= mem;
        self.bound.pop();
    }

    /// The PreFilters' work for one pod.
    fn view(&self, pod: &Value) -> PodView {
        PodView {
            req: node_resources_fit::requests(pod),
            nonzero: node_resources_fit::nonzero_requests(pod),
            spread: pod_topology_spread::prefilter(pod, self.nodes, &self.bound),
            affinity: inter_pod_affinity::prefilter(
                pod,
                self.nodes,
                &self.bound,
                &self.ctx.namespaces,
            ),
            csi: self.ctx.storage.csi_volumes(pod),
        }
    }

    /// Why node `i` cannot take the pod: the reasons of the first filter that refuses it,
    /// in the default profile's order; empty when it can.
    fn refusal(&self, pod: &Value, view: &PodView, claims: &[ClaimCheck], i: usize) -> Vec<String> {
        let node = &self.nodes[i];
        if let Some(r) = node_filters::refusal(pod, node) {
            return vec![r.to_string()];
        }
        let short = node_resources_fit::insufficient(&view.req, &self.used[i], node);
        if !short.is_empty() {
            return short;
        }
        let on_node: Vec<&Value> = self
            .bound
            .iter()
            .filter(|(n, _)| *n == i)
            .map(|(_, p)| p)
            .collect();
        let refused = self
            .ctx
            .storage
            .refusal(node, &view.csi, &on_node)
            .or_else(|| crate::volumes::refusal(claims, node))
            .or_else(|| pod_topology_spread::refusal(&view.spread, node))
            .or_else(|| inter_pod_affinity::refusal(&view.affinity, node));
        refused.map(|r| vec![r.to_string()]).unwrap_or_default()
    }

    /// The default profile's resource scores for node `i`: LeastAllocated plus
    /// BalancedAllocation, weight 1 each. The profile's other scores (preferred terms,
    /// soft spreads, images) are left out: they tie for pods that use none of them.
    fn score(&self, view: &PodView, i: usize) -> i64 {
        let node = &self.nodes[i];
        node_resources_fit::least_allocated(node, self.nonzero[i], view.nonzero)
            + node_resources_fit::balanced_allocation(node, &self.used[i], &view.req).unwrap_or(0)
    }

    /// The best-scored node that takes the pod (the first of equals), or every refusal.
    fn pick(&self, pod: &Value, claims: &[ClaimCheck]) -> (Option<usize>, BTreeMap<String, usize>) {
        let view = self.view(pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(usize, i64)> = None;
        for i in 0..self.nodes.len() {
            let refused = self.refusal(pod, &view, claims, i);
            if refused.is_empty() {
                let score = self.score(&view, i);
                if best.is_none_or(|(_, s)| score > s) {
                    best = Some((i, score));
                }
            }
            for r in refused {
                *reasons.entry(r).or_default() += 1;
            }
        }
        (best.map(|(i, _)| i), reasons)
    }

    /// The nodes that could take the pod now, best scored first.
    fn open_nodes(&self, pod: &Value) -> Vec<usize> {
        let view = self.view(pod);
        let mut open: Vec<(usize, i64)> = (0..self.nodes.len())
            .filter(|&i| self.refusal(pod, &view, &[], i).is_empty())
            .map(|i| (i, self.score(&view, i)))
            .collect();
        open.sort_by_key(|(_, s)| -s);
        open.into_iter().map(|(i, _)| i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: &str, memory: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "status": {
                "allocatable": {"cpu": "4", "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
    }

    /// A pod of the workload `app=web`, spread over zones with `maxSkew: 1`.
    fn pod(name: &str, memory: &str, on: Option<&str>) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": "web"}},
            "spec": {
                "nodeName": on,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": memory}}}],
                "topologySpreadConstraints": [{
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }],
            },
        })
    }

    /// Zone a holds one pod of the workload, zone b none, and b's node has room for a small
    /// pod only: the big pod is refused now (a is over the skew, b is short of memory).
    fn world(b_memory: &str) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
        let nodes = vec![node("a", "a", "8Gi"), node("b", "b", b_memory)];
        let pods = vec![Arc::new(pod("running", "1Gi", Some("a")))];
        (nodes, pods)
    }

    #[test]
    fn a_pod_refused_for_its_turn_fits_once_its_workload_is_taken_in_another_order() {
        let (nodes, pods) = world("1Gi");
        let ctx = Context::default();
        let cluster = Cluster::new(&nodes, &pods, &ctx);
        let (big, small) = (pod("big", "2Gi", None), pod("small", "512Mi", None));
        // Refused now, as kube-scheduler would: a over the skew, b short of memory.
        assert!(cluster.open_nodes(&big).is_empty());
        let view = cluster.view(&big);
        assert_eq!(
            cluster.refusal(&big, &view, &[], 0),
            ["node(s) didn't match pod topology spread constraints"]
        );
        assert_eq!(
            cluster.refusal(&big, &view, &[], 1),
            ["Insufficient memory"]
        );
        // The small pod into b first evens the zones, and a takes the big one.
        assert_eq!(
            cluster.fits_in_some_order(&big, &[&big, &small]),
            Some(true)
        );
        // Alone it has no order to wait for.
        assert_eq!(cluster.fits_in_some_order(&big, &[&big]), Some(false));
    }

    #[test]
    fn a_pod_without_room_in_any_order_is_told_apart() {
        // b cannot take even the small pod: no order evens the zones.
        let (nodes, pods) = world("256Mi");
        let ctx = Context::default();
        let cluster = Cluster::new(&nodes, &pods, &ctx);
        let (big, small) = (pod("big", "2Gi", None), pod("small", "512Mi", None));
        assert_eq!(
            cluster.fits_in_some_order(&big, &[&big, &small]),
            Some(false)
        );
    }

    #[test]
    fn pods_of_other_workloads_do_not_count_as_its_group() {
        let (nodes, pods) = world("1Gi");
        let ctx = Context::default();
        let cluster = Cluster::new(&nodes, &pods, &ctx);
        let big = pod("big", "2Gi", None);
        let mut other = pod("other", "512Mi", None);
        other["metadata"]["labels"] = json!({"app": "db"});
        assert_eq!(
            cluster.fits_in_some_order(&big, &[&big, &other]),
            Some(false)
        );
    }

    /// What a test subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_pass_writes_the_verdict_and_logs_it_explained_then_binds_the_pod_at_its_turn() {
        let store = Store::new(100);
        let t = types(&store);
        let (nodes, _) = world("1Gi");
        for n in nodes {
            store.create(&t.nodes, None, (*n).clone()).unwrap();
        }
        for p in [
            pod("running", "1Gi", Some("a")),
            pod("big", "2Gi", None),
            pod("small", "512Mi", None),
        ] {
            store.create(&t.pods, Some("default"), p).unwrap();
        }
        let log = Captured::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || reconcile_scheduler(&store, Explain::On));
        let get = |name: &str| store.get(&t.pods, Some("default"), name).unwrap();
        // Queue order takes "big" first: refused, as kube-scheduler would; "small" bound.
        let big = get("big");
        assert!(big["spec"]["nodeName"].is_null());
        assert!(has_verdict(
            &big,
            "0/2 nodes are available: 1 Insufficient memory, 1 node(s) didn't match pod topology spread constraints. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        ));
        assert_eq!(get("small")["spec"]["nodeName"], "b");
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains(&format!(
                "{VERDICT_LOG}: uid={} pod=default/big fits_in_some_order=true",
                big["metadata"]["uid"].as_str().unwrap()
            )),
            "{text}"
        );
        // Its turn: the next pass binds it to zone a.
        reconcile_scheduler(&store, Explain::On);
        assert_eq!(get("big")["spec"]["nodeName"], "a");
    }

    #[test]
    fn a_deployment_short_of_replicas_counts_the_pods_it_is_about_to_create() {
        let store = Store::new(100);
        let t = types(&store);
        let template = pod("template", "512Mi", None);
        let deployments = store.find_type("apps", "v1", "deployments").unwrap();
        let d = store
            .create(
                &deployments,
                Some("default"),
                json!({
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {
                        "replicas": 3,
                        "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
                    },
                }),
            )
            .unwrap();
        let hash = crate::controllers::template_hash(&d["spec"]["template"]);
        let mut live = pod("live", "512Mi", Some("a"));
        live["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        live["metadata"]["ownerReferences"] =
            json!([{"kind": "Deployment", "name": "web", "uid": d["metadata"]["uid"]}]);
        store.create(&t.pods, Some("default"), live).unwrap();
        let (pods, _) = store.list(&t.pods, None);
        let coming = missing_replicas(&store, &pods);
        assert_eq!(coming.len(), 2);
        for p in &coming {
            assert_eq!(p["metadata"]["labels"]["app"], "web");
            assert_eq!(p["metadata"]["namespace"], "default");
            assert!(p["spec"]["nodeName"].is_null());
        }
    }

    /// NodeResourcesFit counts ephemeral-storage like cpu and memory (`fitsRequest`,
    /// `pkg/scheduler/framework/plugins/noderesources/fit.go`): a request over what the
    /// node has left is refused, and a node that reports none has none.
    #[test]
    fn ephemeral_storage_requests_must_fit_the_nodes_allocatable() {
        use node_resources_fit::insufficient;
        let node = json!({"status": {"allocatable": {
            "cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "37Gi"}}});
        let req = |gi: i64| Amounts::from([("ephemeral-storage".to_string(), gi << 30)]);
        assert!(insufficient(&req(30), &Amounts::new(), &node).is_empty());
        assert_eq!(
            insufficient(&req(30), &req(10), &node),
            ["Insufficient ephemeral-storage"]
        );
        let none = json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}});
        assert_eq!(
            insufficient(&req(1), &Amounts::new(), &none),
            ["Insufficient ephemeral-storage"]
        );
    }
}
