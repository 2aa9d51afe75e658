//! The filters that read the node alone: NodeUnschedulable
//! (`plugins/nodeunschedulable/node_unschedulable.go`), TaintToleration
//! (`plugins/tainttoleration/taint_toleration.go`) and NodeAffinity
//! (`plugins/nodeaffinity/node_affinity.go`), in kube-scheduler's words.

use serde_json::{json, Value};

use crate::controllers::{node_is_ready, node_selector_ok};

pub const UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const UNTOLERATED_TAINT: &str = "node(s) had untolerated taint(s)";
pub const NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";

/// The taint the node lifecycle controller puts on a node whose kubelet is not Ready.
const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint NodeUnschedulable lets a pod tolerate to land on a cordoned node.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Whether a toleration tolerates a taint (`Toleration.ToleratesTaint`): an empty effect or
/// key in the toleration matches any; `Exists` matches any value.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let (effect, key) = (s(&toleration["effect"]), s(&toleration["key"]));
    if !effect.is_empty() && effect != s(&taint["effect"]) {
        return false;
    }
    if !key.is_empty() && key != s(&taint["key"]) {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => s(&toleration["value"]) == s(&taint["value"]),
        _ => false,
    }
}

fn tolerated(pod: &Value, taint: &Value) -> bool {
    pod["spec"]["tolerations"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, taint)))
}

/// The node's taints as kube-scheduler sees them: a node that is not Ready carries the
/// lifecycle controller's `not-ready` taint.
pub fn taints(node: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !node_is_ready(node) && !out.iter().any(|t| t["key"] == NOT_READY) {
        out.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
    out
}

/// Whether the node has a `NoSchedule` or `NoExecute` taint the pod does not tolerate
/// (`helper.DoNotScheduleTaintsFilterFunc`).
pub fn has_untolerated_taint(pod: &Value, node: &Value) -> bool {
    taints(node).iter().any(|t| {
        matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")) && !tolerated(pod, t)
    })
}

/// The first of these filters that refuses the node, in the profile's order.
pub fn refusal(pod: &Value, node: &Value) -> Option<&'static str> {
    let cordon = json!({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"});
    if node["spec"]["unschedulable"] == true && !tolerated(pod, &cordon) {
        Some(UNSCHEDULABLE)
    } else if has_untolerated_taint(pod, node) {
        Some(UNTOLERATED_TAINT)
    } else if !node_selector_ok(pod, node) {
        Some(NODE_AFFINITY)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cordoned_node_takes_a_pod_that_tolerates_the_cordon() {
        let node = json!({"spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let plain = json!({"spec": {}});
        assert_eq!(refusal(&plain, &node), Some(UNSCHEDULABLE));
        let tolerant = json!({"spec": {"tolerations": [
            {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}});
        assert_eq!(refusal(&tolerant, &node), None);
    }

    #[test]
    fn prefer_no_schedule_taints_do_not_refuse_and_not_ready_nodes_are_tainted() {
        let node = json!({"spec": {"taints": [{"key": "a", "value": "b", "effect": "PreferNoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(refusal(&json!({}), &node), None);
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert_eq!(refusal(&json!({}), &not_ready), Some(UNTOLERATED_TAINT));
    }
}
