//! The simulated kube-scheduler: binds each pending pod to a Ready, schedulable node that
//! passes its filters (taints, node selector and required affinity, requests, required
//! topology spread), the least CPU-allocated first, or writes the `Unschedulable` verdict
//! kube-scheduler writes.
//!
//! Like kube-scheduler it takes pods one at a time in queue order and counts only bound pods
//! for topology spread. So while several pods of one workload are unbound, a required spread
//! can refuse one of them for an attempt although all of them fit once taken in another
//! order: two zones short at once, with `maxSkew: 1`, admit their pods only alternately. The
//! verdict is the real one either way. With [`Explain::On`], every new verdict is also
//! logged with `fits_in_some_order`: whether the pod and the unbound pods its spreads count
//! (those its Deployment is about to create too: a drain's evictions are recreated one by
//! one) could all be bound to the nodes as they stood, in some order. Tests use it to tell a
//! pod waiting for room from one waiting for its turn.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::controllers::{
    is_deleting, is_terminal, missing_replicas, node_is_ready, node_selector_ok, pod_requests,
    set_condition, types, untolerated_taint,
};
use crate::quantity;
use crate::selectors::label_selector_matches;
use crate::store::{name_of, namespace_of, Store, Write};
use crate::volumes::PodVolumes;

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

/// Most placements one explanation may try before it answers "no".
const SEARCH_BUDGET: usize = 4_096;
/// Larger problems (pods × nodes) are not searched: their verdicts are logged as unknown.
const SEARCH_LIMIT: usize = 100_000;

/// The cluster as one pass sees it: nodes, what is requested on each, and the bound pods
/// (node, namespace and labels: what topology spread counts).
#[derive(Clone)]
struct Cluster<'a> {
    nodes: &'a [Arc<Value>],
    used: Vec<BTreeMap<String, f64>>,
    bound: Vec<(usize, Value)>,
}

/// One required spread constraint of a pod, with its domains' counts as the cluster stands.
struct Spread<'a> {
    key: String,
    max_skew: i64,
    self_match: i64,
    counts: HashMap<&'a str, i64>,
    min: i64,
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
    let mut cluster = Cluster::new(&nodes, &pods);
    // Pods bound earlier in this pass: no longer waiting, whatever the listed copy says.
    let mut bound_now: HashSet<(&str, &str)> = HashSet::new();
    let mut explained: HashMap<String, (usize, Option<bool>)> = HashMap::new();
    // The pods Deployments are about to create, read once a verdict needs explaining.
    let mut coming: Option<Vec<Value>> = None;
    let volumes = crate::volumes::Volumes::load(store);
    for pod in pending.iter().copied() {
        let req = pod_requests(pod);
        let constraints = spread_constraints(pod);
        let spread = cluster.spread(pod, &constraints);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(usize, f64)> = None;
        let claims = match volumes.for_pod(pod) {
            PodVolumes::Check(claims) => claims,
            PodVolumes::Refused(why) => {
                refuse_before_filters(store, pod, nodes.len(), &why);
                continue;
            }
        };
        for i in 0..nodes.len() {
            let refused = cluster.refusal(pod, &req, &spread, i).or_else(|| {
                crate::volumes::refusal(&claims, &cluster.nodes[i]).map(str::to_string)
            });
            match refused {
                Some(r) => *reasons.entry(r).or_default() += 1,
                None => {
                    let score = cluster.cpu_share(i);
                    if best.is_none_or(|(_, s)| score < s) {
                        best = Some((i, score));
                    }
                }
            }
        }
        let name = name_of(pod);
        let ns = namespace_of(pod);
        match best {
            Some((i, _)) => {
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
                    cluster.bind(i, pod, &req);
                    bound_now.insert((ns, name));
                }
            }
            None => {
                let message = verdict(nodes.len(), &reasons);
                if explain == Explain::On && !has_verdict(pod, &message) {
                    // Pods of one shape refused with nothing bound in between share an answer.
                    let key = shape_key(pod);
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
    let message = format!(
        "0/{nodes} nodes are available: {why}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    );
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

/// kube-scheduler's message: how many nodes each filter refused.
fn verdict(nodes: usize, reasons: &BTreeMap<String, usize>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "0/{nodes} nodes are available: {}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.",
        parts.join(", "),
    )
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

impl<'a> Cluster<'a> {
    fn new(nodes: &'a [Arc<Value>], pods: &[Arc<Value>]) -> Cluster<'a> {
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (name_of(n), i))
            .collect();
        let mut cluster = Cluster {
            nodes,
            used: vec![BTreeMap::new(); nodes.len()],
            bound: Vec::new(),
        };
        for p in pods {
            let Some(i) = p["spec"]["nodeName"].as_str().and_then(|n| index.get(n)) else {
                continue;
            };
            if is_terminal(p) || is_deleting(p) {
                continue;
            }
            cluster.bind(*i, p, &pod_requests(p));
        }
        cluster
    }

    fn bind(&mut self, i: usize, pod: &Value, req: &BTreeMap<String, f64>) {
        for (k, v) in req {
            *self.used[i].entry(k.clone()).or_default() += v;
        }
        let seen = json!({"metadata": {"namespace": pod["metadata"]["namespace"], "labels": pod["metadata"]["labels"]}});
        self.bound.push((i, seen));
    }

    /// Undoes the latest [`Cluster::bind`], which was of `req` on node `i`.
    fn unbind_last(&mut self, i: usize, req: &BTreeMap<String, f64>) {
        for (k, v) in req {
            *self.used[i].entry(k.clone()).or_default() -= v;
        }
        self.bound.pop();
    }

    fn cpu_share(&self, i: usize) -> f64 {
        let cap = allocatable(&self.nodes[i], "cpu").unwrap_or(0.0).max(1e-9);
        self.used[i].get("cpu").copied().unwrap_or(0.0) / cap
    }

    /// Why node `i` cannot take the pod, in kube-scheduler's words; None when it can.
    fn refusal(
        &self,
        pod: &Value,
        req: &BTreeMap<String, f64>,
        spread: &[Spread],
        i: usize,
    ) -> Option<String> {
        let node = &self.nodes[i];
        if !node_is_ready(node) {
            Some("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".to_string())
        } else if node["spec"]["unschedulable"] == true {
            Some("node(s) were unschedulable".to_string())
        } else if let Some(taint) = untolerated_taint(pod, node, false) {
            Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or(""),
                taint["value"].as_str().unwrap_or("")
            ))
        } else if !node_selector_ok(pod, node) {
            Some("node(s) didn't match Pod's node affinity/selector".to_string())
        } else if let Some(r) = insufficient(req, &self.used[i], node) {
            Some(r)
        } else if !spread_ok(spread, node) {
            Some("node(s) didn't match pod topology spread constraints".to_string())
        } else {
            None
        }
    }

    /// The pod's required spreads with their domains' counts: every domain of a node the
    /// pod's selector and affinity admit, and the bound pods in its namespace each counts.
    fn spread(&self, pod: &Value, constraints: &[Value]) -> Vec<Spread<'a>> {
        let ns = &pod["metadata"]["namespace"];
        constraints
            .iter()
            .map(|c| {
                let key = c["topologyKey"].as_str().unwrap_or("");
                let nodes: &'a [Arc<Value>] = self.nodes;
                let mut counts: HashMap<&'a str, i64> = HashMap::new();
                for n in nodes {
                    if let Some(d) = n["metadata"]["labels"][key].as_str() {
                        if node_selector_ok(pod, n) {
                            counts.entry(d).or_insert(0);
                        }
                    }
                }
                for (i, p) in &self.bound {
                    if p["metadata"]["namespace"] != *ns
                        || !label_selector_matches(&c["labelSelector"], &p["metadata"]["labels"])
                            .unwrap_or(false)
                    {
                        continue;
                    }
                    if let Some(d) = self.nodes[*i]["metadata"]["labels"][key].as_str() {
                        if let Some(e) = counts.get_mut(d) {
                            *e += 1;
                        }
                    }
                }
                let self_match =
                    label_selector_matches(&c["labelSelector"], &pod["metadata"]["labels"])
                        .unwrap_or(false) as i64;
                Spread {
                    key: key.to_string(),
                    max_skew: c["maxSkew"].as_i64().unwrap_or(1),
                    self_match,
                    min: counts.values().copied().min().unwrap_or(0),
                    counts,
                }
            })
            .collect()
    }

    /// The nodes that could take the pod now.
    fn open_nodes(&self, pod: &Value, req: &BTreeMap<String, f64>) -> Vec<usize> {
        let constraints = spread_constraints(pod);
        let spread = self.spread(pod, &constraints);
        let mut open: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.refusal(pod, req, &spread, i).is_none())
            .collect();
        open.sort_by(|a, b| self.cpu_share(*a).total_cmp(&self.cpu_share(*b)));
        open
    }

    /// Whether `pod` and the unbound pods in `waiting` that its required spreads count could
    /// all be bound to the nodes as they stand, in some order. None: too large to search.
    fn fits_in_some_order(&self, pod: &Value, waiting: &[&Value]) -> Option<bool> {
        let constraints = spread_constraints(pod);
        let ns = &pod["metadata"]["namespace"];
        let members = waiting.iter().copied().filter(|p| {
            std::ptr::eq(*p, pod)
                || (p["metadata"]["namespace"] == *ns
                    && constraints.iter().any(|c| {
                        label_selector_matches(&c["labelSelector"], &p["metadata"]["labels"])
                            .unwrap_or(false)
                    }))
        });
        let mut shapes: Vec<Shape> = Vec::new();
        let mut total = 0;
        for p in members {
            total += 1;
            let key = shape_key(p);
            match shapes.iter_mut().find(|s| s.key == key) {
                Some(s) => s.left += 1,
                None => shapes.push(Shape {
                    key,
                    pod: p,
                    req: pod_requests(p),
                    left: 1,
                }),
            }
        }
        if total * self.nodes.len().max(1) > SEARCH_LIMIT {
            return None;
        }
        if !shapes.iter().all(|s| self.room_for(s)) {
            return Some(false);
        }
        let mut trial = self.clone();
        // Enough for the greedy descent and some backtracking; pods of one shape are
        // interchangeable, so a deeper search mostly repeats itself.
        let mut budget = (4 * total + 64).min(SEARCH_BUDGET);
        Some(trial.place_all(&mut shapes, &mut budget))
    }

    /// Whether the nodes that could ever take the shape's pods (all but the request and
    /// spread filters) have room for all of them together: a cheap necessary condition,
    /// so that a workload plainly short of room is not searched.
    fn room_for(&self, shape: &Shape) -> bool {
        let mut free: BTreeMap<&str, f64> = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !node_is_ready(node)
                || node["spec"]["unschedulable"] == true
                || untolerated_taint(shape.pod, node, false).is_some()
                || !node_selector_ok(shape.pod, node)
            {
                continue;
            }
            for k in shape.req.keys() {
                let cap = allocatable(node, k).unwrap_or(if k == "pods" { 110.0 } else { 0.0 });
                let used = self.used[i].get(k).copied().unwrap_or(0.0);
                *free.entry(k).or_default() += (cap - used).max(0.0);
            }
        }
        shape.req.iter().all(|(k, v)| {
            *v * shape.left as f64 <= free.get(k.as_str()).copied().unwrap_or(0.0) + 1e-9
        })
    }

    /// Depth-first: binds next a pod of the shape with the fewest open nodes (a shape with
    /// none may open up once others are bound), trying its nodes least allocated first.
    fn place_all(&mut self, shapes: &mut [Shape], budget: &mut usize) -> bool {
        if shapes.iter().all(|s| s.left == 0) {
            return true;
        }
        let mut next: Option<(usize, Vec<usize>)> = None;
        for (k, s) in shapes.iter().enumerate() {
            if s.left == 0 {
                continue;
            }
            let open = self.open_nodes(s.pod, &s.req);
            if !open.is_empty() && next.as_ref().is_none_or(|(_, o)| open.len() < o.len()) {
                next = Some((k, open));
            }
        }
        let Some((k, open)) = next else {
            return false;
        };
        for i in open {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let (pod, req) = (shapes[k].pod, shapes[k].req.clone());
            self.bind(i, pod, &req);
            shapes[k].left -= 1;
            if self.place_all(shapes, budget) {
                return true;
            }
            shapes[k].left += 1;
            self.unbind_last(i, &req);
        }
        false
    }
}

/// Unbound pods that schedule alike (one ReplicaSet's, say), searched as one.
struct Shape<'p> {
    key: String,
    pod: &'p Value,
    req: BTreeMap<String, f64>,
    left: usize,
}

/// What the filters read of a pod: pods with equal keys are interchangeable.
fn shape_key(pod: &Value) -> String {
    let spec = &pod["spec"];
    json!([
        pod["metadata"]["labels"],
        spec["containers"]
            .as_array()
            .map(|cs| cs.iter().map(|c| &c["resources"]).collect::<Vec<_>>()),
        spec["initContainers"]
            .as_array()
            .map(|cs| cs.iter().map(|c| &c["resources"]).collect::<Vec<_>>()),
        spec["overhead"],
        spec["nodeSelector"],
        spec["affinity"]["nodeAffinity"],
        spec["tolerations"],
        spec["topologySpreadConstraints"],
    ])
    .to_string()
}

fn spread_ok(spread: &[Spread], node: &Value) -> bool {
    spread.iter().all(|s| {
        let Some(domain) = node["metadata"]["labels"][s.key.as_str()].as_str() else {
            return false;
        };
        s.counts.get(domain).copied().unwrap_or(0) + s.self_match - s.min <= s.max_skew
    })
}

fn allocatable(node: &Value, res: &str) -> Option<f64> {
    let a = &node["status"]["allocatable"][res];
    let a = if a.is_null() {
        &node["status"]["capacity"][res]
    } else {
        a
    };
    quantity::from_json(a)
}

fn insufficient(
    req: &BTreeMap<String, f64>,
    used: &BTreeMap<String, f64>,
    node: &Value,
) -> Option<String> {
    for (k, v) in req {
        if *v <= 0.0 {
            continue;
        }
        let cap = match allocatable(node, k) {
            Some(c) => c,
            None if k == "pods" => 110.0,
            None => 0.0,
        };
        if used.get(k).copied().unwrap_or(0.0) + v > cap + 1e-9 {
            return Some(if k == "pods" {
                "Too many pods".to_string()
            } else {
                format!("Insufficient {k}")
            });
        }
    }
    None
}

/// The pod's `DoNotSchedule` constraints: `ScheduleAnyway` ones only score.
fn spread_constraints(pod: &Value) -> Vec<Value> {
    pod["spec"]["topologySpreadConstraints"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| {
                    c["whenUnsatisfiable"].as_str().unwrap_or("DoNotSchedule") == "DoNotSchedule"
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
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
        let cluster = Cluster::new(&nodes, &pods);
        let (big, small) = (pod("big", "2Gi", None), pod("small", "512Mi", None));
        // Refused now, as kube-scheduler would: a over the skew, b short of memory.
        assert!(cluster.open_nodes(&big, &pod_requests(&big)).is_empty());
        let spread = cluster.spread(&big, &spread_constraints(&big));
        assert_eq!(
            cluster
                .refusal(&big, &pod_requests(&big), &spread, 0)
                .as_deref(),
            Some("node(s) didn't match pod topology spread constraints")
        );
        assert_eq!(
            cluster
                .refusal(&big, &pod_requests(&big), &spread, 1)
                .as_deref(),
            Some("Insufficient memory")
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
        let cluster = Cluster::new(&nodes, &pods);
        let (big, small) = (pod("big", "2Gi", None), pod("small", "512Mi", None));
        assert_eq!(
            cluster.fits_in_some_order(&big, &[&big, &small]),
            Some(false)
        );
    }

    #[test]
    fn pods_of_other_workloads_do_not_count_as_its_group() {
        let (nodes, pods) = world("1Gi");
        let cluster = Cluster::new(&nodes, &pods);
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
        let node = json!({"status": {"allocatable": {
            "cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "37Gi"}}});
        let req =
            |gi: f64| BTreeMap::from([("ephemeral-storage".to_string(), gi * (1u64 << 30) as f64)]);
        assert_eq!(insufficient(&req(30.0), &BTreeMap::new(), &node), None);
        let used = req(10.0);
        assert_eq!(
            insufficient(&req(30.0), &used, &node).as_deref(),
            Some("Insufficient ephemeral-storage")
        );
        let none = json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}});
        assert_eq!(
            insufficient(&req(1.0), &BTreeMap::new(), &none).as_deref(),
            Some("Insufficient ephemeral-storage")
        );
    }
}
