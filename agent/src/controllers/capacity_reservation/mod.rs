//! The end of a reservation's nodes (Karpenter's `capacityreservation.expiration` and
//! `capacityreservation.capacitytype` controllers, in one loop).
//!
//! Every `--reservation-check-interval`, the reservations of the NodeClaims launched into
//! one (their `karpenter.k8s.aws/capacity-reservation-id`) are read from EC2 and each
//! claim's fate decided by [`crate::catalog::reservations::fate`]:
//! - a capacity block 40 minutes from its end (10 minutes before EC2 starts terminating
//!   its instances) is drained: the claim is disrupted as an interruption is, replacement
//!   first, with EC2's reclaim time as the deadline;
//! - an on-demand reservation that expired or was cancelled leaves its instance running as
//!   ordinary on-demand capacity: the claim and its Node are relabelled `on-demand`, the
//!   reservation labels removed, so prices and drift see what the node now is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::claim_termination::TerminationReason;
use super::context::Context;
use super::disrupted::{self, is_disrupted, Mark};
use crate::api::NodeClaim;
use crate::catalog::reservations::{fate, ReservationKind, ReservedFate};
use crate::controllers::conditions;
use crate::labels;

/// Claims launched into a reservation, with its ID and kind.
fn reserved_claims(ctx: &Context) -> Vec<(Arc<NodeClaim>, String, ReservationKind)> {
    ctx.state
        .node_claims
        .list()
        .into_iter()
        .filter(|c| !is_disrupted(c))
        .filter(|c| {
            c.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, conditions::LAUNCHED))
        })
        .filter_map(|c| {
            let l = c.labels();
            if l.get(labels::CAPACITY_TYPE).map(String::as_str)
                != Some(labels::CAPACITY_TYPE_RESERVED)
            {
                return None;
            }
            let id = l.get(labels::CAPACITY_RESERVATION_ID)?.clone();
            let kind = l
                .get(labels::CAPACITY_RESERVATION_TYPE)
                .and_then(|k| ReservationKind::parse(k))
                .unwrap_or(ReservationKind::Default);
            Some((c, id, kind))
        })
        .collect()
}

/// One pass. Errors name the call that failed.
pub async fn reconcile(ctx: &Context) -> Result<(), String> {
    let claims = reserved_claims(ctx);
    if claims.is_empty() {
        return Ok(());
    }
    let mut ids: Vec<String> = claims.iter().map(|(_, id, _)| id.clone()).collect();
    ids.sort();
    ids.dedup();
    let records = ctx.cloud.capacity_reservations(&ids).await.map_err(|e| {
        ctx.metrics.cloud_error(&e);
        e.to_string()
    })?;
    let by_id: BTreeMap<&str, _> = records.iter().map(|r| (r.id.as_str(), r)).collect();
    let now = jiff::Timestamp::now();
    for (claim, id, kind) in claims {
        match fate(kind, by_id.get(id.as_str()).copied(), now.as_second()) {
            ReservedFate::Keep => {}
            ReservedFate::Drain { deadline } => {
                let deadline = jiff::Timestamp::from_second(deadline).unwrap_or(now);
                let message = format!(
                    "capacity block {id} ends: EC2 reclaims its instances from {deadline}; \
                     replacement first, then drain"
                );
                disrupted::disrupt(
                    ctx,
                    &claim,
                    Mark {
                        reason: TerminationReason::Interrupted,
                        condition_reason: "CapacityBlockExpiring",
                        message: &message,
                        deadline,
                        replaced_by: None,
                    },
                )
                .await?;
                tracing::info!(nodeclaim = %claim.name_any(), reservation = %id, %deadline, "capacity block expiring: draining");
                ctx.events
                    .publish(
                        &super::events::reference(claim.as_ref()),
                        super::events::Type::Normal,
                        "CapacityBlockExpiring",
                        &message,
                    )
                    .await;
            }
            ReservedFate::NoLongerReserved => relabel_on_demand(ctx, &claim, &id).await?,
        }
    }
    Ok(())
}

/// The claim and its Node become on-demand: no reservation labels, capacity type
/// `on-demand`.
async fn relabel_on_demand(ctx: &Context, claim: &NodeClaim, id: &str) -> Result<(), String> {
    let patch = json!({"metadata": {"labels": {
        labels::CAPACITY_TYPE: labels::CAPACITY_TYPE_ON_DEMAND,
        labels::CAPACITY_RESERVATION_ID: null,
        labels::CAPACITY_RESERVATION_TYPE: null,
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE: null,
    }}});
    let name = claim.name_any();
    let claims = ctx.node_claim_api();
    let updated = claims
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            ctx.metrics.kube_error("nodeclaims patch", &e);
            format!("relabelling NodeClaim {name} on-demand (nodeclaims patch): {e}")
        })?;
    ctx.state.node_claims.insert(&name, updated);
    if let Some(node) = ctx.state.node_for_claim(claim) {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client.clone());
        nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| {
                ctx.metrics.kube_error("nodes patch", &e);
                format!(
                    "relabelling Node {} on-demand (nodes patch): {e}",
                    node.name_any()
                )
            })?;
    }
    let message = format!(
        "capacity reservation {id} no longer holds this instance (expired or cancelled): it \
         runs on as on-demand capacity"
    );
    tracing::info!(nodeclaim = %name, reservation = %id, "reservation lapsed: relabelled on-demand");
    ctx.events
        .publish(
            &super::events::reference(claim),
            super::events::Type::Normal,
            "CapacityReservationLapsed",
            &message,
        )
        .await;
    Ok(())
}

pub async fn run(ctx: Arc<Context>) {
    let every = ctx
        .config
        .reservation_check_interval
        .max(Duration::from_millis(100));
    loop {
        if let Err(e) = reconcile(&ctx).await {
            tracing::warn!(error = %e, "capacity reservation check failed; retrying");
        }
        tokio::time::sleep(every).await;
    }
}
