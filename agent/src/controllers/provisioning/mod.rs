//! Provisioning: pending pods are batched ([`batcher`]), then one `schedule()` call plans
//! the round from the cluster state ([`input`]); planned NodeClaims are created
//! ([`nodeclaims`]) and the lifecycle loop launches them. Pods no NodePool can take get a
//! `FailedScheduling` Event with the scheduler's reason per NodePool.

pub mod batcher;
pub mod fargate;
pub mod input;
pub mod nodeclaims;
pub mod warm;

use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use tokio::sync::Notify;

use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::controllers::state::Change;
use crate::controllers::Context;
use crate::scheduler::schedule;

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
    let _watcher = crate::controllers::AbortOnDrop(tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(Change::NodeClaim(name)) => {
                    if state.node_claims.get(&name).is_none() {
                        k.notify_one();
                    }
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
        let pending_uids = round(&ctx, last_seen).await;
        // Forget pods that are no longer pending, so they trigger again if they come back.
        batcher.seen.retain(|u| pending_uids.contains(u));
        for u in pending_uids {
            batcher.seen.insert(u);
        }
    }
}

/// One scheduling round. Returns the uids of the pods that were pending.
pub async fn round(ctx: &Context, last_seen: Option<Instant>) -> std::collections::HashSet<String> {
    let started = Instant::now();
    let r = input::build(ctx).await;
    let plan = schedule(&r.catalog, &r.input);
    ctx.metrics
        .scheduling_duration
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics.scheduling_rounds.inc();
    ctx.metrics.pods_pending.set(r.input.pods.len() as i64);
    let uids = r.pods.iter().filter_map(|p| p.uid()).collect();
    if r.input.pods.is_empty() {
        return uids;
    }
    let planned: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
    ctx.metrics
        .pods_scheduled
        .inc_by((plan.placements.len() + planned) as u64);
    tracing::info!(
        pending = r.input.pods.len(),
        on_existing = plan.placements.len(),
        new_claims = plan.new_claims.len(),
        unschedulable = plan.unschedulable.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "scheduling round"
    );
    for claim in &plan.new_claims {
        let Some(pool) = r.pools.get(&claim.nodepool) else {
            continue;
        };
        let mut obj = nodeclaims::build(claim, pool);
        // Drift compares these hashes with today's; stamping at birth means a change made
        // right after launch still drifts the node (unstamped claims are stamped later with
        // the then-current hashes, which would hide such a change).
        if let Some(class) = ctx
            .state
            .node_classes
            .get(&pool.spec.template.spec.node_class_ref.name)
        {
            obj.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(crate::disruption::drift::stamp(&pool.spec, &class.spec));
        }
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
                tracing::info!(
                    nodeclaim = %name,
                    nodepool = %claim.nodepool,
                    pods = claim.pods.len(),
                    candidates = claim.instance_types.len(),
                    cheapest = claim.instance_types.first().map(|c| c.instance_type.as_str()).unwrap_or(""),
                    "created NodeClaim"
                );
                ctx.claims.add(&name);
            }
            Err(e) => {
                ctx.metrics.kube_error("nodeclaims create", &e);
                tracing::warn!(nodeclaim = %name, error = %e, "creating NodeClaim failed; the next round retries");
            }
        }
    }
    for u in &plan.unschedulable {
        ctx.metrics.pods_unschedulable.inc();
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
            .publish(
                &events::reference(pod.as_ref()),
                Type::Warning,
                "FailedScheduling",
                &msg,
            )
            .await;
    }
    uids
}
