//! NodeResourcesFit and NodeResourcesBalancedAllocation, as kube-scheduler's
//! `pkg/scheduler/framework/plugins/noderesources/` (`fit.go`, `least_allocated.go`,
//! `balanced_allocation.go`, `resource_allocation.go`).
//!
//! Amounts are integers in the plugin's units (CPU in millicores, everything else in whole
//! units, rounded as `Quantity.Value()` rounds), so that scores, and the ties between them,
//! come out as the plugin's integer arithmetic makes them.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::controllers::pod_requests;
use crate::quantity;

/// A pod's or a node's amounts by resource name; `cpu` in millicores.
pub type Amounts = BTreeMap<String, i64>;

/// The score range every plugin normalises to (`framework.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;
/// What scoring assumes for a container that requests no CPU (`schedutil.DefaultMilliCPURequest`).
const DEFAULT_MILLI_CPU: i64 = 100;
/// ...and no memory (`schedutil.DefaultMemoryRequest`, 200 MiB).
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

fn to_units(resource: &str, v: f64) -> i64 {
    if resource == "cpu" {
        (v * 1000.0).round() as i64
    } else {
        v.round() as i64
    }
}

/// What the pod requests (containers summed, the largest init container if larger,
/// overhead added; a limit stands for a missing request), plus one `pods`.
pub fn requests(pod: &Value) -> Amounts {
    pod_requests(pod)
        .into_iter()
        .map(|(k, v)| {
            let units = to_units(&k, v);
            (k, units)
        })
        .collect()
}

/// The CPU and memory scoring counts for the pod: each container (and init container) that
/// requests none is taken to request the defaults, so that best-effort pods still spread.
pub fn nonzero_requests(pod: &Value) -> (i64, i64) {
    let one = |c: &Value| {
        let get = |k: &str| {
            let req = &c["resources"]["requests"][k];
            let v = quantity::from_json(req)
                .or_else(|| quantity::from_json(&c["resources"]["limits"][k]));
            v.map(|v| to_units(k, v))
        };
        (
            get("cpu").unwrap_or(DEFAULT_MILLI_CPU),
            get("memory").unwrap_or(DEFAULT_MEMORY),
        )
    };
    let (mut cpu, mut mem) = (0, 0);
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let (a, b) = one(c);
        cpu += a;
        mem += b;
    }
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (a, b) = one(c);
        cpu = cpu.max(a);
        mem = mem.max(b);
    }
    let overhead = &pod["spec"]["overhead"];
    cpu += quantity::from_json(&overhead["cpu"]).map_or(0, |v| to_units("cpu", v));
    mem += quantity::from_json(&overhead["memory"]).map_or(0, |v| to_units("memory", v));
    (cpu, mem)
}

/// The node's allocatable amount of a resource (its capacity when it reports no
/// allocatable at all); none reported is none.
pub fn allocatable(node: &Value, resource: &str) -> i64 {
    let a = &node["status"]["allocatable"];
    let source = if a.is_object() {
        a
    } else {
        &node["status"]["capacity"]
    };
    quantity::from_json(&source[resource]).map_or(0, |v| to_units(resource, v))
}

/// The Filter: every resource the node has too little of left, in the plugin's words
/// (`Too many pods` first, then cpu, memory, ephemeral-storage, then extended resources).
pub fn insufficient(req: &Amounts, used: &Amounts, node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let left = |k: &str| allocatable(node, k) - used.get(k).copied().unwrap_or(0);
    if left("pods") < 1 {
        out.push("Too many pods".to_string());
    }
    let named = ["cpu", "memory", "ephemeral-storage"];
    for k in named {
        let want = req.get(k).copied().unwrap_or(0);
        if want > 0 && want > left(k) {
            out.push(format!("Insufficient {k}"));
        }
    }
    for (k, want) in req {
        if named.contains(&k.as_str()) || k == "pods" || *want == 0 {
            continue;
        }
        if *want > left(k) {
            out.push(format!("Insufficient {k}"));
        }
    }
    out
}

/// NodeResourcesFit's LeastAllocated score over cpu and memory (weight 1 each): the share
/// left free once the pod is added, counting requests as scoring counts them.
pub fn least_allocated(node: &Value, nonzero_used: (i64, i64), pod: (i64, i64)) -> i64 {
    let parts = [
        (allocatable(node, "cpu"), nonzero_used.0 + pod.0),
        (allocatable(node, "memory"), nonzero_used.1 + pod.1),
    ];
    let (mut sum, mut weights) = (0, 0);
    for (cap, requested) in parts {
        if cap == 0 {
            continue;
        }
        sum += if requested > cap {
            0
        } else {
            (cap - requested) * MAX_NODE_SCORE / cap
        };
        weights += 1;
    }
    if weights == 0 {
        0
    } else {
        sum / weights
    }
}

/// How balanced the node's cpu and memory shares are (`1 - std` of the two, times 100):
/// from 50 (one full, one empty) to 100.
fn balance(node: &Value, used: &Amounts, add: &Amounts) -> i64 {
    let mut fractions = Vec::new();
    for k in ["cpu", "memory"] {
        let cap = allocatable(node, k);
        if cap == 0 {
            continue;
        }
        let amount = used.get(k).copied().unwrap_or(0) + add.get(k).copied().unwrap_or(0);
        fractions.push((amount as f64 / cap as f64).min(1.0));
    }
    let std = if fractions.len() == 2 {
        ((fractions[0] - fractions[1]) / 2.0).abs()
    } else {
        0.0
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// NodeResourcesBalancedAllocation's score: how much the pod improves the node's balance
/// of cpu and memory shares (actual requests): 75 for no change, 50 for the worst turn,
/// 100 for the best. None for a pod that requests neither: the plugin skips best-effort
/// pods.
pub fn balanced_allocation(node: &Value, used: &Amounts, req: &Amounts) -> Option<i64> {
    let want = |k: &str| req.get(k).copied().unwrap_or(0);
    if want("cpu") == 0 && want("memory") == 0 {
        return None;
    }
    let with_pod = balance(node, used, req);
    let without = balance(node, used, &Amounts::new());
    let half = MAX_NODE_SCORE / 2;
    Some(half + (half + with_pod - without) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(cpu: &str, memory: &str) -> Value {
        json!({"status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "2"}}})
    }

    #[test]
    fn every_short_resource_is_a_reason_of_its_own() {
        let n = node("1", "1Gi");
        let req = Amounts::from([
            ("cpu".into(), 2000),
            ("memory".into(), 2 << 30),
            ("nvidia.com/gpu".into(), 1),
            ("pods".into(), 1),
        ]);
        let used = Amounts::from([("pods".into(), 2)]);
        assert_eq!(
            insufficient(&req, &used, &n),
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient nvidia.com/gpu"
            ]
        );
    }

    #[test]
    fn scores_use_the_plugins_integer_arithmetic() {
        let n = node("4", "8Gi");
        // 1 of 4 cores and 2 of 8 GiB taken: (3000*100/4000 + 6Gi*100/8Gi) / 2 = 75.
        assert_eq!(least_allocated(&n, (500, 1 << 30), (500, 1 << 30)), 75);
        // An empty node kept perfectly balanced: no change, 75.
        let req = Amounts::from([("cpu".into(), 1000), ("memory".into(), 2 << 30)]);
        assert_eq!(balanced_allocation(&n, &Amounts::new(), &req), Some(75));
        // Memory half full, cpu empty (balance 75); the pod takes 2 CPUs (balance 100).
        let used = Amounts::from([("memory".into(), 4 << 30)]);
        let cpu = Amounts::from([("cpu".into(), 2000)]);
        assert_eq!(
            balanced_allocation(&n, &used, &cpu),
            Some(50 + (50 + 100 - 75) / 2)
        );
        assert_eq!(
            balanced_allocation(&n, &Amounts::new(), &Amounts::new()),
            None
        );
    }

    #[test]
    fn containers_without_requests_score_as_the_defaults() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b",
            "resources": {"requests": {"cpu": "250m"}}}]}});
        assert_eq!(nonzero_requests(&pod), (350, 2 * DEFAULT_MEMORY));
    }
}
