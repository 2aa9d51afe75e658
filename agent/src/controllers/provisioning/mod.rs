//! Provisioning: pending pods are batched ([`batcher`]), then one scheduler call plans the
//! round from the cluster state ([`scheduling_input`]): `schedule_with_spare_room`, which
//! adds a spare pod's room where displaced pods leave several domains; planned NodeClaims are created
//! ([`nodeclaims`], the one place they are) and the lifecycle loop launches them. Pods no NodePool can take get a
//! `FailedScheduling` Event with the scheduler's reason per NodePool.
//!
//! The pods of disrupted or deleting nodes (interruption, consolidation, drift, expiry)
//! are planned with the pending ones, so their replacements come from the same batch and
//! the same NodeClaim path; the claims they land on are named on the disrupted claim for
//! termination to wait for (see [`disrupted`]).
//!
//! Capacity no pod asks for comes from the same round and path ([`capacity`]): the
//! missing replicas of static pools, and the headroom and spare nodes of pools that keep
//! some. A pod bound anywhere may have taken a pool's headroom, so with headroom or
//! replicas configured a binding also starts a (batched) round.

pub mod batcher;
pub mod capacity;
pub mod warm;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use tokio::sync::Notify;

use crate::api::NodeClaim;
use crate::controllers::conditions;
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::controllers::scheduling_input::{self, Round};
use crate::controllers::state::Change;
use crate::controllers::{disrupted, nodeclaims};
use crate::scheduler::headroom;
use crate::scheduler::{schedule_with_spare_room, spare_rooms, NewNodeClaim, Target};

use batcher::{Batcher, Trigger};

/// Runs the provisioning loop (leader only).
pub async fn run(ctx: Arc<Context>) {
    let mut rx = ctx.state.subscribe();
    let kick = Arc::new(Notify::new());
    // A NodeClaim that disappeared (failed launch, deleted) may leave pods without capacity.
    let mut batcher = Batcher::new(
        ctx.state.subscribe(),
        ctx.config.batch_idle,
        ctx.config.batch_max,
    );
    let k = kick.clone();
    let state = ctx.state.clone();
    // A claim newly disrupted puts its node's pods in the next batch (once per claim).
    let mut disrupted_seen = std::collections::HashSet::new();
    let _watcher = crate::task::AbortOnDrop(tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(Change::NodeClaim(name)) => match state.node_claims.get(&name) {
                    None => {
                        disrupted_seen.remove(&name);
                        k.notify_one();
                    }
                    Some(c) if disrupted::is_disrupted(&c) => {
                        if disrupted_seen.insert(name) {
                            k.notify_one();
                        }
                    }
                    Some(_) => {}
                },
                // A pod bound to a node may have used up a pool's headroom.
                Ok(Change::Pod {
                    provisionable: false,
                    node: Some(_),
                    ..
                }) if state
                    .node_pools
                    .list()
                    .iter()
                    .any(|p| !p.spec.headroom.is_empty() || p.spec.replicas.is_some()) =>
                {
                    k.notify_one()
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => k.notify_one(),
                Err(_) => return,
            }
        }
    }));
    // Pods that were pending before this replica led are a batch of their own.
    let mut first = true;
    loop {
        let trigger = if first {
            first = false;
            Trigger::Kick
        } else {
            batcher.next(&kick).await
        };
        let last_seen = match trigger {
            Trigger::Pods { last_seen } => Some(last_seen),
            _ => None,
        };
        // The pods the round planned, at the versions it saw; pods no longer pending are
        // forgotten, so they trigger again if they come back.
        batcher.seen = round(&ctx, last_seen).await;
    }
}

/// Which pools the round found at their limits: the scheduler names the pool and the limit
/// in an unplaced pod's reasons.
fn record_limits(ctx: &Context, r: &Round, plan: &crate::scheduler::Plan) {
    for name in r.pools.keys() {
        let marker = format!("nodepool {name:?}: limit ");
        let at = plan
            .unschedulable
            .iter()
            .any(|u| u.reasons.iter().any(|why| why.starts_with(&marker)));
        ctx.metrics
            .nodepool_at_limit
            .get_or_create(&l(&[("nodepool", name)]))
            .set(i64::from(at));
    }
}

/// One scheduling round. Returns the pods that were pending: uid to resourceVersion.
pub async fn round(
    ctx: &Context,
    last_seen: Option<Instant>,
) -> std::collections::HashMap<String, String> {
    let started = Instant::now();
    let mut r = scheduling_input::build(ctx).await;
    let static_pools = capacity::split_static(&mut r);
    let plan = schedule_with_spare_room(&r.catalog, &r.input);
    ctx.metrics
        .scheduling_duration
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics.scheduling_rounds.inc();
    ctx.metrics.pods_pending.set(r.pods.len() as i64);
    let uids = r
        .pods
        .iter()
        .map(|p| (p.uid.clone(), p.version.clone()))
        .collect();
    record_limits(ctx, &r, &plan);
    let caps = capacity::pools(ctx, &r, &plan);
    if !caps.is_empty() {
        let now = jiff::Timestamp::now().as_second();
        let extra = headroom::extra_claims(&r.catalog, &r.input, &plan, &static_pools, &caps, now);
        create_extra(ctx, &r, &extra).await;
    }
    if r.input.pods.is_empty() {
        return uids;
    }
    let planned: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
    ctx.metrics
        .pods_scheduled
        .inc_by((plan.placements.len() + planned) as u64);
    tracing::info!(
        pending = r.pods.len(),
        displaced = r.displaced.len(),
        on_existing = plan.placements.len(),
        new_claims = plan.new_claims.len(),
        spare_rooms = spare_rooms(&r.input.pods),
        unschedulable = plan.unschedulable.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "scheduling round"
    );
    // Per disrupted claim: the claims its pods were put on.
    let mut replacements: Vec<BTreeSet<String>> = vec![BTreeSet::new(); r.disrupted.len()];
    for claim in &plan.new_claims {
        create_claim(ctx, &r, claim, last_seen, &mut replacements).await;
    }
    for p in &plan.placements {
        let Some(d) = disrupted_source(&r, p.pod) else {
            continue;
        };
        if let Some(c) = waiting_on(ctx, &p.target) {
            replacements[d].insert(c);
        }
    }
    let unplaced: BTreeSet<usize> = plan
        .unschedulable
        .iter()
        .filter_map(|u| disrupted_source(&r, u.pod))
        .collect();
    for (d, names) in replacements.iter().enumerate() {
        name_replacements(ctx, &r.disrupted[d], names, unplaced.contains(&d)).await;
    }
    report_unschedulable(ctx, &r, &plan).await;
    uids
}

/// The disrupted claim (its index in `r.disrupted`) input pod `pod` came from, if any: the
/// round's input lists the pending pods first, then the displaced ones.
fn disrupted_source(r: &Round, pod: usize) -> Option<usize> {
    pod.checked_sub(r.pods.len()).map(|i| r.displaced[i])
}

/// Creates one planned NodeClaim, and names it among the replacements of each disrupted
/// claim whose pods it takes. A failure is logged: the next round plans the pods again.
async fn create_claim(
    ctx: &Context,
    r: &Round,
    claim: &NewNodeClaim,
    last_seen: Option<Instant>,
    replacements: &mut [BTreeSet<String>],
) {
    let Some((_, obj)) = claim_object(ctx, r, claim) else {
        return;
    };
    let name = obj.name_any();
    if let Some(t) = last_seen {
        ctx.batch_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), t);
    }
    match nodeclaims::create(ctx, &obj).await {
        Ok(_) => {
            ctx.metrics
                .nodeclaims_created
                .get_or_create(&l(&[("nodepool", &claim.nodepool)]))
                .inc();
            let displaced = claim
                .pods
                .iter()
                .filter(|&&p| disrupted_source(r, p).is_some())
                .count();
            tracing::info!(
                nodeclaim = %name,
                nodepool = %claim.nodepool,
                pods = claim.pods.len(),
                displaced,
                candidates = claim.instance_types.len(),
                cheapest = claim.instance_types.first().map(|c| c.instance_type.as_str()).unwrap_or(""),
                "created NodeClaim"
            );
            let mut interrupted = false;
            for d in claim.pods.iter().filter_map(|&p| disrupted_source(r, p)) {
                replacements[d].insert(name.clone());
                interrupted |= ctx
                    .interruption_sent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(&r.disrupted[d].name_any());
            }
            if interrupted {
                ctx.metrics.interruption.replacements.inc();
            }
            ctx.claims.add(&name);
        }
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims create", &e);
            tracing::warn!(nodeclaim = %name, error = %e, "creating NodeClaim failed; the next round retries");
        }
    }
}

/// The claim a displaced pod placed on `target` waits for: a node or claim still coming
/// up is a replacement to wait for; a ready node is not.
fn waiting_on(ctx: &Context, target: &Target) -> Option<String> {
    match target {
        Target::InFlight(c) => Some(c.clone()),
        Target::Node(n) => ctx
            .state
            .node(n)
            .and_then(|node| ctx.state.claim_for_node(&node))
            .filter(|c| {
                !c.status
                    .as_ref()
                    .is_some_and(|s| conditions::is_true(&s.conditions, conditions::INITIALIZED))
            })
            .map(|c| c.name_any()),
    }
}

/// Tells each pending pod no NodePool can take why, by a FailedScheduling event.
async fn report_unschedulable(ctx: &Context, r: &Round, plan: &crate::scheduler::Plan) {
    for u in &plan.unschedulable {
        ctx.metrics.pods_unschedulable.inc();
        // Displaced pods are not pending: their node still runs them.
        let Some(pod) = r.pods.get(u.pod) else {
            continue;
        };
        let msg = if u.reasons.is_empty() {
            "Failed to schedule pod: no NodePool is ready to launch capacity".to_string()
        } else {
            format!(
                "Failed to schedule pod: no NodePool can take it: {}",
                u.reasons.join("; ")
            )
        };
        ctx.events
            .publish(&pod.reference(), Type::Warning, "FailedScheduling", &msg)
            .await;
    }
}

/// The NodeClaim object for a planned claim, built against its pool as the round read it
/// and the pool's class as it is now; None when the round has no such pool.
fn claim_object<'a>(
    ctx: &Context,
    r: &'a Round,
    claim: &NewNodeClaim,
) -> Option<(&'a Arc<crate::api::NodePool>, NodeClaim)> {
    let pool = r.pools.get(&claim.nodepool)?;
    let class = ctx
        .state
        .node_classes
        .get(&pool.spec.template.spec.node_class_ref.name);
    Some((
        pool,
        nodeclaims::build(&ctx.served, claim, pool, class.as_deref()),
    ))
}

/// Creates the claims no pod waits for (static replicas, headroom, spare nodes).
async fn create_extra(ctx: &Context, r: &Round, extra: &[NewNodeClaim]) {
    for claim in extra {
        let Some((pool, obj)) = claim_object(ctx, r, claim) else {
            continue;
        };
        let name = obj.name_any();
        let why = if pool.spec.replicas.is_some() {
            "static replicas"
        } else {
            "headroom"
        };
        match nodeclaims::create(ctx, &obj).await {
            Ok(_) => {
                ctx.metrics
                    .nodeclaims_created
                    .get_or_create(&l(&[("nodepool", &claim.nodepool)]))
                    .inc();
                tracing::info!(
                    nodeclaim = %name,
                    nodepool = %claim.nodepool,
                    reason = why,
                    candidates = claim.instance_types.len(),
                    cheapest = claim.instance_types.first().map(|c| c.instance_type.as_str()).unwrap_or(""),
                    "created NodeClaim"
                );
                ctx.events
                    .publish(
                        &events::reference(pool.as_ref()),
                        Type::Normal,
                        "Provisioned",
                        &format!("NodeClaim {name} launched for the pool's {why}"),
                    )
                    .await;
                ctx.claims.add(&name);
            }
            Err(e) => {
                ctx.metrics.kube_error("nodeclaims create", &e);
                tracing::warn!(nodeclaim = %name, error = %e, "creating NodeClaim failed; the next round retries");
            }
        }
    }
}

/// Names on a disrupted claim the claims its pods were put on ([`REPLACED_BY`]), which
/// termination waits for before draining. Written when the claim has a deadline and the
/// provisioner has not named replacements yet, or one it named is gone; a later round that
/// packs the pods differently does not rewrite a list whose claims are still coming.
async fn name_replacements(
    ctx: &Context,
    claim: &NodeClaim,
    names: &BTreeSet<String>,
    some_unplaced: bool,
) {
    if disrupted::deadline(claim).is_none() {
        return;
    }
    let name = claim.name_any();
    if let Some(old) = disrupted::replaced_by(claim) {
        let intact = old.iter().all(|c| {
            ctx.state
                .node_claims
                .get(c)
                .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
        });
        if intact {
            return;
        }
    }
    if !names.is_empty() {
        let mut sent = ctx
            .interruption_sent
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(s) = sent.get_mut(&name).filter(|s| !s.replacement_seen) {
            s.replacement_seen = true;
            let latency = std::time::SystemTime::now()
                .duration_since(s.at)
                .unwrap_or_default()
                .as_secs_f64();
            ctx.metrics
                .interruption
                .message_to_replacement
                .observe(latency);
        }
    }
    if some_unplaced {
        tracing::warn!(nodeclaim = %name, "some pods of a disrupted node fit no NodePool; they will wait as pending after the drain");
    }
    let list: Vec<&str> = names.iter().map(String::as_str).collect();
    let patch =
        serde_json::json!({"metadata": {"annotations": {disrupted::REPLACED_BY: list.join(",")}}});
    let api = ctx.node_claim_api();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(c) => {
            ctx.state.node_claims.insert(&name, c);
            ctx.claims.add(&name);
            tracing::info!(nodeclaim = %name, replacements = ?list, "replacements named for a disrupted node");
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => ctx.metrics.kube_error("nodeclaims patch (replaced-by)", &e),
    }
}
