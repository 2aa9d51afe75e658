//! A NodePool's standing as several loops need it: whether it can be served ([`usable`]:
//! the validation loop writes the verdict on the pool's status, the scheduling input serves
//! only the pools it passes) and one condition set on its status ([`set_condition`]:
//! registration health, adoption).

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use super::conditions;
use super::context::Context;
use super::state::ClusterState;
use crate::api::served::ClassCloud;
use crate::api::{NodeClass, NodePool};
use crate::scheduler::ParsedPool;

/// The NodeClass a NodePool launches with and the pool as the verdict read it, or why the
/// pool cannot be served.
pub fn usable(
    state: &ClusterState,
    pool: &NodePool,
) -> Result<(Arc<NodeClass>, ParsedPool), String> {
    let parsed = ParsedPool::parse(&pool.name_any(), &pool.spec).map_err(|errors| {
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        format!("invalid NodePool: {}", msgs.join("; "))
    })?;
    let class_ref = &pool.spec.template.spec.node_class_ref;
    if !state.served.refers_to_served_class(class_ref) {
        let served = state.served.node_classes();
        return Err(format!(
            "nodeClassRef names a {}/{}; this agent serves {}/{}",
            class_ref.group, class_ref.kind, served.group, served.kind
        ));
    }
    let class_name = &class_ref.name;
    let Some(class) = state.node_classes.get(class_name) else {
        if let Some((_, e)) = state
            .node_classes
            .malformed()
            .into_iter()
            .find(|(n, _)| n == class_name)
        {
            return Err(format!("NodeClass {class_name:?} is malformed: {e}"));
        }
        return Err(format!("NodeClass {class_name:?} not found"));
    };
    // A class being deleted launches nothing more: its finalizer waits for its claims.
    if class.metadata.deletion_timestamp.is_some() {
        return Err(format!("NodeClass {class_name:?} is being deleted"));
    }
    if state.served.cloud == ClassCloud::Kwok && state.served.is_karpenter() {
        // A KWOKNodeClass has no spec to check: its readiness is its Ready condition,
        // which its CRD defaults to True and a test may set False.
        let ready = class
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
        if let Some(c) = ready.filter(|c| c.status != "True") {
            return Err(format!(
                "NodeClass {class_name:?} is not ready: {}",
                if c.message.is_empty() {
                    &c.reason
                } else {
                    &c.message
                }
            ));
        }
        return Ok((class, parsed));
    }
    let errors = crate::api::validate::node_class(&class.spec, "spec");
    if !errors.is_empty() {
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        return Err(format!(
            "NodeClass {class_name:?} is invalid: {}",
            msgs.join("; ")
        ));
    }
    Ok((class, parsed))
}

/// Sets one condition on a pool's status (a merge patch of the conditions the watch last
/// saw, with this one set), for the loops that report on pools: registration health,
/// adoption. Nothing is written when nothing changes.
pub async fn set_condition(
    ctx: &Context,
    pool: &str,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
) {
    let Some(np) = ctx.state.node_pools.get(pool) else {
        return;
    };
    let mut conds = np.status.clone().unwrap_or_default().conditions;
    if !conditions::set(&mut conds, type_, ok, reason, message) {
        return;
    }
    let api = ctx.node_pool_api();
    let patch = json!({"status": {"conditions": conds}});
    if let Err(e) = api
        .patch_status(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        ctx.metrics.kube_error("nodepools/status patch", &e);
        tracing::warn!(nodepool = %pool, error = %e, "NodePool status patch failed");
    }
}
