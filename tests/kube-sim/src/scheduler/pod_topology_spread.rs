//! PodTopologySpread's Filter for `DoNotSchedule` constraints, as kube-scheduler's
//! `plugins/podtopologyspread/` (`filtering.go`, `common.go`).
//!
//! PreFilter counts, per constraint, the pods of the incoming pod's namespace that match
//! the constraint's selector on each node that carries every topology key of the pod's
//! constraints and passes the constraint's inclusion policies (`nodeAffinityPolicy`,
//! Honor by default: only nodes the pod's node selector and required affinity admit;
//! `nodeTaintsPolicy`, Ignore by default: Honor leaves out nodes with taints the pod does
//! not tolerate). Those nodes' values are the constraint's domains. Filter refuses a node
//! without one of the keys, and one where `matching + self - global minimum > maxSkew`;
//! the global minimum is 0 while there are fewer domains than `minDomains`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::node_filters::has_untolerated_taint;
use crate::controllers::node_selector_ok;
use crate::selectors::label_selector_matches;

pub const CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
pub const MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// One required constraint, its selector merged with `matchLabelKeys`, and its domains'
/// counts as the cluster stands.
pub struct Spread {
    key: String,
    max_skew: i64,
    self_match: bool,
    counts: HashMap<String, i64>,
    min_domains: usize,
}

/// Whether a structured selector matches; a missing selector matches nothing.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    !selector.is_null() && label_selector_matches(selector, labels).unwrap_or(false)
}

/// The pod's `DoNotSchedule` constraints: `ScheduleAnyway` ones only score.
pub fn constraints(pod: &Value) -> Vec<Value> {
    pod["spec"]["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["whenUnsatisfiable"].as_str().unwrap_or("DoNotSchedule") == "DoNotSchedule")
        .map(|c| with_match_label_keys(c, pod))
        .collect()
}

/// `matchLabelKeys`: the pod's own values of those keys join the selector.
fn with_match_label_keys(c: &Value, pod: &Value) -> Value {
    let mut c = c.clone();
    let labels = &pod["metadata"]["labels"];
    let keys: Vec<&str> = c["matchLabelKeys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|k| labels[*k].is_string())
        .collect();
    if keys.is_empty() || c["labelSelector"].is_null() {
        return c;
    }
    let added: Vec<Value> = keys
        .iter()
        .map(|k| json!({"key": k, "operator": "In", "values": [labels[*k].clone()]}))
        .collect();
    let sel = &mut c["labelSelector"];
    let mut exprs = sel["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    exprs.extend(added);
    sel["matchExpressions"] = Value::Array(exprs);
    c
}

fn policy_honored(c: &Value, field: &str, default: &str) -> bool {
    c[field].as_str().unwrap_or(default) == "Honor"
}

/// PreFilter: each constraint's domains and counts. `bound` is every bound pod with its
/// node's index.
pub fn prefilter(pod: &Value, nodes: &[Arc<Value>], bound: &[(usize, Value)]) -> Vec<Spread> {
    let cs = constraints(pod);
    let ns = &pod["metadata"]["namespace"];
    let has_all_keys = |n: &Value| {
        cs.iter()
            .all(|c| n["metadata"]["labels"][c["topologyKey"].as_str().unwrap_or("")].is_string())
    };
    cs.iter()
        .map(|c| {
            let key = c["topologyKey"].as_str().unwrap_or("").to_string();
            let eligible = |n: &Value| {
                has_all_keys(n)
                    && (!policy_honored(c, "nodeAffinityPolicy", "Honor")
                        || node_selector_ok(pod, n))
                    && (!policy_honored(c, "nodeTaintsPolicy", "Ignore")
                        || !has_untolerated_taint(pod, n))
            };
            let open: Vec<bool> = nodes.iter().map(|n| eligible(n)).collect();
            let mut counts: HashMap<String, i64> = HashMap::new();
            for (i, n) in nodes.iter().enumerate() {
                if open[i] {
                    let d = n["metadata"]["labels"][&key].as_str().unwrap_or("");
                    counts.entry(d.to_string()).or_insert(0);
                }
            }
            for (i, p) in bound {
                if open[*i]
                    && p["metadata"]["namespace"] == *ns
                    && selects(&c["labelSelector"], &p["metadata"]["labels"])
                {
                    let d = nodes[*i]["metadata"]["labels"][&key].as_str().unwrap_or("");
                    *counts.entry(d.to_string()).or_default() += 1;
                }
            }
            Spread {
                key,
                max_skew: c["maxSkew"].as_i64().unwrap_or(1),
                self_match: selects(&c["labelSelector"], &pod["metadata"]["labels"]),
                counts,
                min_domains: c["minDomains"].as_u64().unwrap_or(1) as usize,
            }
        })
        .collect()
}

/// Filter: why the node breaks one of the constraints, if it does.
pub fn refusal(spread: &[Spread], node: &Value) -> Option<&'static str> {
    for s in spread {
        let Some(domain) = node["metadata"]["labels"][s.key.as_str()].as_str() else {
            return Some(MISSING_LABEL);
        };
        let min = if s.counts.len() < s.min_domains {
            0
        } else {
            s.counts
                .values()
                .copied()
                .min()
                .unwrap_or(i64::from(i32::MAX))
        };
        let matching = s.counts.get(domain).copied().unwrap_or(0);
        if matching + i64::from(s.self_match) - min > s.max_skew {
            return Some(CONSTRAINTS_NOT_MATCH);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: Value, taint: bool) -> Arc<Value> {
        let taints = if taint {
            json!([{"key": "t", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        Arc::new(json!({"metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    }

    fn pod(constraint: Value) -> Value {
        json!({"metadata": {"namespace": "d", "labels": {"app": "w"}},
            "spec": {"topologySpreadConstraints": [constraint]}})
    }

    #[test]
    fn a_tainted_zone_counts_unless_taints_are_honored() {
        let nodes = vec![
            node("a", json!({"zone": "a"}), false),
            node("b", json!({"zone": "b"}), true),
        ];
        let running = pod(json!({}));
        let bound = vec![(0, running)];
        let c = json!({"maxSkew": 1, "topologyKey": "zone",
            "labelSelector": {"matchLabels": {"app": "w"}}});
        // Ignore (the default): zone b, empty, is the minimum, so zone a is over the skew.
        let s = prefilter(&pod(c.clone()), &nodes, &bound);
        assert_eq!(refusal(&s, &nodes[0]), Some(CONSTRAINTS_NOT_MATCH));
        let mut honor = c;
        honor["nodeTaintsPolicy"] = json!("Honor");
        let s = prefilter(&pod(honor), &nodes, &bound);
        assert_eq!(refusal(&s, &nodes[0]), None);
    }

    #[test]
    fn min_domains_makes_the_minimum_zero_and_keys_are_required() {
        let nodes = vec![
            node("a", json!({"zone": "a"}), false),
            node("x", json!({}), false),
        ];
        let bound = vec![(0, pod(json!({})))];
        let c = json!({"maxSkew": 1, "topologyKey": "zone", "minDomains": 2,
            "labelSelector": {"matchLabels": {"app": "w"}}});
        let s = prefilter(&pod(c), &nodes, &bound);
        assert_eq!(refusal(&s, &nodes[0]), Some(CONSTRAINTS_NOT_MATCH));
        assert_eq!(refusal(&s, &nodes[1]), Some(MISSING_LABEL));
    }
}
