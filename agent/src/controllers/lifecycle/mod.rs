//! A NodeClaim's life, one reconcile per claim at a time ([`crate::controllers::queue`]):
//! Launched ([`launch`]) → Registered ([`registration`], with the registration TTL) →
//! Initialized ([`initialization`]); a claim being deleted goes to the termination
//! controller's finalizer (handed to [`run`] by the controller list, [`Finalize`]), and one
//! disrupted but not being deleted (a disruption cut short by a crash) has its termination
//! requested. Triggers: claim and node changes, pods leaving a draining node, and a
//! periodic resync that catches anything a lagged watch hid.

pub mod backoff;
pub mod initialization;
pub mod launch;
pub mod registration;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crate::controllers::context::Context;
use crate::controllers::disrupted;
use crate::controllers::nodeclaims;
use crate::controllers::state::Change;
use crate::task::AbortOnDrop;

/// How many claims are reconciled at once. Launches are network-bound and a scale-out
/// round can plan dozens of claims: with 16 workers, 67 claims queued for up to four
/// CreateFleet round trips (mean pending → launch 2.9 s in `agent_e2e`).
const WORKERS: usize = 64;
const RESYNC: Duration = Duration::from_secs(30);

/// One step of a deleted claim's termination, returning when to look again: the
/// termination controller's finalizer, which shares this loop's queue so that a claim is
/// never launched and terminated at once.
pub type Finalize = for<'a> fn(&'a Context, &'a NodeClaim) -> BoxFuture<'a, Option<Duration>>;

/// What the loop keeps between reconciles.
pub struct Lifecycle {
    finalize: Finalize,
    /// NodePools in registration back-off: registration records a pool's timeouts and its
    /// recovery, launch waits the back-off out.
    registration_health: Mutex<backoff::RegistrationHealth>,
}

pub async fn run(ctx: Arc<Context>, finalize: Finalize) {
    let own = Arc::new(Lifecycle {
        finalize,
        registration_health: Mutex::new(Default::default()),
    });
    let trigger_ctx = ctx.clone();
    let _trigger = AbortOnDrop(tokio::spawn(async move {
        let ctx = trigger_ctx;
        let mut rx = ctx.state.subscribe();
        let mut resync = tokio::time::interval(RESYNC);
        loop {
            tokio::select! {
                _ = resync.tick() => {
                    for c in ctx.state.node_claims.list() { ctx.claims.add(&c.name_any()); }
                }
                c = rx.recv() => match c {
                    Ok(Change::NodeClaim(name)) => ctx.claims.add(&name),
                    Ok(Change::Node(name)) => {
                        if let Some(node) = ctx.state.node(&name) {
                            if let Some(c) = ctx.state.claim_for_node(&node) {
                                ctx.claims.add(&c.name_any());
                            }
                        }
                    }
                    // A volume detached from a node being terminated advances its termination.
                    Ok(Change::VolumeAttachment(node)) if !node.is_empty() => {
                        if let Some(n) = ctx.state.node(&node) {
                            if let Some(c) = ctx.state.claim_for_node(&n) {
                                if c.metadata.deletion_timestamp.is_some() {
                                    ctx.claims.add(&c.name_any());
                                }
                            }
                        }
                    }
                    Ok(Change::Pod { node: Some(node), .. }) => {
                        // Pods leaving a draining node advance its termination.
                        if let Some(n) = ctx.state.node(&node) {
                            if let Some(c) = ctx.state.claim_for_node(&n) {
                                if c.metadata.deletion_timestamp.is_some() {
                                    ctx.claims.add(&c.name_any());
                                }
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for c in ctx.state.node_claims.list() { ctx.claims.add(&c.name_any()); }
                    }
                    Err(_) => return,
                }
            }
        }
    }));
    let worker_ctx = ctx.clone();
    ctx.claims
        .clone()
        .run(WORKERS, move |name| {
            let ctx = worker_ctx.clone();
            let own = own.clone();
            async move { reconcile(&ctx, &own, &name).await }
        })
        .await;
}

/// One step for one claim; returns when to look again (None: on the next change).
pub async fn reconcile(ctx: &Context, own: &Lifecycle, name: &str) -> Option<Duration> {
    let claim = ctx.state.node_claims.get(name)?;
    if claim.metadata.deletion_timestamp.is_some() {
        return (own.finalize)(ctx, &claim).await;
    }
    if !claim.finalizers().iter().any(|f| f == ctx.finalizer()) {
        // A claim someone else created: adopt it into the termination flow first.
        let mut fins = claim.finalizers().to_vec();
        fins.push(ctx.finalizer().into());
        let api = ctx.node_claim_api();
        if let Err(e) = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": fins}})),
            )
            .await
        {
            ctx.metrics.kube_error("nodeclaims patch", &e);
            return Some(Duration::from_secs(5));
        }
    }
    if disrupted::is_disrupted(&claim) {
        return disrupted::resume(ctx, &claim).await;
    }
    let conds = claim
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if !conditions::is_true(&conds, LAUNCHED) {
        // A claim recording a node another controller launched: adoption writes its
        // status; launching for it would buy a second instance.
        if nodeclaims::is_adopted(&claim) {
            return Some(Duration::from_secs(2));
        }
        return launch::reconcile(ctx, own, &claim).await;
    }
    if !conditions::is_true(&conds, REGISTERED) {
        return registration::reconcile(ctx, own, &claim).await;
    }
    if !conditions::is_true(&conds, INITIALIZED) {
        return initialization::reconcile(ctx, &claim).await;
    }
    None
}
