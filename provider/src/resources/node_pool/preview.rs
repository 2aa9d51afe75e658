//! The plan-time impact preview of a NodePool or NodeClass update, read from the live
//! cluster: which nodes the change makes drifted, how the disruption budgets pace their
//! replacement, and which running pods no node of the changed pool could hold.
//!
//! It reaches the user as a plan warning, not as an attribute: a preview describes the
//! cluster at plan time, so stored in state it would be stale by the next refresh.
//!
//! Best effort by design: a plan must never fail because the cluster is unreachable or
//! does not exist yet, so a failed lookup yields a short note that the preview was skipped.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::node_pool::NodePoolSpec;
use serde_json::Value as Json;

use crate::kubernetes::{kinds, Kube};
use crate::model::node_pool::NodePoolModel;
use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
const NAMED: usize = 5;

/// What the plan can tell the reviewer; `Err` says why the cluster could not be asked.
pub type Preview = Result<Impact, String>;

/// The impact of one update, and the attribute most responsible for it, if one is.
#[derive(Clone, Debug, PartialEq)]
pub struct Impact {
    pub text: String,
    pub path: Option<AttributePath>,
}

/// The plan warning for `preview` of the `kind` object `name` (`NodePool`, `NodeClass`).
pub fn warning(kind: &str, name: &str, preview: Preview) -> Diagnostic {
    match preview {
        Ok(Impact { text, path }) => {
            let summary = format!("Impact of this {kind} change on the live cluster");
            match path {
                Some(p) => Diagnostic::warning_at(p, summary, text),
                None => Diagnostic::warning(summary, text),
            }
        }
        Err(why) => Diagnostic::warning(
            format!("{kind} change impact not previewed"),
            format!(
                "{kind} {name}: the cluster could not be asked at plan time ({why}); the plan \
                 itself is unaffected."
            ),
        ),
    }
}

pub(super) async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(LOOKUP_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: no answer in {}s",
            LOOKUP_TIMEOUT.as_secs()
        )),
    }
}

pub(super) async fn client(ctx: &ProviderContext, cluster: &str) -> Result<Kube, String> {
    if !ctx.kube.is_configured() {
        return Err("the provider's kubernetes settings are not known until apply".into());
    }
    bounded("connecting", ctx.kube.client(cluster)).await
}

async fn nodes_of(kube: &Kube, pool: &str) -> Result<Vec<Json>, String> {
    bounded(
        "listing nodes",
        kube.list(
            kinds::NODE,
            None,
            Some(&format!("karpenter.sh/nodepool={pool}")),
        ),
    )
    .await
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

/// Whether a node launched for `old` no longer fits `new`, why, and the attribute that
/// made it so. Like Karpenter's drift: the node's labels must satisfy the new
/// requirements, and a change to the template's node class, labels or taints drifts every
/// node.
fn drifted(node: &Json, old: &NodePoolSpec, new: &NodePoolSpec) -> Option<(AttributePath, String)> {
    let (o, n) = (&old.template, &new.template);
    if o.spec.node_class_ref != n.spec.node_class_ref {
        return Some(("node_class".into(), "the node class changed".into()));
    }
    if o.metadata.labels != n.metadata.labels {
        return Some(("labels".into(), "the template labels changed".into()));
    }
    if o.spec.taints != n.spec.taints {
        return Some(("taint".into(), "the taints changed".into()));
    }
    if o.spec.startup_taints != n.spec.startup_taints {
        return Some(("startup_taint".into(), "the startup taints changed".into()));
    }
    let node_labels = labels(node);
    for (i, r) in n.spec.requirements.iter().enumerate() {
        let Ok(op) = r.operator.parse::<joiner_agent::requirements::Operator>() else {
            continue;
        };
        let Ok(req) = joiner_agent::requirements::Requirement::new(op, &r.values) else {
            continue;
        };
        let value = node_labels.get(&r.key).map(String::as_str);
        if !req.matches(value) {
            return Some((
                AttributePath::new("requirement")
                    .index(i as i64)
                    .attr("values"),
                format!(
                    "{}={} no longer satisfies {} {} {:?}",
                    r.key,
                    value.unwrap_or("<unset>"),
                    r.key,
                    r.operator,
                    r.values
                ),
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

/// The impact of one pool going from `old` to `new`, given its live nodes and the pods
/// on them.
pub fn describe(
    pool: &str,
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[Json],
    pods: &[Json],
) -> Impact {
    let total = nodes.len();
    let drift: Vec<(String, AttributePath, String)> = nodes
        .iter()
        .filter_map(|n| {
            drifted(n, old, new).map(|(path, why)| {
                (
                    n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    path,
                    why,
                )
            })
        })
        .collect();
    let mut out = format!(
        "NodePool {pool}: {} of {total} live nodes become drifted",
        drift.len()
    );
    let path = drift.first().map(|(_, p, _)| p.clone());
    if let Some((_, _, why)) = drift.first() {
        out.push_str(&format!(" ({why})"));
    }
    if drift.is_empty() {
        return Impact {
            text: out + ".",
            path,
        };
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
    let drifted_names: Vec<&str> = drift.iter().map(|(n, _, _)| n.as_str()).collect();
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
    Impact { text: out, path }
}

/// The plan warning for the capacity fields where they change which nodes
/// exist or how many pods consolidation may move: static `replicas` (how many nodes, at
/// what price), `headroom` (what keeping the room costs at most) and the eviction cap.
/// Needs no cluster (prices are the embedded catalogue's), so a new pool gets it too; an
/// update gets it only when one of these fields changed. None when there is nothing to say.
pub fn capacity_warning(
    catalog: &joiner_agent::catalog::Catalog,
    old: Option<&NodePoolModel>,
    new: &NodePoolModel,
) -> Option<Diagnostic> {
    let (text, path) = capacity_impact(catalog, old, new)?;
    Some(Diagnostic::warning_at(
        path,
        "Capacity this NodePool keeps whatever the pods",
        text,
    ))
}

fn cap_of(m: &NodePoolModel) -> Option<i64> {
    m.disruption
        .as_ref()
        .and_then(|d| d.consolidation_evictions_per_hour)
}

/// The warning's text and the attribute it points at.
pub fn capacity_impact(
    catalog: &joiner_agent::catalog::Catalog,
    old: Option<&NodePoolModel>,
    new: &NodePoolModel,
) -> Option<(String, AttributePath)> {
    use super::admission::{cheapest_fitting, price_text};
    let name = new.name.clone().unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    let mut path: Option<AttributePath> = None;
    let changed = |f: &dyn Fn(&NodePoolModel) -> String| old.is_none_or(|o| f(o) != f(new));
    if let Some(n) = new
        .replicas
        .filter(|_| changed(&|m| format!("{:?}", m.replicas)))
    {
        let each = cheapest_fitting(catalog, new, 0, 0);
        let mut t = format!("keeps {n} node(s) whatever the pods need (replicas)");
        if let Some((ty, price, ct)) = each {
            t.push_str(&format!(
                ": at least ${}/h ({n} × {ty}, {}, the cheapest admitted offering)",
                price_text(price * n as f64),
                ct.as_str()
            ));
        }
        match old.and_then(|o| o.replicas) {
            Some(before) if before < n => t.push_str(&format!(
                "; {before} -> {n}: {} node(s) launched",
                n - before
            )),
            Some(before) if before > n => t.push_str(&format!(
                "; {before} -> {n}: {} node(s) drained and removed, the least busy first (budgets do not pace it; PDBs hold)",
                before - n
            )),
            _ => {}
        }
        parts.push(t);
        path.get_or_insert_with(|| AttributePath::new("replicas"));
    }
    if !new.headroom.is_empty() && changed(&|m| format!("{:?}", m.headroom)) {
        for (i, h) in new.headroom.iter().enumerate() {
            let when = match (&h.schedule, &h.duration) {
                (Some(s), Some(d)) => format!(" during {s} for {d} (UTC)"),
                _ => String::new(),
            };
            let text = if let Some(n) = h.nodes {
                let each = cheapest_fitting(catalog, new, 0, 0);
                let cost = each
                    .map(|(ty, p, ct)| {
                        format!(
                            ": ${}/h ({n} × {ty}, {}) while kept",
                            price_text(p * n as f64),
                            ct.as_str()
                        )
                    })
                    .unwrap_or_default();
                format!("keeps {n} spare node(s){when}{cost}")
            } else {
                let pods = h.pods.unwrap_or(1).max(1);
                let cpu = h
                    .cpu
                    .as_deref()
                    .and_then(|c| joiner_agent::resources::parse_cpu_milli(c).ok())
                    .unwrap_or(0);
                let mem = h
                    .memory
                    .as_deref()
                    .and_then(|m| joiner_agent::resources::parse_bytes(m).ok())
                    .unwrap_or(0);
                let size = [
                    h.cpu.as_deref().map(|c| format!("{c} CPU")),
                    h.memory.clone(),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" / ");
                let cost = cheapest_fitting(catalog, new, cpu * pods, mem * pods)
                    .map(|(ty, p, ct)| {
                        format!(
                            ": at most ${}/h when no node has the room free (one {ty}, {}, the cheapest admitted type that holds it all)",
                            price_text(p),
                            ct.as_str()
                        )
                    })
                    .unwrap_or_else(|| {
                        "; no single admitted type holds it all, so it is kept on several nodes"
                            .to_string()
                    });
                format!("keeps room for {pods} pod(s) of {size}{when}{cost}")
            };
            parts.push(format!("headroom[{i}] {text}"));
        }
        // An attribute of the first block: Terraform (1.0.3 included) points a path that ends
        // at a block, or at a list of blocks, at the resource's header instead.
        if let Some(first) = new.headroom.first() {
            let attr = if first.nodes.is_some() {
                "nodes"
            } else if first.cpu.is_some() {
                "cpu"
            } else if first.memory.is_some() {
                "memory"
            } else {
                "pods"
            };
            path.get_or_insert_with(|| AttributePath::new("headroom").index(0).attr(attr));
        }
    }
    if let Some(cap) = cap_of(new).filter(|_| changed(&|m| format!("{:?}", cap_of(m)))) {
        parts.push(format!(
            "consolidation evicts at most {cap} pod(s) an hour from it ({} a day); moves beyond that wait, and the saving they would bring waits with them",
            cap * 24
        ));
        path.get_or_insert_with(|| {
            AttributePath::root()
                .attr("disruption")
                .attr("consolidation_evictions_per_hour")
        });
    }
    let path = path?;
    Some((format!("NodePool {name} {}.", parts.join("; ")), path))
}

/// The preview of a NodePool update.
pub async fn node_pool(ctx: &ProviderContext, old: &NodePoolModel, new: &NodePoolModel) -> Preview {
    let (Some(cluster), Some(pool)) = (new.cluster_name.as_deref(), new.name.as_deref()) else {
        return Err("the pool's cluster or name is not known".into());
    };
    let kube = client(ctx, cluster).await?;
    let nodes = nodes_of(&kube, pool).await?;
    let pods = pods(&kube).await?;
    Ok(describe(pool, &old.spec(), &new.spec(), &nodes, &pods))
}

async fn pods(kube: &Kube) -> Result<Vec<Json>, String> {
    bounded("listing pods", kube.list(kinds::POD, None, None)).await
}

/// The preview of a NodeClass update: every node of every pool using the class drifts.
/// `path` is the changed attribute to point at, if the caller knows one.
pub async fn node_class(
    ctx: &ProviderContext,
    cluster: &str,
    class: &str,
    path: Option<AttributePath>,
) -> Preview {
    let kube = client(ctx, cluster).await?;
    let pools = bounded("listing NodePools", kube.list(kinds::NODE_POOL, None, None)).await?;
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
        parts.push(class_part(&name, &spec, nodes.len()));
    }
    let text = if parts.is_empty() {
        format!("NodeClass {class}: no NodePool uses it; no node drifts.")
    } else {
        format!("NodeClass {class} changes; {}.", parts.join("; "))
    };
    Ok(Impact { text, path })
}

/// One pool's share of a NodeClass change: all `nodes` of it drift.
fn class_part(name: &str, spec: &NodePoolSpec, nodes: usize) -> String {
    let (at_once, why) = budget(spec, nodes);
    let rounds = if nodes == 0 {
        "nothing to replace".to_string()
    } else if at_once == 0 {
        "none at a time until the budget opens".to_string()
    } else {
        format!(
            "replaced {at_once} at a time ({why}): {} round(s)",
            nodes.div_ceil(at_once)
        )
    };
    format!("NodePool {name}: {nodes} live nodes become drifted; {rounds}")
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
            }]
            .into(),
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
        let impact = describe("general", &old, &new, &nodes, &pods);
        // A taint change drifts every node, so the taint is what the warning points at.
        assert_eq!(impact.path, Some(AttributePath::new("taint")));
        let text = impact.text;
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
        let impact = describe("p", &old, &new, &nodes, &[]);
        let text = &impact.text;
        assert!(
            text.starts_with("NodePool p: 1 of 2 live nodes become drifted"),
            "{text}"
        );
        assert_eq!(
            impact.path,
            Some(AttributePath::new("requirement").index(0).attr("values"))
        );
        let w = warning("NodePool", "p", Ok(impact.clone()));
        assert!(!w.is_error());
        assert_eq!(w.path, impact.path);
        assert_eq!(w.detail, impact.text);
    }

    #[test]
    fn no_live_node_drifts_still_says_so() {
        let spec = pool(&["on-demand"]);
        let mut heavier = spec.clone();
        heavier.weight = Some(5);
        let impact = describe("p", &spec, &heavier, &[node("a", "on-demand")], &[]);
        assert_eq!(impact.text, "NodePool p: 0 of 1 live nodes become drifted.");
        assert_eq!(impact.path, None);
    }

    #[test]
    fn class_change_paces_each_pool_by_its_budget() {
        let spec = pool(&["on-demand"]);
        assert_eq!(
            class_part("a", &spec, 25),
            "NodePool a: 25 live nodes become drifted; replaced 3 at a time (budget nodes=10%): 9 round(s)"
        );
        assert_eq!(
            class_part("b", &spec, 0),
            "NodePool b: 0 live nodes become drifted; nothing to replace"
        );
    }

    #[test]
    fn capacity_fields_are_priced_on_create_and_when_they_change() {
        use crate::model::node_pool::{DisruptionModel, HeadroomModel};
        let cat = super::super::admission::catalog();
        let mut m = NodePoolModel {
            name: Some("warm".into()),
            node_class: Some("d".into()),
            requirements: vec![RequirementModel {
                key: "karpenter.sh/capacity-type".into(),
                operator: "In".into(),
                values: vec!["on-demand".into()],
                min_values: None,
            }]
            .into(),
            ..Default::default()
        };
        assert_eq!(capacity_impact(cat, None, &m), None, "nothing to say");
        m.headroom = vec![HeadroomModel {
            cpu: Some("1".into()),
            memory: Some("2Gi".into()),
            pods: Some(4),
            ..Default::default()
        }];
        m.disruption = Some(DisruptionModel {
            consolidation_evictions_per_hour: Some(30),
            ..Default::default()
        });
        let (text, path) = capacity_impact(cat, None, &m).unwrap();
        assert_eq!(path, AttributePath::new("headroom").index(0).attr("cpu"));
        assert!(
            text.starts_with(
                "NodePool warm headroom[0] keeps room for 4 pod(s) of 1 CPU / 2Gi: at most $"
            ),
            "{text}"
        );
        assert!(
            text.contains("on-demand, the cheapest admitted type that holds it all"),
            "{text}"
        );
        assert!(
            text.contains("consolidation evicts at most 30 pod(s) an hour from it (720 a day)"),
            "{text}"
        );
        // Unchanged on update: no warning.
        assert_eq!(capacity_impact(cat, Some(&m.clone()), &m), None);
        // Static replicas scaled down.
        let mut s1 = m.clone();
        s1.headroom.clear();
        s1.disruption = None;
        s1.replicas = Some(5);
        let mut s2 = s1.clone();
        s2.replicas = Some(2);
        let (text, path) = capacity_impact(cat, Some(&s1), &s2).unwrap();
        assert_eq!(path, AttributePath::new("replicas"));
        assert!(
            text.contains("keeps 2 node(s) whatever the pods need (replicas): at least $"),
            "{text}"
        );
        assert!(
            text.contains("5 -> 2: 3 node(s) drained and removed"),
            "{text}"
        );
    }

    #[test]
    fn an_unaskable_cluster_is_a_note_not_an_error() {
        let w = warning("NodeClass", "default", Err("connecting: refused".into()));
        assert!(!w.is_error());
        assert_eq!(w.summary, "NodeClass change impact not previewed");
        assert!(w.detail.contains("connecting: refused"), "{}", w.detail);
    }
}
