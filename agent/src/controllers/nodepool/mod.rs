//! NodePool readiness: a NodePool is served only when its spec validates
//! ([`crate::api::validate::node_pool`]) and its NodeClass exists and validates
//! ([`crate::controllers::pool_status::usable`]). The reason it is not is written on
//! its status conditions and as an Event; the others are served regardless.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::conditions::{self, READY, VALIDATION_SUCCEEDED};
use super::context::Context;
use super::events::{self, Type};
use super::pool_status::usable;
use super::state::Change;
use crate::api::NodePool;

async fn report(ctx: &Context, pool: &NodePool) {
    let verdict = usable(&ctx.state, pool);
    let mut conds = pool.status.clone().unwrap_or_default().conditions;
    let changed = match &verdict {
        Ok(_) => {
            conditions::set(&mut conds, VALIDATION_SUCCEEDED, true, "Valid", "")
                | conditions::set(&mut conds, READY, true, "Ready", "")
        }
        Err(msg) => {
            conditions::set(
                &mut conds,
                VALIDATION_SUCCEEDED,
                false,
                "ValidationFailed",
                msg,
            ) | conditions::set(&mut conds, READY, false, "NotReady", msg)
        }
    };
    if !changed {
        return;
    }
    if let Err(msg) = &verdict {
        tracing::warn!(nodepool = %pool.name_any(), reason = %msg, "NodePool not served");
        ctx.events
            .publish(
                &events::reference(pool),
                Type::Warning,
                "ValidationFailed",
                msg,
            )
            .await;
    }
    let api = ctx.node_pool_api();
    let patch = json!({"status": {"conditions": conds}});
    if let Err(e) = api
        .patch_status(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        ctx.metrics.kube_error("nodepools/status patch", &e);
        tracing::warn!(nodepool = %pool.name_any(), error = %e, "NodePool status patch failed");
    }
}

/// A NodePool whose fields do not even parse: report it through an untyped patch.
async fn report_malformed(
    ctx: &Context,
    name: &str,
    error: &str,
    last: &mut BTreeMap<String, String>,
) {
    if last.get(name).is_some_and(|e| e == error) {
        return;
    }
    last.insert(name.to_string(), error.to_string());
    let msg = format!("NodePool cannot be read: {error}");
    let ar = ctx.served.node_pools();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
    let obj = api.get_opt(name).await.ok().flatten();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("joiner.dev/v1".into()),
        kind: Some("NodePool".into()),
        name: Some(name.to_string()),
        uid: obj.as_ref().and_then(|o| o.metadata.uid.clone()),
        ..Default::default()
    };
    ctx.events
        .publish(&reference, Type::Warning, "ValidationFailed", &msg)
        .await;
    let now = conditions::now_rfc3339();
    let patch = json!({"status": {"conditions": [
        {"type": VALIDATION_SUCCEEDED, "status": "False", "reason": "Malformed", "message": msg, "lastTransitionTime": now},
        {"type": READY, "status": "False", "reason": "Malformed", "message": msg, "lastTransitionTime": now},
    ]}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        ctx.metrics.kube_error("nodepools/status patch", &e);
    }
}

/// Re-checks every NodePool when a NodePool or NodeClass changes.
pub async fn run(ctx: Arc<Context>) {
    let mut rx = ctx.state.subscribe();
    let mut malformed_seen = BTreeMap::new();
    loop {
        for pool in ctx.state.node_pools.list() {
            report(&ctx, &pool).await;
        }
        for (name, err) in ctx.state.node_pools.malformed() {
            report_malformed(&ctx, &name, &err, &mut malformed_seen).await;
        }
        // Wait for a relevant change (or a lag, which may hide one), then debounce.
        loop {
            match rx.recv().await {
                Ok(Change::NodePool(_)) | Ok(Change::NodeClass(_)) => break,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(_) => return,
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
