//! Capacity no pending pod asks for, read from the cluster for the round: static pools
//! (`replicas`) are taken out of the round's dynamic pools (they never launch for pending
//! pods, as in Karpenter), and for each pool with `replicas` or `headroom` the round learns
//! what already counts toward it. The pure [`headroom::extra_claims`] decides what to add;
//! the round creates it through its one NodeClaim path.

use std::collections::BTreeSet;

use kube::ResourceExt;

use crate::controllers::context::Context;
use crate::controllers::disrupted::is_disrupted;
use crate::controllers::scheduling_input::Round;
use crate::labels;
use crate::scheduler::headroom::{self, PoolCapacity};
use crate::scheduler::{NodePoolInput, Plan, Target};

/// Takes static pools out of the round's scheduler input; returns their inputs.
pub fn split_static(r: &mut Round) -> Vec<NodePoolInput> {
    let statics: BTreeSet<String> = r
        .pools
        .iter()
        .filter(|(_, p)| p.spec.replicas.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    let (s, dynamic): (Vec<_>, Vec<_>) = std::mem::take(&mut r.input.node_pools)
        .into_iter()
        .partition(|p| statics.contains(&p.name));
    r.input.node_pools = dynamic;
    s
}

/// The pools with `replicas` or `headroom`, with what counts toward them once `plan` is
/// carried out.
pub fn pools(ctx: &Context, r: &Round, plan: &Plan) -> Vec<PoolCapacity> {
    let mut out = Vec::new();
    // In-flight claims the plan puts pods on are not empty.
    let used: BTreeSet<&str> = plan
        .placements
        .iter()
        .filter_map(|p| match &p.target {
            Target::InFlight(c) => Some(c.as_str()),
            Target::Node(_) => None,
        })
        .collect();
    for (name, pool) in &r.pools {
        let spec = &pool.spec;
        if spec.replicas.is_none() && spec.headroom.is_empty() {
            continue;
        }
        let headroom = match headroom::parse(&spec.headroom) {
            Ok(h) => h,
            Err(e) => {
                ctx.metrics.malformed("NodePool");
                tracing::warn!(nodepool = %name, error = %e, "NodePool headroom cannot be read; none is kept");
                vec![]
            }
        };
        let mut live = 0;
        let mut empty = 0;
        for claim in ctx.state.node_claims.list() {
            if claim.labels().get(labels::JOINER_NODEPOOL) != Some(name) || is_disrupted(&claim) {
                continue;
            }
            live += 1;
            match ctx.state.node_for_claim(&claim) {
                Some(node) => {
                    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                    let busy = ctx
                        .state
                        .pods_on(&node.name_any())
                        .iter()
                        .any(|p| p.reschedulable());
                    if !cordoned && !busy && node.metadata.deletion_timestamp.is_none() {
                        empty += 1;
                    }
                }
                None if !used.contains(claim.name_any().as_str()) => empty += 1,
                None => {}
            }
        }
        out.push(PoolCapacity {
            pool: name.clone(),
            headroom,
            replicas: spec.replicas.map(|r| r.max(0) as u32),
            live,
            empty,
        });
    }
    out
}
