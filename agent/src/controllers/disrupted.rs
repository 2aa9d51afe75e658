//! Disrupting a NodeClaim: the one way interruption, consolidation, expiry, drift, repair
//! and a reservation's end take a node away, and the one place its replacement is waited
//! for. It sits below every loop that reads or writes the mark, so that none of them
//! borrows it from another.
//!
//! Those loops never plan or create capacity. They [`disrupt`] the claim: it gets the
//! `Disrupted` condition (reason and message say why), a [`DEADLINE`] by which its pods must
//! be elsewhere, and its termination is requested. From then on:
//! - provisioning counts the node's reschedulable pods as needing capacity in its next
//!   batch (minus what fits on existing, undisrupted nodes), creates the replacements
//!   through its own NodeClaim path and names them on the claim ([`REPLACED_BY`]);
//! - termination ([`replacement_wait`]) holds the drain until those replacements are
//!   Initialized, or until the deadline minus the longest termination grace period among
//!   the node's pods, whichever comes first; then it cordons and evicts (PDBs hold).
//!
//! Pods that fit on existing capacity get no replacement: the provisioner names none and
//! the drain starts as soon as it has looked.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::claim_termination::{delete_claim, TerminationReason, TERMINATION_REASON};
use crate::controllers::conditions;
use crate::controllers::context::Context;

/// The claim's `Disrupted` condition (Karpenter's name): true from the moment a loop decides
/// the node goes, with the loop's reason.
pub const DISRUPTED_CONDITION: &str = "Disrupted";
/// RFC 3339 time by which the node's pods must have left it (the end of a Spot notice, or
/// the longest a voluntary disruption may wait for its replacement).
pub const DEADLINE: &str = "joiner.dev/disruption-deadline";
/// The NodeClaims the provisioner put the node's pods on, comma-separated; empty when they
/// fit on existing capacity. Written by provisioning only.
pub const REPLACED_BY: &str = "joiner.dev/replaced-by";
/// Karpenter's taint for a node being taken away. Put on as soon as the claim is disrupted
/// (pods already there keep running; NoSchedule evicts nothing), so that kube-scheduler
/// places nothing new on a doomed node while it waits for its replacement. Without it, in a
/// storm the pods evicted from one warned node landed on the next warned node, and were
/// evicted again.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// How long a claim may stay disrupted without being deleted before [`resume`] deletes it.
const RESUME_AFTER: Duration = Duration::from_secs(10);
/// A pod's grace when it sets none (the Kubernetes default).
const DEFAULT_POD_GRACE: i64 = 30;

/// What a loop says when it disrupts a claim.
pub struct Mark<'a> {
    pub reason: TerminationReason,
    /// The condition's reason (`SpotInterrupted`, `Underutilized`, ...).
    pub condition_reason: &'a str,
    pub message: &'a str,
    pub deadline: jiff::Timestamp,
    /// Set when the caller already proved the pods fit on existing capacity (consolidation's
    /// delete decisions): `Some(&[])` lets the drain start without waiting for a round.
    pub replaced_by: Option<&'a [String]>,
}

/// Whether a claim has been disrupted or is being deleted: its node's pods need capacity.
pub fn is_disrupted(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_some()
        || claim
            .status
            .as_ref()
            .is_some_and(|s| conditions::is_true(&s.conditions, DISRUPTED_CONDITION))
}

/// The claim's deadline, if a loop gave it one.
pub fn deadline(claim: &NodeClaim) -> Option<jiff::Timestamp> {
    claim.annotations().get(DEADLINE)?.parse().ok()
}

/// The replacements the provisioner named (`None`: it has not looked yet).
pub fn replaced_by(claim: &NodeClaim) -> Option<Vec<String>> {
    claim.annotations().get(REPLACED_BY).map(|v| {
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// Marks the claim disrupted and requests its termination. Errors name the call.
///
/// Three writes, in an order a crash between any two can be finished from: the intent
/// first (deadline, termination reason, replacements) as annotations, then the `Disrupted`
/// condition (from which the loops stop choosing the claim), then the delete. A leader
/// killed after the condition but before the delete left a claim no loop would touch again
/// (the kill loop found one, empty, never terminated); [`resume`] finishes it from what the
/// first write recorded.
pub async fn disrupt(ctx: &Context, claim: &NodeClaim, mark: Mark<'_>) -> Result<(), String> {
    let name = claim.name_any();
    let mut annotations = serde_json::Map::new();
    annotations.insert(DEADLINE.into(), json!(mark.deadline.to_string()));
    annotations.insert(TERMINATION_REASON.into(), json!(mark.reason.as_str()));
    if let Some(r) = mark.replaced_by {
        annotations.insert(REPLACED_BY.into(), json!(r.join(",")));
    }
    if !annotate(ctx, &name, annotations).await? {
        return Ok(());
    }
    let mut conds = claim
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions::set(
        &mut conds,
        DISRUPTED_CONDITION,
        true,
        mark.condition_reason,
        mark.message,
    );
    let api = ctx.node_claim_api();
    match api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conds}})),
        )
        .await
    {
        Ok(c) => ctx.state.node_claims.insert(&name, c),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims/status patch", &e);
            return Err(format!(
                "marking NodeClaim {name} disrupted (nodeclaims/status patch): {e}"
            ));
        }
    }
    taint_node(ctx, claim).await;
    delete_claim(ctx, &name, mark.reason).await.map_err(|e| {
        ctx.metrics.kube_error("nodeclaims delete", &e);
        format!("requesting termination of NodeClaim {name} (nodeclaims delete): {e}")
    })
}

/// Finishes a [`disrupt`] cut short: a claim with the `Disrupted` condition that is not
/// being deleted. The reason and deadline come from the annotations `disrupt` wrote first;
/// a condition someone else set, without them, is treated as a voluntary disruption with
/// the voluntary deadline. Returns when to look again.
pub async fn resume(ctx: &Context, claim: &NodeClaim) -> Option<Duration> {
    let name = claim.name_any();
    let cond = claim
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, DISRUPTED_CONDITION));
    // A disrupt in progress writes the delete a moment after the condition: leave it that
    // moment, so the normal path is not raced (and not logged as a recovery).
    if let Some(age) = cond.and_then(conditions::age_seconds) {
        if age < RESUME_AFTER.as_secs_f64() {
            return Some(RESUME_AFTER.saturating_sub(Duration::from_secs_f64(age.max(0.0))));
        }
    }
    let reason = match claim.annotations().get(TERMINATION_REASON) {
        Some(r) => TerminationReason::parse(r),
        None => TerminationReason::parse(cond.map(|c| c.reason.as_str()).unwrap_or("")),
    };
    if deadline(claim).is_none() || !claim.annotations().contains_key(TERMINATION_REASON) {
        let mut annotations = serde_json::Map::new();
        let by = deadline(claim).unwrap_or_else(|| voluntary_deadline(ctx, jiff::Timestamp::now()));
        annotations.insert(DEADLINE.into(), json!(by.to_string()));
        annotations.insert(TERMINATION_REASON.into(), json!(reason.as_str()));
        match annotate(ctx, &name, annotations).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(nodeclaim = %name, error = %e, "finishing a disruption");
                return Some(Duration::from_secs(5));
            }
        }
    }
    taint_node(ctx, claim).await;
    tracing::info!(nodeclaim = %name, reason = reason.as_str(), "finishing a disruption cut short (its termination was never requested)");
    match delete_claim(ctx, &name, reason).await {
        Ok(()) => None,
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims delete", &e);
            Some(Duration::from_secs(5))
        }
    }
}

/// How long a voluntary disruption (consolidation, drift, expiry, a rebalance
/// recommendation) may hold its node for a replacement: as long as a replacement may take
/// to register, and a minute to initialise. A replacement that fails is replaced again by
/// the provisioner within that time; after it, the node drains regardless.
pub fn voluntary_deadline(ctx: &Context, now: jiff::Timestamp) -> jiff::Timestamp {
    let bound = ctx.config.registration_ttl + Duration::from_secs(60);
    now.checked_add(jiff::SignedDuration::try_from(bound).unwrap_or_default())
        .unwrap_or(now)
}

/// Merge-patches annotations onto the claim; `Ok(false)` when the claim is gone.
async fn annotate(
    ctx: &Context,
    name: &str,
    annotations: serde_json::Map<String, serde_json::Value>,
) -> Result<bool, String> {
    let api = ctx.node_claim_api();
    let patch = json!({"metadata": {"annotations": annotations}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(c) => {
            ctx.state.node_claims.insert(name, c);
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims patch (disruption)", &e);
            Err(format!(
                "recording NodeClaim {name}'s disruption (nodeclaims patch): {e}"
            ))
        }
    }
}

/// Puts [`DISRUPTED_TAINT`] on the claim's node, if it has one and lacks it. A failure is
/// counted and logged, not fatal: the drain still cordons before it evicts. A loop taking
/// several nodes at once taints them all first, so that no pod evicted from the first lands
/// on the second before it is marked (and is evicted twice).
pub async fn taint_node(ctx: &Context, claim: &NodeClaim) {
    let Some(node_name) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
        return;
    };
    let Some(node) = ctx
        .state
        .nodes
        .state()
        .into_iter()
        .find(|n| n.name_any() == node_name)
    else {
        return;
    };
    taint(ctx, &node).await;
}

/// Puts [`DISRUPTED_TAINT`] on `node` if it lacks it (see [`taint_node`]).
pub async fn taint(ctx: &Context, node: &Node) {
    let node_name = node.name_any();
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return;
    }
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    if let Err(e) = nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
    {
        ctx.metrics.kube_error("nodes patch", &e);
        tracing::warn!(node = %node_name, error = %e, "tainting a disrupted node (nodes patch) failed");
    }
}

/// Brings a disrupted claim's deadline forward (a Spot warning for a node consolidation
/// had already chosen). Errors name the call.
pub async fn tighten(
    ctx: &Context,
    claim: &NodeClaim,
    deadline: jiff::Timestamp,
) -> Result<(), String> {
    let name = claim.name_any();
    let api = ctx.node_claim_api();
    let patch = json!({"metadata": {"annotations": {DEADLINE: deadline.to_string()}}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(c) => {
            ctx.state.node_claims.insert(&name, c);
            ctx.claims.add(&name);
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims patch (deadline)", &e);
            Err(format!(
                "bringing NodeClaim {name}'s disruption deadline forward (nodeclaims patch): {e}"
            ))
        }
    }
}

/// Why the drain of a disrupted claim may start now.
pub enum Go {
    /// No deadline, or nothing on the node needs a place: drain as before.
    NoWait,
    /// Every replacement is Initialized (the list may be empty: the pods fit elsewhere).
    Replaced(Vec<String>),
    /// The deadline minus the longest pod grace has come; the named replacements were not
    /// all Initialized.
    OutOfTime(Vec<String>),
}

/// For a disrupted claim whose node still has pods: `Err(wait)` while its replacements are
/// not ready and there is time; `Ok(why)` when the drain may start.
pub fn replacement_wait(ctx: &Context, claim: &NodeClaim, node: &Node) -> Result<Go, Duration> {
    let Some(deadline) = deadline(claim) else {
        return Ok(Go::NoWait);
    };
    let pods: Vec<_> = ctx
        .state
        .pods_on(&node.name_any())
        .into_iter()
        .filter(|p| p.reschedulable())
        .collect();
    if pods.is_empty() {
        return Ok(Go::NoWait);
    }
    let grace = pods
        .iter()
        .map(|p| p.grace_seconds.unwrap_or(DEFAULT_POD_GRACE))
        .max()
        .unwrap_or(DEFAULT_POD_GRACE)
        .max(0);
    let drain_by = deadline
        .checked_sub(jiff::SignedDuration::from_secs(grace))
        .unwrap_or(deadline);
    let left = jiff::Timestamp::now().duration_until(drain_by);
    let named = replaced_by(claim);
    if left.is_negative() || left.is_zero() {
        return Ok(Go::OutOfTime(named.unwrap_or_default()));
    }
    let left = Duration::try_from(left).unwrap_or_default();
    // Checked again at least this often: a replacement's progress does not requeue this claim.
    let poll = Duration::from_millis(500).min(left);
    let Some(names) = named else {
        return Err(poll);
    };
    for n in &names {
        match ctx.state.node_claims.get(n) {
            // Gone or going: the provisioner names another in its next round.
            None => return Err(poll),
            Some(c) if c.metadata.deletion_timestamp.is_some() => return Err(poll),
            Some(c) => {
                let init = c
                    .status
                    .as_ref()
                    .is_some_and(|s| conditions::is_true(&s.conditions, conditions::INITIALIZED));
                if !init {
                    return Err(poll);
                }
            }
        }
    }
    Ok(Go::Replaced(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotations: &[(&str, &str)], disrupted: bool) -> NodeClaim {
        let mut c = NodeClaim::new("c", Default::default());
        c.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        if disrupted {
            let mut conds = Vec::new();
            conditions::set(&mut conds, DISRUPTED_CONDITION, true, "Drifted", "");
            c.status = Some(crate::api::NodeClaimStatus {
                conditions: conds,
                ..Default::default()
            });
        }
        c
    }

    #[test]
    fn replaced_by_tells_not_looked_yet_from_nothing_needed() {
        assert_eq!(replaced_by(&claim(&[], false)), None);
        assert_eq!(
            replaced_by(&claim(&[(REPLACED_BY, "")], false)),
            Some(vec![])
        );
        assert_eq!(
            replaced_by(&claim(&[(REPLACED_BY, "a-1,b-2")], false)),
            Some(vec!["a-1".to_string(), "b-2".to_string()])
        );
    }

    #[test]
    fn deadline_and_disrupted_are_read_from_the_claim() {
        let c = claim(&[(DEADLINE, "2026-11-25T10:00:00Z")], true);
        assert_eq!(deadline(&c), Some("2026-11-25T10:00:00Z".parse().unwrap()));
        assert!(is_disrupted(&c));
        assert!(!is_disrupted(&claim(&[], false)));
        assert_eq!(deadline(&claim(&[(DEADLINE, "soon")], false)), None);
    }
}
