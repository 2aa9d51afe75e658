//! Karpenter's well-known labels, end to end on kube-sim and moto: a NodePool requiring a
//! bandwidth Karpenter derives from DescribeInstanceTypes, and a pod selecting a CPU
//! manufacturer and a zone by its account-independent ID, get a node that carries every
//! one of those labels with the value EC2's data gives its type, in the zone whose subnet
//! has that ID.

use std::time::Duration;

use joiner_agent::api::NodeClass;
use joiner_agent_world::{wait_for, Opts, World};
use kube::api::Api;
use kube::ResourceExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_selecting_karpenter_labels_and_a_zone_id_lands_where_they_hold() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    let mut spec = World::general_pool_spec("default");
    spec["template"]["spec"]["requirements"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "karpenter.k8s.aws/instance-network-bandwidth", "operator": "Gte", "values": ["10000"]}));
    w.node_pool("general", spec).await;
    let _agent = w.agent(&[]).await;

    // The zone IDs come from the subnets the NodeClass resolved.
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    let (zone, zone_id) = wait_for(
        "the NodeClass's subnets with their zone IDs",
        Duration::from_secs(60),
        || async {
            let c = classes.get("default").await.ok()?;
            let s = c
                .status?
                .subnets
                .into_iter()
                .find(|s| s.zone == "us-east-1b")?;
            Some((s.zone, s.zone_id?))
        },
    )
    .await;
    w.deployment_with(
        "amd",
        1,
        "250m",
        "256Mi",
        json!({}),
        json!({"nodeSelector": {
            "karpenter.k8s.aws/instance-cpu-manufacturer": "amd",
            "topology.k8s.aws/zone-id": zone_id,
        }}),
    )
    .await;
    wait_for("the pod Running", Duration::from_secs(90), || async {
        (w.running("amd").await == 1).then_some(())
    })
    .await;
    let pod = w.pods("amd").await.remove(0);
    let node_name = pod.spec.unwrap().node_name.unwrap();
    let node = w
        .nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == node_name)
        .unwrap();
    let l = node.labels();
    assert_eq!(l["topology.kubernetes.io/zone"], zone);
    assert_eq!(l["topology.k8s.aws/zone-id"], zone_id);
    assert_eq!(l["karpenter.k8s.aws/instance-cpu-manufacturer"], "amd");
    assert_eq!(l["karpenter.k8s.aws/ec2nodeclass"], "default");
    let bandwidth: u64 = l["karpenter.k8s.aws/instance-network-bandwidth"]
        .parse()
        .unwrap();
    assert!(bandwidth >= 10_000, "{bandwidth}");
    for key in [
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
        "karpenter.k8s.aws/instance-ebs-bandwidth",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported",
        "karpenter.k8s.aws/instance-capability-flex",
    ] {
        assert!(l.contains_key(key), "{key} on the node: {l:?}");
    }
    assert!(
        !l.contains_key("karpenter.k8s.aws/instance-gpu-count"),
        "a CPU type carries no GPU labels"
    );
}
