//! Karpenter's disruption conditions on each NodeClaim, written from the world a disruption
//! pass reads: `Consolidatable` once the claim is initialized and its pool's
//! `consolidateAfter` has passed since its pods last changed (Karpenter's
//! `nodeclaim/disruption/consolidation.go`: the condition is removed, not set False, while
//! the window runs or when consolidation is off), and `Drifted` while the claim differs
//! from its pool or class. Users and tools read them (`kubectl get nodeclaims -o yaml`,
//! Karpenter's own e2e suite waits on them).
//!
//! As in Karpenter, a claim is consolidated only once it has carried `Consolidatable` for
//! [`VALIDATION_DELAY_SECS`] ([`hold_unvalidated`]): what a reader sees says what the agent
//! is about to do, never what it already did, and the pass that acts reads the cluster
//! afresh after the delay, as Karpenter validates its command again.

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

/// How long a claim shows `Consolidatable` before it is consolidated: Karpenter's
/// `commandValidationDelay` (`pkg/controllers/disruption/consolidation.go`), after which it
/// validates an emptiness or consolidation command again before acting. A pod that
/// kube-scheduler binds to the node meanwhile keeps it, rather than being evicted from a
/// node chosen a moment before.
pub const VALIDATION_DELAY_SECS: i64 = 15;

/// Holds back consolidation of the claims that are due but have not shown `Consolidatable`
/// for [`VALIDATION_DELAY_SECS`]: their pods' last change is moved so that decide sees them
/// due exactly when the delay ends (counted from now for a claim the cluster does not show
/// marked yet; the next pass, which sees the mark, counts from its transition time). Only
/// those claims: one inside its window is held by decide itself, and moving every claim's
/// time would change the world each pass and defeat the quiet pass. Expiry, drift and
/// interruption do not wait on the condition, as in Karpenter.
pub fn hold_unvalidated(ctx: &Context, world: &mut World) {
    let now = world.now;
    let after: std::collections::HashMap<&str, Option<u64>> = world
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.consolidate_after))
        .collect();
    for c in &mut world.candidates {
        let Some(Some(after)) = after.get(c.nodepool.as_str()).copied() else {
            continue;
        };
        if !c.initialized || now < c.last_pod_change.saturating_add(after as i64) {
            continue;
        }
        let marked_at =
            ctx.state.node_claims.get(&c.nodeclaim).and_then(|claim| {
                consolidatable_since(claim.status.as_ref()?.conditions.as_slice())
            });
        c.last_pod_change = held_change(c.last_pod_change, after, marked_at, now);
    }
}

/// The last pod change decide should see for a claim due for consolidation, marked
/// `Consolidatable` at `marked_at` (or not yet): unchanged once the delay has run, else the
/// time that makes it due when the delay ends.
fn held_change(last_pod_change: i64, after: u64, marked_at: Option<i64>, now: i64) -> i64 {
    let valid_at = marked_at
        .unwrap_or(now)
        .saturating_add(VALIDATION_DELAY_SECS);
    if now < valid_at {
        valid_at.saturating_sub(after as i64)
    } else {
        last_pod_change
    }
}

/// When `Consolidatable` became True, in Unix seconds; `None` when it is not True. A mark
/// without a readable time counts as made now.
fn consolidatable_since(conds: &[Condition]) -> Option<i64> {
    let c = conditions::get(conds, CONSOLIDATABLE).filter(|c| c.status == "True")?;
    let at = c
        .last_transition_time
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or_else(jiff::Timestamp::now);
    Some(at.as_second())
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

    #[test]
    fn the_mark_counts_from_its_transition() {
        let mut conds = Vec::new();
        conditions::set(&mut conds, CONSOLIDATABLE, true, "Consolidatable", "");
        conds[0].last_transition_time = Some("2026-12-03T16:02:28Z".into());
        let at: jiff::Timestamp = "2026-12-03T16:02:28Z".parse().unwrap();
        assert_eq!(consolidatable_since(&conds), Some(at.as_second()));
        conds[0].status = "False".into();
        assert_eq!(consolidatable_since(&conds), None);
        assert_eq!(consolidatable_since(&[]), None);
    }

    #[test]
    fn a_due_claim_waits_for_the_delay_after_its_mark() {
        let now = 1_000;
        // Not marked yet: due only a full delay from now.
        assert_eq!(
            held_change(900, 10, None, now) + 10,
            now + VALIDATION_DELAY_SECS
        );
        // Marked 5 s ago: due 10 s from now.
        assert_eq!(held_change(900, 10, Some(now - 5), now) + 10, now + 10);
        // Marked long enough ago: its real time stands.
        assert_eq!(held_change(900, 10, Some(now - 20), now), 900);
        assert_eq!(held_change(900, 0, Some(now - 15), now), 900);
    }
}
