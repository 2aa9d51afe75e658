//! Termination, driven by the `joiner.dev/termination` finalizer on NodeClaims and their
//! Nodes: cordon, drain ([`drain`]: the Eviction API, so PodDisruptionBudgets hold), wait for
//! the drained pods' volumes to detach ([`detach`]), then terminate the instance, remove the
//! Node, and release the claim.
//!
//! Do-not-disrupt (`karpenter.sh/do-not-disrupt`, `joiner.dev/do-not-disrupt`): on a
//! Node it blocks a *voluntary* termination from starting; on a pod it keeps that pod from
//! being evicted by a voluntary termination. Neither blocks an involuntary one
//! (interruption, registration timeout, instance gone), where the capacity is going away
//! anyway.
//!
//! The NodePool's `terminationGracePeriod` (copied onto the claim) caps all of it, as in
//! Karpenter: the claim's deletion plus that period is the drain's deadline. Pods are
//! deleted rather than evicted, each early enough that its own grace ends by the deadline
//! (so the first may go before it), whatever PodDisruptionBudgets and do-not-disrupt say;
//! the node's do-not-disrupt holds only until that first deletion falls due. Then the
//! instance is terminated and the Node and claim go.

pub mod detach;
pub mod drain;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::claim_termination::{
    request_termination, TerminationReason, TERMINATION_REASON,
};
use crate::controllers::context::Context;
use crate::controllers::disrupted;
use crate::controllers::do_not_disrupt::has_do_not_disrupt;
use crate::controllers::events::{self, Type};
use crate::controllers::state::Change;

/// Seconds since the claim's deletion was requested.
fn deleting_for(claim: &NodeClaim) -> f64 {
    claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| jiff::Timestamp::now().duration_since(t.0).as_secs_f64())
        .unwrap_or(0.0)
}

/// When the claim's node must be empty: its deletion plus its `terminationGracePeriod`
/// (Karpenter's node termination time). None: no grace period set (or not deleted yet),
/// so nothing caps the wait on PodDisruptionBudgets and do-not-disrupt.
fn drain_deadline(claim: &NodeClaim) -> Option<jiff::Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let g = claim.spec.termination_grace_period.as_deref()?;
    let secs = crate::api::duration::parse_seconds(g).ok()?;
    let secs = i64::try_from(secs).ok()?;
    deleted
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .ok()
}

/// The merge patch that takes the agent's finalizer off `obj`; `None` when it is not on.
fn finalizer_removal<K: kube::Resource>(obj: &K, ours: &str) -> Option<serde_json::Value> {
    let fins: Vec<&String> = obj.finalizers().iter().filter(|f| *f != ours).collect();
    (fins.len() != obj.finalizers().len()).then(|| json!({"metadata": {"finalizers": fins}}))
}

/// A write to an object that is already gone has nothing left to do.
fn gone_is_done<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn release_node(ctx: &Context, nodes: &Api<Node>, node: &Node) -> Result<(), kube::Error> {
    let Some(patch) = finalizer_removal(node, ctx.finalizer()) else {
        return Ok(());
    };
    gone_is_done(
        nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
    )
}

/// The claim's instance id: from its providerID (`aws:///zone/i-...`), else by tag.
async fn instance_id(
    ctx: &Context,
    claim: &NodeClaim,
) -> Result<Option<String>, crate::cloud::CloudError> {
    if let Some(id) = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
    {
        return Ok(Some(id.to_string()));
    }
    Ok(ctx
        .cloud
        .instance_for(&claim.name_any())
        .await?
        .map(|i| i.instance_id))
}

/// One step of a claim's termination; returns when to look again.
pub async fn finalize(ctx: &Context, claim: &NodeClaim) -> Option<Duration> {
    if !claim.finalizers().iter().any(|f| f == ctx.finalizer()) {
        return None;
    }
    let name = claim.name_any();
    let reason = TerminationReason::parse(
        claim
            .annotations()
            .get(TERMINATION_REASON)
            .map(String::as_str)
            .unwrap_or(""),
    );
    let node = ctx.state.node_for_claim(claim);
    if let Err(again) = take_down(ctx, claim, node.as_deref(), reason).await {
        return Some(again);
    }
    ctx.metrics
        .nodeclaims_terminated
        .get_or_create(&crate::controllers::operator::metrics::claim_labels(claim))
        .inc();
    ctx.metrics
        .termination_duration
        .observe(deleting_for(claim));
    tracing::info!(nodeclaim = %name, reason = reason.as_str(), "terminated");
    ctx.state.notify(Change::NodeClaim(name));
    None
}

/// The steps in order: mark the node [`disrupted::DISRUPTED_TAINT`], empty it, wait for its
/// volumes to detach ([`detach`]), terminate the instance, remove the Node, then release the
/// claim. `Err`: when to look again (at the step that has to wait).
///
/// The taint comes first, as Karpenter's node termination puts it: whatever the claim
/// waits for next (a do-not-disrupt pod's grace), no new pod is placed on a node that is
/// going away. Not for a claim a loop disrupted with a deadline (an interruption notice):
/// its node keeps serving while its replacements come up, and is cordoned when its drain
/// starts; tainted at once, the pods other drains moved meanwhile waited for capacity in
/// the sandbox's Spot storm.
async fn take_down(
    ctx: &Context,
    claim: &NodeClaim,
    node: Option<&Node>,
    reason: TerminationReason,
) -> Result<(), Duration> {
    if let Some(node) = node {
        if disrupted::deadline(claim).is_none() {
            disrupted::taint(ctx, node).await;
        }
        empty_node(ctx, claim, node, reason).await?;
        detach::await_detachment(ctx, claim, node, reason).await?;
    }
    terminate_instance(ctx, claim).await?;
    if let Some(node) = node {
        remove_node(ctx, node).await?;
    }
    if let Some(patch) = finalizer_removal(claim, ctx.finalizer()) {
        let api = ctx.node_claim_api();
        let released = api
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        if let Err(e) = gone_is_done(released) {
            ctx.metrics.kube_error("nodeclaims patch", &e);
            return Err(Duration::from_secs(2));
        }
    }
    // A wait its Node's disappearance cut short is over too.
    detach::forget(ctx, &claim.name_any());
    Ok(())
}

/// Empties the claim's node before its instance goes: waits out a do-not-disrupt (for a
/// voluntary reason, until the first pod's deletion falls due) and the replacements, then
/// drains.
/// `Err`: when to look again.
async fn empty_node(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    reason: TerminationReason,
) -> Result<(), Duration> {
    let forceful = reason.is_forceful();
    let now = jiff::Timestamp::now();
    // A forceful termination's deadline is now: nothing on the node is waited for.
    let deadline = if forceful {
        Some(now)
    } else {
        drain_deadline(claim)
    };
    let grace_over = deadline.is_some_and(|d| now >= d);
    let respect_dnd = reason.is_voluntary() && !grace_over;
    // How soon the first pod's deletion falls due (zero: now).
    let due_in = deletion_due_in(ctx, node, deadline, now);
    let due = due_in == Some(Duration::ZERO);
    if respect_dnd && !due && has_do_not_disrupt(&node.metadata) {
        ctx.events
            .publish(
                &events::reference(claim),
                Type::Normal,
                "DisruptionBlocked",
                &format!("node {} is annotated do-not-disrupt; termination waits until the annotation is removed or, under a terminationGracePeriod, until its first pod must be deleted to end by the deadline", node.name_any()),
            )
            .await;
        return Err(due_in.map_or(Duration::from_secs(5), |d| d.min(Duration::from_secs(5))));
    }
    // Replacement before drain: a disrupted node keeps serving until its pods have
    // somewhere to go, or until waiting longer would cut into their grace (the disruption's
    // deadline, or the grace period's, for the first pod whose deletion falls due).
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    if !cordoned && !due {
        let go = disrupted::replacement_wait(ctx, claim, node)?;
        announce_drain(ctx, claim, node, go).await;
    }
    let terms = drain::Terms {
        respect_dnd,
        deadline,
        forceful,
    };
    match drain::drain(ctx, claim, node, &terms).await {
        drain::Outcome::Drained => Ok(()),
        drain::Outcome::Waiting(d) => Err(d),
    }
}

/// How soon the first of the node's pods must be deleted to end by the deadline (zero:
/// now); None without a deadline or pods.
fn deletion_due_in(
    ctx: &Context,
    node: &Node,
    deadline: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Option<Duration> {
    deadline?;
    ctx.state
        .pods_on(&node.name_any())
        .iter()
        .filter(|p| p.reschedulable())
        .map(|p| drain::due_in(p.grace_seconds, deadline, now))
        .min()
}

/// Terminates the claim's instance, if it has one. `Err`: when to try again.
async fn terminate_instance(ctx: &Context, claim: &NodeClaim) -> Result<(), Duration> {
    let name = claim.name_any();
    match instance_id(ctx, claim).await {
        Ok(Some(id)) => {
            if let Err(e) = ctx.cloud.terminate(std::slice::from_ref(&id)).await {
                ctx.metrics.cloud_error(&e);
                tracing::warn!(nodeclaim = %name, instance = %id, error = %e, "terminating the instance failed; retrying");
                // An IAM refusal does not heal by retrying: say it where `kubectl describe`
                // looks, not only in the log.
                ctx.events
                    .publish(
                        &events::reference(claim),
                        Type::Warning,
                        "TerminationFailed",
                        &format!("instance {id}: {e}"),
                    )
                    .await;
                return Err(Duration::from_secs(5));
            }
            tracing::info!(nodeclaim = %name, instance = %id, "instance terminated");
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => {
            ctx.metrics.cloud_error(&e);
            Err(Duration::from_secs(5))
        }
    }
}

/// Releases and deletes the Node. `Err`: when to try again.
async fn remove_node(ctx: &Context, node: &Node) -> Result<(), Duration> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    if let Err(e) = release_node(ctx, &nodes, node).await {
        ctx.metrics.kube_error("nodes patch", &e);
        return Err(Duration::from_secs(2));
    }
    match nodes
        .delete(&node.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            ctx.metrics.kube_error("nodes delete", &e);
            Err(Duration::from_secs(2))
        }
    }
}

/// Says on the claim and the Node why the drain starts now, and measures an interruption's
/// message → cordon time (the drain cordons right after).
async fn announce_drain(ctx: &Context, claim: &NodeClaim, node: &Node, go: disrupted::Go) {
    let message = match &go {
        disrupted::Go::NoWait => return,
        disrupted::Go::Replaced(r) if r.is_empty() => {
            "its pods fit on existing capacity; cordoned and draining".to_string()
        }
        disrupted::Go::Replaced(r) => format!(
            "replacement NodeClaim(s) {} Initialized; cordoned and draining",
            r.join(", ")
        ),
        disrupted::Go::OutOfTime(r) => format!(
            "the deadline less the longest pod termination grace came before replacement NodeClaim(s) [{}] were Initialized; cordoned and draining",
            r.join(", ")
        ),
    };
    if let Some(sent) = ctx
        .interruption_sent
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&claim.name_any())
    {
        let latency = std::time::SystemTime::now()
            .duration_since(sent.at)
            .unwrap_or_default()
            .as_secs_f64();
        ctx.metrics.interruption.message_to_cordon.observe(latency);
    }
    let ty = match go {
        disrupted::Go::OutOfTime(_) => {
            ctx.metrics.disruption.replacement_failures.inc();
            Type::Warning
        }
        _ => Type::Normal,
    };
    for r in [events::reference(claim), events::reference(node)] {
        ctx.events.publish(&r, ty, "Draining", &message).await;
    }
}

/// The Node side of the finalizer: a Node deleted directly (kubectl delete node) has its
/// claim terminated, which drains it; a Node with the finalizer but no claim is released.
pub async fn run_node_finalizer(ctx: std::sync::Arc<Context>) {
    let mut rx = ctx.state.subscribe();
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            c = rx.recv() => match c {
                Ok(Change::Node(_)) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(_) => return,
            }
        }
        for node in ctx.state.nodes.state() {
            if node.metadata.deletion_timestamp.is_none()
                || !node.finalizers().iter().any(|f| f == ctx.finalizer())
            {
                continue;
            }
            match ctx.state.claim_for_node(&node) {
                Some(c) if c.metadata.deletion_timestamp.is_none() => {
                    if let Err(e) =
                        request_termination(&ctx, &c.name_any(), TerminationReason::NodeDeleted)
                            .await
                    {
                        ctx.metrics.kube_error("nodeclaims delete", &e);
                    }
                }
                Some(_) => {}
                None => {
                    let nodes: Api<Node> = Api::all(ctx.client.clone());
                    if let Err(e) = release_node(&ctx, &nodes, node.as_ref()).await {
                        ctx.metrics.kube_error("nodes patch", &e);
                    }
                }
            }
        }
    }
}
