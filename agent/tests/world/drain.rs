//! Drains that end: a node whose pods a PodDisruptionBudget holds is drained by its
//! NodePool's `terminationGracePeriod`, as Karpenter's terminator does. Before the deadline
//! the Eviction API refuses and nothing leaves; from it the pods are deleted, then the
//! instance is terminated in the emulator and the Node and NodeClaim go.
//!
//! The agent runs under the rendered roles, which kube-sim and the real API server enforce,
//! so this also proves the permission the deletions need. The same body runs on the real
//! control plane (kube-controller-manager's disruption controller keeping the PDB's status,
//! the real Eviction API refusing); the e2e `agent_rbac` test runs the scenario again with
//! the agent deployed by Terraform. And the order of a drain: the disrupted taint first,
//! then ordinary pods, DaemonSet pods and critical pods, each group once the one before is
//! gone.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::NodeClaim;
use joiner_agent_world::pod_watch::PodWatch;
use joiner_agent_world::{wait_for, Agent, Opts, Target, World};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

const GRACE: i64 = 20;
const APP: &str = "held";

/// One on-demand 2-vCPU node type family for the pool, with a short grace period and no
/// consolidation (only the test disrupts).
fn pool() -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "terminationGracePeriod": format!("{GRACE}s"),
        }},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                       "budgets": [{"nodes": "100%"}]},
    })
}

/// The `held` pods by uid: (name, node, terminating).
async fn held_pods(w: &World) -> BTreeMap<String, (String, String, bool)> {
    w.pods(APP)
        .await
        .iter()
        .map(|p: &Pod| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            (
                p.uid().unwrap_or_default(),
                (p.name_any(), node, p.metadata.deletion_timestamp.is_some()),
            )
        })
        .collect()
}

/// A pool with the short grace period, two pods a PodDisruptionBudget holds
/// (minAvailable 2) Running on it, and the agent that launched their capacity.
async fn held_workload(w: &World) -> Agent {
    w.node_class("default").await;
    w.node_pool("guarded", pool()).await;
    // Pods with no grace of their own: each is due for deletion at the deadline itself.
    w.deployment_with(
        APP,
        2,
        "250m",
        "256Mi",
        json!({}),
        json!({"terminationGracePeriodSeconds": 0}),
    )
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": APP},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": APP}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let agent = w.agent(&[]).await;
    wait_for("2 held pods Running", Duration::from_secs(90), || async {
        (w.running(APP).await == 2).then_some(())
    })
    .await;
    agent
}

/// Before the deadline: an `EvictionBlocked` Event on a held pod (the drain started, the
/// PDB refused), every held pod of `node` still there and not terminating, and evictions
/// counted as blocked.
async fn assert_held_before(
    w: &World,
    agent: &Agent,
    pods: &BTreeMap<String, (String, String, bool)>,
    node: &str,
    deadline: jiff::Timestamp,
) {
    wait_for(
        "an EvictionBlocked Event on a held pod",
        Duration::from_secs(GRACE as u64),
        || async {
            for p in w.pods(APP).await {
                let events = w.events_for("default", &p.name_any()).await;
                if events.iter().any(|e| e.starts_with("EvictionBlocked")) {
                    return Some(());
                }
            }
            None
        },
    )
    .await;
    let held = held_pods(w).await;
    assert!(
        jiff::Timestamp::now() < deadline,
        "the refusal came before the deadline"
    );
    for uid in pods
        .iter()
        .filter(|(_, (_, n, _))| n == node)
        .map(|(uid, _)| uid)
    {
        assert_eq!(
            held.get(uid),
            Some(&(pods[uid].0.clone(), node.to_string(), false)),
            "pod {uid} still on {node} and not terminating before the deadline: {held:?}"
        );
    }
    let metrics = w.metrics(agent.metrics).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("joiner_evictions_total{") && l.contains("blocked")),
        "evictions counted as blocked:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_holds_the_drain_until_the_termination_grace_period_then_the_node_goes() {
    held_drain_ends_at_the_grace_period(Target::Sim).await
}

async fn held_drain_ends_at_the_grace_period(target: Target) {
    let w = World::start(Opts::on(target)).await;
    let agent = held_workload(&w).await;

    // The node of the first pod, its claim, its instance, and the pods on it.
    let pods = held_pods(&w).await;
    let node = pods.values().next().unwrap().1.clone();
    let on_node: Vec<String> = pods
        .iter()
        .filter(|(_, (_, n, _))| *n == node)
        .map(|(uid, _)| uid.clone())
        .collect();
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let claim = w
        .claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .expect("the node's NodeClaim");
    let instance = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .expect("providerID aws:///<zone>/<instance>")
        .to_string();
    claims
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let deleted = claims
        .get(&claim.name_any())
        .await
        .expect("held by its finalizer")
        .metadata
        .deletion_timestamp
        .expect("deleting")
        .0;
    let deadline = deleted + jiff::SignedDuration::from_secs(GRACE);

    // Before the deadline: the drain has started and the PDB refuses it.
    assert_held_before(&w, &agent, &pods, &node, deadline).await;

    // From the deadline: the held pods are deleted, then the instance, Node and claim go.
    wait_for(
        "the held pods deleted",
        Duration::from_secs(GRACE as u64 + 30),
        || async {
            let now = held_pods(&w).await;
            on_node
                .iter()
                .all(|uid| !now.contains_key(uid))
                .then_some(())
        },
    )
    .await;
    let gone_at = jiff::Timestamp::now();
    assert!(
        gone_at >= deadline,
        "pods deleted at {gone_at}, before the deadline {deadline}"
    );
    wait_for(
        "the instance terminated, the Node and NodeClaim gone",
        Duration::from_secs(30),
        || async {
            let live = w.live_instances().await.iter().any(|i| i.0 == instance);
            let node_left = w.nodes().await.iter().any(|n| n.name_any() == node);
            let claim_left = claims.get_opt(&claim.name_any()).await.ok().flatten();
            (!live && !node_left && claim_left.is_none()).then_some(())
        },
    )
    .await;
    // Each said why on the pod, as Karpenter's `Disrupted` Event does.
    for uid in &on_node {
        let name = &pods[uid].0;
        let events = w.events_for("default", name).await;
        assert!(
            events
                .iter()
                .any(|e| e.starts_with("Disrupted") && e.contains("terminationGracePeriod")),
            "pod {name}: {events:?}"
        );
    }
    // The workload comes back on new capacity.
    wait_for(
        "2 held pods Running again",
        Duration::from_secs(90),
        || async { (w.running(APP).await == 2).then_some(()) },
    )
    .await;
    // The rendered roles allowed every call the drain made: the API server refused none.
    let metrics = w.metrics(agent.metrics).await;
    let forbidden: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("joiner_kubernetes_errors_total{") && l.contains("code=\"403\""))
        .collect();
    assert!(
        forbidden.is_empty(),
        "[{}] calls the agent's roles did not allow: {forbidden:?}",
        w.target_name()
    );
    drop(agent);
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn a_pdb_holds_the_drain_until_the_termination_grace_period_then_the_node_goes() {
        held_drain_ends_at_the_grace_period(Target::ControlPlane).await
    }
}

/// The evictions the PodDisruptionBudget refused so far.
async fn evictions_refused(w: &World, agent: &Agent) -> f64 {
    w.metrics(agent.metrics)
        .await
        .lines()
        .filter(|l| l.starts_with("joiner_evictions_total{") && l.contains("blocked"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Termination as Karpenter's terminator runs it: the node is tainted
/// `karpenter.sh/disrupted:NoSchedule` first, then drained in order: the ordinary pod, then
/// the DaemonSet's pod, then the critical pod (`system-node-critical`), each once the one
/// before is gone. A PodDisruptionBudget holds the ordinary pod at first: while it refuses,
/// the taint is on and no later pod has been touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_taints_first_and_drains_in_karpenters_order() {
    let w = World::start(Opts::on(Target::Sim)).await;
    w.node_class("default").await;
    let mut spec = pool();
    spec["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("terminationGracePeriod");
    w.node_pool("ordered", spec).await;
    let labels = json!({"labels": {"drain-order": "yes"}});
    let quick = json!({"terminationGracePeriodSeconds": 0});
    w.deployment_with("plain", 1, "250m", "256Mi", labels.clone(), quick.clone())
        .await;
    let mut critical = quick.clone();
    critical["priorityClassName"] = json!("system-node-critical");
    w.deployment_with("critical", 1, "250m", "256Mi", labels, critical)
        .await;
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "logs"},
        "spec": {"selector": {"matchLabels": {"app": "logs"}},
            "template": {"metadata": {"labels": {"app": "logs", "drain-order": "yes"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}
    }))
    .unwrap();
    let daemonsets: Api<DaemonSet> = Api::namespaced(w.client.clone(), "default");
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "plain"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "plain"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let agent = w.agent(&[]).await;

    let node = wait_for(
        "both pods Running on one node",
        Duration::from_secs(90),
        || async {
            let on = |app: &'static str| {
                let w = &w;
                async move {
                    w.pods(app).await.into_iter().find_map(|p| {
                        joiner_agent_world::pod_watch::running_on(&p).map(str::to_string)
                    })
                }
            };
            match (on("plain").await, on("critical").await) {
                (Some(a), Some(b)) if a == b => Some(a),
                _ => None,
            }
        },
    )
    .await;
    wait_for(
        "the DaemonSet's pod on it",
        Duration::from_secs(60),
        || async {
            w.pods("logs")
                .await
                .iter()
                .any(|p| joiner_agent_world::pod_watch::running_on(p) == Some(node.as_str()))
                .then_some(())
        },
    )
    .await;
    let watch = PodWatch::start_selecting(w.client.clone(), "default", "drain-order=yes").await;
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let claim = w
        .claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .expect("the node's NodeClaim");
    claims
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();

    // Two refusals: the drain has passed over the node twice and stopped at its first group.
    wait_for("two refused evictions", Duration::from_secs(90), || async {
        (evictions_refused(&w, &agent).await >= 2.0).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(w.client.clone());
    let taints = nodes
        .get(&node)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule"),
        "the node is tainted before its pods leave: {taints:?}"
    );
    assert_eq!(
        watch.leaving(),
        Vec::<String>::new(),
        "no pod leaves while the first group is held"
    );

    pdbs.delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the node gone", Duration::from_secs(120), || async {
        nodes
            .get_opt(&node)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    let leaving = watch.leaving();
    let at = |prefix: &str| {
        leaving
            .iter()
            .position(|n| n.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} pod left the node: {leaving:?}"))
    };
    assert!(
        at("plain-") < at("logs-") && at("logs-") < at("critical-"),
        "the ordinary pod, then the DaemonSet's, then the critical one: {leaving:?}"
    );
    drop(agent);
}
