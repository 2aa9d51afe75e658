//! InterPodAffinity's Filter, as kube-scheduler's `plugins/interpodaffinity/filtering.go`:
//! the incoming pod's required affinity and anti-affinity terms, and the required
//! anti-affinity terms of the pods already bound, each counted per topology pair (a
//! topology key and a node's value of it).
//!
//! A term selects pods by label in its namespaces: the term's `namespaces` and those its
//! `namespaceSelector` matches (`{}`: all), or the owning pod's own namespace when it
//! names neither.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::pod_topology_spread::selects;

pub const AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

type Pair = (String, String);

/// The pre-computed counts (`preFilterState`).
#[derive(Default)]
pub struct Affinity {
    affinity_terms: Vec<Value>,
    anti_terms: Vec<Value>,
    affinity_counts: HashMap<Pair, i64>,
    anti_counts: HashMap<Pair, i64>,
    existing_anti: HashSet<Pair>,
    /// The first pod of a group whose affinity selects itself may land where the rest
    /// of its terms allow.
    self_affine: bool,
}

fn required(pod: &Value, kind: &str) -> Vec<Value> {
    pod["spec"]["affinity"][kind]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether `target` is one of the pods `term` (of a pod in namespace `owner_ns`) selects.
fn term_matches(
    term: &Value,
    owner_ns: &str,
    target: &Value,
    namespaces: &HashMap<String, Value>,
) -> bool {
    let ns = target["metadata"]["namespace"].as_str().unwrap_or("");
    let names: Vec<&str> = term["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let selector = &term["namespaceSelector"];
    let in_ns = if names.is_empty() && selector.is_null() {
        ns == owner_ns
    } else {
        names.contains(&ns)
            || namespaces
                .get(ns)
                .is_some_and(|n| selects(selector, &n["metadata"]["labels"]))
    };
    in_ns && selects(&term["labelSelector"], &target["metadata"]["labels"])
}

fn pair(term: &Value, node: &Value) -> Option<Pair> {
    let key = term["topologyKey"].as_str().unwrap_or("");
    let value = node["metadata"]["labels"][key].as_str()?;
    Some((key.to_string(), value.to_string()))
}

/// PreFilter: the counts for `pod` given the bound pods (node index, pod).
pub fn prefilter(
    pod: &Value,
    nodes: &[Arc<Value>],
    bound: &[(usize, Value)],
    namespaces: &HashMap<String, Value>,
) -> Affinity {
    let own_ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let mut a = Affinity {
        affinity_terms: required(pod, "podAffinity"),
        anti_terms: required(pod, "podAntiAffinity"),
        ..Affinity::default()
    };
    let matches_all = |p: &Value, terms: &[Value]| {
        !terms.is_empty() && terms.iter().all(|t| term_matches(t, own_ns, p, namespaces))
    };
    a.self_affine = matches_all(pod, &a.affinity_terms);
    for (i, p) in bound {
        let node = &nodes[*i];
        if matches_all(p, &a.affinity_terms) {
            for t in &a.affinity_terms {
                if let Some(pr) = pair(t, node) {
                    *a.affinity_counts.entry(pr).or_default() += 1;
                }
            }
        }
        for t in &a.anti_terms {
            if term_matches(t, own_ns, p, namespaces) {
                if let Some(pr) = pair(t, node) {
                    *a.anti_counts.entry(pr).or_default() += 1;
                }
            }
        }
        let p_ns = p["metadata"]["namespace"].as_str().unwrap_or("");
        for t in required(p, "podAntiAffinity") {
            if term_matches(&t, p_ns, pod, namespaces) {
                if let Some(pr) = pair(&t, node) {
                    a.existing_anti.insert(pr);
                }
            }
        }
    }
    a
}

/// Filter: the incoming pod's affinity, then its anti-affinity, then the bound pods'
/// anti-affinity.
pub fn refusal(a: &Affinity, node: &Value) -> Option<&'static str> {
    if !a.affinity_terms.is_empty() {
        let mut all_found = true;
        for t in &a.affinity_terms {
            let Some(pr) = pair(t, node) else {
                return Some(AFFINITY);
            };
            if a.affinity_counts.get(&pr).copied().unwrap_or(0) <= 0 {
                all_found = false;
            }
        }
        let first_of_group = a.affinity_counts.is_empty() && a.self_affine;
        if !all_found && !first_of_group {
            return Some(AFFINITY);
        }
    }
    let anti_hit = a
        .anti_terms
        .iter()
        .any(|t| pair(t, node).is_some_and(|pr| a.anti_counts.get(&pr).copied().unwrap_or(0) > 0));
    if anti_hit {
        return Some(ANTI_AFFINITY);
    }
    let labels = node["metadata"]["labels"].as_object();
    let existing_hit = labels.into_iter().flatten().any(|(k, v)| {
        v.as_str()
            .is_some_and(|v| a.existing_anti.contains(&(k.clone(), v.to_string())))
    });
    existing_hit.then_some(EXISTING_ANTI_AFFINITY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": {"zone": zone, "host": name}}}))
    }

    fn pod(labels: Value, affinity: Value) -> Value {
        json!({"metadata": {"namespace": "d", "labels": labels}, "spec": {"affinity": affinity}})
    }

    fn term(app: &str, key: &str) -> Value {
        json!([{"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}])
    }

    #[test]
    fn the_first_pod_of_a_self_affine_group_lands_anywhere_and_the_next_follow_it() {
        let nodes = vec![node("a", "a"), node("b", "b")];
        let first = pod(
            json!({"app": "g"}),
            json!({"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": term("g", "zone")}}),
        );
        let none = HashMap::new();
        let a = prefilter(&first, &nodes, &[], &none);
        assert_eq!(refusal(&a, &nodes[0]), None);
        assert_eq!(refusal(&a, &nodes[1]), None);
        let bound = vec![(1, first.clone())];
        let a = prefilter(&first, &nodes, &bound, &none);
        assert_eq!(refusal(&a, &nodes[0]), Some(AFFINITY));
        assert_eq!(refusal(&a, &nodes[1]), None);
    }

    #[test]
    fn a_bound_pods_anti_affinity_keeps_matching_pods_out_of_its_domain() {
        let nodes = vec![node("a", "a"), node("b", "b")];
        let lonely = pod(
            json!({"app": "l"}),
            json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": term("w", "zone")}}),
        );
        let web = pod(json!({"app": "w"}), json!({}));
        let a = prefilter(&web, &nodes, &[(0, lonely)], &HashMap::new());
        assert_eq!(refusal(&a, &nodes[0]), Some(EXISTING_ANTI_AFFINITY));
        assert_eq!(refusal(&a, &nodes[1]), None);
    }
}
