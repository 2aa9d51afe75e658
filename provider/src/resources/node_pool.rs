//! `joiner_node_pool`: a `joiner.dev/v1` NodePool, planned against the embedded instance
//! catalogue and written to the cluster with server-side apply.
//!
//! - Validation: the agent's own `api::validate::node_pool`, its field paths translated to
//!   attribute paths; values unknown at plan time are checked again when known.
//! - Plan: `admitted_instance_types` from the catalogue; a pool admitting nothing is an
//!   error naming the requirement that empties the set. An update that changes the spec
//!   gets a plan warning previewing its impact on the live cluster (nodes drifted, budget
//!   pacing, pods stranded), or a short note when the cluster cannot be asked.
//! - Delete: the agent's finalizer holds the object until its NodeClaims are gone; we wait.

pub mod admission;
pub mod preview;
pub mod pricing;

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::node_pool::NodePoolSpec;
use joiner_agent::api::validate::FieldError;
use serde_json::Value as Json;

use super::custom_object::CustomObject;
use crate::context::ProviderContext;
use crate::kubernetes::{kinds, Kind, Kube};
use crate::model::node_pool::NodePoolModel;
use crate::model::paths::PathMap;
use crate::model::Model;
use crate::protocol::prelude::*;

/// The resource, a [`CustomObject`]: its lifecycle is shared, the rest of this module is the
/// NodePool's own.
pub struct NodePool;

pub const PATHS: PathMap = PathMap {
    dropped: &["spec", "template", "metadata", "name"],
    renamed: &[
        ("requirements", "requirement"),
        ("taints", "taint"),
        ("startupTaints", "startup_taint"),
        ("budgets", "budget"),
        ("nodeClassRef", "node_class"),
        ("policies", "policy"),
    ],
};

#[async_trait]
impl CustomObject for NodePool {
    const TYPE_NAME: &'static str = "joiner_node_pool";
    const DESCRIPTION: &'static str = "A joiner.dev/v1 NodePool: which nodes the agent may launch, with its constraints, limits and disruption rules (Karpenter v1 NodePool fields).";
    const KIND: Kind = kinds::NODE_POOL;
    const PATHS: &'static PathMap = &PATHS;
    const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

    type Model = NodePoolModel;
    type Spec = NodePoolSpec;

    fn attributes(schema: Schema) -> Schema {
        let schema = launch_policy(object_annotations(template(schema)))
            .attribute(
                Attribute::new("admitted_instance_types", admission::Admitted::value_type())
                    .computed()
                    .description("Instance types the pool admits (embedded catalogue), computed at plan time."),
            )
            .block(NestedBlock::list(
                "requirement",
                Block::new()
                    .attribute(Attribute::string("key").required())
                    .attribute(Attribute::string("operator").required())
                    .attribute(Attribute::string_list("values").optional())
                    .attribute(Attribute::number("min_values").optional()),
            ))
            .block(NestedBlock::list("taint", taint_block()))
            .block(NestedBlock::list("startup_taint", taint_block()))
            .block(disruption_block());
        static_capacity(schema).block(repair_block())
    }

    fn spec(m: &NodePoolModel) -> NodePoolSpec {
        m.spec()
    }

    fn annotations(m: &NodePoolModel) -> BTreeMap<String, String> {
        m.object_annotations()
    }

    fn from_live(cluster: &str, name: &str, spec: &NodePoolSpec, obj: &Json) -> NodePoolModel {
        let mut m = NodePoolModel::from_spec(cluster, name, spec);
        m.set_object_annotations(&live_annotations(obj));
        m.admitted_instance_types = admission::admitted(admission::catalog(), &m)
            .map(|a| a.to_value())
            .unwrap_or(Value::Null);
        m
    }

    fn in_sync(state: &NodePoolModel, obj: &Json) -> bool {
        let mut live_opt_in = NodePoolModel::default();
        live_opt_in.set_object_annotations(&live_annotations(obj));
        live_opt_in.object_annotations() == state.object_annotations()
            && !state.admitted_instance_types.is_null()
    }

    fn check(m: &NodePoolModel) -> Diagnostics {
        let mut d = rebalance_checks(m);
        if m.disruption
            .as_ref()
            .is_some_and(|x| x.expire_after_v1beta1.is_some())
        {
            d.push(Diagnostic::error_at(
                AttributePath::root()
                    .attr("disruption")
                    .attr("expire_after"),
                "expire_after moved",
                "Karpenter v1 moved expireAfter out of disruption (v1beta1's \
                 spec.disruption.expireAfter is v1's spec.template.spec.expireAfter): set \
                 `expire_after` on the joiner_node_pool itself, beside `node_class`.",
            ));
        }
        if let Some(n) = m
            .disruption
            .as_ref()
            .and_then(|x| x.consolidation_evictions_per_hour)
            .filter(|n| !(0..=i64::from(u32::MAX)).contains(n))
        {
            d.push(Diagnostic::error_at(
                AttributePath::root()
                    .attr("disruption")
                    .attr("consolidation_evictions_per_hour"),
                "Invalid consolidation_evictions_per_hour",
                format!("must be a whole number from 0 (consolidation evicts nothing, empty nodes still go) up, got {n}"),
            ));
        }
        for (i, h) in m.headroom.iter().enumerate() {
            for (name, v) in [("pods", h.pods), ("nodes", h.nodes)] {
                if let Some(n) = v.filter(|n| *n < 1 || *n > i64::from(u32::MAX)) {
                    d.push(Diagnostic::error_at(
                        AttributePath::new("headroom").index(i as i64).attr(name),
                        format!("Invalid headroom {name}"),
                        format!("must be a whole number of at least 1, got {n}"),
                    ));
                }
            }
        }
        d
    }

    fn agent_errors(spec: &NodePoolSpec) -> Vec<FieldError> {
        joiner_agent::api::validate::node_pool(spec, "spec")
    }

    async fn plan(
        ctx: &ProviderContext,
        plan: &mut Plan,
        m: &NodePoolModel,
    ) -> Result<(), Diagnostics> {
        admit(plan, m)?;
        let prior = (!plan.is_create()).then(|| NodePoolModel::from_value(&plan.prior));
        if let Some(p) = &prior {
            // Karpenter: a pool cannot switch between static and dynamic; here the switch
            // is a new pool.
            if p.replicas.is_some() != m.replicas.is_some() {
                plan.require_replace("replicas");
            }
        }
        if plan.planned.is_fully_known() {
            let changed = plan.is_create()
                || plan.is_replace()
                || prior.as_ref().is_some_and(|p| p.spec() != m.spec());
            if changed {
                if let Some(w) = pricing::overlay_prices(ctx, m).await {
                    plan.warn(w);
                }
            }
            // What the new capacity fields cost or cap needs no cluster: said on create too.
            let name = m.name.clone().unwrap_or_default();
            if let Some(w) = preview::capacity_warning(admission::catalog(), prior.as_ref(), m) {
                plan.warn(w);
            }
            if let Some(prior) = prior.filter(|_| !plan.is_replace()) {
                if let Some(w) = pricing::launch_policy_change(&prior.spec(), &m.spec()) {
                    plan.warn(w);
                }
                if prior.spec() != m.spec() {
                    let preview = preview::node_pool(ctx, &prior, m).await;
                    plan.warn(preview::warning("NodePool", &name, preview));
                }
            }
        }
        Ok(())
    }

    async fn deleting(kube: &Kube, name: &str, obj: &Json) -> String {
        let selector = format!("karpenter.sh/nodepool={name}");
        let claims = kube.list(kinds::NODE_CLAIM, None, Some(&selector)).await;
        let claims = claims.map(|l| l.len()).unwrap_or(0);
        let finalizers = &obj["metadata"]["finalizers"];
        format!("{claims} NodeClaims remain; finalizers {finalizers}")
    }
}

/// The annotations of the live NodePool object.
fn live_annotations(obj: &Json) -> BTreeMap<String, String> {
    serde_json::from_value(obj["metadata"]["annotations"].clone()).unwrap_or_default()
}

/// `rebalance` and its `rebalance_limit`, which the agent reads from the pool's annotations.
fn rebalance_checks(m: &NodePoolModel) -> Diagnostics {
    let mut d = Diagnostics::new();
    if m.rebalance.as_deref().is_some_and(|r| r != "replace") {
        d.push(Diagnostic::error_at(
            "rebalance",
            "Invalid rebalance",
            "must be \"replace\" (replace nodes on rebalance recommendations), or unset",
        ));
    }
    if let Some(l) = &m.rebalance_limit {
        if !m.rebalance.is_set() {
            d.push(Diagnostic::error_at(
                "rebalance_limit",
                "Invalid rebalance_limit",
                "limits rebalance replacements: set rebalance = \"replace\" too",
            ));
        }
        if let Err(e) = joiner_agent::interruption::actions::parse_limit(l) {
            d.push(Diagnostic::error_at(
                "rebalance_limit",
                "Invalid rebalance_limit",
                format!("{e}; e.g. 2/10m"),
            ));
        }
    }
    d
}

/// `admitted_instance_types`, unknown until the requirements and labels are; a pool that
/// admits nothing is an error at the line that empties the set.
fn admit(plan: &mut Plan, m: &NodePoolModel) -> Result<(), Diagnostics> {
    if !(m.requirements.is_known() && m.labels.is_known()) {
        plan.set_unknown("admitted_instance_types");
        return Ok(());
    }
    let a = admission::admitted(admission::catalog(), m)
        .map_err(|e| Diagnostic::error_at(e.path, "NodePool admits no instance type", e.detail))?;
    for (path, detail) in &a.min_values_shortfalls {
        plan.warn(Diagnostic::warning_at(
            path.clone(),
            "minValues relaxed at launch",
            detail.clone(),
        ));
    }
    plan.planned
        .set_attr("admitted_instance_types", a.to_value());
    Ok(())
}

/// The node template: its class, labels and lifetime, and the pool's weight and limits.
fn template(schema: Schema) -> Schema {
    schema
        .attribute(Attribute::string("node_class").required())
        .attribute(Attribute::number("weight").optional())
        .attribute(Attribute::string_map("labels").optional())
        .attribute(Attribute::string_map("annotations").optional())
        .attribute(Attribute::string_map("limits").optional())
        .attribute(
            Attribute::string("expire_after")
                .optional()
                .description("Duration or Never; default 720h."),
        )
        .attribute(Attribute::string("termination_grace_period").optional())
}

/// What the agent reads from the NodePool object's own annotations: the rebalance opt-in
/// and the Karpenter pools it adopts.
fn object_annotations(schema: Schema) -> Schema {
    schema
        .attribute(Attribute::string("rebalance").optional().description(
            "`replace`: replace nodes on EC2 rebalance recommendations, ahead of a likely Spot interruption (the NodePool's `joiner.dev/rebalance` annotation). Unset: recommendations are only logged.",
        ))
        .attribute(Attribute::string_list("adopts_karpenter_node_pools").optional().description(
            "Moving from Karpenter: the Karpenter NodePools whose running nodes this pool adopts (with `joiner_agent.adopt_karpenter_namespace`), when their names differ from this pool's; a pool adopts its namesake's nodes without it. Written as the NodePool's `joiner.dev/adopts-karpenter-nodepools` annotation.",
        ).validate(node_pool_names))
        .attribute(Attribute::string("rebalance_limit").optional().description(
            "`N/duration` (e.g. `2/10m`): at most N rebalance replacements per window; needs `rebalance`.",
        ))
}

fn node_pool_names(v: &Value) -> Result<(), String> {
    for n in v.as_string_list() {
        let ok = !n.is_empty()
            && n.len() <= 253
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(format!(
                "{n:?} is not a NodePool name (a DNS-1123 subdomain: a-z, 0-9, '-', '.')"
            ));
        }
    }
    Ok(())
}

/// Which of the admitted types a launch may pick.
fn launch_policy(schema: Schema) -> Schema {
    schema
        .attribute(Attribute::string("min_values_policy").optional().description(
            "`Strict` (default) or `BestEffort`: what a launch does when a requirement's `min_values` cannot be met. Strict plans nothing on this pool; BestEffort launches with the values there are and annotates the NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed`. (Karpenter's global `--min-values-policy`, per pool.)",
        ))
        .attribute(Attribute::string("candidate_price_ratio").optional().description(
            "How much dearer than a NodeClaim's cheapest candidate type its dearest may be, as a decimal ratio of at least 1, compared within a capacity type (a Spot claim's on-demand fallback is not cut); default \"2\". Types above it are never launched, so a shortage of cheap types cannot fall back to a node costing many times as much. Types kept for `min_values` are exempt.",
        ))
}

fn taint_block() -> Block {
    Block::new()
        .attribute(Attribute::string("key").required())
        .attribute(Attribute::string("value").optional())
        .attribute(
            Attribute::string("effect")
                .required()
                .description("NoSchedule, PreferNoSchedule or NoExecute."),
        )
}

fn disruption_block() -> NestedBlock {
    NestedBlock::single(
        "disruption",
        Block::new()
            .attribute(Attribute::string("consolidation_policy").optional())
            .attribute(Attribute::string("consolidate_after").optional())
            .attribute(Attribute::string("expire_after").optional().description(
                "Not here: Karpenter v1 moved expireAfter out of disruption; set the pool's `expire_after`. Accepted only to say so at plan.",
            ))
            .block(NestedBlock::list(
                "budget",
                Block::new()
                    .attribute(Attribute::string("nodes").required())
                    .attribute(Attribute::string("schedule").optional())
                    .attribute(Attribute::string("duration").optional())
                    .attribute(Attribute::string_list("reasons").optional()),
            ))
            .attribute(Attribute::bool("spot_to_spot_consolidation").optional().description(
                "Replace Spot nodes by cheaper Spot nodes (Karpenter's SpotToSpotConsolidation feature gate, per pool): a single node needs 15 cheaper Spot types and launches from the 15 cheapest. Default false.",
            ))
            .attribute(Attribute::number("consolidation_evictions_per_hour").optional().description(
                "At most this many pods evicted by consolidation in any hour (joiner; Karpenter has no such cap). Unset: no cap.",
            )),
    )
}

/// Capacity kept whatever the pods: a static node count, or room kept free.
fn static_capacity(schema: Schema) -> Schema {
    schema
        .attribute(Attribute::number("replicas").optional().description(
            "Static capacity (Karpenter v1.8 spec.replicas): keep exactly this many nodes, whatever the pods; never launch for pending pods. Adding or removing it replaces the pool.",
        ))
        .block(NestedBlock::list(
            "headroom",
            Block::new()
                .description("Warm capacity: room kept free for pods to come, so a burst starts without waiting for a boot. Priced in the plan.")
                .attribute(Attribute::string("cpu").optional().description("CPU of one pod to make room for."))
                .attribute(Attribute::string("memory").optional().description("Memory of one pod to make room for."))
                .attribute(Attribute::number("pods").optional().description("How many such pods (default 1)."))
                .attribute(Attribute::number("nodes").optional().description("Spare (empty) nodes, instead of cpu/memory/pods."))
                .attribute(Attribute::string("schedule").optional().description("Cron (UTC) when this headroom is kept; needs duration."))
                .attribute(Attribute::string("duration").optional()),
        ))
}

fn repair_block() -> NestedBlock {
    NestedBlock::single(
        "repair",
        Block::new()
            .description("Node repair (Karpenter v1.1): replace nodes unhealthy for a set time, unless over 20 % of the pool is unhealthy. Without policy blocks: Karpenter's AWS policies.")
            .block(NestedBlock::list(
                "policy",
                Block::new()
                    .attribute(Attribute::string("condition_type").required())
                    .attribute(Attribute::string("condition_status").required())
                    .attribute(Attribute::string("toleration_duration").required()),
            )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;
    use crate::model::node_pool::*;
    use std::collections::BTreeMap;

    fn full() -> NodePoolModel {
        NodePoolModel {
            id: Some("c:p".into()),
            cluster_name: Some("c".into()),
            name: Some("p".into()),
            node_class: Some("default".into()),
            weight: Some(10),
            labels: BTreeMap::from([("team".to_string(), "a".to_string())]).into(),
            annotations: [("a".to_string(), "b".to_string())].into(),
            requirements: vec![RequirementModel {
                key: "karpenter.sh/capacity-type".into(),
                operator: "In".into(),
                values: vec!["spot".into()],
                min_values: Some(1),
            }]
            .into(),
            taints: vec![TaintModel {
                key: "k".into(),
                value: Some("v".into()),
                effect: "NoSchedule".into(),
            }],
            startup_taints: vec![TaintModel::default()],
            limits: [("cpu".to_string(), "10".to_string())].into(),
            expire_after: Some("Never".into()),
            termination_grace_period: Some("1h".into()),
            disruption: Some(DisruptionModel {
                consolidation_policy: Some("WhenEmpty".into()),
                consolidate_after: Some("30s".into()),
                budgets: vec![BudgetModel {
                    nodes: "0".into(),
                    schedule: Some("@daily".into()),
                    duration: Some("1h".into()),
                    reasons: vec!["Empty".into()],
                }],
                spot_to_spot_consolidation: Some(true),
                consolidation_evictions_per_hour: Some(40),
                expire_after_v1beta1: None,
            }),
            rebalance: Some("replace".into()).into(),
            rebalance_limit: Some("2/10m".into()),
            adopts_karpenter_node_pools: vec!["general-v1".into()],
            min_values_policy: Some("BestEffort".into()),
            candidate_price_ratio: Some("1.5".into()),
            replicas: None,
            headroom: vec![HeadroomModel {
                cpu: Some("1".into()),
                memory: Some("2Gi".into()),
                pods: Some(4),
                schedule: Some("0 8 * * mon-fri".into()),
                duration: Some("10h".into()),
                ..Default::default()
            }],
            repair: Some(RepairModel {
                policies: vec![RepairPolicyModel {
                    condition_type: "Ready".into(),
                    condition_status: "Unknown".into(),
                    toleration_duration: "10m".into(),
                }],
            }),
            admitted_instance_types: Value::Null,
            timeouts: Value::Null,
        }
    }

    /// Every attribute the model writes is in the schema, and every schema attribute is
    /// mapped (the timeouts block is the server's, added here as it adds it).
    #[test]
    fn model_matches_schema() {
        let r = NodePool;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(NodePoolModel::from_value(&full().to_value()), full());
    }

    #[test]
    fn spec_round_trips_through_the_crd_shape() {
        let m = full();
        let back = NodePoolModel::from_spec("c", "p", &m.spec());
        assert_eq!(back.spec(), m.spec());
        // Defaults read back as omitted.
        let minimal = NodePoolModel {
            node_class: Some("d".into()),
            ..Default::default()
        };
        let back = NodePoolModel::from_spec("c", "p", &minimal.spec());
        assert!(back.disruption.is_none() && back.expire_after.is_none());
    }

    #[test]
    fn agent_errors_carry_attribute_paths() {
        let mut m = full();
        m.requirements[0].operator = "Maybe".into();
        m.disruption.as_mut().unwrap().budgets[0].nodes = "ten".into();
        m.weight = Some(500);
        let d = NodePool.validate(&m.to_value());
        let paths: Vec<String> = d
            .iter()
            .map(|d| d.path.clone().unwrap().to_string())
            .collect();
        assert!(
            paths.contains(&"requirement[0].operator".to_string()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"disruption.budget[0].nodes".to_string()),
            "{paths:?}"
        );
        assert!(paths.contains(&"weight".to_string()), "{paths:?}");
    }

    #[test]
    fn an_unmodelled_karpenter_label_is_refused_at_plan() {
        let mut m = full();
        m.requirements[0] = RequirementModel {
            key: "karpenter.k8s.aws/instance-gpu-memry".into(),
            operator: "Gt".into(),
            values: vec!["16000".into()],
            min_values: None,
        };
        let d = NodePool.validate(&m.to_value());
        let at: Vec<_> = d
            .iter()
            .filter(|d| d.path.clone().unwrap().to_string() == "requirement[0].key")
            .collect();
        assert_eq!(at.len(), 1, "{d:?}");
        assert!(
            at[0]
                .detail
                .contains("karpenter.k8s.aws/instance-gpu-memry")
                && at[0].detail.contains("would admit every instance type"),
            "{}",
            at[0].detail
        );
    }

    #[test]
    fn expire_after_in_disruption_says_where_it_moved() {
        let mut m = full();
        m.disruption.as_mut().unwrap().expire_after_v1beta1 = Some("720h".into());
        let d = NodePool.validate(&m.to_value());
        let at: Vec<_> = d
            .iter()
            .filter(|d| d.path.clone().unwrap().to_string() == "disruption.expire_after")
            .collect();
        assert_eq!(at.len(), 1, "{d:?}");
        assert!(at[0]
            .detail
            .contains("set `expire_after` on the joiner_node_pool itself"));
    }
}
