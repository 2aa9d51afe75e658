//! Draining a Node: cordon it, then evict its pods through the Eviction API so
//! PodDisruptionBudgets hold. kube's built-in 429 retry is off for these calls
//! ([`crate::controllers::context::Context::eviction_client`]); a refused eviction is retried by
//! the claim's own requeue with a per-pod exponential backoff (1 s doubling to 30 s), so one
//! blocked pod never stalls the worker.
//!
//! Pods leave in Karpenter's order ([`DrainGroup`]): ordinary pods, then DaemonSet pods, then
//! critical pods, then critical DaemonSet pods, each group once the one before is gone.
//! DaemonSet pods are evicted too (their controller does not put them back on a node marked
//! `karpenter.sh/disrupted:NoSchedule`, which termination puts first), so a logging agent
//! stops gracefully rather than with its instance. Left: static pods' mirrors (no API call
//! removes them) and pods that tolerate the disrupted taint, which would be placed right
//! back (Karpenter's `IsDrainable`).
//!
//! A drain with a deadline (the claim's deletion plus its `terminationGracePeriod`) ends by
//! it, as Karpenter's terminator does: a pod whose own grace period would run past the
//! deadline is deleted instead of evicted, with the grace left until the deadline (at least
//! 1 s), whatever its PodDisruptionBudget or do-not-disrupt annotation say; a pod still
//! terminating at the deadline has its grace cut to 1 s; one still there a minute later no
//! longer holds the node (its kubelet is not confirming). A refused deletion is logged with
//! its operation and code, counted, published as a `FailedDraining` Event and retried.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::controllers::context::Context;
use crate::controllers::disrupted::DISRUPTED_TAINT;
use crate::controllers::do_not_disrupt::pod_has_do_not_disrupt;
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::controllers::state::pods::DrainGroup;
use crate::controllers::state::PodRecord;
use crate::taints::{Effect, Taint};

pub enum Outcome {
    Drained,
    Waiting(Duration),
}

/// How a drain treats the node's pods.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// Hold pods annotated do-not-disrupt (a voluntary termination).
    pub respect_dnd: bool,
    /// When the node's pods must be gone; None: no cap, PDBs and do-not-disrupt hold.
    pub deadline: Option<Timestamp>,
    /// Pods already terminating are not waited for: the node is not serving them.
    pub forceful: bool,
}

/// How long past the deadline a terminating pod still holds the drain (Karpenter's
/// `IsStuckTerminating` allows a minute past the pod's own deletion time).
const STUCK: SignedDuration = SignedDuration::from_secs(60);
/// A pod's grace when its spec sets none (the API server's default).
const DEFAULT_GRACE: i64 = 30;

/// What the drain does with one pod now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Ask the Eviction API (its PodDisruptionBudget may refuse).
    Evict,
    /// Held by its do-not-disrupt annotation.
    Blocked,
    /// Delete it with this grace (seconds): its own would run past the deadline.
    Delete(u32),
    /// Already terminating: wait for it.
    Await,
    /// Still terminating at the deadline: cut its grace to 1 s (the API server only ever
    /// shortens a pending deletion's grace).
    Hurry,
    /// Not waited for: a forceful drain, or stuck terminating long past the deadline.
    Abandon,
}

/// The grace to delete a pod with when its own (`grace`, seconds) would run past the
/// deadline: what is left until the deadline, at least 1 s (0 would remove it from the API
/// before its kubelet has stopped it). None: no deadline, or not due yet.
pub fn deletion_grace(
    grace: Option<i64>,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> Option<u32> {
    let deadline = deadline?;
    let grace = SignedDuration::from_secs(grace.unwrap_or(DEFAULT_GRACE).max(0));
    let left = now.duration_until(deadline);
    (left <= grace).then(|| left.as_secs().clamp(1, i64::from(u32::MAX)) as u32)
}

/// How long until a pod's deletion falls due (zero: it is due): when to look again at the
/// latest, so the drain keeps its deadline. Only meaningful with a deadline.
pub fn due_in(grace: Option<i64>, deadline: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(deadline) = deadline else {
        return Duration::MAX;
    };
    let grace = SignedDuration::from_secs(grace.unwrap_or(DEFAULT_GRACE).max(0));
    let left = now.duration_until(deadline).saturating_sub(grace);
    Duration::try_from(left).unwrap_or_default()
}

fn step(deleting: bool, grace: Option<i64>, dnd: bool, terms: &Terms, now: Timestamp) -> Step {
    if deleting {
        return match terms.deadline {
            _ if terms.forceful => Step::Abandon,
            Some(d) if d.duration_until(now) >= STUCK => Step::Abandon,
            Some(d) if now >= d => Step::Hurry,
            _ => Step::Await,
        };
    }
    if let Some(g) = deletion_grace(grace, terms.deadline, now) {
        return Step::Delete(g);
    }
    if terms.respect_dnd && dnd {
        return Step::Blocked;
    }
    Step::Evict
}

/// Per pod uid (or `delete/` + uid): (attempts, next try).
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

pub async fn drain(ctx: &Context, claim: &NodeClaim, node: &Node, terms: &Terms) -> Outcome {
    if let Err(e) = cordon(ctx, node).await {
        ctx.metrics.kube_error("nodes patch", &e);
        return Outcome::Waiting(Duration::from_secs(2));
    }
    let now = Timestamp::now();
    let pods: Vec<_> = ctx
        .state
        .pods_on(&node.name_any())
        .into_iter()
        // Pods to evict, and pods already leaving (waited for); finished ones need nothing.
        .filter_map(|p| {
            let group = drained_in(&p)?;
            let s = step(
                p.deleting,
                p.grace_seconds,
                pod_has_do_not_disrupt(&p),
                terms,
                now,
            );
            Some((p, group, s))
        })
        .collect();
    // The group being drained: the first with a pod still held for.
    let Some(current) = pods
        .iter()
        .filter(|(_, _, s)| *s != Step::Abandon)
        .map(|(_, g, _)| *g)
        .min()
    else {
        return Outcome::Drained;
    };
    let mut wait = Duration::from_secs(30);
    let mut blocked_dnd = 0;
    for (p, group, s) in &pods {
        // A later group waits its turn, but not past the deadline: a deletion that falls
        // due is made whatever the group (Karpenter's expiring pods).
        if *group > current && !matches!(s, Step::Delete(_) | Step::Hurry) {
            continue;
        }
        let d = match *s {
            Step::Abandon => continue,
            Step::Await => Duration::from_secs(1),
            Step::Blocked => {
                blocked_dnd += 1;
                Duration::from_secs(5)
            }
            Step::Evict => match evict(ctx, claim, node, p).await {
                Some(d) => d,
                None => continue,
            },
            Step::Delete(grace) => delete(ctx, claim, node, p, (grace, true), terms.deadline).await,
            // Already announced: hurrying a pod still terminating is said only in the log.
            Step::Hurry => delete(ctx, claim, node, p, (1, false), terms.deadline).await,
        };
        wait = wait.min(d);
        // A pod held now is looked at again when its deletion falls due.
        if matches!(s, Step::Evict | Step::Blocked) {
            let due = due_in(p.grace_seconds, terms.deadline, now);
            wait = wait.min(due.max(Duration::from_millis(100)));
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

/// The pod's drain group, or None when the drain does not wait for it: a mirror pod, a
/// finished pod, or one that tolerates [`DISRUPTED_TAINT`] (evicted, it would be placed
/// right back).
fn drained_in(p: &PodRecord) -> Option<DrainGroup> {
    if p.finished && !p.deleting {
        return None;
    }
    let disrupted = Taint {
        key: DISRUPTED_TAINT.into(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    if p.shape.tolerations.iter().any(|t| t.tolerates(&disrupted)) {
        return None;
    }
    p.drain_group
}

/// Deletes one pod whose deletion fell due (its PDB and do-not-disrupt give way), with
/// `grace` seconds, publishing a `Disrupted` Event on the pod when `announce`; returns how
/// soon to look again. A refusal (403 when the agent's role
/// lacks `pods: delete`, or any other) is logged, counted and published, then retried with
/// the pod's backoff: the drain never waits on it in silence.
async fn delete(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    p: &PodRecord,
    (grace, announce): (u32, bool),
    deadline: Option<Timestamp>,
) -> Duration {
    let key = format!("delete/{}", p.uid);
    if !backoff_ready(&key) {
        return Duration::from_secs(1);
    }
    let api: Api<Pod> = Api::namespaced(ctx.eviction_client.clone(), p.namespace());
    let params = DeleteParams {
        grace_period_seconds: Some(grace),
        preconditions: Some(Preconditions {
            uid: Some(p.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let deadline = deadline.map(|d| d.to_string()).unwrap_or_default();
    match api.delete(p.name(), &params).await {
        Ok(_) => {
            tracing::info!(nodeclaim = %claim.name_any(), pod = %format!("{}/{}", p.namespace(), p.name()), grace, %deadline, "deleting the pod by the drain's deadline");
            if announce {
                let message = format!("deleting the pod with {grace} s of grace so that node {} (NodeClaim {}) is drained by its terminationGracePeriod deadline {deadline}; its PodDisruptionBudget and do-not-disrupt annotation no longer hold it", node.name_any(), claim.name_any());
                ctx.events
                    .publish(&p.reference(), Type::Normal, "Disrupted", &message)
                    .await;
            }
            // Looked at again soon; a pod still terminating is hurried with backoff.
            backoff_fail(&key);
            Duration::from_secs(1)
        }
        // Gone, or replaced by a pod of the same name (the UID precondition failed).
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
            backoff_clear(&key);
            Duration::from_secs(1)
        }
        Err(e) => {
            ctx.metrics.kube_error("pods delete", &e);
            let code = error_code(&e);
            tracing::warn!(nodeclaim = %claim.name_any(), pod = %format!("{}/{}", p.namespace(), p.name()), operation = "pods delete", code = %code, error = %e, "deleting the pod past the drain's deadline failed; retrying");
            ctx.events
                .publish(
                    &events::reference(claim),
                    Type::Warning,
                    "FailedDraining",
                    &format!("deleting pod {}/{} on node {} (pods delete) failed with {code}: {e}; retrying", p.namespace(), p.name(), node.name_any()),
                )
                .await;
            backoff_fail(&key)
        }
    }
}

/// An API error's HTTP code, or `transport` when the call got no answer.
fn error_code(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        _ => "transport".to_string(),
    }
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
            tracing::warn!(nodeclaim = %claim.name_any(), pod = %format!("{}/{}", p.namespace(), p.name()), operation = "pods/eviction create", code = %error_code(&e), error = %e, "evicting the pod failed; retrying");
            Some(backoff_fail(uid))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn terms(deadline: Option<i64>) -> Terms {
        Terms {
            respect_dnd: true,
            deadline: deadline.map(at),
            forceful: false,
        }
    }

    #[test]
    fn without_a_deadline_pdbs_and_do_not_disrupt_hold() {
        let t = terms(None);
        assert_eq!(step(false, Some(0), false, &t, at(1_000)), Step::Evict);
        assert_eq!(step(false, Some(0), true, &t, at(1_000)), Step::Blocked);
        assert_eq!(step(true, Some(0), false, &t, at(1_000)), Step::Await);
    }

    #[test]
    fn a_pod_is_deleted_when_its_grace_would_run_past_the_deadline() {
        // Deadline at 20 s; a pod with 5 s of grace is evicted until 15 s, then deleted
        // with what is left, do-not-disrupt or not.
        let t = terms(Some(20));
        assert_eq!(step(false, Some(5), false, &t, at(14)), Step::Evict);
        assert_eq!(step(false, Some(5), true, &t, at(14)), Step::Blocked);
        assert_eq!(step(false, Some(5), false, &t, at(15)), Step::Delete(5));
        assert_eq!(step(false, Some(5), true, &t, at(17)), Step::Delete(3));
        // Grace 0: deleted at the deadline, with 1 s (0 would skip its kubelet).
        assert_eq!(step(false, Some(0), false, &t, at(19)), Step::Evict);
        assert_eq!(step(false, Some(0), false, &t, at(20)), Step::Delete(1));
        assert_eq!(step(false, Some(0), false, &t, at(500)), Step::Delete(1));
        // No grace in the spec: the API server's 30 s, already past the deadline's start.
        assert_eq!(step(false, None, false, &t, at(0)), Step::Delete(20));
    }

    #[test]
    fn terminating_pods_are_hurried_at_the_deadline_and_then_let_go() {
        let t = terms(Some(20));
        assert_eq!(step(true, Some(30), false, &t, at(19)), Step::Await);
        assert_eq!(step(true, Some(30), false, &t, at(20)), Step::Hurry);
        assert_eq!(step(true, Some(30), false, &t, at(79)), Step::Hurry);
        assert_eq!(step(true, Some(30), false, &t, at(80)), Step::Abandon);
    }

    #[test]
    fn a_forceful_drain_waits_for_no_terminating_pod() {
        let t = Terms {
            respect_dnd: false,
            deadline: Some(at(0)),
            forceful: true,
        };
        assert_eq!(step(true, Some(30), false, &t, at(0)), Step::Abandon);
        assert_eq!(step(false, Some(30), true, &t, at(0)), Step::Delete(1));
    }

    #[test]
    fn a_held_pod_is_looked_at_again_when_it_falls_due() {
        let d = Some(at(20));
        assert_eq!(due_in(Some(5), d, at(10)), Duration::from_secs(5));
        assert_eq!(due_in(Some(5), d, at(16)), Duration::ZERO);
        assert_eq!(due_in(Some(5), None, at(16)), Duration::MAX);
        assert_eq!(
            due_in(Some(i64::MAX), d, at(0)),
            Duration::ZERO,
            "a huge grace does not overflow"
        );
        // Due exactly when deletion_grace says so.
        for now in 0..30 {
            assert_eq!(
                due_in(Some(5), d, at(now)) == Duration::ZERO,
                deletion_grace(Some(5), d, at(now)).is_some(),
                "at {now}"
            );
        }
    }

    fn record(extra: serde_json::Value) -> PodRecord {
        let mut pod = serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        });
        json_patch(&mut pod, extra);
        PodRecord::from_pod(&serde_json::from_value(pod).unwrap())
    }

    fn json_patch(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    json_patch(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn pods_leave_in_karpenters_order() {
        let daemon = serde_json::json!({"metadata": {"ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d", "controller": true}]}});
        let critical = serde_json::json!({"spec": {"priorityClassName": "system-node-critical"}});
        let mut critical_daemon = daemon.clone();
        json_patch(&mut critical_daemon, critical.clone());
        let groups: Vec<_> = [serde_json::json!({}), daemon, critical, critical_daemon]
            .into_iter()
            .map(|p| drained_in(&record(p)))
            .collect();
        assert_eq!(
            groups,
            [
                Some(DrainGroup::Workload),
                Some(DrainGroup::Daemon),
                Some(DrainGroup::CriticalWorkload),
                Some(DrainGroup::CriticalDaemon),
            ]
        );
        assert!(groups.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn mirrors_finished_pods_and_pods_tolerating_the_taint_are_not_waited_for() {
        let mirror =
            serde_json::json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}});
        let everything = serde_json::json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        let the_taint = serde_json::json!({"spec": {"tolerations": [
            {"key": DISRUPTED_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}});
        let other = serde_json::json!({"spec": {"tolerations": [
            {"key": "dedicated", "operator": "Exists"}]}});
        let finished = serde_json::json!({"status": {"phase": "Succeeded"}});
        for p in [mirror, everything, the_taint, finished] {
            assert_eq!(drained_in(&record(p.clone())), None, "{p}");
        }
        assert_eq!(drained_in(&record(other)), Some(DrainGroup::Workload));
    }
}
