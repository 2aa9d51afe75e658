//! The plan-time impact preview of a NodePool or NodeClass update, read from the live
//! cluster: which nodes the change makes drifted, how the disruption budgets pace their
//! replacement, and which running pods no node of the changed pool could hold.
//!
//! It reaches the user as a plan warning, not as an attribute: a preview describes the
//! cluster at plan time, so stored in state it would be stale by the next refresh.
//!
//! Best effort by design: a plan must never fail because the cluster is unreachable or
//! does not exist yet, so a failed lookup yields a short note that the preview was skipped.
//!
//! What a change means is the agent's to say, never this module's: which nodes drift is
//! its [`template_drift`] (the check its disruption loop makes), the pace its budgets'
//! [`strictest`](joiner_agent::disruption::Budgets::strictest), which pods could not run
//! on the new pool its scheduler's [`stranded`]. Here the cluster's JSON is read into the
//! agent's types, and the answers are put in words and attribute paths.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::node_pool::NodePoolSpec;
use joiner_agent::api::{parse_requirements, ParsedRequirements};
use joiner_agent::catalog::Catalog;
use joiner_agent::disruption::drift::{completed_labels, template_drift, PoolDrift, TemplateField};
use joiner_agent::disruption::{PoolPolicy, Reason};
use joiner_agent::scheduler::convert::{self, reschedulable};
use joiner_agent::scheduler::fit::{stranded, Stranded};
use joiner_agent::scheduler::NodePoolInput;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value as Json;

use crate::context::ProviderContext;
use crate::kubernetes::{kinds, Kube};
use crate::model::node_pool::{HeadroomModel, NodePoolModel};
use crate::protocol::prelude::*;

use super::admission::{cheapest_fitting, price_text};

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

/// The seconds since the epoch the preview judges budget windows at: the plan's.
pub fn plan_time() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The attribute a drift comes from, and the sentence the plan shows for it.
fn drift_text(d: &PoolDrift, new: &NodePoolSpec) -> (Option<AttributePath>, String) {
    let field = |path: &str, why: &str| (Some(AttributePath::new(path)), why.to_string());
    match d {
        PoolDrift::Template(Some(TemplateField::NodeClass)) => {
            field("node_class", "the node class changed")
        }
        PoolDrift::Template(Some(TemplateField::Labels)) => {
            field("labels", "the template labels changed")
        }
        PoolDrift::Template(Some(TemplateField::Annotations)) => {
            field("annotations", "the template annotations changed")
        }
        PoolDrift::Template(Some(TemplateField::Taints)) => field("taint", "the taints changed"),
        PoolDrift::Template(Some(TemplateField::StartupTaints)) => {
            field("startup_taint", "the startup taints changed")
        }
        PoolDrift::Template(None) => (None, d.to_string()),
        PoolDrift::Requirement {
            index, key, value, ..
        } => {
            let r = &new.template.spec.requirements[*index];
            (
                Some(
                    AttributePath::new("requirement")
                        .index(*index as i64)
                        .attr("values"),
                ),
                format!(
                    "{key}={value} no longer satisfies {key} {} {:?}",
                    r.operator, r.values
                ),
            )
        }
        PoolDrift::Label { key, want, have } => (
            Some(AttributePath::new("labels").key(key)),
            format!("{key}={have} is not the template's {key}={want}"),
        ),
    }
}

/// How many nodes the budgets let the agent replace at once for drift at `now`, and which
/// budget says so: the agent's own reading of the pool's disruption settings.
fn budget(spec: &NodePoolSpec, total: usize, now: i64) -> (usize, String) {
    let policy = match PoolPolicy::from_api("", spec) {
        Ok(p) => p,
        // The agent leaves the nodes of a pool it cannot read alone.
        Err(e) => return (0, format!("unreadable: {e}")),
    };
    match policy.budgets.strictest(Reason::Drifted, total, now) {
        None => (total, "no budget applies to drift".into()),
        Some((i, n)) => {
            let b = &spec.disruption.budgets[i];
            let scheduled = b
                .schedule
                .as_ref()
                .map(|s| format!(" during {s} for {}", b.duration.clone().unwrap_or_default()))
                .unwrap_or_default();
            (n, format!("budget nodes={}{scheduled}", b.nodes))
        }
    }
}

/// Why a pod is stranded, in the words of the pod's and the pool's own attributes where
/// the refused key is one the pod's nodeSelector names.
fn stranded_text(
    why: &Stranded,
    pod: &Json,
    new: &NodePoolSpec,
    requirements: &ParsedRequirements,
) -> String {
    let Stranded::Requirements(refusal) = why else {
        return why.to_string();
    };
    let k = &refusal.key;
    let Some(v) = pod["spec"]["nodeSelector"][k].as_str() else {
        return why.to_string();
    };
    if let Some(l) = new.template.metadata.labels.get(k).filter(|l| *l != v) {
        return format!("nodeSelector {k}={v} but the pool labels {k}={l}");
    }
    let excluding = new
        .template
        .spec
        .requirements
        .iter()
        .zip(&requirements.entries)
        .find(|(r, (_, read))| r.key == *k && read.as_ref().is_ok_and(|(_, req)| !req.has(v)))
        .map(|(r, _)| r);
    match excluding {
        Some(r) => format!(
            "nodeSelector {k}={v} is excluded by {k} {} {:?}",
            r.operator, r.values
        ),
        None => why.to_string(),
    }
}

/// What one NodePool change does to the live pool, before it is put in words.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Every node that drifts: its name, the attribute responsible, why.
    pub drifted: Vec<(String, Option<AttributePath>, String)>,
    /// Nodes the budgets let the agent replace at once, and the budget that says so.
    pub at_once: usize,
    pub budget: String,
    /// The pods on drifted nodes no node of the new pool could run: `namespace/name`, why.
    pub stranded: Vec<(String, String)>,
}

/// The verdict on one pool going from `old` to `new`, given its live nodes and the pods on
/// them, at `now`. Each question is the agent's own function; this only reads the JSON.
pub fn verdict(
    catalog: &Catalog,
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[Json],
    pods: &[Json],
    now: i64,
) -> Verdict {
    // Read once for every node, as the agent's round reads it.
    let requirements = parse_requirements(&new.template.spec.requirements);
    let drifted: Vec<(String, Option<AttributePath>, String)> = nodes
        .iter()
        .filter_map(|n| {
            let own = labels(n);
            let itype = own.get(joiner_agent::labels::INSTANCE_TYPE).cloned();
            let full = completed_labels(catalog, itype.as_deref().unwrap_or(""), &own);
            let d = template_drift(old, new, &requirements, &full)?;
            let (path, why) = drift_text(&d, new);
            Some((
                n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                path,
                why,
            ))
        })
        .collect();
    let (at_once, budget) = budget(new, nodes.len(), now);
    let pool = NodePoolInput::from_parsed("", new, &requirements, Default::default()).ok();
    let stranded = pods
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| drifted.iter().any(|(d, _, _)| d == n))
        })
        .filter_map(|p| {
            let k8s: Pod = serde_json::from_value(p.clone()).ok()?;
            if !reschedulable(&k8s) {
                return None;
            }
            let why = stranded(catalog, pool.as_ref()?, &convert::pod(&k8s).ok()?)?;
            Some((
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                ),
                stranded_text(&why, p, new, &requirements),
            ))
        })
        .collect();
    Verdict {
        drifted,
        at_once,
        budget,
        stranded,
    }
}

/// The impact of one pool going from `old` to `new`, given its live nodes and the pods
/// on them, at `now`.
pub fn describe(
    catalog: &Catalog,
    pool: &str,
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[Json],
    pods: &[Json],
    now: i64,
) -> Impact {
    let total = nodes.len();
    let v = verdict(catalog, old, new, nodes, pods, now);
    let mut out = format!(
        "NodePool {pool}: {} of {total} live nodes become drifted",
        v.drifted.len()
    );
    let path = v.drifted.first().and_then(|(_, p, _)| p.clone());
    if let Some((_, _, why)) = v.drifted.first() {
        out.push_str(&format!(" ({why})"));
    }
    if v.drifted.is_empty() {
        return Impact {
            text: out + ".",
            path,
        };
    }
    let (at_once, why) = (v.at_once, &v.budget);
    if at_once == 0 {
        out.push_str(&format!(
            "; the disruption budget ({why}) allows none at a time, so they stay until it opens"
        ));
    } else {
        let rounds = v.drifted.len().div_ceil(at_once);
        out.push_str(&format!(
            "; replaced {at_once} at a time ({why}): {rounds} round(s)"
        ));
    }
    if v.stranded.is_empty() {
        out.push_str("; no running pod would become unschedulable.");
    } else {
        out.push_str(&format!(
            "; {} pod(s) would become unschedulable: {}{}.",
            v.stranded.len(),
            v.stranded
                .iter()
                .take(NAMED)
                .map(|(pod, why)| format!("{pod} ({why})"))
                .collect::<Vec<_>>()
                .join(", "),
            if v.stranded.len() > NAMED {
                ", ..."
            } else {
                ""
            }
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
    catalog: &Catalog,
    old: Option<&NodePoolModel>,
    new: &NodePoolModel,
) -> Option<(String, AttributePath)> {
    let name = new.name.clone().unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    let mut path: Option<AttributePath> = None;
    let changed = |f: &dyn Fn(&NodePoolModel) -> String| old.is_none_or(|o| f(o) != f(new));
    if let Some(n) = new
        .replicas
        .filter(|_| changed(&|m| format!("{:?}", m.replicas)))
    {
        parts.push(replicas_impact(catalog, old, new, n));
        path.get_or_insert_with(|| AttributePath::new("replicas"));
    }
    if !new.headroom.is_empty() && changed(&|m| format!("{:?}", m.headroom)) {
        for (i, h) in new.headroom.iter().enumerate() {
            parts.push(format!(
                "headroom[{i}] {}",
                headroom_impact(catalog, new, h)
            ));
        }
        if let Some(first) = new.headroom.first() {
            path.get_or_insert_with(|| headroom_path(first));
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

/// What keeping `n` static nodes costs at least, and what a change of the count does.
fn replicas_impact(
    catalog: &Catalog,
    old: Option<&NodePoolModel>,
    new: &NodePoolModel,
    n: i64,
) -> String {
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
    t
}

/// What one headroom block keeps, when, and what that costs at most.
fn headroom_impact(catalog: &Catalog, new: &NodePoolModel, h: &HeadroomModel) -> String {
    let when = match (&h.schedule, &h.duration) {
        (Some(s), Some(d)) => format!(" during {s} for {d} (UTC)"),
        _ => String::new(),
    };
    if let Some(n) = h.nodes {
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
        return format!("keeps {n} spare node(s){when}{cost}");
    }
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
            "; no single admitted type holds it all, so it is kept on several nodes".to_string()
        });
    format!("keeps room for {pods} pod(s) of {size}{when}{cost}")
}

/// An attribute of the first headroom block: Terraform (1.0.3 included) points a path that
/// ends at a block, or at a list of blocks, at the resource's header instead.
fn headroom_path(first: &HeadroomModel) -> AttributePath {
    let attr = if first.nodes.is_some() {
        "nodes"
    } else if first.cpu.is_some() {
        "cpu"
    } else if first.memory.is_some() {
        "memory"
    } else {
        "pods"
    };
    AttributePath::new("headroom").index(0).attr(attr)
}

/// The preview of a NodePool update.
pub async fn node_pool(ctx: &ProviderContext, old: &NodePoolModel, new: &NodePoolModel) -> Preview {
    let (Some(cluster), Some(pool)) = (new.cluster_name.as_deref(), new.name.as_deref()) else {
        return Err("the pool's cluster or name is not known".into());
    };
    let kube = client(ctx, cluster).await?;
    let nodes = nodes_of(&kube, pool).await?;
    let pods = pods(&kube).await?;
    Ok(describe(
        super::admission::catalog(),
        pool,
        &old.spec(),
        &new.spec(),
        &nodes,
        &pods,
        plan_time(),
    ))
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
        parts.push(class_part(&name, &spec, nodes.len(), plan_time()));
    }
    let text = if parts.is_empty() {
        format!("NodeClass {class}: no NodePool uses it; no node drifts.")
    } else {
        format!("NodeClass {class} changes; {}.", parts.join("; "))
    };
    Ok(Impact { text, path })
}

/// One pool's share of a NodeClass change: all `nodes` of it drift.
fn class_part(name: &str, spec: &NodePoolSpec, nodes: usize, now: i64) -> String {
    let (at_once, why) = budget(spec, nodes, now);
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

    fn cat() -> &'static Catalog {
        super::super::admission::catalog()
    }

    #[test]
    fn a_template_annotation_change_drifts_every_node() {
        // The agent hashes the template's annotations with its labels and taints.
        let old = pool(&["spot", "on-demand"]);
        let mut new = old.clone();
        new.template
            .metadata
            .annotations
            .insert("example.com/owner".into(), "team-a".into());
        let nodes = vec![node("a", "spot"), node("b", "on-demand")];
        let impact = describe(cat(), "p", &old, &new, &nodes, &[], 0);
        assert!(
            impact.text.starts_with(
                "NodePool p: 2 of 2 live nodes become drifted (the template annotations changed)"
            ),
            "{}",
            impact.text
        );
        assert_eq!(impact.path, Some(AttributePath::new("annotations")));
    }

    #[test]
    fn a_requirement_on_a_label_the_node_lacks_drifts_nothing() {
        // The agent does not judge a key the node does not carry (nor its instance type,
        // which would fill it in from the catalogue).
        let old = pool(&["spot", "on-demand"]);
        let mut new = old.clone();
        new.template.spec.requirements.push(
            joiner_agent::api::NodeSelectorRequirementWithMinValues {
                key: "karpenter.k8s.aws/instance-category".into(),
                operator: "In".into(),
                values: vec!["c".into()],
                min_values: None,
            },
        );
        let nodes = vec![node("a", "spot"), node("b", "on-demand")];
        let impact = describe(cat(), "p", &old, &new, &nodes, &[], 0);
        assert_eq!(impact.text, "NodePool p: 0 of 2 live nodes become drifted.");
        // A node whose type the catalogue knows is judged by the type's category.
        let mut m5 = node("c", "spot");
        m5["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!("m5.large");
        let impact = describe(cat(), "p", &old, &new, &[m5], &[], 0);
        assert!(
            impact.text.starts_with(
                "NodePool p: 1 of 1 live nodes become drifted \
                 (karpenter.k8s.aws/instance-category=m no longer satisfies"
            ),
            "{}",
            impact.text
        );
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
        let impact = describe(cat(), "general", &old, &new, &nodes, &pods, 0);
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
        let impact = describe(cat(), "p", &old, &new, &nodes, &[], 0);
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
        let impact = describe(
            cat(),
            "p",
            &spec,
            &heavier,
            &[node("a", "on-demand")],
            &[],
            0,
        );
        assert_eq!(impact.text, "NodePool p: 0 of 1 live nodes become drifted.");
        assert_eq!(impact.path, None);
    }

    #[test]
    fn class_change_paces_each_pool_by_its_budget() {
        let spec = pool(&["on-demand"]);
        assert_eq!(
            class_part("a", &spec, 25, 0),
            "NodePool a: 25 live nodes become drifted; replaced 3 at a time (budget nodes=10%): 9 round(s)"
        );
        assert_eq!(
            class_part("b", &spec, 0, 0),
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
