//! joiner beside managed node groups, as the production team of the seed documents moved
//! off Cluster Autoscaler: nodes that belong to no NodeClaim (a node group's) are never
//! cordoned, tainted, drained or deleted by the agent, even while it consolidates its own;
//! pods that fit there stay there; and as the group is drained to zero, its pods move onto
//! nodes the agent launches.
//!
//! The "node group" is two Nodes made directly through the API, as the kubelet of a node
//! group's instance registers itself; the group's shrinking is done by this test, as Cluster
//! Autoscaler would: cordon, evict through the Eviction API, delete the Node.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use joiner_agent_world::{wait_for, Opts, World};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

const GROUP: [&str; 2] = ["ng-general-a", "ng-general-b"];

fn group_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "eks.amazonaws.com/nodegroup": "general",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "m5.xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
        }},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }))
    .unwrap()
}

/// What happened to the group's Nodes, from a watch started before the agent: anything
/// this test did not do itself first is a violation.
#[derive(Default)]
struct GroupLog {
    cordoned_by_us: BTreeSet<String>,
    deleted_by_us: BTreeSet<String>,
    deletions_seen: usize,
    violations: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_groups_are_left_alone_and_their_pods_move_as_they_shrink() {
    let w = World::start(Opts::default()).await;
    let nodes: Api<Node> = Api::all(w.client.clone());
    for name in GROUP {
        let n = nodes
            .create(&PostParams::default(), &group_node(name))
            .await
            .expect("register a node group Node");
        // Status is a subresource: written as the kubelet writes it.
        nodes
            .patch_status(
                &n.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": group_node(name).status})),
            )
            .await
            .expect("node group Node status");
    }
    let log = Arc::new(Mutex::new(GroupLog::default()));
    let watch = {
        let log = log.clone();
        let nodes = nodes.clone();
        tokio::spawn(async move {
            let mut stream = watcher(nodes, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(Ok(ev)) = stream.next().await {
                let (node, deleted) = match ev {
                    watcher::Event::Apply(n) | watcher::Event::InitApply(n) => (n, false),
                    watcher::Event::Delete(n) => (n, true),
                    _ => continue,
                };
                let name = node.name_any();
                if !GROUP.contains(&name.as_str()) {
                    continue;
                }
                let spec = node.spec.clone().unwrap_or_default();
                let mut log = log.lock().unwrap();
                log.deletions_seen += usize::from(deleted);
                if deleted && !log.deleted_by_us.contains(&name) {
                    log.violations.push(format!("{name} deleted"));
                }
                if spec.unschedulable == Some(true) && !log.cordoned_by_us.contains(&name) {
                    log.violations.push(format!("{name} cordoned"));
                }
                for taint in spec.taints.unwrap_or_default() {
                    log.violations.push(format!("{name} tainted {}", taint.key));
                }
            }
        })
    };

    w.node_class("default").await;
    let mut pool = World::general_pool_spec("default");
    // Consolidate at once: the agent's disruption passes run through the whole test.
    pool["disruption"] =
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    w.node_pool("general", pool).await;
    let _agent = w.agent(&[]).await;

    // 1. A workload that fits on the group stays there: 6 × 500m on 2 × 3.92 cores.
    w.deployment("app", 6, "500m", "512Mi").await;
    wait_for("6 app pods Running", Duration::from_secs(60), || async {
        (w.running("app").await == 6).then_some(())
    })
    .await;
    let on = |pods: &[Pod], prefix: &str| {
        pods.iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .count()
    };
    assert_eq!(on(&w.pods("app").await, "ng-general-"), 6);
    assert!(
        w.claims().await.is_empty(),
        "no capacity launched for pods the group holds"
    );

    // 2. The group shrinks, node by node, as Cluster Autoscaler drains it.
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    for name in GROUP {
        log.lock().unwrap().cordoned_by_us.insert(name.to_string());
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .expect("cordon");
        for p in w.pods("app").await {
            if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name) {
                // A refusal (a PDB) is retried by the wait below's next round, as CA would.
                let _ = pods.evict(&p.name_any(), &EvictParams::default()).await;
            }
        }
        wait_for(
            &format!("no app pod left on {name}"),
            Duration::from_secs(60),
            || async { (on(&w.pods("app").await, name) == 0).then_some(()) },
        )
        .await;
        log.lock().unwrap().deleted_by_us.insert(name.to_string());
        nodes
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete the drained node");
    }
    // Every pod now runs on the agent's capacity.
    let placed = wait_for(
        "6 app pods Running on joiner's nodes",
        Duration::from_secs(120),
        || async {
            let pods = w.pods("app").await;
            let running = w.running("app").await;
            (running == 6 && on(&pods, "ng-general-") == 0).then_some(pods)
        },
    )
    .await;
    assert!(!w.claims().await.is_empty(), "the agent launched capacity");
    eprintln!(
        "moved: {:?}",
        placed
            .iter()
            .map(|p| p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default())
            .collect::<Vec<_>>()
    );

    // Let the watch see the last deletion, then judge everything it saw.
    wait_for(
        "the watch saw both deletions",
        Duration::from_secs(10),
        || async {
            let log = log.lock().unwrap();
            (log.deletions_seen == GROUP.len()).then_some(())
        },
    )
    .await;
    watch.abort();
    let log = log.lock().unwrap();
    assert!(
        log.violations.is_empty(),
        "the agent touched the node group: {:?}",
        log.violations
    );
}
