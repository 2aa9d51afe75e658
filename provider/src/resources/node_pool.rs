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

use std::time::Duration;

use joiner_agent::api::node_pool::NodePoolSpec;

use crate::context::ProviderContext;
use crate::kubernetes::{custom, kinds};
use crate::model::node_pool::NodePoolModel;
use crate::model::paths::PathMap;
use crate::model::Model;
use crate::protocol::prelude::*;
use crate::validators;

const WRITE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

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

#[async_trait]
impl Resource<ProviderContext> for NodePool {
    fn type_name(&self) -> &'static str {
        "joiner_node_pool"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("A joiner.dev/v1 NodePool: which nodes the agent may launch, with its constraints, limits and disruption rules (Karpenter v1 NodePool fields).")
            .attribute(Attribute::string("id").computed().description("`<cluster_name>:<name>`, also the import ID."))
            .attribute(Attribute::string("cluster_name").required().force_new())
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(validators::dns_subdomain),
            )
            .attribute(Attribute::string("node_class").required())
            .attribute(Attribute::number("weight").optional())
            .attribute(Attribute::string_map("labels").optional())
            .attribute(Attribute::string_map("annotations").optional())
            .attribute(Attribute::string_map("limits").optional())
            .attribute(Attribute::string("expire_after").optional().description("Duration or Never; default 720h."))
            .attribute(Attribute::string("termination_grace_period").optional())
            .attribute(Attribute::string("rebalance").optional().description(
                "`replace`: replace nodes on EC2 rebalance recommendations, ahead of a likely Spot interruption (the NodePool's `joiner.dev/rebalance` annotation). Unset: recommendations are only logged.",
            ))
            .attribute(Attribute::string_list("adopts_karpenter_node_pools").optional().description(
                "Moving from Karpenter: the Karpenter NodePools whose running nodes this pool adopts (with `joiner_agent.adopt_karpenter_namespace`), when their names differ from this pool's; a pool adopts its namesake's nodes without it. Written as the NodePool's `joiner.dev/adopts-karpenter-nodepools` annotation.",
            ).validate(|v| {
                for n in v.as_string_list() {
                    let ok = !n.is_empty()
                        && n.len() <= 253
                        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
                    if !ok {
                        return Err(format!("{n:?} is not a NodePool name (a DNS-1123 subdomain: a-z, 0-9, '-', '.')"));
                    }
                }
                Ok(())
            }))
            .attribute(Attribute::string("rebalance_limit").optional().description(
                "`N/duration` (e.g. `2/10m`): at most N rebalance replacements per window; needs `rebalance`.",
            ))
            .attribute(Attribute::string("min_values_policy").optional().description(
                "`Strict` (default) or `BestEffort`: what a launch does when a requirement's `min_values` cannot be met. Strict plans nothing on this pool; BestEffort launches with the values there are and annotates the NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed`. (Karpenter's global `--min-values-policy`, per pool.)",
            ))
            .attribute(Attribute::string("candidate_price_ratio").optional().description(
                "How much dearer than a NodeClaim's cheapest candidate type its dearest may be, as a decimal ratio of at least 1, compared within a capacity type (a Spot claim's on-demand fallback is not cut); default \"2\". Types above it are never launched, so a shortage of cheap types cannot fall back to a node costing many times as much. Types kept for `min_values` are exempt.",
            ))
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
            .block(NestedBlock::single(
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
            ))
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
            .block(NestedBlock::single(
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
            ))
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(WRITE_TIMEOUT),
            read: None,
            update: Some(WRITE_TIMEOUT),
            delete: Some(DELETE_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let m = NodePoolModel::from_value(config);
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
        let errors = joiner_agent::api::validate::node_pool(&m.spec(), "spec");
        d.extend(PATHS.diagnostics("NodePool", errors, config, None));
        d
    }

    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        let m = NodePoolModel::from_value(&plan.planned);
        if let (Some(c), Some(n)) = (&m.cluster_name, &m.name) {
            plan.planned
                .set_attr("id", Value::string(format!("{c}:{n}")));
        }
        if !(m.requirements.is_known() && m.labels.is_known()) {
            plan.set_unknown("admitted_instance_types");
        } else {
            match admission::admitted(admission::catalog(), &m) {
                Ok(a) => {
                    for (path, detail) in &a.min_values_shortfalls {
                        plan.warn(Diagnostic::warning_at(
                            path.clone(),
                            "minValues relaxed at launch",
                            detail.clone(),
                        ));
                    }
                    plan.planned
                        .set_attr("admitted_instance_types", a.to_value())
                }
                Err(e) => {
                    return Err(Diagnostic::error_at(
                        e.path,
                        "NodePool admits no instance type",
                        e.detail,
                    )
                    .into())
                }
            }
        }
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
                if let Some(w) = pricing::overlay_prices(ctx, &m).await {
                    plan.warn(w);
                }
            }
            // What the new capacity fields cost or cap needs no cluster: said on create too.
            let name = m.name.clone().unwrap_or_default();
            if let Some(w) = preview::capacity_warning(admission::catalog(), prior.as_ref(), &m) {
                plan.warn(w);
            }
            if let Some(prior) = prior.filter(|_| !plan.is_replace()) {
                if let Some(w) = pricing::launch_policy_change(&prior.spec(), &m.spec()) {
                    plan.warn(w);
                }
                if prior.spec() != m.spec() {
                    let preview = preview::node_pool(ctx, &prior, &m).await;
                    plan.warn(preview::warning("NodePool", &name, preview));
                }
            }
        }
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write(ctx, change).await
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        write(ctx, change).await
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let state = NodePoolModel::from_value(&req.state);
        let (Some(cluster), Some(name)) = (state.cluster_name.clone(), state.name.clone()) else {
            return Ok(None);
        };
        let found = custom::read::<NodePoolSpec>(&ctx.kube, &cluster, kinds::NODE_POOL, &name);
        let Some((live, obj)) = found.await? else {
            return Ok(None);
        };
        let live_annotations: std::collections::BTreeMap<String, String> =
            serde_json::from_value(obj["metadata"]["annotations"].clone()).unwrap_or_default();
        let mut live_opt_in = NodePoolModel::default();
        live_opt_in.set_object_annotations(&live_annotations);
        if live == state.spec()
            && live_opt_in.object_annotations() == state.object_annotations()
            && !state.admitted_instance_types.is_null()
        {
            return Ok(Some(Applied::new(req.state).with_private(req.private)));
        }
        let mut fresh = NodePoolModel::from_spec(&cluster, &name, &live);
        fresh.set_object_annotations(&live_annotations);
        fresh.timeouts = state.timeouts.clone();
        fresh.admitted_instance_types = admission::admitted(admission::catalog(), &fresh)
            .map(|a| a.to_value())
            .unwrap_or(Value::Null);
        Ok(Some(
            Applied::new(fresh.to_value()).with_private(req.private),
        ))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let m = NodePoolModel::from_value(&change.prior);
        let (Some(cluster), Some(name)) = (m.cluster_name, m.name) else {
            return Ok(());
        };
        let selector = format!("karpenter.sh/nodepool={name}");
        custom::delete(
            &ctx.kube,
            &ctx.stop,
            &cluster,
            kinds::NODE_POOL,
            &name,
            change.timeout,
            DELETE_TIMEOUT,
            |kube, obj| {
                let selector = selector.clone();
                Box::pin(async move {
                    let claims = kube.list(kinds::NODE_CLAIM, None, Some(&selector)).await;
                    let claims = claims.map(|l| l.len()).unwrap_or(0);
                    let finalizers = &obj["metadata"]["finalizers"];
                    format!("{claims} NodeClaims remain; finalizers {finalizers}")
                })
            },
        )
        .await?;
        Ok(())
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        let (cluster, name) = custom::split_id(id, "name")?;
        let m = NodePoolModel {
            id: Some(id.to_string()),
            cluster_name: Some(cluster.into()),
            name: Some(name.into()),
            ..Default::default()
        };
        Ok(Applied::new(m.to_value()))
    }
}

async fn write(ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
    let m = NodePoolModel::from_value(&change.planned);
    let cluster = m.cluster_name.clone().unwrap_or_default();
    let name = m.name.clone().unwrap_or_default();
    let annotations = m.object_annotations();
    custom::apply(
        &ctx.kube,
        &cluster,
        kinds::NODE_POOL,
        &name,
        &annotations,
        &m.spec(),
    )
    .await?;
    let mut state = change.planned;
    state.set_attr("id", Value::string(format!("{cluster}:{name}")));
    Ok(Applied::new(state))
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
