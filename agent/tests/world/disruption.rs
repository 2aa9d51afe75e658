//! Disruption end to end: kube-sim with its EC2 → Node bridge, the AWS emulator, the agent
//! in-process. Consolidation (the seed's scale-in, replacement by a cheaper node), budgets
//! (one at a time, a schedule-bound 0), what blocks (do-not-disrupt, PDBs), expiry and
//! drift (NodePool requirements, NodeClass AMI).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use joiner_agent_world::claim_log::{deleting_before, most_deleting_at_once, ClaimLog, Step};
use joiner_agent_world::{wait_for, World};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::{NodeClaim, NodeClass, NodePool};

fn pool(cpus: &[&str], disruption: serde_json::Value, expire: &str) -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": cpus},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "expireAfter": expire,
        }},
        "disruption": disruption,
    })
}

/// The agent's `joiner_disruption_*` samples, printed when a test fails to say why.
fn disruption_metrics(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .filter(|l| l.starts_with("joiner_disruption") || l.starts_with("joiner_nodeclaims"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "joiner_agent=info".into()))
        .with_test_writer()
        .try_init();
}

fn label(n: &Node, k: &str) -> String {
    n.labels().get(k).cloned().unwrap_or_default()
}

async fn node_names(w: &World) -> BTreeSet<String> {
    w.nodes().await.iter().map(|n| n.name_any()).collect()
}

async fn settle(w: &World, app: &str, replicas: usize) {
    wait_for(
        &format!("{replicas} {app} pods Running"),
        Duration::from_secs(150),
        || async { (w.running(app).await == replicas).then_some(()) },
    )
    .await;
}

async fn events_with_reason(w: &World, reason: &str) -> Vec<Event> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_scale_in_100_to_4() {
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "general",
        pool(
            &["2", "4"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
                   "budgets": [{"nodes": "100%"}]}),
            "720h",
        ),
    )
    .await;
    w.deployment("web", 100, "250m", "512Mi").await;
    let agent = w.agent(&[]).await;
    settle(&w, "web", 100).await;
    let peak = w.nodes().await.len();
    let started = Instant::now();
    w.scale("web", 4).await;
    // The scheduler's choice for four such pods on this pool: one node.
    let end = wait_for("scale-in settles", Duration::from_secs(120), || async {
        let n = w.nodes().await.len();
        (n <= 1 && w.running("web").await == 4).then_some(n)
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(end, 1);
    let removed = events_with_reason(&w, "Disrupting").await;
    assert!(
        !removed.is_empty(),
        "every removal is explained by an Event"
    );
    assert!(
        removed
            .iter()
            .any(|e| e.message.as_deref().unwrap_or("").contains("saving $")),
        "{:?}",
        removed.first().map(|e| e.message.clone())
    );
    println!(
        "scale-in 100 -> 4 replicas: {peak} -> {end} nodes in {secs:.1} s (consolidateAfter 5s; Karpenter on EKS: 25 -> 4 in 55 s)"
    );
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn underutilised_node_replaced_by_a_cheaper_one() {
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    // Only 8-vCPU nodes at first, consolidation off.
    w.node_pool(
        "general",
        pool(
            &["8"],
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            "720h",
        ),
    )
    .await;
    w.deployment("web", 6, "1", "1Gi").await;
    let agent = w.agent(&[]).await;
    settle(&w, "web", 6).await;
    w.scale("web", 1).await;
    settle(&w, "web", 1).await;
    let before = w.nodes().await;
    assert!(before
        .iter()
        .all(|n| label(n, "karpenter.k8s.aws/instance-cpu") == "8"));
    // Allow 2-vCPU nodes and consolidation: the 8-vCPU node with one pod is replaced.
    let api: Api<NodePool> = Api::all(w.client.clone());
    api.patch(
        "general",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": pool(
            &["2", "8"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "2s",
                   "budgets": [{"nodes": "1"}]}),
            "720h",
        )})),
    )
    .await
    .unwrap();
    let old: BTreeSet<String> = before.iter().map(|n| n.name_any()).collect();
    wait_for(
        "replaced by a 2-vCPU node",
        Duration::from_secs(120),
        || async {
            let nodes = w.nodes().await;
            (nodes.iter().all(|n| !old.contains(&n.name_any()))
                && nodes
                    .iter()
                    .any(|n| label(n, "karpenter.k8s.aws/instance-cpu") == "2")
                && w.running("web").await == 1)
                .then_some(())
        },
    )
    .await;
    let ev = events_with_reason(&w, "Disrupting").await;
    assert!(
        ev.iter().any(|e| {
            let m = e.message.as_deref().unwrap_or("");
            m.contains("Underutilized") && m.contains("replaced by one") && m.contains("saving $")
        }),
        "{:?}",
        ev.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_one_at_a_time_and_a_scheduled_zero() {
    logs();
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    // Right now a budget of 0 is in force (every minute, for an hour).
    w.node_pool(
        "general",
        pool(
            &["2"],
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1s",
                   "budgets": [{"nodes": "1"}, {"nodes": "0", "schedule": "* * * * *", "duration": "1h"}]}),
            "720h",
        ),
    )
    .await;
    w.deployment("web", 10, "1", "1Gi").await;
    let agent = w.agent(&[]).await;
    settle(&w, "web", 10).await;
    let peak = w.nodes().await.len();
    assert!(peak >= 4, "{peak}");
    // Every claim deletion from here on, in the API server's order.
    let log = ClaimLog::start(w.client.clone()).await;
    let claims = claim_names(&w).await;
    assert_eq!(claims.len(), peak, "one claim per node");
    w.scale("web", 0).await;
    // The scheduled budget of 0 holds the now empty nodes for as long as it is in force.
    tokio::time::sleep(Duration::from_secs(12)).await;
    if let Err(e) = claims_untouched_since(&w, &claims).await {
        panic!("the scheduled budget of 0 blocks: {e}");
    }
    // Lift the window: nodes go, never more than one at a time.
    let api: Api<NodePool> = Api::all(w.client.clone());
    let lifted = api
        .patch(
            "general",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})),
        )
        .await
        .unwrap();
    let lifted_at: u64 = lifted
        .resource_version()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion");
    wait_for(
        "every claim's deletion seen through the watch",
        Duration::from_secs(120),
        || async { log.all_gone(&claims).then_some(()) },
    )
    .await;
    let steps = log.steps();
    eprintln!("claim deletions (budget lifted at resourceVersion {lifted_at}): {steps:?}");
    assert_eq!(
        deleting_before(&steps, lifted_at),
        Vec::<String>::new(),
        "claims deleted while the scheduled budget of 0 was in force; {}",
        disruption_metrics(agent.metrics)
    );
    assert_eq!(
        most_deleting_at_once(&steps),
        1,
        "a budget of 1 disrupts one node at a time: {steps:?}"
    );
    let deleted = steps
        .iter()
        .filter(|s| matches!(s, Step::Deleting { .. }))
        .count();
    assert_eq!(deleted, peak, "every empty node went: {steps:?}");
    drop(agent);
}

async fn claim_names(w: &World) -> BTreeSet<String> {
    w.claims().await.iter().map(|c| c.name_any()).collect()
}

/// Claims (by name) and whether any has a deletionTimestamp. Deletion cannot be undone and
/// names are not reused, so the same names with none deleting at two moments means no claim
/// was deleted in between: a state, not a sample of a transient one.
async fn claims_untouched_since(w: &World, before: &BTreeSet<String>) -> Result<(), String> {
    let now: Vec<NodeClaim> = w.claims().await;
    let names: BTreeSet<String> = now.iter().map(|c| c.name_any()).collect();
    let deleting: Vec<String> = now
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some())
        .map(|c| c.name_any())
        .collect();
    if &names == before && deleting.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "claims before {before:?}, now {names:?}, deleting {deleting:?}"
        ))
    }
}

#[test]
fn overlapping_deletions_are_counted() {
    let d = |c: &str, rv| Step::Deleting {
        claim: c.into(),
        rv,
    };
    let g = |c: &str, rv| Step::Gone {
        claim: c.into(),
        rv,
    };
    let one_at_a_time = [d("a", 1), g("a", 2), d("b", 3), g("b", 4)];
    assert_eq!(most_deleting_at_once(&one_at_a_time), 1);
    // What sampling every 100 ms could miss entirely: a deletion inside the window.
    let overlapping = [d("a", 1), d("b", 2), g("a", 3), g("b", 4)];
    assert_eq!(most_deleting_at_once(&overlapping), 2);
    assert_eq!(deleting_before(&overlapping, 2), vec!["a".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn do_not_disrupt_and_pdbs_block() {
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "general",
        pool(
            &["2"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1s",
                   "budgets": [{"nodes": "100%"}]}),
            "720h",
        ),
    )
    .await;
    // One pod per node (1.5 of 2 vCPU): each node is underutilised only if others had room.
    w.deployment_with(
        "pinned",
        1,
        "500m",
        "256Mi",
        json!({"annotations": {"karpenter.sh/do-not-disrupt": "true"}}),
        json!({}),
    )
    .await;
    w.deployment("guarded", 1, "500m", "256Mi").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "guarded"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let agent = w.agent(&[]).await;
    settle(&w, "pinned", 1).await;
    settle(&w, "guarded", 1).await;
    let nodes = node_names(&w).await;
    let claims = claim_names(&w).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(node_names(&w).await, nodes, "nothing may be disrupted");
    if let Err(e) = claims_untouched_since(&w, &claims).await {
        panic!("nothing may be disrupted: {e}");
    }
    let blocked = events_with_reason(&w, "DisruptionBlocked").await;
    let msgs: Vec<String> = blocked.iter().filter_map(|e| e.message.clone()).collect();
    assert!(
        msgs.iter().any(|m| m.contains("do-not-disrupt"))
            || msgs.iter().any(|m| m.contains("PodDisruptionBudget")),
        "{msgs:?}"
    );
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiry_and_drift_replace_within_budget() {
    let w = World::start(Default::default()).await;
    w.node_class("default").await;
    w.node_pool(
        "general",
        pool(
            &["2"],
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                   "budgets": [{"nodes": "1"}]}),
            "720h",
        ),
    )
    .await;
    w.deployment("web", 4, "1", "1Gi").await;
    let agent = w.agent(&[]).await;
    settle(&w, "web", 4).await;

    // Drift by requirements: only 4-vCPU nodes allowed now.
    let log = ClaimLog::start(w.client.clone()).await;
    let claim_names_before = claim_names(&w).await;
    let api: Api<NodePool> = Api::all(w.client.clone());
    let mut spec = pool(
        &["4"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
        "720h",
    );
    api.patch(
        "general",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec.clone()})),
    )
    .await
    .unwrap();
    wait_for(
        "drifted nodes replaced by 4-vCPU ones",
        Duration::from_secs(180),
        || async {
            let nodes = w.nodes().await;
            (!nodes.is_empty()
                && nodes
                    .iter()
                    .all(|n| label(n, "karpenter.k8s.aws/instance-cpu") == "4")
                && w.running("web").await == 4)
                .then_some(())
        },
    )
    .await;
    let drifted = claim_names_before.clone();
    wait_for(
        "every drifted claim's deletion seen through the watch",
        Duration::from_secs(60),
        || async { log.all_gone(&drifted).then_some(()) },
    )
    .await;
    let steps = log.steps();
    assert_eq!(
        most_deleting_at_once(&steps),
        1,
        "budget of 1: claims deleting at once, in order: {steps:?}"
    );
    assert!(events_with_reason(&w, "Disrupting").await.iter().any(|e| e
        .message
        .as_deref()
        .unwrap_or("")
        .contains("Drifted")));

    // Drift by AMI: the NodeClass selects another image.
    let images = w
        .ec2
        .describe_images()
        .owners("amazon")
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let other = images
        .images()
        .iter()
        .filter_map(|i| i.image_id())
        .find(|id| *id != w.image_id)
        .unwrap()
        .to_string();
    // expireAfter is stamped on each NodeClaim at launch (Karpenter v1: changing it on the
    // NodePool neither drifts nor expires existing nodes), so shorten it now: the nodes the
    // AMI drift brings up next carry 20 s and expire below.
    spec["template"]["spec"]["expireAfter"] = json!("20s");
    api.patch(
        "general",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .unwrap();
    let before = node_names(&w).await;
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    classes
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"amiSelectorTerms": [{"id": other}]}})),
        )
        .await
        .unwrap();
    wait_for(
        "AMI-drifted nodes replaced",
        Duration::from_secs(180),
        || async {
            let now = node_names(&w).await;
            (!now.is_empty() && now.is_disjoint(&before) && w.running("web").await == 4)
                .then_some(())
        },
    )
    .await;

    // Expiry: the nodes launched with expireAfter 20 s are replaced in turn.
    let before = node_names(&w).await;
    wait_for(
        "expired nodes replaced",
        Duration::from_secs(180),
        || async {
            let now = node_names(&w).await;
            (!now.is_empty() && now.is_disjoint(&before) && w.running("web").await == 4)
                .then_some(())
        },
    )
    .await;
    drop(agent);
}
