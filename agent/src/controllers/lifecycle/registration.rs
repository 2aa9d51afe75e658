//! Registration: the Node that appears with the claim's providerID gets the claim's labels
//! and taints, the termination finalizer, and the NodePool's startup taints (once, at
//! registration, as Karpenter does: whatever removes them later is not fought). A claim
//! whose Node has not registered within `--registration-ttl` of its launch is deleted and
//! its instance terminated, with an Event saying the likely cause (the node role may not
//! join the cluster), a metric, and a back-off on its NodePool's launches
//! ([`super::backoff`]) reported as the pool's `NodeRegistrationHealthy` condition, so that
//! a pool whose nodes cannot join does not relaunch in a loop. The next claim of the pool
//! that registers clears it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::claim_termination::{request_termination, TerminationReason};
use crate::controllers::conditions::{self, LAUNCHED, REGISTERED};
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::{nodeclaims, pool_status};
use crate::labels;

use super::Lifecycle;

fn api_taint(t: &crate::api::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.clone(),
        time_added: None,
    }
}

/// The Node's taints after registration: the kubelet's, without the unregistered taint,
/// plus the claim's taints and startup taints it lacks.
pub fn registered_taints(node: &Node, claim: &NodeClaim) -> Vec<Taint> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints.retain(|t| t.key != labels::JOINER_UNREGISTERED_TAINT);
    for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(api_taint(t));
        }
    }
    taints
}

/// The condition on a NodePool saying whether its nodes register (Karpenter v1's name).
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

fn pool_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(labels::JOINER_NODEPOOL)
        .or_else(|| claim.labels().get(labels::KARPENTER_NODEPOOL))
        .cloned()
        .unwrap_or_default()
}

/// What the operator reads on the NodeClaim's Event: which instance, which role it runs as,
/// on which cluster, the likely cause and what the pool does now.
pub fn timeout_message(
    claim: &NodeClaim,
    class: Option<&crate::api::NodeClass>,
    cluster: &str,
    ttl: Duration,
    wait: Duration,
) -> String {
    let name = claim.name_any();
    let instance = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .unwrap_or("(unknown instance)");
    let identity = match class {
        Some(c) => match (&c.spec.instance_profile, &c.spec.role) {
            (Some(p), _) => format!("instance profile {p}"),
            (None, Some(r)) => format!("node role {r}"),
            (None, None) => "its instance profile".to_string(),
        },
        None => "its instance profile".to_string(),
    };
    let groups = class
        .and_then(|c| c.status.as_ref())
        .map(|s| {
            s.security_groups
                .iter()
                .map(|g| g.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "its NodeClass's security groups".to_string());
    format!(
        "the Node of NodeClaim {name} (instance {instance}) did not register within {}s of its \
         launch; the claim is deleted and the instance terminated. Likely causes: {identity} \
         may not join EKS cluster {cluster}: it needs an access entry of type EC2_LINUX \
         (joiner_access_entry) or a system:nodes mapping in kube-system/aws-auth; or its \
         kubelet cannot reach the API server: security groups [{groups}] must include the \
         cluster security group (tagged aws:eks:cluster-name={cluster}) or be admitted by it \
         on TCP 443. NodePool {pool} launches again in {}s at the earliest.",
        ttl.as_secs(),
        wait.as_secs(),
        pool = pool_of(claim),
    )
}

/// Writes the pool's `NodeRegistrationHealthy` condition.
async fn set_pool_health(ctx: &Context, pool: &str, healthy: bool, reason: &str, msg: &str) {
    pool_status::set_condition(ctx, pool, NODE_REGISTRATION_HEALTHY, healthy, reason, msg).await
}

pub async fn reconcile(ctx: &Context, own: &Lifecycle, claim: &NodeClaim) -> Option<Duration> {
    let name = claim.name_any();
    let Some(node) = ctx.state.node_for_claim(claim) else {
        return no_node_yet(ctx, own, claim).await;
    };
    if let Err(retry) = label_node(ctx, claim, &node).await {
        return Some(retry);
    }
    let mut conds = claim.status.clone().unwrap_or_default().conditions;
    conditions::set(&mut conds, REGISTERED, true, "Registered", "");
    let status = json!({"nodeName": node.name_any(), "conditions": conds});
    match nodeclaims::patch_status(ctx, &name, status).await {
        Ok(updated) => {
            ctx.metrics
                .nodeclaims_registered
                .get_or_create(&crate::controllers::operator::metrics::claim_labels(
                    &updated,
                ))
                .inc();
            tracing::info!(nodeclaim = %name, node = %node.name_any(), "registered");
            let pool = pool_of(&updated);
            own.registration_health
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .registered(&pool);
            // Also after a restart, when only the condition remembers the failure; a
            // no-op (no patch) once the condition is True.
            set_pool_health(ctx, &pool, true, "NodeRegistered", "").await;
            super::initialization::reconcile(ctx, &updated).await
        }
        Err(_) => Some(Duration::from_secs(2)),
    }
}

/// A launched claim whose node has not joined: wait out the registration TTL, then give up
/// on it (and count the failure against its pool's registration health).
async fn no_node_yet(ctx: &Context, own: &Lifecycle, claim: &NodeClaim) -> Option<Duration> {
    let ttl = ctx.config.registration_ttl;
    let age = claim
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, LAUNCHED))
        .and_then(conditions::age_seconds)
        .unwrap_or(0.0);
    if age >= ttl.as_secs_f64() {
        return registration_timed_out(ctx, own, claim, ttl).await;
    }
    let left = (ttl.as_secs_f64() - age).max(0.5);
    Some(Duration::from_secs_f64(left.min(30.0)))
}

/// Says why the node never joined (log, metric, event, the pool's health condition) and
/// asks for the claim's termination.
async fn registration_timed_out(
    ctx: &Context,
    own: &Lifecycle,
    claim: &NodeClaim,
    ttl: Duration,
) -> Option<Duration> {
    let name = claim.name_any();
    let pool = pool_of(claim);
    let health = own
        .registration_health
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .failed(
            &pool,
            std::time::Instant::now(),
            ctx.config.registration_backoff,
            ctx.config.registration_backoff_max,
        );
    let wait = health
        .retry_at
        .saturating_duration_since(std::time::Instant::now());
    let msg = timeout_message(
        claim,
        ctx.state
            .node_classes
            .get(&claim.spec.node_class_ref.name)
            .as_deref(),
        &ctx.config.cluster_name,
        ttl,
        wait,
    );
    tracing::warn!(nodeclaim = %name, nodepool = %pool, failures = health.failures, "{msg}");
    ctx.metrics
        .nodeclaims_registration_timeouts
        .get_or_create(&crate::controllers::operator::metrics::l(&[(
            "nodepool", &pool,
        )]))
        .inc();
    ctx.events
        .publish(
            &events::reference(claim),
            Type::Warning,
            "RegistrationTimedOut",
            &msg,
        )
        .await;
    set_pool_health(ctx, &pool, false, "RegistrationTimedOut", &msg).await;
    if let Err(e) = request_termination(ctx, &name, TerminationReason::RegistrationTimeout).await {
        ctx.metrics.kube_error("nodeclaims delete", &e);
        return Some(Duration::from_secs(5));
    }
    None
}

/// Makes the node the claim's: its labels (and Karpenter's `registered`), the agent's
/// termination finalizer, and the taints
/// it registers with. `Err`: when to try again.
async fn label_node(ctx: &Context, claim: &NodeClaim, node: &Node) -> Result<(), Duration> {
    let name = claim.name_any();
    // Labels: the claim's (pool template, single-valued requirements, launched type,
    // zone, capacity type) and the claim's name.
    let mut node_labels: BTreeMap<String, String> = claim.labels().clone();
    node_labels.insert(labels::JOINER_NODECLAIM.into(), name.clone());
    node_labels.insert(labels::KARPENTER_REGISTERED.into(), "true".into());
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == ctx.finalizer()) {
        finalizers.push(ctx.finalizer().into());
    }
    // The taint list is replaced whole, so the patch is guarded by the resourceVersion we
    // computed it from: otherwise a taint the node lifecycle controller removed in between
    // (`node.kubernetes.io/not-ready`) would be written back and strand the node's pods.
    let patch = json!({
        "metadata": {
            "labels": node_labels,
            "finalizers": finalizers,
            "resourceVersion": node.resource_version(),
        },
        "spec": {"taints": registered_taints(node, claim)},
    });
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    // A merge patch replaces the taint list whole, which is what we computed.
    if let Err(e) = nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        if matches!(&e, kube::Error::Api(s) if s.code == 409) {
            // The Node changed since our watch saw it; the watch catches up, we retry.
            return Err(Duration::from_millis(300));
        }
        ctx.metrics.kube_error("nodes patch", &e);
        tracing::warn!(nodeclaim = %name, node = %node.name_any(), error = %e, "registering the node failed; retrying");
        return Err(Duration::from_secs(2));
    }
    Ok(())
}
