//! The differential test's scenarios, as data: each names the filter or score it exercises.
//! Node, pod and cluster-scoped object names carry the scenario's prefix (`sdNN-`), so no
//! scenario meets another's leftovers; pods that place others first pin them with a
//! hostname selector, so that what is compared is decided by the filters and scores alone.

use serde_json::{json, Value};

use super::NS;

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";
const EBS: &str = "ebs.csi.aws.com";

pub struct Scenario {
    pub name: &'static str,
    pub nodes: Vec<Value>,
    /// Created before the nodes, in order; deleted after the pods, in reverse.
    pub objects: Vec<Value>,
    /// Created one at a time, each once the one before has its outcome.
    pub pods: Vec<Value>,
    /// Sets of nodes the scenario's pods score alike (kube-scheduler picks one at random).
    pub ties: Vec<Vec<String>>,
}

/// Builds one scenario, prefixing its names.
struct B {
    p: String,
    s: Scenario,
}

impl B {
    fn n(&self, x: &str) -> String {
        format!("{}-{x}", self.p)
    }

    /// A node with 4 CPUs, 8 GiB, 20 GiB of ephemeral storage and room for 110 pods.
    fn node(&mut self, x: &str, zone: Option<&str>, f: impl FnOnce(&mut Value)) {
        let name = self.n(x);
        let mut labels = json!({HOST: name});
        if let Some(z) = zone {
            labels[ZONE] = json!(z);
        }
        let alloc =
            json!({"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"});
        let mut n = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {},
            "status": {"allocatable": alloc, "capacity": alloc,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}});
        f(&mut n);
        n["status"]["capacity"] = n["status"]["allocatable"].clone();
        self.s.nodes.push(n);
    }

    /// A pod requesting `cpu` and `memory` (`""`: none).
    fn pod(&mut self, x: &str, cpu: &str, memory: &str, f: impl FnOnce(&mut Value)) {
        let mut requests = json!({});
        if !cpu.is_empty() {
            requests["cpu"] = json!(cpu);
        }
        if !memory.is_empty() {
            requests["memory"] = json!(memory);
        }
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.n(x), "namespace": NS, "labels": {}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": requests}}],
                "terminationGracePeriodSeconds": 0}});
        f(&mut p);
        self.s.pods.push(p);
    }

    fn obj(&mut self, o: Value) {
        self.s.objects.push(o);
    }

    fn tie(&mut self, xs: &[&str]) {
        let set = xs.iter().map(|x| self.n(x)).collect();
        self.s.ties.push(set);
    }

    fn taint(n: &mut Value, key: &str, value: &str, effect: &str) {
        let mut ts = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        ts.push(json!({"key": key, "value": value, "effect": effect}));
        n["spec"]["taints"] = Value::Array(ts);
    }

    /// Storage class `name` of `provisioner`, binding `mode`, allowed in `zones` (any: empty).
    fn class(&mut self, x: &str, provisioner: &str, mode: &str, zones: &[&str]) {
        let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": self.n(x)}, "provisioner": provisioner,
            "volumeBindingMode": mode});
        if !zones.is_empty() {
            sc["allowedTopologies"] =
                json!([{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]);
        }
        self.obj(sc);
    }

    /// A CSI volume pre-bound to claim `x` (created too), reachable from `zone`'s nodes by
    /// node affinity, or labelled with it (`by_label`) as VolumeZone reads.
    fn static_volume(&mut self, x: &str, zone: &str, by_label: bool) {
        let (pv, claim) = (self.n(&format!("pv-{x}")), self.n(x));
        let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {}},
            "spec": {"capacity": {"storage": "4Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                "csi": {"driver": EBS, "volumeHandle": format!("vol-{claim}")},
                "claimRef": {"namespace": NS, "name": claim}}});
        if by_label {
            v["metadata"]["labels"][ZONE] = json!(zone);
        } else {
            v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}});
        }
        self.obj(v);
        let c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": NS},
            "spec": {"storageClassName": "", "volumeName": pv, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "4Gi"}}}});
        self.obj(c);
    }

    /// An unbound claim of class `class`.
    fn claim(&mut self, x: &str, class: &str) {
        let c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": self.n(x), "namespace": NS},
            "spec": {"storageClassName": self.n(class), "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "4Gi"}}}});
        self.obj(c);
    }

    /// Node `x`'s CSINode: the EBS driver with room for `count` volumes.
    fn csinode(&mut self, x: &str, count: i64) {
        let c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": self.n(x)},
            "spec": {"drivers": [{"name": EBS, "nodeID": format!("i-{x}"),
                "topologyKeys": [ZONE], "allocatable": {"count": count}}]}});
        self.obj(c);
    }
}

fn labels(p: &mut Value, kv: &[(&str, &str)]) {
    for (k, v) in kv {
        p["metadata"]["labels"][*k] = json!(v);
    }
}

fn select(p: &mut Value, k: &str, v: &str) {
    p["spec"]["nodeSelector"][k] = json!(v);
}

fn tolerate(p: &mut Value, t: Value) {
    let mut ts = p["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ts.push(t);
    p["spec"]["tolerations"] = Value::Array(ts);
}

fn node_affinity(p: &mut Value, terms: Value) {
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({"nodeSelectorTerms": terms});
}

/// A `DoNotSchedule` constraint over `key` for pods labelled `app`, plus `extra` fields.
fn spread(p: &mut Value, key: &str, app: &str, extra: Value) {
    let mut c = json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    let mut cs = p["spec"]["topologySpreadConstraints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    cs.push(c);
    p["spec"]["topologySpreadConstraints"] = Value::Array(cs);
}

/// A required (anti-)affinity term (`kind`: `podAffinity` or `podAntiAffinity`).
fn pod_affinity(p: &mut Value, kind: &str, app: &str, key: &str, extra: Value) {
    let mut t = json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key});
    for (k, v) in extra.as_object().into_iter().flatten() {
        t[k] = v.clone();
    }
    let slot = &mut p["spec"]["affinity"][kind]["requiredDuringSchedulingIgnoredDuringExecution"];
    let mut ts = slot.as_array().cloned().unwrap_or_default();
    ts.push(t);
    *slot = Value::Array(ts);
}

fn mount(p: &mut Value, claim: &str) {
    p["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
}

/// The pod's claim whose class waits for the first consumer, if it has one: its chosen node
/// shows on the claim.
pub fn waiting_claim(pod: &Value, objects: &[Value]) -> Option<String> {
    let claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str()?;
    let c = objects
        .iter()
        .find(|o| o["kind"] == "PersistentVolumeClaim" && o["metadata"]["name"] == claim)?;
    let class = c["spec"]["storageClassName"].as_str()?;
    let sc = objects
        .iter()
        .find(|o| o["kind"] == "StorageClass" && o["metadata"]["name"] == class)?;
    (sc["volumeBindingMode"] == "WaitForFirstConsumer" && c["spec"]["volumeName"].is_null())
        .then(|| claim.to_string())
}

type Build = fn(&mut B);

/// Every scenario, in the order run.
pub fn all() -> Vec<Scenario> {
    let list: Vec<(&'static str, Build)> = vec![
        ("NodeUnschedulable", node_unschedulable),
        ("TaintToleration", taint_toleration),
        ("TaintToleration operators", taint_operators),
        ("NodeAffinity nodeSelector", node_selector),
        ("NodeAffinity required", required_node_affinity),
        ("Fit cpu", fit_cpu),
        ("Fit memory", fit_memory),
        ("Fit ephemeral-storage", fit_ephemeral),
        ("Fit pods", fit_pods),
        ("Fit extended resource", fit_gpu),
        ("Fit several reasons", fit_several),
        ("Fit init containers", fit_init),
        ("filter order", filter_order),
        ("Spread affinity Honor", spread_honor),
        ("Spread affinity Ignore", spread_ignore),
        ("Spread missing key", spread_missing_key),
        ("Spread every key", spread_every_key),
        ("Spread taints Ignore/Honor", spread_taints),
        ("Spread minDomains", spread_min_domains),
        ("Spread matchLabelKeys", spread_match_label_keys),
        ("PodAffinity", pod_affinity_scenario),
        ("PodAffinity first of group", self_affinity),
        ("PodAntiAffinity", anti_affinity),
        ("existing anti-affinity", existing_anti_affinity),
        ("anti-affinity namespaces", namespace_selector),
        ("VolumeBinding PV affinity", volume_node_affinity),
        ("VolumeBinding immediate", unbound_immediate),
        ("VolumeBinding WFFC topology", wait_for_first_consumer),
        ("VolumeZone", volume_zone),
        ("NodeVolumeLimits CSINode", volume_limits),
        ("NodeVolumeLimits attachments", volume_limits_attached),
        ("score cpu", score_cpu),
        ("score memory", score_memory),
        ("score balanced", score_balanced),
        ("score best-effort", score_best_effort),
    ];
    list.into_iter()
        .enumerate()
        .map(|(i, (name, build))| {
            let mut b = B {
                p: format!("sd{i:02}"),
                s: Scenario {
                    name,
                    nodes: Vec::new(),
                    objects: Vec::new(),
                    pods: Vec::new(),
                    ties: Vec::new(),
                },
            };
            build(&mut b);
            b.s
        })
        .collect()
}

fn node_unschedulable(b: &mut B) {
    b.node("a", None, |n| n["spec"]["unschedulable"] = json!(true));
    b.node("b", None, |n| n["spec"]["unschedulable"] = json!(true));
    b.pod("plain", "100m", "", |_| {});
    b.pod("tolerant", "100m", "", |p| {
        tolerate(
            p,
            json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
            "effect": "NoSchedule"}),
        )
    });
    b.tie(&["a", "b"]);
}

fn taint_toleration(b: &mut B) {
    b.node("a", None, |n| B::taint(n, "dedicated", "gpu", "NoSchedule"));
    b.node("b", None, |n| B::taint(n, "evict", "now", "NoExecute"));
    b.pod("plain", "100m", "", |_| {});
    b.pod("gpu", "100m", "", |p| {
        tolerate(
            p,
            json!({"key": "dedicated", "operator": "Equal", "value": "gpu",
            "effect": "NoSchedule"}),
        )
    });
}

fn taint_operators(b: &mut B) {
    b.node("a", None, |n| B::taint(n, "k", "v", "NoSchedule"));
    b.pod("wrong-effect", "100m", "", |p| {
        tolerate(
            p,
            json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
        )
    });
    b.pod("wrong-value", "100m", "", |p| {
        tolerate(p, json!({"key": "k", "operator": "Equal", "value": "w"}))
    });
    b.pod("everything", "100m", "", |p| {
        tolerate(p, json!({"operator": "Exists"}))
    });
}

fn node_selector(b: &mut B) {
    b.node("a", None, |n| {
        n["metadata"]["labels"]["disk"] = json!("ssd")
    });
    b.node("b", None, |n| {
        n["metadata"]["labels"]["disk"] = json!("hdd")
    });
    b.pod("ssd", "100m", "", |p| select(p, "disk", "ssd"));
    b.pod("nvme", "100m", "", |p| select(p, "disk", "nvme"));
}

fn required_node_affinity(b: &mut B) {
    b.node("a", None, |n| n["metadata"]["labels"]["gen"] = json!("3"));
    b.node("b", None, |n| n["metadata"]["labels"]["gen"] = json!("5"));
    b.node("c", None, |_| {});
    b.pod("gt", "100m", "", |p| {
        node_affinity(
            p,
            json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]),
        )
    });
    b.pod("absent", "100m", "", |p| {
        node_affinity(
            p,
            json!([{"matchExpressions": [{"key": "gen", "operator": "DoesNotExist"}]}]),
        )
    });
    b.pod("either", "100m", "", |p| {
        node_affinity(
            p,
            json!([
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["x"]}]},
            {"matchExpressions": [{"key": "gen", "operator": "NotIn", "values": ["5"]},
                {"key": "gen", "operator": "Exists"}]}]),
        )
    });
    b.pod("none", "100m", "", |p| {
        node_affinity(
            p,
            json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["2"]}]}]),
        )
    });
}

fn fit_cpu(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("2")
    });
    b.node("b", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("2")
    });
    for x in ["one", "two", "three"] {
        b.pod(x, "1500m", "", |_| {});
    }
    b.tie(&["a", "b"]);
}

fn fit_memory(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["memory"] = json!("2Gi")
    });
    b.node("b", None, |n| {
        n["status"]["allocatable"]["memory"] = json!("2Gi")
    });
    for x in ["one", "two", "three"] {
        b.pod(x, "", "1536Mi", |_| {});
    }
    b.tie(&["a", "b"]);
}

fn fit_ephemeral(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["ephemeral-storage"] = json!("10Gi")
    });
    b.node("b", None, |n| {
        n["status"]["allocatable"]["ephemeral-storage"] = json!("1Gi")
    });
    for x in ["five", "six"] {
        b.pod(x, "100m", "", |p| {
            p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = json!("6Gi")
        });
    }
}

fn fit_pods(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["pods"] = json!("1")
    });
    b.node("b", None, |n| {
        n["status"]["allocatable"]["pods"] = json!("1")
    });
    for x in ["one", "two", "three"] {
        b.pod(x, "100m", "", |_| {});
    }
    b.tie(&["a", "b"]);
}

fn fit_gpu(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["nvidia.com/gpu"] = json!("1")
    });
    b.node("b", None, |_| {});
    for x in ["one", "two"] {
        b.pod(x, "100m", "", |p| {
            p["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"})
        });
    }
}

fn fit_several(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("1");
        n["status"]["allocatable"]["memory"] = json!("1Gi");
    });
    b.node("b", None, |n| B::taint(n, "k", "v", "NoSchedule"));
    b.pod("big", "2", "2Gi", |_| {});
}

fn fit_init(b: &mut B) {
    b.node("a", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("2")
    });
    b.pod("init", "500m", "", |p| {
        p["spec"]["initContainers"] = json!([{"name": "i", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "1800m"}}}])
    });
    b.pod("after", "500m", "", |_| {});
}

fn filter_order(b: &mut B) {
    b.node("a", None, |n| {
        n["spec"]["unschedulable"] = json!(true);
        B::taint(n, "k", "v", "NoSchedule");
    });
    b.node("b", None, |n| B::taint(n, "k", "v", "NoSchedule"));
    b.node("c", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("1")
    });
    b.node("d", None, |n| {
        n["metadata"]["labels"]["role"] = json!("db");
        n["status"]["allocatable"]["cpu"] = json!("1");
    });
    b.pod("db", "2", "", |p| select(p, "role", "db"));
}

fn zones_ab(b: &mut B) {
    b.node("a", Some("a"), |_| {});
    b.node("b", Some("b"), |_| {});
}

fn spread_honor(b: &mut B) {
    zones_ab(b);
    for x in ["one", "two"] {
        b.pod(x, "100m", "", |p| {
            labels(p, &[("app", "w")]);
            select(p, ZONE, "a");
            spread(p, ZONE, "w", json!({}));
        });
    }
    b.pod("three", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        spread(p, ZONE, "w", json!({}));
    });
}

fn spread_ignore(b: &mut B) {
    zones_ab(b);
    for x in ["one", "two"] {
        b.pod(x, "100m", "", |p| {
            labels(p, &[("app", "w")]);
            select(p, ZONE, "a");
            spread(p, ZONE, "w", json!({"nodeAffinityPolicy": "Ignore"}));
        });
    }
}

fn spread_missing_key(b: &mut B) {
    zones_ab(b);
    b.node("c", None, |_| {});
    let host_a = b.n("a");
    let host_c = b.n("c");
    b.pod("first", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        select(p, HOST, &host_a);
    });
    b.pod("second", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        spread(p, ZONE, "w", json!({}));
    });
    b.pod("on-c", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        select(p, HOST, &host_c);
        spread(p, ZONE, "w", json!({}));
    });
}

fn spread_every_key(b: &mut B) {
    zones_ab(b);
    b.node("d", None, |_| {});
    for (x, on) in [("on-a", "a"), ("on-b", "b")] {
        let host = b.n(on);
        b.pod(x, "100m", "", |p| {
            labels(p, &[("app", "w")]);
            select(p, HOST, &host);
        });
    }
    // Node d lacks the zone key, so it is no domain of the hostname constraint either: the
    // hostname minimum is 1 (a and b), not 0 (d).
    b.pod("both-keys", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        spread(p, ZONE, "w", json!({}));
        spread(p, HOST, "w", json!({}));
    });
    b.tie(&["a", "b"]);
}

fn spread_taints(b: &mut B) {
    b.node("a", Some("a"), |_| {});
    b.node("b", Some("b"), |n| B::taint(n, "k", "v", "NoSchedule"));
    let host_a = b.n("a");
    b.pod("first", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        select(p, HOST, &host_a);
    });
    b.pod("ignore", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        spread(p, ZONE, "w", json!({}));
    });
    b.pod("honor", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        spread(p, ZONE, "w", json!({"nodeTaintsPolicy": "Honor"}));
    });
}

fn spread_min_domains(b: &mut B) {
    zones_ab(b);
    let host_a = b.n("a");
    b.pod("first", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        select(p, HOST, &host_a);
    });
    for x in ["second", "third"] {
        b.pod(x, "100m", "", |p| {
            labels(p, &[("app", "w")]);
            spread(p, ZONE, "w", json!({"minDomains": 3}));
        });
    }
}

fn spread_match_label_keys(b: &mut B) {
    b.node("a", Some("a"), |_| {});
    b.node("b", Some("b"), |n| {
        n["status"]["allocatable"]["pods"] = json!("1")
    });
    let (host_a, host_b) = (b.n("a"), b.n("b"));
    b.pod("v1", "100m", "", |p| {
        labels(p, &[("app", "w"), ("ver", "1")]);
        select(p, HOST, &host_a);
    });
    b.pod("filler", "100m", "", |p| select(p, HOST, &host_b));
    b.pod("v2", "100m", "", |p| {
        labels(p, &[("app", "w"), ("ver", "2")]);
        spread(p, ZONE, "w", json!({"matchLabelKeys": ["ver"]}));
    });
}

fn pod_affinity_scenario(b: &mut B) {
    zones_ab(b);
    let host_b = b.n("b");
    b.pod("db", "100m", "", |p| {
        labels(p, &[("app", "db")]);
        select(p, HOST, &host_b);
    });
    b.pod("web", "100m", "", |p| {
        pod_affinity(p, "podAffinity", "db", ZONE, json!({}))
    });
    b.pod("lost", "100m", "", |p| {
        pod_affinity(p, "podAffinity", "cache", ZONE, json!({}))
    });
}

fn self_affinity(b: &mut B) {
    b.node("a1", Some("a"), |_| {});
    b.node("a2", Some("a"), |_| {});
    b.node("b", Some("b"), |_| {});
    let host = b.n("a1");
    b.pod("g1", "100m", "", |p| {
        labels(p, &[("app", "g")]);
        select(p, HOST, &host);
        pod_affinity(p, "podAffinity", "g", ZONE, json!({}));
    });
    b.pod("g2", "100m", "", |p| {
        labels(p, &[("app", "g")]);
        pod_affinity(p, "podAffinity", "g", ZONE, json!({}));
    });
    b.tie(&["a1", "a2"]);
}

fn anti_affinity(b: &mut B) {
    b.node("a", None, |_| {});
    b.node("b", None, |_| {});
    let host = b.n("a");
    b.pod("x1", "100m", "", |p| {
        labels(p, &[("app", "x")]);
        select(p, HOST, &host);
    });
    for x in ["x2", "x3"] {
        b.pod(x, "100m", "", |p| {
            labels(p, &[("app", "x")]);
            pod_affinity(p, "podAntiAffinity", "x", HOST, json!({}));
        });
    }
}

fn existing_anti_affinity(b: &mut B) {
    b.node("a", Some("a"), |_| {});
    b.node("a2", Some("a"), |_| {});
    b.node("b", Some("b"), |_| {});
    let host = b.n("a");
    b.pod("guard", "100m", "", |p| {
        labels(p, &[("app", "guard")]);
        select(p, HOST, &host);
        pod_affinity(p, "podAntiAffinity", "w", ZONE, json!({}));
    });
    b.pod("w1", "100m", "", |p| labels(p, &[("app", "w")]));
    b.pod("w2", "100m", "", |p| {
        labels(p, &[("app", "w")]);
        select(p, ZONE, "a");
    });
}

fn namespace_selector(b: &mut B) {
    zones_ab(b);
    let team = b.n("team");
    b.obj(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": team, "labels": {"team": "x"}}}));
    b.obj(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": team}}));
    let host = b.n("a");
    b.pod("t1", "100m", "", |p| {
        p["metadata"]["namespace"] = json!(team);
        labels(p, &[("app", "t")]);
        select(p, HOST, &host);
    });
    b.pod("by-selector", "100m", "", |p| {
        pod_affinity(
            p,
            "podAntiAffinity",
            "t",
            ZONE,
            json!({"namespaceSelector": {"matchLabels": {"team": "x"}}}),
        )
    });
    b.pod("by-name", "100m", "", |p| {
        select(p, ZONE, "a");
        pod_affinity(
            p,
            "podAntiAffinity",
            "t",
            ZONE,
            json!({"namespaces": [team]}),
        )
    });
}

fn volume_node_affinity(b: &mut B) {
    zones_ab(b);
    b.static_volume("in-b", "b", false);
    b.static_volume("in-c", "c", false);
    let (in_b, in_c) = (b.n("in-b"), b.n("in-c"));
    b.pod("uses-b", "100m", "", |p| mount(p, &in_b));
    b.pod("uses-c", "100m", "", |p| mount(p, &in_c));
}

fn unbound_immediate(b: &mut B) {
    zones_ab(b);
    b.class("manual", "kubernetes.io/no-provisioner", "Immediate", &[]);
    b.claim("waits", "manual");
    let claim = b.n("waits");
    b.pod("waits", "100m", "", |p| mount(p, &claim));
}

fn wait_for_first_consumer(b: &mut B) {
    zones_ab(b);
    b.class("only-c", EBS, "WaitForFirstConsumer", &["c"]);
    b.class("only-b", EBS, "WaitForFirstConsumer", &["b"]);
    b.claim("wants-c", "only-c");
    b.claim("wants-b", "only-b");
    let (c, bb) = (b.n("wants-c"), b.n("wants-b"));
    b.pod("wants-c", "100m", "", |p| mount(p, &c));
    b.pod("wants-b", "100m", "", |p| mount(p, &bb));
}

fn volume_zone(b: &mut B) {
    zones_ab(b);
    b.static_volume("labelled-b", "b", true);
    b.static_volume("labelled-c", "c", true);
    let (in_b, in_c) = (b.n("labelled-b"), b.n("labelled-c"));
    b.pod("uses-b", "100m", "", |p| mount(p, &in_b));
    b.pod("uses-c", "100m", "", |p| mount(p, &in_c));
}

fn volume_limits(b: &mut B) {
    zones_ab(b);
    b.csinode("a", 1);
    b.csinode("b", 1);
    for (x, zone) in [("v1", "a"), ("v2", "b"), ("v3", "a")] {
        b.static_volume(x, zone, true);
    }
    let (v1, v2, v3) = (b.n("v1"), b.n("v2"), b.n("v3"));
    let host_a = b.n("a");
    b.pod("v1", "100m", "", |p| {
        select(p, HOST, &host_a);
        mount(p, &v1)
    });
    b.pod("v2", "100m", "", |p| mount(p, &v2));
    b.pod("v3", "100m", "", |p| mount(p, &v3));
    b.pod("v1-again", "100m", "", |p| mount(p, &v1));
}

fn volume_limits_attached(b: &mut B) {
    // A volume still attached to a, its pod gone, the driver not done detaching it (the
    // external-attacher's finalizer; kube-sim's attach-detach emulation holds the
    // detachment for the node's delay): a has no room for another volume.
    b.node("a", Some("a"), |n| {
        n["metadata"]["annotations"]["kube-sim.joiner.dev/detach-delay-seconds"] = json!("3600")
    });
    b.node("b", Some("b"), |_| {});
    b.csinode("a", 1);
    b.static_volume("left", "a", true);
    b.static_volume("next", "a", true);
    let (node, pv) = (b.n("a"), b.n("pv-left"));
    b.obj(json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": b.n("attachment"), "finalizers": ["external-attacher/ebs-csi-aws-com"]},
        "spec": {"attacher": EBS, "nodeName": node, "source": {"persistentVolumeName": pv}}}));
    let next = b.n("next");
    b.pod("next", "100m", "", |p| mount(p, &next));
}

fn score_cpu(b: &mut B) {
    b.node("a", None, |_| {});
    b.node("b", None, |_| {});
    let host = b.n("a");
    b.pod("filler", "2", "", |p| select(p, HOST, &host));
    b.pod("next", "500m", "512Mi", |_| {});
}

fn score_memory(b: &mut B) {
    b.node("a", None, |_| {});
    b.node("b", None, |_| {});
    let host = b.n("b");
    b.pod("filler", "", "4Gi", |p| select(p, HOST, &host));
    b.pod("next", "100m", "1Gi", |_| {});
}

fn score_balanced(b: &mut B) {
    // a: LeastAllocated 75, balance kept (100 before and after): 75; b: LeastAllocated
    // (87 + 75) / 2 = 81, balance from 100 to 93: 50 + (50 - 7) / 2 = 71. b wins, 152 to
    // 150; scored on the balance after alone (100 against 93), a would win.
    b.node("a", None, |n| {
        n["status"]["allocatable"]["memory"] = json!("4Gi")
    });
    b.node("b", None, |n| {
        n["status"]["allocatable"]["cpu"] = json!("8");
        n["status"]["allocatable"]["memory"] = json!("4Gi");
    });
    b.pod("one", "1", "1Gi", |_| {});
}

fn score_best_effort(b: &mut B) {
    // Three best-effort pods count as 300m and 600 MiB on a, more than b's one pod asks.
    b.node("a", None, |_| {});
    b.node("b", None, |_| {});
    let (host_a, host_b) = (b.n("a"), b.n("b"));
    for x in ["be1", "be2", "be3"] {
        b.pod(x, "", "", |p| select(p, HOST, &host_a));
    }
    b.pod("small", "250m", "50Mi", |p| select(p, HOST, &host_b));
    b.pod("next", "", "", |_| {});
}
