//! Initialization: a registered Node is initialized once it is Ready and its startup
//! taints (and the kubelet's not-ready taints) are gone. Until then the provisioner counts
//! it as capacity that is coming, not as a node pods can be placed on now.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::conditions::{self, INITIALIZED, READY};
use crate::controllers::Context;

pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why the node is not initialized yet, if it is not.
pub fn pending_reason(node: &Node, claim: &NodeClaim) -> Option<String> {
    if !node_ready(node) {
        return Some("node is not Ready".into());
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if let Some(t) = taints.iter().find(|t| {
        t.key == "node.kubernetes.io/not-ready"
            || claim.spec.startup_taints.iter().any(|s| s.key == t.key)
    }) {
        return Some(format!("startup taint {} is still present", t.key));
    }
    None
}

pub async fn reconcile(ctx: &Context, claim: &NodeClaim) -> Option<Duration> {
    let node = ctx.state.node_for_claim(claim)?;
    if let Some(why) = pending_reason(&node, claim) {
        let mut conds = claim.status.clone().unwrap_or_default().conditions;
        // Ready is Launched and Registered and Initialized, as on Karpenter's NodeClaims.
        if conditions::set(&mut conds, INITIALIZED, false, "NotInitialized", &why)
            | conditions::set(&mut conds, READY, false, "NotInitialized", &why)
        {
            let _ = super::patch_status(ctx, &claim.name_any(), json!({"conditions": conds})).await;
        }
        // Node changes wake the claim; this is the backstop.
        return Some(Duration::from_secs(30));
    }
    let mut conds = claim.status.clone().unwrap_or_default().conditions;
    conditions::set(&mut conds, INITIALIZED, true, "Initialized", "");
    conditions::set(&mut conds, READY, true, "Ready", "");
    match super::patch_status(ctx, &claim.name_any(), json!({"conditions": conds})).await {
        Ok(updated) => {
            ctx.metrics
                .nodeclaims_initialized
                .get_or_create(&crate::controllers::operator::metrics::claim_labels(
                    &updated,
                ))
                .inc();
            tracing::info!(nodeclaim = %claim.name_any(), node = %node.name_any(), "initialized");
            None
        }
        Err(_) => Some(Duration::from_secs(2)),
    }
}
