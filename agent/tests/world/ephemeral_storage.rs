//! Ephemeral storage end to end: the agent sizes a node's disk from its NodeClass (here a
//! 40 GiB root volume), kube-sim's bridge reports the Node's ephemeral-storage from the
//! launch template the instance was launched from, and kube-sim's scheduler refuses a pod
//! whose request exceeds the Node's allocatable. A pod no NodeClass's disk can hold is
//! reported unplaceable and launched for by nobody.

use std::time::Duration;

use joiner_agent::api::NodeClass;
use joiner_agent_world::{wait_for, Opts, Target, World};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

const GI: i64 = 1 << 30;

/// A Deployment of one small pod asking `storage` of ephemeral storage.
async fn storage_deployment(w: &World, name: &str, storage: &str) {
    w.deployment_with(
        name,
        1,
        "250m",
        "256Mi",
        json!({}),
        json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi",
                "ephemeral-storage": storage}}}]}),
    )
    .await;
}

fn ephemeral(node: &Node, field: &str) -> i64 {
    let status = node.status.as_ref().expect("Node status");
    let map = match field {
        "capacity" => status.capacity.as_ref(),
        _ => status.allocatable.as_ref(),
    };
    let q = map
        .and_then(|m| m.get("ephemeral-storage"))
        .unwrap_or_else(|| panic!("Node {} has no {field} ephemeral-storage", node.name_any()));
    joiner_agent::resources::parse_bytes(&q.0).expect("ephemeral-storage quantity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_a_node_whose_disk_holds_it_and_one_no_disk_holds_is_unplaceable() {
    disk_sized_node(Target::Sim).await
}

/// On the real control plane kube-scheduler's NodeResourcesFit judges the 30 GiB request
/// against the allocatable the bridge reports on the Node KWOK keeps.
async fn disk_sized_node(target: Target) {
    let w = World::start(Opts::on(target)).await;
    w.node_class("default").await;
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    classes
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"blockDeviceMappings": [{
                "deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "40Gi", "volumeType": "gp3"}}]}})),
        )
        .await
        .expect("NodeClass patch");
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&["--batch-idle", "1s", "--batch-max", "10s"]).await;

    // 30 GiB of a 40 GiB root volume: 40 less 1 GiB kube-reserved and the 10 %
    // nodefs.available threshold leaves 35 GiB.
    storage_deployment(&w, "scratch", "30Gi").await;
    wait_for("the 30Gi pod Running", Duration::from_secs(90), || async {
        (w.running("scratch").await == 1).then_some(())
    })
    .await;
    let nodes = w.nodes().await;
    assert_eq!(nodes.len(), 1, "one node for one pod");
    assert_eq!(ephemeral(&nodes[0], "capacity"), 40 * GI);
    assert_eq!(
        ephemeral(&nodes[0], "allocatable"),
        40 * GI - GI - 4 * GI,
        "capacity less kube-reserved and nodefs.available"
    );
    let claims = w.claims().await;
    assert_eq!(claims.len(), 1, "one claim: {claims:?}");
    let claimed = claims[0]
        .status
        .as_ref()
        .and_then(|s| s.allocatable.get("ephemeral-storage").cloned())
        .expect("the claim states its ephemeral-storage");
    assert_eq!(
        joiner_agent::resources::parse_bytes(&claimed).unwrap(),
        35 * GI,
        "the claim promised what the kubelet reports"
    );

    // More than any disk of the NodeClass holds: reported, never launched for.
    storage_deployment(&w, "hoard", "100Gi").await;
    let hoard = wait_for("the 100Gi pod", Duration::from_secs(30), || async {
        w.pods("hoard").await.into_iter().next()
    })
    .await;
    let reason = wait_for(
        "the agent's FailedScheduling event for the 100Gi pod",
        Duration::from_secs(60),
        || async {
            w.events_for("default", &hoard.name_any())
                .await
                .into_iter()
                .find(|e| e.contains("no NodePool can take it"))
        },
    )
    .await;
    assert!(
        reason.contains("ephemeral-storage=100Gi"),
        "the event names the request no type holds: {reason}"
    );
    assert_eq!(w.claims().await.len(), 1, "no claim for the 100Gi pod");
    assert_eq!(
        w.live_instances().await.len(),
        1,
        "no instance for the 100Gi pod"
    );
    assert_eq!(w.running("hoard").await, 0);
    agent.stop().await.expect("graceful stop");
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn a_pod_gets_a_node_whose_disk_holds_it_and_one_no_disk_holds_is_unplaceable() {
        disk_sized_node(Target::ControlPlane).await
    }
}
