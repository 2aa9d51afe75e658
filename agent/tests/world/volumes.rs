//! Volume topology end to end: pods whose persistent volumes live in one zone get nodes in
//! that zone, and keep to it when their node is replaced.
//!
//! The local world prices Spot lowest in us-east-1a (`catalog::prices::spot_model`: each
//! zone letter adds 1 %), so a pool that allows every zone puts a pod without volumes there.
//! The volumes here live in us-east-1b or us-east-1c: a node launched in the cheapest zone
//! would be one kube-sim's VolumeBinding filter refuses (as kube-scheduler does), and the pod
//! would stay Pending beside it.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use joiner_agent::api::NodeClaim;
use joiner_agent_world::ebs_provisioner::EbsProvisioner;
use joiner_agent_world::pod_watch::{running_on, PodWatch};
use joiner_agent_world::{sdk_config, wait_for, Opts, Target, World, QUEUE};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

const ZONE: &str = "topology.kubernetes.io/zone";

/// A StorageClass of the EBS CSI driver that provisions only in `zone`.
async fn storage_class(w: &World, name: &str, mode: &str, zone: &str) {
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": mode,
        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": [zone]}]}],
    }))
    .unwrap();
    Api::<StorageClass>::all(w.client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("StorageClass create");
}

/// A StatefulSet of `replicas` pods, each with a claim `data-<name>-<ordinal>` of `class`.
async fn stateful_set(w: &World, name: &str, replicas: i32, class: &str) {
    let s: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "8Gi"}}}}]}
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(w.client.clone(), "default")
        .create(&PostParams::default(), &s)
        .await
        .expect("StatefulSet create");
}

/// The zone of the node a pod runs on.
async fn zone_of(w: &World, pod: &Pod) -> String {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let node: Node = Api::all(w.client.clone()).get(&node).await.unwrap();
    node.labels()[ZONE].clone()
}

/// The zone a claim's volume can be reached from.
async fn volume_zone(w: &World, claim: &str) -> String {
    let c: PersistentVolumeClaim = Api::namespaced(w.client.clone(), "default")
        .get(claim)
        .await
        .unwrap();
    let volume = c.spec.unwrap().volume_name.expect("claim bound");
    let pv: PersistentVolume = Api::all(w.client.clone()).get(&volume).await.unwrap();
    let term = &pv
        .spec
        .unwrap()
        .node_affinity
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms[0];
    let e = &term.match_expressions.as_ref().unwrap()[0];
    assert_eq!(e.key, ZONE);
    e.values.as_ref().unwrap()[0].clone()
}

/// Every NodeClaim's zone.
fn claim_zones(claims: &[NodeClaim]) -> Vec<String> {
    claims
        .iter()
        .map(|c| c.labels().get(ZONE).cloned().unwrap_or_default())
        .collect()
}

/// Pods of `app` Running, once all `n` are.
async fn running_pods(w: &World, app: &str, n: usize) -> Vec<Pod> {
    wait_for(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(180),
        || async {
            let pods = w.pods(app).await;
            let running = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (running == n && pods.len() == n).then_some(pods)
        },
    )
    .await
}

/// A StatefulSet whose WaitForFirstConsumer class allows only us-east-1c (the dearest zone
/// for Spot) gets its nodes there; its claims are provisioned there and its pods run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_gets_nodes_in_the_zone_its_storage_class_allows() {
    stateful_set_in_its_classes_zone(Target::Sim).await
}

/// On the real control plane kube-scheduler's VolumeBinding picks the node and binds the
/// pods; the harness plays the EBS CSI driver's provisioner ([`EbsProvisioner`]).
async fn stateful_set_in_its_classes_zone(target: Target) {
    let w = World::start(Opts::on(target)).await;
    let _provisioner =
        (target == Target::ControlPlane).then(|| EbsProvisioner::start(w.client.clone()));
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    storage_class(&w, "only-c", "WaitForFirstConsumer", "us-east-1c").await;
    let verdicts = PodWatch::start(w.client.clone(), "default", "db").await;
    stateful_set(&w, "db", 2, "only-c").await;
    let pods = running_pods(&w, "db", 2).await;
    assert_eq!(
        verdicts.volume_zone_verdicts(),
        [],
        "[{}] no pod waited on its volumes' zone",
        w.target_name()
    );
    for p in &pods {
        assert_eq!(zone_of(&w, p).await, "us-east-1c", "{}", p.name_any());
        let claim = format!("data-{}", p.name_any());
        assert_eq!(volume_zone(&w, &claim).await, "us-east-1c", "{claim}");
    }
    let claims = w.claims().await;
    assert!(!claims.is_empty());
    assert!(
        claim_zones(&claims).iter().all(|z| z == "us-east-1c"),
        "no node launched where the volumes cannot go: {:?}",
        claim_zones(&claims)
    );
    agent.stop().await.expect("graceful stop");
}

/// A pod whose claim is bound to a volume in us-east-1b (its node affinity, as the EBS CSI
/// driver writes it) gets a node in us-east-1b, not in the cheaper us-east-1a, and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_to_a_volume_gets_a_node_in_the_volumes_zone() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "orders-data"},
        "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0", "fsType": "ext4"},
            "claimRef": {"namespace": "default", "name": "orders-data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}
    }))
    .unwrap();
    Api::<PersistentVolume>::all(w.client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "orders-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "volumeName": "orders-data", "resources": {"requests": {"storage": "20Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(w.client.clone(), "default")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    w.deployment_with(
        "orders",
        1,
        "500m",
        "512Mi",
        json!({}),
        json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "orders-data"}}]}),
    )
    .await;
    let pods = running_pods(&w, "orders", 1).await;
    assert_eq!(zone_of(&w, &pods[0]).await, "us-east-1b");
    let claims = w.claims().await;
    assert_eq!(claim_zones(&claims), ["us-east-1b"]);
    agent.stop().await.expect("graceful stop");
}

/// A Spot interruption of the node a StatefulSet pod runs on: the replacement is launched in
/// the zone of the pod's volume (us-east-1c, the dearest), never in a cheaper one, and the
/// pod, recreated under its name, runs there again on its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_replaces_a_volume_pods_node_in_its_volumes_zone() {
    let w = World::start(Opts::default()).await;
    let queue = spot_queue(&w).await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&["--queue-url", &queue.url]).await;
    storage_class(&w, "only-c", "WaitForFirstConsumer", "us-east-1c").await;
    stateful_set(&w, "db", 1, "only-c").await;
    let before = running_pods(&w, "db", 1).await.remove(0);
    let first_node = before.spec.as_ref().unwrap().node_name.clone().unwrap();
    let node: Node = Api::all(w.client.clone()).get(&first_node).await.unwrap();
    let instance = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .unwrap()
        .to_string();
    assert_eq!(
        node.labels()
            .get("karpenter.sh/capacity-type")
            .map(String::as_str),
        Some("spot"),
        "the general pool prefers Spot"
    );
    queue.spot_warning(&instance).await;
    let after = wait_for(
        "db-0 Running on another node",
        Duration::from_secs(240),
        || async {
            let p = w.pods("db").await.into_iter().next()?;
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
            let node = p.spec.as_ref()?.node_name.clone()?;
            (running && node != first_node).then_some(p)
        },
    )
    .await;
    assert_eq!(zone_of(&w, &after).await, "us-east-1c");
    assert_eq!(volume_zone(&w, "data-db-0").await, "us-east-1c");
    // Every instance the agent ever launched (terminated ones included) is in us-east-1c.
    let zones: Vec<String> = w
        .ec2
        .describe_instances()
        .send()
        .await
        .unwrap()
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.placement()?.availability_zone().map(str::to_string))
        .collect();
    assert!(zones.len() >= 2, "a replacement was launched: {zones:?}");
    assert!(
        zones.iter().all(|z| z == "us-east-1c"),
        "never moved out of the volume's zone: {zones:?}"
    );
    agent.stop().await.expect("graceful stop");
}

/// The messages of the agent's `Disrupting` Events (on NodeClaims and Nodes).
async fn disrupting_events(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for ns in ["default", "joiner"] {
        let api: Api<Event> = Api::namespaced(w.client.clone(), ns);
        for e in api.list(&Default::default()).await.unwrap().items {
            if e.reason.as_deref() == Some("Disrupting") {
                out.push(e.message.unwrap_or_default());
            }
        }
    }
    out
}

/// The disruption settings of the drift test's pools: only the test disrupts.
fn no_consolidation() -> serde_json::Value {
    json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
           "budgets": [{"nodes": "100%"}]})
}

/// The node of a StatefulSet pod drifts (its NodeClass selects another image) while a node
/// of another pool, in the cheapest zone, has room for it. The pod may only go where its
/// volume is: the agent launches the replacement in us-east-1c before draining, and the
/// pod, recreated under its name, binds there, never refused for its volume's zone. (A
/// disruption that read the pod without its volume would find it room on the cheaper node,
/// drain at once, and leave it Pending on its volume's node affinity.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_volume_pods_node_is_replaced_in_its_volumes_zone() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_class("spare").await;
    let mut db_pool = World::general_pool_spec("default");
    db_pool["weight"] = json!(50);
    db_pool["disruption"] = no_consolidation();
    w.node_pool("db", db_pool).await;
    let mut spare_pool = World::general_pool_spec("spare");
    spare_pool["disruption"] = no_consolidation();
    w.node_pool("spare", spare_pool).await;
    let agent = w.agent(&[]).await;
    // A small pod held to the spare pool: its node, in the cheapest zone, has room to spare.
    w.deployment_with(
        "filler",
        1,
        "250m",
        "256Mi",
        json!({}),
        json!({"nodeSelector": {"karpenter.sh/nodepool": "spare"}}),
    )
    .await;
    let spare = running_pods(&w, "filler", 1).await.remove(0);
    let spare_zone = zone_of(&w, &spare).await;
    assert_ne!(
        spare_zone, "us-east-1c",
        "the spare room is outside the volume's zone"
    );

    storage_class(&w, "only-c", "WaitForFirstConsumer", "us-east-1c").await;
    let mut pods = PodWatch::start(w.client.clone(), "default", "db").await;
    stateful_set(&w, "db", 1, "only-c").await;
    let db_node = |p: &std::collections::BTreeMap<String, Pod>| {
        p.get("db-0").and_then(running_on).map(str::to_string)
    };
    let first = pods
        .until("db-0 Running", Duration::from_secs(120), db_node)
        .await;
    let node: Node = Api::all(w.client.clone()).get(&first).await.unwrap();
    assert_eq!(node.labels()[ZONE], "us-east-1c");
    assert_eq!(
        node.labels()["karpenter.sh/nodepool"],
        "db",
        "the heavier pool"
    );
    // Refusals of the spare node while db-0 waited for its first node are the scheduler's
    // due; from the drift on, none may come.
    let before = pods.verdicts().len();

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
    Api::<joiner_agent::api::NodeClass>::all(w.client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"amiSelectorTerms": [{"id": other}]}})),
        )
        .await
        .expect("NodeClass patch");
    let second = pods
        .until(
            "db-0 Running on its drifted node's replacement",
            Duration::from_secs(180),
            |p| db_node(p).filter(|n| *n != first),
        )
        .await;
    let node: Node = Api::all(w.client.clone()).get(&second).await.unwrap();
    assert_eq!(node.labels()[ZONE], "us-east-1c");
    assert_eq!(volume_zone(&w, "data-db-0").await, "us-east-1c");
    let refused: Vec<_> = pods.verdicts()[before..]
        .iter()
        .filter(|v| v.names_a_volume_zone())
        .cloned()
        .collect();
    assert_eq!(refused, [], "db-0 never waited on its volume's zone");
    // The drift was decided knowing the pod needs a node in its volume's zone, not room
    // on the spare node.
    let decisions = disrupting_events(&w).await;
    assert!(
        decisions
            .iter()
            .any(|m| m.contains("drifted") && m.contains("replaced by 1 new node(s)")),
        "{decisions:?}"
    );
    assert_eq!(
        running_pods(&w, "filler", 1).await[0]
            .spec
            .as_ref()
            .unwrap()
            .node_name,
        spare.spec.as_ref().unwrap().node_name,
        "the spare node was not disrupted"
    );
    agent.stop().await.expect("graceful stop");
}

/// The db pool of the consolidation test: on-demand only (Spot→Spot replacement is off
/// unless a pool opts in), of `cpus`-vCPU types, heavier than the spare pool.
fn db_pool(cpus: &[&str], disruption: serde_json::Value) -> serde_json::Value {
    let mut pool = World::general_pool_spec("default");
    pool["template"]["spec"]["requirements"] = json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": cpus},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]);
    pool["weight"] = json!(50);
    pool["disruption"] = disruption;
    pool
}

/// What a node has left of `resource` (CPU in millicores, else bytes) once `used` is
/// requested on it.
fn left(node: &Node, resource: &str, used: i64) -> i64 {
    let q = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .map(|q| q.0.as_str())
        .unwrap_or("0");
    let allocatable = if resource == "cpu" {
        joiner_agent::resources::parse_cpu_milli(q)
    } else {
        joiner_agent::resources::parse_bytes(q)
    };
    allocatable.expect("allocatable parses") - used
}

/// A small pod held to the spare pool; its node, outside the volume's zone, has room for
/// db-0's requests.
async fn filler_with_room_for_db(w: &World) -> Pod {
    w.deployment_with(
        "filler",
        1,
        "250m",
        "256Mi",
        json!({}),
        json!({"nodeSelector": {"karpenter.sh/nodepool": "spare"}}),
    )
    .await;
    let spare = running_pods(w, "filler", 1).await.remove(0);
    assert_ne!(
        zone_of(w, &spare).await,
        "us-east-1c",
        "the spare room is outside the volume's zone"
    );
    let spare_node: Node = Api::all(w.client.clone())
        .get(spare.spec.as_ref().unwrap().node_name.as_deref().unwrap())
        .await
        .unwrap();
    let cpu = left(&spare_node, "cpu", 250);
    let memory = left(&spare_node, "memory", 256 << 20);
    assert!(
        cpu >= 500 && memory >= 512 << 20,
        "the spare node has room for db-0's 500m and 512Mi: {cpu}m, {memory} bytes left"
    );
    spare
}

/// A StatefulSet pod sits alone on an 8-vCPU node in its volume's zone (us-east-1c) while
/// a node of another pool, in a cheaper zone, has room for it; then its pool turns to
/// consolidating underutilised nodes and allows 2-vCPU types. The agent may only move the
/// pod where its volume is: it replaces the node by a cheaper one in us-east-1c, and the
/// pod, recreated under its name, binds there, never refused for its volume's zone. (A
/// consolidation that read the pod without its volume would see it fit on the spare node,
/// delete its node outright, and leave it Pending on its volume's node affinity.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_replaces_a_volume_pods_node_only_in_its_volumes_zone() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_class("spare").await;
    w.node_pool("db", db_pool(&["8"], no_consolidation())).await;
    let mut spare_pool = World::general_pool_spec("spare");
    spare_pool["disruption"] = no_consolidation();
    w.node_pool("spare", spare_pool).await;
    let agent = w.agent(&[]).await;
    let spare = filler_with_room_for_db(&w).await;

    storage_class(&w, "only-c", "WaitForFirstConsumer", "us-east-1c").await;
    let mut pods = PodWatch::start(w.client.clone(), "default", "db").await;
    stateful_set(&w, "db", 1, "only-c").await;
    let db_node = |p: &std::collections::BTreeMap<String, Pod>| {
        p.get("db-0").and_then(running_on).map(str::to_string)
    };
    let first = pods
        .until("db-0 Running", Duration::from_secs(120), db_node)
        .await;
    let node: Node = Api::all(w.client.clone()).get(&first).await.unwrap();
    assert_eq!(node.labels()[ZONE], "us-east-1c");
    assert_eq!(node.labels()["karpenter.k8s.aws/instance-cpu"], "8");
    // Refusals of the spare node while db-0 waited for its first node are the scheduler's
    // due; from consolidation on, none may come.
    let before = pods.verdicts().len();

    Api::<joiner_agent::api::NodePool>::all(w.client.clone())
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": db_pool(
                &["2", "8"],
                json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "2s",
                       "budgets": [{"nodes": "100%"}]}),
            )})),
        )
        .await
        .expect("NodePool patch");
    let second = pods
        .until(
            "db-0 Running on its consolidated node's replacement",
            Duration::from_secs(180),
            |p| db_node(p).filter(|n| *n != first),
        )
        .await;
    let node: Node = Api::all(w.client.clone()).get(&second).await.unwrap();
    assert_eq!(node.labels()[ZONE], "us-east-1c");
    assert_eq!(volume_zone(&w, "data-db-0").await, "us-east-1c");
    let refused: Vec<_> = pods.verdicts()[before..]
        .iter()
        .filter(|v| v.names_a_volume_zone())
        .cloned()
        .collect();
    assert_eq!(refused, [], "db-0 never waited on its volume's zone");
    // The node went to consolidation, replaced (the spare node's room was not counted).
    let decisions = disrupting_events(&w).await;
    assert!(
        decisions.iter().any(|m| m.contains(&format!("underutilised {first}"))
            && m.contains("replaced by one")),
        "{decisions:?}"
    );
    assert!(
        !decisions.iter().any(|m| m.contains("fit on other nodes")),
        "{decisions:?}"
    );
    assert_eq!(
        running_pods(&w, "filler", 1).await[0]
            .spec
            .as_ref()
            .unwrap()
            .node_name,
        spare.spec.as_ref().unwrap().node_name,
        "the spare node was not disrupted"
    );
    agent.stop().await.expect("graceful stop");
}

/// An SQS queue the agent reads interruption messages from: the one the world's agent
/// policy lets it read.
struct SpotQueue {
    url: String,
    sqs: aws_sdk_sqs::Client,
}

async fn spot_queue(w: &World) -> SpotQueue {
    // The in-process agent builds its SQS client from the standard credential chain, as in
    // a pod; the emulator takes any static key.
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(&w.moto.endpoint()).await);
    let url = sqs
        .create_queue()
        .queue_name(QUEUE)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    SpotQueue { url, sqs }
}

impl SpotQueue {
    /// EC2's Spot interruption warning, as EventBridge delivers it to the queue.
    async fn spot_warning(&self, instance: &str) {
        let body = json!({
            "version": "0", "id": "5d5c1f2a-volumes", "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "account": "123456789012", "time": "2026-01-01T00:00:00Z",
            "region": "us-east-1",
            "resources": [format!("arn:aws:ec2:us-east-1b:instance/{instance}")],
            "detail": {"instance-id": instance, "instance-action": "terminate"},
        });
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body.to_string())
            .send()
            .await
            .unwrap();
    }
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn a_stateful_set_gets_nodes_in_the_zone_its_storage_class_allows() {
        stateful_set_in_its_classes_zone(Target::ControlPlane).await
    }
}
