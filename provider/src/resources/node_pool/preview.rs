//! The plan-time impact preview of a NodePool or NodeClass update, read from the live
//! cluster: which nodes the change makes drifted, how the disruption budgets pace their
//! replacement, and which running pods no node of the changed pool could hold.
//!
//! Best effort by design: a plan must never fail because the cluster is unreachable or
//! does not exist yet, so any error yields no preview.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::node_pool::NodePoolSpec;
use serde_json::Value as Json;

use crate::kubernetes::{kinds, Kube};
use crate::model::node_pool::NodePoolModel;
use crate::provider::ProviderContext;

const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
const NAMED: usize = 5;

async fn client(ctx: &ProviderContext, cluster: &str) -> Option<Kube> {
    if !ctx.kube.is_configured() {
        return None;
    }
    tokio::time::timeout(LOOKUP_TIMEOUT, ctx.kube.client(cluster))
        .await
        .ok()?
        .ok()
}

async fn nodes_of(kube: &Kube, pool: &str) -> Option<Vec<Json>> {
    tokio::time::timeout(
        LOOKUP_TIMEOUT,
        kube.list(
            kinds::NODE,
            None,
            Some(&format!("karpenter.sh/nodepool={pool}")),
        ),
    )
    .await
    .ok()?
    .ok()
}

fn labels(obj: &Json) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a node launched for `old` no longer fits `new`. Like Karpenter's drift: the
/// node's labels must satisfy the new requirements, and a change to the template's node
/// class, labels or taints drifts every node.
fn drifted(node: &Json, old: &NodePoolSpec, new: &NodePoolSpec) -> Option<String> {
    let (o, n) = (&old.template, &new.template);
    if o.spec.node_class_ref != n.spec.node_class_ref {
        return Some("the node class changed".into());
    }
    if o.metadata.labels != n.metadata.labels {
        return Some("the template labels changed".into());
    }
    if o.spec.taints != n.spec.taints || o.spec.startup_taints != n.spec.startup_taints {
        return Some("the taints changed".into());
    }
    let node_labels = labels(node);
    for r in &n.spec.requirements {
        let Ok(op) = r.operator.parse::<joiner_agent::requirements::Operator>() else {
            continue;
        };
        let Ok(req) = joiner_agent::requirements::Requirement::new(op, &r.values) else {
            continue;
        };
        let value = node_labels.get(&r.key).map(String::as_str);
        if !req.matches(value) {
            return Some(format!(
                "{}={} no longer satisfies {} {} {:?}",
                r.key,
                value.unwrap_or("<unset>"),
                r.key,
                r.operator,
                r.values
            ));
        }
    }
    None
}

/// How many nodes the budgets let the agent replace at once for drift.
fn budget(spec: &NodePoolSpec, total: usize) -> (usize, String) {
    let mut allowed = usize::MAX;
    let mut why = String::new();
    for b in &spec.disruption.budgets {
        if !b.reasons.is_empty() && !b.reasons.iter().any(|r| r == "Drifted") {
            continue;
        }
        let n = match b.nodes.strip_suffix('%') {
            Some(p) => {
                let p: f64 = p.parse().unwrap_or(0.0);
                ((p / 100.0) * total as f64).ceil() as usize
            }
            None => b.nodes.parse().unwrap_or(0),
        };
        let scheduled = b
            .schedule
            .as_ref()
            .map(|s| format!(" during {s} for {}", b.duration.clone().unwrap_or_default()))
            .unwrap_or_default();
        if n < allowed {
            allowed = n;
            why = format!("budget nodes={}{scheduled}", b.nodes);
        }
    }
    if allowed == usize::MAX {
        (total, "no budget applies to drift".into())
    } else {
        (allowed, why)
    }
}

fn tolerates(pod: &Json, key: &str, value: &str, effect: &str) -> bool {
    pod["spec"]["tolerations"]
        .as_array()
        .map(|ts| {
            ts.iter().any(|t| {
                let tk = t["key"].as_str().unwrap_or("");
                let op = t["operator"].as_str().unwrap_or("Equal");
                let te = t["effect"].as_str().unwrap_or("");
                let key_ok = (tk.is_empty() && op == "Exists") || tk == key;
                let value_ok = op == "Exists" || t["value"].as_str().unwrap_or("") == value;
                key_ok && value_ok && (te.is_empty() || te == effect)
            })
        })
        .unwrap_or(false)
}

/// Why `pod` could not run on a node of the new pool, if it could not.
fn stranded(pod: &Json, new: &NodePoolSpec) -> Option<String> {
    for t in &new.template.spec.taints {
        if t.effect != "PreferNoSchedule" && !tolerates(pod, &t.key, &t.value, &t.effect) {
            return Some(format!(
                "does not tolerate taint {}={}:{}",
                t.key, t.value, t.effect
            ));
        }
    }
    if let Some(sel) = pod["spec"]["nodeSelector"].as_object() {
        for (k, v) in sel {
            let v = v.as_str().unwrap_or("");
            if let Some(l) = new.template.metadata.labels.get(k) {
                if l != v {
                    return Some(format!("nodeSelector {k}={v} but the pool labels {k}={l}"));
                }
            }
            for r in new
                .template
                .spec
                .requirements
                .iter()
                .filter(|r| &r.key == k)
            {
                let Ok(op) = r.operator.parse::<joiner_agent::requirements::Operator>() else {
                    continue;
                };
                if let Ok(req) = joiner_agent::requirements::Requirement::new(op, &r.values) {
                    if !req.has(v) {
                        return Some(format!(
                            "nodeSelector {k}={v} is excluded by {k} {} {:?}",
                            r.operator, r.values
                        ));
                    }
                }
            }
        }
    }
    None
}

fn is_daemon(pod: &Json) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["kind"] == "DaemonSet"))
}

/// The preview text for one pool going from `old` to `new`, given its live nodes and the
/// pods on them.
pub fn describe(
    pool: &str,
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[Json],
    pods: &[Json],
) -> String {
    let total = nodes.len();
    let drift: Vec<(String, String)> = nodes
        .iter()
        .filter_map(|n| {
            drifted(n, old, new).map(|why| {
                (
                    n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    why,
                )
            })
        })
        .collect();
    let mut out = format!(
        "NodePool {pool}: {} of {total} live nodes become drifted",
        drift.len()
    );
    if let Some((_, why)) = drift.first() {
        out.push_str(&format!(" ({why})"));
    }
    if drift.is_empty() {
        return out + ".";
    }
    let (at_once, why) = budget(new, total);
    if at_once == 0 {
        out.push_str(&format!(
            "; the disruption budget ({why}) allows none at a time, so they stay until it opens"
        ));
    } else {
        let rounds = drift.len().div_ceil(at_once);
        out.push_str(&format!(
            "; replaced {at_once} at a time ({why}): {rounds} round(s)"
        ));
    }
    let drifted_names: Vec<&str> = drift.iter().map(|(n, _)| n.as_str()).collect();
    let stranded: Vec<String> = pods
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| drifted_names.contains(&n))
                && !is_daemon(p)
        })
        .filter_map(|p| {
            stranded(p, new).map(|why| {
                format!(
                    "{}/{} ({why})",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                )
            })
        })
        .collect();
    if stranded.is_empty() {
        out.push_str("; no running pod would become unschedulable.");
    } else {
        out.push_str(&format!(
            "; {} pod(s) would become unschedulable: {}{}.",
            stranded.len(),
            stranded
                .iter()
                .take(NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if stranded.len() > NAMED { ", ..." } else { "" }
        ));
    }
    out
}

/// The preview for a NodePool update; None when the cluster cannot be asked.
pub async fn node_pool(
    ctx: &ProviderContext,
    old: &NodePoolModel,
    new: &NodePoolModel,
) -> Option<String> {
    let cluster = new.cluster_name.as_deref()?;
    let pool = new.name.as_deref()?;
    let kube = client(ctx, cluster).await?;
    let nodes = nodes_of(&kube, pool).await?;
    let pods = pods(&kube).await?;
    Some(describe(pool, &old.spec(), &new.spec(), &nodes, &pods))
}

pub(crate) async fn pods(kube: &Kube) -> Option<Vec<Json>> {
    tokio::time::timeout(LOOKUP_TIMEOUT, kube.list(kinds::POD, None, None))
        .await
        .ok()?
        .ok()
}

/// The preview for a NodeClass update: every node of every pool using the class drifts.
pub async fn node_class(ctx: &ProviderContext, cluster: &str, class: &str) -> Option<String> {
    let kube = client(ctx, cluster).await?;
    let pools = tokio::time::timeout(LOOKUP_TIMEOUT, kube.list(kinds::NODE_POOL, None, None))
        .await
        .ok()?
        .ok()?;
    let mut parts = Vec::new();
    for p in pools {
        let Ok(spec) = serde_json::from_value::<NodePoolSpec>(p["spec"].clone()) else {
            continue;
        };
        if spec.template.spec.node_class_ref.name != class {
            continue;
        }
        let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        let nodes = nodes_of(&kube, &name).await?;
        let (at_once, why) = budget(&spec, nodes.len());
        let rounds = if at_once == 0 {
            "none at a time until the budget opens".to_string()
        } else {
            format!(
                "replaced {at_once} at a time ({why}): {} round(s)",
                nodes.len().div_ceil(at_once)
            )
        };
        parts.push(format!(
            "NodePool {name}: {} live nodes become drifted; {rounds}",
            nodes.len()
        ));
    }
    if parts.is_empty() {
        Some(format!(
            "NodeClass {class}: no NodePool uses it; no node drifts."
        ))
    } else {
        Some(format!("NodeClass {class} changes; {}.", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node_pool::RequirementModel;
    use serde_json::json;

    fn pool(values: &[&str]) -> NodePoolSpec {
        NodePoolModel {
            node_class: Some("d".into()),
            requirements: vec![RequirementModel {
                key: "karpenter.sh/capacity-type".into(),
                operator: "In".into(),
                values: values.iter().map(|s| s.to_string()).collect(),
                min_values: None,
            }],
            ..Default::default()
        }
        .spec()
    }

    fn node(name: &str, ct: &str) -> Json {
        json!({"metadata": {"name": name, "labels": {"karpenter.sh/capacity-type": ct}}})
    }

    #[test]
    fn drift_budget_and_stranded_pods() {
        let old = pool(&["spot", "on-demand"]);
        let mut new = pool(&["on-demand"]);
        new.template.spec.taints.push(joiner_agent::api::Taint {
            key: "critical".into(),
            value: "true".into(),
            effect: "NoSchedule".into(),
        });
        let nodes: Vec<Json> = (0..4)
            .map(|i| node(&format!("n{i}"), if i < 3 { "spot" } else { "on-demand" }))
            .collect();
        let pods = vec![
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"nodeName": "n0"}}),
            json!({"metadata": {"name": "ok", "namespace": "default"}, "spec": {"nodeName": "n1",
                "tolerations": [{"key": "critical", "operator": "Exists"}]}}),
        ];
        let text = describe("general", &old, &new, &nodes, &pods);
        assert!(text.contains("4 of 4 live nodes become drifted"), "{text}");
        assert!(text.contains("1 at a time (budget nodes=10%)"), "{text}");
        assert!(text.contains("4 round(s)"), "{text}");
        assert!(
            text.contains("default/web (does not tolerate taint critical=true:NoSchedule)"),
            "{text}"
        );
        assert!(!text.contains("default/ok"), "{text}");
    }

    #[test]
    fn requirement_change_drifts_only_nodes_outside_it() {
        let old = pool(&["spot", "on-demand"]);
        let new = pool(&["on-demand"]);
        let nodes = vec![node("a", "spot"), node("b", "on-demand")];
        let text = describe("p", &old, &new, &nodes, &[]);
        assert!(
            text.starts_with("NodePool p: 1 of 2 live nodes become drifted"),
            "{text}"
        );
    }
}
