//! Capacity and churn features end to end, kube-sim + moto, the agent
//! in-process: static NodePools (`replicas`), warm capacity (`headroom`), node repair, the
//! consolidation eviction cap and the `Balanced` policy.
//!
//! Transient states (a claim's deletion, a pod's eviction) are read from watches; only end
//! states are waited for by polling.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use joiner_agent_world::claim_log::{ClaimLog, Step};
use joiner_agent_world::{wait_for, World};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::{NodeClaim, NodePool};

/// The agent's count of its disruption passes (every few seconds, work or not): the clock
/// of the "nothing happens" windows below.
const PASSES: &str = "joiner_disruption_pass_duration_seconds_count";
/// Passes skipped because the cluster was unchanged since one that decided nothing.
const SKIPPED: &str = "joiner_disruption_passes_skipped_total";

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "joiner_agent=info".into()))
        .with_test_writer()
        .try_init();
}

/// A pool of on-demand c/m/r nodes with `cpus` vCPUs, and `extra` merged into its spec.
fn pool(cpus: &[&str], extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": cpus},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        }},
    });
    if let Some(m) = extra.as_object() {
        for (k, v) in m {
            spec[k] = v.clone();
        }
    }
    spec
}

async fn claims_of(w: &World, pool: &str) -> Vec<NodeClaim> {
    w.claims()
        .await
        .into_iter()
        .filter(|c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool))
        .collect()
}

/// Live (not deleting) claims of the pool whose Node is Ready.
async fn ready_nodes_of(w: &World, pool: &str) -> Vec<Node> {
    w.nodes()
        .await
        .into_iter()
        .filter(|n| {
            n.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool)
                && n.metadata.deletion_timestamp.is_none()
                && n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect()
}

async fn events(w: &World, reason: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for ns in ["default", "joiner"] {
        let api: Api<Event> = Api::namespaced(w.client.clone(), ns);
        if let Ok(l) = api.list(&ListParams::default()).await {
            out.extend(
                l.items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some(reason)),
            );
        }
    }
    out
}

fn messages(evs: &[Event]) -> Vec<String> {
    evs.iter().filter_map(|e| e.message.clone()).collect()
}

async fn running(w: &World, app: &str, n: usize) {
    wait_for(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(180),
        || async { (w.running(app).await == n).then_some(()) },
    )
    .await;
}

/// Every pod deletion of an app seen by a watch, by name.
struct PodDeletions {
    deleted: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodDeletions {
    async fn start(client: kube::Client, app: &str) -> PodDeletions {
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let d = deleted.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let selector = format!("app={app}");
        let task = tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, "default");
            let mut ev = watcher(api, watcher::Config::default().labels(&selector))
                .default_backoff()
                .boxed();
            let mut ready = Some(ready_tx);
            while let Some(e) = ev.next().await {
                match e {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => d.lock().unwrap().push(p.name_any()),
                    _ => {}
                }
            }
        });
        let _ = ready_rx.await;
        PodDeletions { deleted, task }
    }

    fn count(&self) -> usize {
        self.deleted.lock().unwrap().len()
    }
}

impl Drop for PodDeletions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Claims (by name) untouched between two moments: same names, none deleting. Names are
/// not reused and deletion is not undone, so this is a state, not a sample.
/// The value of a metric's first sample (`name` is the full sample name), from the agent's
/// `/metrics`.
async fn metric(w: &World, addr: std::net::SocketAddr, name: &str) -> f64 {
    let text = w.metrics(addr).await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// Waits until the agent has done `n` more of the work `name` counts. A "nothing happens" window measured in the agent's own passes, not
/// in wall time: on a loaded machine a fixed sleep can hold no pass at all and prove nothing.
async fn after_passes(w: &World, addr: std::net::SocketAddr, name: &str, n: f64) {
    let start = metric(w, addr, name).await;
    wait_for(name, Duration::from_secs(120), || async {
        (metric(w, addr, name).await >= start + n).then_some(())
    })
    .await;
}

async fn claims_untouched(w: &World, pool: &str, before: &BTreeSet<String>) -> Result<(), String> {
    let now = claims_of(w, pool).await;
    let names: BTreeSet<String> = now.iter().map(|c| c.name_any()).collect();
    let deleting = now.iter().any(|c| c.metadata.deletion_timestamp.is_some());
    if &names == before && !deleting {
        Ok(())
    } else {
        Err(format!(
            "claims before {before:?}, now {names:?} (deleting: {deleting})"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_pool_keeps_its_replicas_and_never_launches_for_pods() {
    logs();
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "fixed",
        pool(&["2"], json!({"replicas": 3, "limits": {"nodes": "5"}})),
    )
    .await;
    let agent = w.agent(&[]).await;
    wait_for("3 Ready static nodes", Duration::from_secs(120), || async {
        (ready_nodes_of(&w, "fixed").await.len() == 3 && claims_of(&w, "fixed").await.len() == 3)
            .then_some(())
    })
    .await;
    // Pods may run there (kube-scheduler puts them on the nodes that exist)...
    w.deployment_with(
        "small",
        2,
        "500m",
        "256Mi",
        json!({}),
        json!({"nodeSelector": {"karpenter.sh/nodepool": "fixed"}}),
    )
    .await;
    running(&w, "small", 2).await;
    // ...but a pod no static node holds waits: the pool never launches for it.
    w.deployment_with(
        "big",
        1,
        "3",
        "1Gi",
        json!({}),
        json!({"nodeSelector": {"karpenter.sh/nodepool": "fixed"}}),
    )
    .await;
    let names: BTreeSet<String> = claims_of(&w, "fixed")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    wait_for(
        "FailedScheduling for the big pod",
        Duration::from_secs(60),
        || async {
            let pods = w.pods("big").await;
            let name = pods.first()?.name_any();
            w.events_for("default", &name)
                .await
                .iter()
                .any(|e| e.starts_with("FailedScheduling"))
                .then_some(())
        },
    )
    .await;
    after_passes(&w, agent.metrics, PASSES, 3.0).await;
    if let Err(e) = claims_untouched(&w, "fixed", &names).await {
        panic!("a static pool launched for a pending pod: {e}");
    }
    assert_eq!(w.running("big").await, 0);

    // Scaled down to 1 with Terraform's patch: the two emptiest claims go (a static pool's
    // scale-down is not paced by budgets), then one comes back for replicas 2.
    let log = ClaimLog::start(w.client.clone()).await;
    let pools: Api<NodePool> = Api::all(w.client.clone());
    pools
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    wait_for("1 static node left", Duration::from_secs(120), || async {
        (claims_of(&w, "fixed").await.len() == 1 && ready_nodes_of(&w, "fixed").await.len() == 1)
            .then_some(())
    })
    .await;
    let gone: Vec<String> = log
        .steps()
        .into_iter()
        .filter_map(|s| match s {
            Step::Gone { claim, .. } => Some(claim),
            _ => None,
        })
        .collect();
    assert_eq!(gone.len(), 2, "{gone:?}");
    running(&w, "small", 2).await;
    let ev = messages(&events(&w, "Disrupting").await);
    assert!(
        ev.iter()
            .any(|m| m.starts_with("Overprovisioned: NodePool fixed keeps 1 node(s)")),
        "{ev:?}"
    );

    pools
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    wait_for("2 static nodes again", Duration::from_secs(120), || async {
        (ready_nodes_of(&w, "fixed").await.len() == 2 && claims_of(&w, "fixed").await.len() == 2)
            .then_some(())
    })
    .await;
    // A claim deleted by hand is replaced.
    let one = claims_of(&w, "fixed").await[0].name_any();
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    claims.delete(&one, &DeleteParams::default()).await.unwrap();
    wait_for(
        "the deleted claim replaced",
        Duration::from_secs(120),
        || async {
            let now = claims_of(&w, "fixed").await;
            (now.len() == 2
                && now.iter().all(|c| c.name_any() != one)
                && ready_nodes_of(&w, "fixed").await.len() == 2)
                .then_some(())
        },
    )
    .await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn headroom_is_warm_room_a_burst_starts_on_at_once() {
    logs();
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    // Room for one pod of 2 vCPU / 2 GiB on 4-vCPU nodes; consolidation eager.
    w.node_pool(
        "warm",
        pool(
            &["4"],
            json!({
                "headroom": [{"cpu": "2", "memory": "2Gi"}],
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": "1s", "budgets": [{"nodes": "100%"}]},
            }),
        ),
    )
    .await;
    let agent = w.agent(&[]).await;
    // No pod at all, yet a node comes up: the headroom.
    let warm = wait_for("a warm node", Duration::from_secs(120), || async {
        let n = ready_nodes_of(&w, "warm").await;
        (n.len() == 1).then(|| n[0].clone())
    })
    .await;
    let claims: BTreeSet<String> = claims_of(&w, "warm")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(claims.len(), 1);
    // Consolidation leaves the empty node alone: its room is the headroom. The node is due
    // for consolidation once it has shown Consolidatable for the validation delay; the
    // pass that then decides counts it blocked for the headroom.
    let blocked = "joiner_disruption_blocked{reason=\"headroom\"} 1";
    wait_for(
        "the empty node kept for the headroom",
        Duration::from_secs(120),
        || async {
            w.metrics(agent.metrics)
                .await
                .contains(blocked)
                .then_some(())
        },
    )
    .await;
    after_passes(&w, agent.metrics, PASSES, 2.0).await;
    if let Err(e) = claims_untouched(&w, "warm", &claims).await {
        panic!("consolidation took the headroom away: {e}");
    }
    // Nothing changes from here, so the passes that follow are skipped (what keeps the agent's
    // idle CPU low), and skipping decides what deciding did: the node stays.
    after_passes(&w, agent.metrics, SKIPPED, 2.0).await;
    if let Err(e) = claims_untouched(&w, "warm", &claims).await {
        panic!("a skipped pass took the headroom away: {e}");
    }

    // A burst of 2 vCPU lands on the warm node at once, no boot in between...
    w.deployment("burst", 1, "2", "1Gi").await;
    running(&w, "burst", 1).await;
    let pod = &w.pods("burst").await[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        Some(warm.name_any()),
        "the burst ran on the node that was waiting for it"
    );
    // ...and the headroom is restored: a second node, so 2 vCPU are free again (the warm
    // node has 1.9 left).
    wait_for("headroom restored", Duration::from_secs(120), || async {
        (ready_nodes_of(&w, "warm").await.len() == 2).then_some(())
    })
    .await;
    let provisioned = messages(&events(&w, "Provisioned").await);
    assert!(
        provisioned
            .iter()
            .filter(|m| m.contains("for the pool's headroom"))
            .count()
            >= 2,
        "{provisioned:?}"
    );
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repair_replaces_an_unhealthy_node_unless_too_many_are() {
    logs();
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "general",
        pool(
            &["2"],
            json!({
                "repair": {"policies": [
                    {"conditionType": "Ready", "conditionStatus": "Unknown", "tolerationDuration": "5s"},
                    {"conditionType": "KernelReady", "conditionStatus": "False", "tolerationDuration": "5s"},
                ]},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
            }),
        ),
    )
    .await;
    // One pod per 2-vCPU node: five nodes.
    w.deployment("web", 5, "1200m", "512Mi").await;
    let agent = w.agent(&[]).await;
    running(&w, "web", 5).await;
    let nodes = ready_nodes_of(&w, "general").await;
    assert_eq!(nodes.len(), 5);

    // A hung kubelet: the node goes Unknown and, 5 s later, is replaced.
    let log = ClaimLog::start(w.client.clone()).await;
    let sick = nodes[0].name_any();
    let sick_claim = w
        .claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(sick.as_str()))
        .map(|c| c.name_any())
        .expect("the node's claim");
    w.set_kubelet_running(&sick, false).await;
    wait_for(
        "the sick node's claim gone",
        Duration::from_secs(120),
        || async {
            log.all_gone(&BTreeSet::from([sick_claim.clone()]))
                .then_some(())
        },
    )
    .await;
    running(&w, "web", 5).await;
    let repaired = messages(&events(&w, "Repairing").await);
    assert!(
        repaired.iter().any(|m| m.contains(&sick)
            && m.contains("Ready=Unknown for")
            && m.contains("(toleration 5s)")),
        "{repaired:?}"
    );
    assert!(
        log.steps().iter().all(|s| match s {
            Step::Deleting { claim, .. } | Step::Gone { claim, .. } => claim == &sick_claim,
        }),
        "only the sick node's claim was deleted: {:?}",
        log.steps()
    );

    // A node-problem condition (as the EKS node monitoring agent sets it) is repaired too.
    let nodes = ready_nodes_of(&w, "general").await;
    let kernel = nodes[0].name_any();
    w.set_node_condition(&kernel, "KernelReady", "False").await;
    wait_for(
        "the KernelReady=False node replaced",
        Duration::from_secs(120),
        || async {
            let gone = !w.nodes().await.iter().any(|n| n.name_any() == kernel);
            (gone && w.running("web").await == 5).then_some(())
        },
    )
    .await;

    // Two of five unhealthy: more than 20 %, so none is repaired, and both say why.
    let nodes = ready_nodes_of(&w, "general").await;
    assert_eq!(nodes.len(), 5);
    let (a, b) = (nodes[0].name_any(), nodes[1].name_any());
    let before: BTreeSet<String> = claims_of(&w, "general")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    w.set_kubelet_running(&a, false).await;
    w.set_kubelet_running(&b, false).await;
    wait_for(
        "NodeRepairBlocked on both",
        Duration::from_secs(60),
        || async {
            let ev = events(&w, "NodeRepairBlocked").await;
            let on = |n: &str| {
                ev.iter()
                    .any(|e| e.involved_object.name.as_deref() == Some(n))
            };
            (on(&a) && on(&b)).then_some(())
        },
    )
    .await;
    let held = messages(&events(&w, "NodeRepairBlocked").await);
    assert!(
        held.iter()
            .any(|m| m
                .contains("2 of the 5 nodes of NodePool general are unhealthy, more than 20 %")),
        "{held:?}"
    );
    if let Err(e) = claims_untouched(&w, "general", &before).await {
        panic!("repair acted while over 20 % of the pool was unhealthy: {e}");
    }
    // One recovers: the other, now alone (1 of 5), is repaired.
    w.set_kubelet_running(&a, true).await;
    wait_for(
        "the remaining sick node replaced",
        Duration::from_secs(120),
        || async {
            let gone = !w.nodes().await.iter().any(|n| n.name_any() == b);
            (gone && w.running("web").await == 5).then_some(())
        },
    )
    .await;
    assert!(
        w.nodes().await.iter().any(|n| n.name_any() == a),
        "the recovered node stays"
    );
    drop(agent);
}

/// Six 4-vCPU nodes, each left holding one 1-vCPU pod of `app` (the 2.5-vCPU pods that
/// forced one node each are deleted), in a pool with `disruption`.
async fn six_underused_nodes(w: &World, disruption: serde_json::Value) {
    w.node_class("default").await;
    w.node_pool("general", pool(&["4"], json!({"disruption": disruption})))
        .await;
    w.deployment("spread", 6, "2500m", "512Mi").await;
    running(w, "spread", 6).await;
    w.deployment("keep", 6, "1", "512Mi").await;
    running(w, "keep", 6).await;
    assert_eq!(ready_nodes_of(w, "general").await.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_eviction_cap_paces_consolidation() {
    logs();
    let w = World::start(Default::default()).await;
    let agent = w.agent(&[]).await;
    // Consolidation would move all six pods onto two nodes; the cap allows 3 an hour.
    six_underused_nodes(
        &w,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "2s",
               "budgets": [{"nodes": "100%"}], "consolidationEvictionsPerHour": 3}),
    )
    .await;
    let evictions = PodDeletions::start(w.client.clone(), "keep").await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(w.client.clone(), "default");
    deployments
        .delete("spread", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the cap reached and said", Duration::from_secs(120), || async {
        let blocked = messages(&events(&w, "DisruptionBlocked").await);
        blocked
            .iter()
            .any(|m| m.contains("the NodePool's cap of 3 consolidation evictions per hour would be exceeded"))
            .then_some(())
    })
    .await;
    running(&w, "keep", 6).await;
    // A few more passes: nothing more moves within the hour.
    after_passes(&w, agent.metrics, PASSES, 3.0).await;
    assert_eq!(
        evictions.count(),
        3,
        "evicted: {:?}",
        evictions.deleted.lock().unwrap()
    );
    let pools: Api<NodePool> = Api::all(w.client.clone());
    let status = pools
        .get("general")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let tally: u32 = status.consolidation_evictions.iter().map(|r| r.pods).sum();
    assert_eq!(tally, 3, "{:?}", status.consolidation_evictions);
    let metrics = w.metrics(agent.metrics).await;
    assert!(
        metrics.contains("joiner_disruption_consolidation_evictions_total{nodepool=\"general\"} 3"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("consolidation_evictions"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn balanced_consolidation_says_its_score() {
    logs();
    let w = World::start(Default::default()).await;
    let agent = w.agent(&[]).await;
    six_underused_nodes(
        &w,
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "2s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(w.client.clone(), "default");
    deployments
        .delete("spread", &DeleteParams::default())
        .await
        .unwrap();
    // Deleting underused nodes of equal price saves k/6 of the cost for k/6 of the
    // disruption (each node 1 + its pod 1): score 1.00, approved.
    let msg = wait_for(
        "a Balanced consolidation",
        Duration::from_secs(120),
        || async {
            messages(&events(&w, "Disrupting").await)
                .into_iter()
                .find(|m| m.contains("Underutilized") && m.contains("Balanced score"))
        },
    )
    .await;
    assert!(msg.contains("Balanced score 1.00 >= 0.50"), "{msg}");
    running(&w, "keep", 6).await;
    drop(agent);
}
