//! Draining a Node: cordon it, then evict its pods through the Eviction API so
//! PodDisruptionBudgets hold. kube's built-in 429 retry is off for these calls
//! ([`crate::controllers::context::Context::eviction_client`]); a refused eviction is retried by
//! the claim's own requeue with a per-pod exponential backoff (1 s doubling to 30 s), so one
//! blocked pod never stalls the worker. DaemonSet pods and static (mirror) pods are left:
//! they go with the node. When the termination grace period has passed, the remaining
//! pods are deleted instead of evicted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::context::Context;
use crate::controllers::do_not_disrupt::pod_has_do_not_disrupt;
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::controllers::state::PodRecord;

pub enum Outcome {
    Drained,
    Waiting(Duration),
}

/// Per pod uid: (attempts, next try).
static BACKOFF: Mutex<Option<HashMap<String, (u32, Instant)>>> = Mutex::new(None);

fn backoff_ready(uid: &str) -> bool {
    let g = BACKOFF.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref()
        .and_then(|m| m.get(uid))
        .is_none_or(|(_, next)| Instant::now() >= *next)
}

fn backoff_fail(uid: &str) -> Duration {
    let mut g = BACKOFF.lock().unwrap_or_else(|p| p.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    let e = m.entry(uid.to_string()).or_insert((0, Instant::now()));
    e.0 += 1;
    let d = Duration::from_secs(1u64 << (e.0 - 1).min(5)).min(Duration::from_secs(30));
    e.1 = Instant::now() + d;
    d
}

fn backoff_clear(uid: &str) {
    let mut g = BACKOFF.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = g.as_mut() {
        m.remove(uid);
    }
}

pub async fn cordon(ctx: &Context, node: &Node) -> Result<(), kube::Error> {
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .map(|_| ())
}

pub async fn drain(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    respect_dnd: bool,
    grace_over: bool,
    forceful: bool,
) -> Outcome {
    if let Err(e) = cordon(ctx, node).await {
        ctx.metrics.kube_error("nodes patch", &e);
        return Outcome::Waiting(Duration::from_secs(2));
    }
    let pods: Vec<_> = ctx
        .state
        .pods_on(&node.name_any())
        .into_iter()
        // Pods to evict, and pods already leaving (waited for); DaemonSet and static pods
        // go with the node, finished ones need nothing.
        .filter(|p| p.reschedulable() || (p.deleting && !p.goes_with_node))
        .collect();
    let abandoned = |p: &PodRecord| forceful && p.deleting;
    if pods.iter().all(|p| abandoned(p)) {
        return Outcome::Drained;
    }
    let mut wait = Duration::from_secs(30);
    let mut blocked_dnd = 0;
    for p in &pods {
        let name = p.name();
        let api: Api<Pod> = Api::namespaced(ctx.eviction_client.clone(), p.namespace());
        if p.deleting {
            // A forceful drain does not wait on a dead kubelet to confirm: the pod goes
            // with the node (pod garbage collection removes it once the Node is gone).
            if !forceful {
                wait = wait.min(Duration::from_secs(1));
            }
            continue;
        }
        if grace_over {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => ctx.metrics.kube_error("pods delete", &e),
            }
            wait = wait.min(Duration::from_secs(1));
            continue;
        }
        if respect_dnd && pod_has_do_not_disrupt(p) {
            blocked_dnd += 1;
            wait = wait.min(Duration::from_secs(5));
            continue;
        }
        if let Some(d) = evict(ctx, claim, node, p).await {
            wait = wait.min(d);
        }
    }
    if blocked_dnd > 0 {
        ctx.events
            .publish(
                &events::reference(claim),
                Type::Normal,
                "DisruptionBlocked",
                &format!("{blocked_dnd} pod(s) on node {} are annotated do-not-disrupt; waiting for them to finish or for the terminationGracePeriod", node.name_any()),
            )
            .await;
    }
    Outcome::Waiting(wait)
}

/// Asks the Eviction API to evict one pod (when its backoff allows); returns how soon to
/// look again for it, None when it is gone.
async fn evict(ctx: &Context, claim: &NodeClaim, node: &Node, p: &PodRecord) -> Option<Duration> {
    let uid = &p.uid;
    if !backoff_ready(uid) {
        return Some(Duration::from_secs(1));
    }
    let api: Api<Pod> = Api::namespaced(ctx.eviction_client.clone(), p.namespace());
    match api.evict(p.name(), &EvictParams::default()).await {
        Ok(_) => {
            backoff_clear(uid);
            ctx.metrics
                .evictions
                .get_or_create(&l(&[("result", "evicted")]))
                .inc();
            Some(Duration::from_secs(1))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            backoff_clear(uid);
            None
        }
        Err(kube::Error::Api(s)) if s.code == 429 => {
            ctx.metrics
                .evictions
                .get_or_create(&l(&[("result", "blocked")]))
                .inc();
            let d = backoff_fail(uid);
            ctx.events
                .publish(
                    &p.reference(),
                    Type::Warning,
                    "EvictionBlocked",
                    &format!("evicting the pod to terminate node {} (NodeClaim {}) is refused: {}; retrying with backoff", node.name_any(), claim.name_any(), s.message),
                )
                .await;
            Some(d)
        }
        Err(e) => {
            ctx.metrics.kube_error("pods/eviction create", &e);
            Some(backoff_fail(uid))
        }
    }
}
