//! NodeOverlays' validation reported on their status. An overlay that does not validate
//! changes nothing ([`crate::controllers::overlays`] says which apply); its status says why
//! (`ValidationSucceeded=False`), with an Event, as Karpenter reports it.

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use super::conditions::{self, READY, VALIDATION_SUCCEEDED};
use super::context::Context;
use super::events::{self, Type};
use super::state::Change;
use crate::api::node_overlay::{validate, NodeOverlay};

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
    let api = ctx.node_overlay_api();
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
