//! NodeOverlays: which ones apply, and their validation reported on their status.
//!
//! Overlays change prices and extended resources in the catalogue every loop reads
//! ([`apply`]): provisioning's round (and so consolidation, which simulates with the
//! round's catalogue) and the launch (which orders CreateFleet by the overlaid prices).
//! An overlay that does not validate changes nothing; its status says why
//! (`ValidationSucceeded=False`), with an Event, as Karpenter reports it.

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::conditions::{self, READY, VALIDATION_SUCCEEDED};
use super::events::{self, Type};
use super::state::{Change, ClusterState};
use super::Context;
use crate::api::node_overlay::{validate, NodeOverlay};
use crate::catalog::overlay::{self, Overlay};
use crate::catalog::Catalog;

/// The overlays that validate, parsed (the others change nothing).
pub fn active(state: &ClusterState) -> Vec<Overlay> {
    state
        .node_overlays
        .list()
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter(|o| validate(&o.spec, "spec").is_empty())
        .map(|o| Overlay::from_spec(&o.name_any(), &o.spec))
        .collect()
}

/// `catalog` as the overlays in the cluster price it.
pub fn apply(state: &ClusterState, catalog: &Catalog) -> Catalog {
    let overlays = active(state);
    overlay::apply(catalog, &overlays)
}

async fn report(ctx: &Context, o: &NodeOverlay) {
    let errors = validate(&o.spec, "spec");
    let mut conds = o.status.clone().unwrap_or_default().conditions;
    let changed = if errors.is_empty() {
        conditions::set(&mut conds, VALIDATION_SUCCEEDED, true, "Valid", "")
            | conditions::set(&mut conds, READY, true, "Ready", "")
    } else {
        let msg = format!(
            "invalid NodeOverlay, not applied: {}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
        let changed = conditions::set(
            &mut conds,
            VALIDATION_SUCCEEDED,
            false,
            "ValidationFailed",
            &msg,
        ) | conditions::set(&mut conds, READY, false, "NotReady", &msg);
        if changed {
            tracing::warn!(nodeoverlay = %o.name_any(), reason = %msg, "NodeOverlay not applied");
            ctx.events
                .publish(
                    &events::reference(o),
                    Type::Warning,
                    "ValidationFailed",
                    &msg,
                )
                .await;
        }
        changed
    };
    if !changed {
        return;
    }
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let patch = json!({"status": {"conditions": conds}});
    if let Err(e) = api
        .patch_status(
            &o.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        ctx.metrics.kube_error("nodeoverlays/status patch", &e);
        tracing::warn!(nodeoverlay = %o.name_any(), error = %e, "NodeOverlay status patch failed");
    }
}

/// Re-checks every NodeOverlay when one changes.
pub async fn run(ctx: Arc<Context>) {
    let mut rx = ctx.state.subscribe();
    loop {
        for o in ctx.state.node_overlays.list() {
            report(&ctx, &o).await;
        }
        loop {
            match rx.recv().await {
                Ok(Change::NodeOverlay(_)) => break,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(_) => return,
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
