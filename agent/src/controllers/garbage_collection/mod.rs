//! Garbage collection, every `--gc-interval`, comparing EC2 with the NodeClaims:
//! - an instance tagged for this cluster whose `joiner.dev/nodeclaim` names no NodeClaim,
//!   launched more than `--gc-grace` ago, is terminated (a crash between CreateFleet and
//!   the claim's creation or status update leaves nothing running);
//! - a launched NodeClaim whose instance is gone (terminated outside the agent) is
//!   deleted, so its pods are planned again; when its Node never registered, EC2's state
//!   reason for the instance is reported ([`crate::controllers::launch_failure`]) and the
//!   claim ends as a failed launch;
//! - a Node carrying the agent's finalizer or `joiner.dev/nodeclaim` label whose claim is
//!   gone is deleted;
//! - launch templates no NodeClass uses, or no launch has used for a minute, are pruned
//!   (`cloud::launch_template`), so a template lives one to three minutes past its last
//!   launch at this loop's default period.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::api::NodeClaim;
use crate::cloud::{Instance, TAG_NODECLAIM};
use crate::controllers::claim_termination::{request_termination, TerminationReason};
use crate::controllers::conditions::{self, LAUNCHED};
use crate::controllers::context::Context;
use crate::controllers::launch_failure;
use crate::labels;

pub async fn run(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(ctx.config.gc_interval);
    loop {
        tick.tick().await;
        collect(&ctx).await;
    }
}

/// One pass.
pub async fn collect(ctx: &Context) {
    let grace = ctx.config.gc_grace.as_secs_f64();
    let now = jiff::Timestamp::now().as_second();
    let instances = match ctx.cloud.instances().await {
        Ok(i) => i,
        Err(e) => {
            ctx.metrics.cloud_error(&e);
            tracing::warn!(error = %e, "garbage collection: listing instances failed");
            return;
        }
    };
    let claims = ctx.state.node_claims.list();
    terminate_orphans(ctx, &instances, &claims, grace, now).await;
    delete_claims_without_instance(ctx, &instances, &claims, grace).await;
    delete_nodes_without_claim(ctx, grace).await;
    let classes: Vec<crate::api::NodeClass> = ctx
        .state
        .node_classes
        .list()
        .iter()
        .map(|c| (**c).clone())
        .collect();
    if let Err(e) = ctx.cloud.prune_launch_templates(&classes).await {
        ctx.metrics.cloud_error(&e);
    }
}

/// Orphaned instances: alive, older than the grace, and naming no NodeClaim that exists.
async fn terminate_orphans(
    ctx: &Context,
    instances: &[Instance],
    claims: &[Arc<NodeClaim>],
    grace: f64,
    now: i64,
) {
    let claim_names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
    let orphans: Vec<String> = instances
        .iter()
        .filter(|i| {
            matches!(
                i.state.as_str(),
                "pending" | "running" | "stopping" | "stopped"
            )
        })
        .filter(|i| {
            i.tags
                .get(TAG_NODECLAIM)
                .is_none_or(|c| !claim_names.contains(c) && ctx.state.node_claims.get(c).is_none())
        })
        .filter(|i| (now - i.launch_time) as f64 >= grace)
        .map(|i| i.instance_id.clone())
        .collect();
    if !orphans.is_empty() {
        tracing::warn!(instances = ?orphans, "garbage collection: terminating instances with no NodeClaim");
        match ctx.cloud.terminate(&orphans).await {
            Ok(()) => {
                ctx.metrics
                    .gc_instances_terminated
                    .inc_by(orphans.len() as u64);
            }
            Err(e) => ctx.metrics.cloud_error(&e),
        }
    }
}

/// Claims launched longer than the grace ago whose instance is gone.
async fn delete_claims_without_instance(
    ctx: &Context,
    instances: &[Instance],
    claims: &[Arc<NodeClaim>],
    grace: f64,
) {
    let live: HashSet<&str> = instances
        .iter()
        .filter(|i| !matches!(i.state.as_str(), "terminated" | "shutting-down"))
        .map(|i| i.instance_id.as_str())
        .collect();
    for c in claims {
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(status) = c.status.as_ref() else {
            continue;
        };
        let Some(launched) =
            conditions::get(&status.conditions, LAUNCHED).filter(|l| l.status == "True")
        else {
            continue;
        };
        if conditions::age_seconds(launched).is_none_or(|a| a < grace) {
            continue;
        }
        let Some(id) = status
            .provider_id
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
        else {
            continue;
        };
        if !live.contains(id) {
            tracing::warn!(nodeclaim = %c.name_any(), instance = %id, "garbage collection: the claim's instance is gone; deleting the claim");
            let reason = if launch_failure::never_registered(c)
                && launch_failure::report(ctx, c, id).await.is_some()
            {
                TerminationReason::LaunchFailed
            } else {
                TerminationReason::InstanceGone
            };
            match request_termination(ctx, &c.name_any(), reason).await {
                Ok(()) => {
                    ctx.metrics.gc_nodeclaims_deleted.inc();
                }
                Err(e) => ctx.metrics.kube_error("nodeclaims delete", &e),
            }
        }
    }
}

/// Nodes labelled for a NodeClaim that is gone, older than the grace.
async fn delete_nodes_without_claim(ctx: &Context, grace: f64) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for n in ctx.state.nodes.state() {
        let Some(claim) = n.labels().get(labels::JOINER_NODECLAIM) else {
            continue;
        };
        if ctx.state.node_claims.get(claim).is_some() || n.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let age = n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| jiff::Timestamp::now().duration_since(t.0).as_secs_f64())
            .unwrap_or(0.0);
        if age < grace {
            continue;
        }
        tracing::warn!(node = %n.name_any(), nodeclaim = %claim, "garbage collection: deleting a node whose NodeClaim is gone");
        match nodes.delete(&n.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => ctx.metrics.kube_error("nodes delete", &e),
        }
    }
}
