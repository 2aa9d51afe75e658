//! Node repair (leader only): every few seconds, reads the agent's nodes' conditions and
//! their pools' `repair` settings, runs the pure [`repair::decide`], and disrupts the
//! claims of nodes unhealthy past their toleration ([`disrupted::disrupt`], reason
//! `Unhealthy`). Termination then drains them forcefully, as Karpenter does: no wait for a
//! replacement, do-not-disrupt and PDBs do not hold it, pods already terminating on the dead
//! node are not waited for. The provisioner replaces the pods' capacity in its next batch.
//!
//! A pool with more than 20 % of its nodes unhealthy repairs none: each node past its
//! toleration gets a `NodeRepairBlocked` Warning saying so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use crate::controllers::claim_termination::TerminationReason;
use crate::controllers::conditions;
use crate::controllers::context::Context;
use crate::controllers::disrupted::{self, Mark};
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::disruption::repair::{self, NodeCondition, NodeHealth};
use crate::labels;

/// Time between passes.
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);

/// The cluster as repair sees it: the agent's nodes, and the policies of pools that repair.
fn read(ctx: &Context) -> (BTreeMap<String, Vec<repair::Policy>>, Vec<NodeHealth>) {
    let mut pools = BTreeMap::new();
    for p in ctx.state.node_pools.list() {
        let Some(r) = &p.spec.repair else { continue };
        match repair::policies(r) {
            Ok(ps) => {
                pools.insert(p.name_any(), ps);
            }
            Err(e) => {
                ctx.metrics.malformed("NodePool");
                tracing::warn!(nodepool = %p.name_any(), error = %e, "NodePool repair settings cannot be read; its nodes are not repaired");
            }
        }
    }
    let mut nodes = Vec::new();
    for claim in ctx.state.node_claims.list() {
        let Some(node) = ctx.state.node_for_claim(&claim) else {
            continue;
        };
        let Some(pool) = claim.labels().get(labels::JOINER_NODEPOOL).cloned() else {
            continue;
        };
        let status = node.status.clone().unwrap_or_default();
        let conds = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| NodeCondition {
                since: c.last_transition_time.map(|t| t.0.as_second()),
                type_: c.type_,
                status: c.status,
            })
            .collect();
        let claim_status = claim.status.clone().unwrap_or_default();
        nodes.push(NodeHealth {
            node: node.name_any(),
            nodeclaim: claim.name_any(),
            nodepool: pool,
            conditions: conds,
            disrupting: disrupted::is_disrupted(&claim)
                || node.metadata.deletion_timestamp.is_some(),
            initialized: conditions::is_true(&claim_status.conditions, conditions::INITIALIZED),
        });
    }
    (pools, nodes)
}

/// One pass; returns the claims it disrupted.
pub async fn pass(ctx: &Context) -> Vec<String> {
    let (pools, nodes) = read(ctx);
    if pools.is_empty() {
        return vec![];
    }
    let now = jiff::Timestamp::now();
    let outcome = repair::decide(&pools, &nodes, now.as_second());
    let m = &ctx.metrics.disruption;
    let pool_label = |p: &str| l(&[("nodepool", p)]);
    for p in pools.keys() {
        m.repair_held.get_or_create(&pool_label(p)).set(0);
    }
    for h in &outcome.held {
        m.repair_held
            .get_or_create(&pool_label(&h.nodepool))
            .set(h.due.len() as i64);
        let msg = format!(
            "not repaired: {} of the {} nodes of NodePool {} are unhealthy, more than {} %; \
             so many failing together points at a cause a replacement would not fix",
            h.unhealthy,
            h.nodes,
            h.nodepool,
            repair::MAX_UNHEALTHY_PERCENT
        );
        for name in &h.due {
            if let Some(node) = ctx.state.node(name) {
                ctx.events
                    .publish(
                        &events::reference(node.as_ref()),
                        Type::Warning,
                        "NodeRepairBlocked",
                        &msg,
                    )
                    .await;
            }
        }
    }
    let mut done = Vec::new();
    for r in outcome.repair {
        let Some(claim) = ctx.state.node_claims.get(&r.nodeclaim) else {
            continue;
        };
        let message = format!("node {} is unhealthy: {}; replacing it", r.node, r.why);
        if let Some(node) = ctx.state.node(&r.node) {
            ctx.events
                .publish(
                    &events::reference(node.as_ref()),
                    Type::Warning,
                    "Repairing",
                    &message,
                )
                .await;
        }
        ctx.events
            .publish(
                &events::reference(claim.as_ref()),
                Type::Warning,
                "Repairing",
                &message,
            )
            .await;
        let mark = Mark {
            reason: TerminationReason::Unhealthy,
            condition_reason: "Unhealthy",
            message: &message,
            deadline: now,
            replaced_by: None,
        };
        match disrupted::disrupt(ctx, &claim, mark).await {
            Ok(()) => {
                let condition = r.why.split('=').next().unwrap_or("").to_string();
                m.nodes_repaired
                    .get_or_create(&l(&[("nodepool", &r.nodepool), ("condition", &condition)]))
                    .inc();
                tracing::warn!(node = %r.node, nodeclaim = %r.nodeclaim, "{message}");
                done.push(r.nodeclaim);
            }
            Err(e) => tracing::warn!(nodeclaim = %r.nodeclaim, error = %e, "repairing a node"),
        }
    }
    done
}

/// The loop: one pass every [`PASS_INTERVAL`].
pub async fn run(ctx: Arc<Context>) {
    loop {
        tokio::time::sleep(PASS_INTERVAL).await;
        pass(&ctx).await;
    }
}
