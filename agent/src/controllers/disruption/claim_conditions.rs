//! Karpenter's disruption conditions on each NodeClaim, written from the world a disruption
//! pass reads: `Consolidatable` once the claim is initialized and its pool's
//! `consolidateAfter` has passed since its pods last changed (Karpenter's
//! `nodeclaim/disruption/consolidation.go`: the condition is removed, not set False, while
//! the window runs or when consolidation is off), and `Drifted` while the claim differs
//! from its pool or class. Users and tools read them (`kubectl get nodeclaims -o yaml`,
//! Karpenter's own e2e suite waits on them).
//!
//! As in Karpenter, a claim is consolidated only once it carries `Consolidatable`: the
//! condition is written in one pass and acted on in a later one ([`hold_unmarked`]), so
//! what a reader sees says what the agent is about to do, never what it already did.

use kube::ResourceExt;
use serde_json::json;

use crate::api::Condition;
use crate::controllers::conditions;
use crate::controllers::context::Context;
use crate::controllers::nodeclaims;
use crate::disruption::decide::World;

pub const CONSOLIDATABLE: &str = "Consolidatable";
pub const DRIFTED: &str = "Drifted";

/// The claim's conditions with the two as they should stand; `None` when nothing changes.
pub fn updated(
    conds: &[Condition],
    consolidatable: bool,
    drift: Option<&str>,
) -> Option<Vec<Condition>> {
    let mut out = conds.to_vec();
    let mut changed = false;
    let mut stand = |out: &mut Vec<Condition>, type_: &str, on: Option<(&str, &str)>| match on {
        Some((reason, message)) => {
            changed |= conditions::set(out, type_, true, reason, message);
        }
        None => {
            let before = out.len();
            out.retain(|c| c.type_ != type_);
            changed |= out.len() != before;
        }
    };
    stand(
        &mut out,
        CONSOLIDATABLE,
        consolidatable.then_some(("Consolidatable", "")),
    );
    stand(&mut out, DRIFTED, drift.map(|d| ("Drifted", d)));
    changed.then_some(out)
}

/// Writes the conditions of every candidate of `world` whose conditions changed.
pub async fn sync(ctx: &Context, world: &World) {
    for c in &world.candidates {
        let after = world
            .pools
            .iter()
            .find(|p| p.name == c.nodepool)
            .and_then(|p| p.consolidate_after);
        let consolidatable = c.initialized
            && after.is_some_and(|a| world.now >= c.last_pod_change.saturating_add(a as i64));
        let Some(claim) = ctx.state.node_claims.get(&c.nodeclaim) else {
            continue;
        };
        let conds = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if let Some(next) = updated(&conds, consolidatable, c.drift.as_deref()) {
            if let Err(e) =
                nodeclaims::patch_status(ctx, &claim.name_any(), json!({"conditions": next})).await
            {
                tracing::debug!(nodeclaim = %c.nodeclaim, error = %e, "writing the disruption conditions failed; the next pass retries");
            }
        }
    }
}

/// Holds back, for this pass, consolidation of the claims that became consolidatable but
/// whose `Consolidatable` the cluster does not show yet: their pods' last change is read as
/// now, so decide waits for them; the next pass, which sees the condition, reads the real
/// time. Only those claims: one inside its window is held by decide itself, and reading
/// every claim's time as now would change the world each pass and defeat the quiet pass.
/// Expiry, drift and interruption do not wait on the condition, as in Karpenter.
pub fn hold_unmarked(ctx: &Context, world: &mut World) {
    let now = world.now;
    let after: std::collections::HashMap<&str, Option<u64>> = world
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.consolidate_after))
        .collect();
    for c in &mut world.candidates {
        let Some(Some(a)) = after.get(c.nodepool.as_str()).copied() else {
            continue;
        };
        let due = c.initialized && now >= c.last_pod_change.saturating_add(a as i64);
        if !due {
            continue;
        }
        let marked = ctx
            .state
            .node_claims
            .get(&c.nodeclaim)
            .is_some_and(|claim| {
                claim
                    .status
                    .as_ref()
                    .is_some_and(|s| conditions::is_true(&s.conditions, CONSOLIDATABLE))
            });
        if !marked {
            c.last_pod_change = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(conds: &[Condition]) -> Vec<&str> {
        conds.iter().map(|c| c.type_.as_str()).collect()
    }

    #[test]
    fn consolidatable_comes_and_goes_without_a_false() {
        let mut conds = Vec::new();
        conditions::set(&mut conds, conditions::READY, true, "Ready", "");
        let on = updated(&conds, true, None).expect("added");
        assert_eq!(types(&on), ["Ready", CONSOLIDATABLE]);
        assert_eq!(
            updated(&on, true, None),
            None,
            "already so: nothing to write"
        );
        let off = updated(&on, false, None).expect("removed");
        assert_eq!(types(&off), ["Ready"]);
    }

    #[test]
    fn drifted_carries_the_reason_and_clears() {
        let d = updated(&[], false, Some("the NodeClass changed")).unwrap();
        assert_eq!(d[0].type_, DRIFTED);
        assert_eq!(d[0].status, "True");
        assert_eq!(d[0].message, "the NodeClass changed");
        assert!(updated(&d, false, None).unwrap().is_empty());
    }
}
