//! Initialization: a registered Node is initialized once it is Ready, its startup taints
//! (and the kubelet's not-ready taints) are gone, and every resource its claim was sized
//! for is advertised with a non-zero allocatable (Karpenter's `RequestedResourcesRegistered`
//! in `nodeclaim/lifecycle/initialization.go`): an extended resource such as
//! `nvidia.com/gpu` or `aws.amazon.com/neuron` appears only once the node's device plugin
//! finds its driver, so a node booted from an image without it never initializes. Until
//! then the provisioner counts it as capacity that is coming, not as a node pods can be
//! placed on now.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::conditions::{self, INITIALIZED, READY};
use crate::controllers::context::Context;
use crate::controllers::nodeclaims;
use crate::labels;

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
    if let Some(name) = unregistered_resource(node, claim) {
        return Some(format!(
            "resource {name} was requested but is not registered: the node's allocatable has none"
        ));
    }
    None
}

/// The first resource the claim's requests name with a non-zero quantity that the node's
/// allocatable lacks or holds at zero.
fn unregistered_resource(node: &Node, claim: &NodeClaim) -> Option<String> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    claim
        .spec
        .resources
        .requests
        .iter()
        .filter(|(_, q)| crate::resources::parse_quantity(q).is_ok_and(|v| v > 0.0))
        .find(|(name, _)| {
            !allocatable
                .and_then(|a| a.get(name.as_str()))
                .is_some_and(|q| crate::resources::parse_quantity(&q.0).is_ok_and(|v| v > 0.0))
        })
        .map(|(name, _)| name.clone())
}

pub async fn reconcile(ctx: &Context, claim: &NodeClaim) -> Option<Duration> {
    let node = ctx.state.node_for_claim(claim)?;
    if let Some(why) = pending_reason(&node, claim) {
        let mut conds = claim.status.clone().unwrap_or_default().conditions;
        // Ready is Launched and Registered and Initialized, as on Karpenter's NodeClaims.
        if conditions::set(&mut conds, INITIALIZED, false, "NotInitialized", &why)
            | conditions::set(&mut conds, READY, false, "NotInitialized", &why)
        {
            let _ = nodeclaims::patch_status(ctx, &claim.name_any(), json!({"conditions": conds}))
                .await;
        }
        // Node changes wake the claim; this is the backstop.
        return Some(Duration::from_secs(30));
    }
    // The node's label first, as Karpenter's initialization does: a claim Initialized
    // names a node labelled so.
    if node
        .labels()
        .get(labels::KARPENTER_INITIALIZED)
        .map(String::as_str)
        != Some("true")
    {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        let patch = json!({"metadata": {"labels": {labels::KARPENTER_INITIALIZED: "true"}}});
        if let Err(e) = nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            ctx.metrics.kube_error("nodes patch", &e);
            return Some(Duration::from_secs(2));
        }
    }
    let mut conds = claim.status.clone().unwrap_or_default().conditions;
    conditions::set(&mut conds, INITIALIZED, true, "Initialized", "");
    conditions::set(&mut conds, READY, true, "Ready", "");
    match nodeclaims::patch_status(ctx, &claim.name_any(), json!({"conditions": conds})).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(allocatable: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": allocatable,
            },
        }))
        .unwrap()
    }

    #[test]
    fn requested_extended_resources_must_be_advertised() {
        let mut spec = crate::api::node_claim::NodeClaimSpec::default();
        for (k, v) in [("cpu", "500m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")] {
            spec.resources.requests.insert(k.into(), v.into());
        }
        let claim = NodeClaim::new("gpu-1", spec);
        let base = json!({"cpu": "3920m", "memory": "14Gi", "pods": "29"});
        let why = pending_reason(&node(base.clone()), &claim).expect("no GPU yet");
        assert!(why.contains("nvidia.com/gpu"), "{why}");
        let mut zero = base.clone();
        zero["nvidia.com/gpu"] = json!("0");
        assert!(
            pending_reason(&node(zero), &claim).is_some(),
            "a zero is not registered"
        );
        let mut one = base;
        one["nvidia.com/gpu"] = json!("1");
        assert_eq!(pending_reason(&node(one), &claim), None);
    }
}
