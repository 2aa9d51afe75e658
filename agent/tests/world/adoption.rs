//! Moving in from Karpenter, the migration guide's switch-over played on kube-sim and moto
//! (IAM enforced: the agent holds only the policy `joiner_agent_role` renders):
//!
//! 1. a cluster with Karpenter's CRDs, two nodes Karpenter launched (its tags on the
//!    instances, its labels and finalizer on the Nodes, its NodeClaims) and a workload
//!    running on them; Karpenter's leader Lease held and renewed;
//! 2. joiner applied beside it (a NodePool of the same name, the agent with
//!    `--adopt-karpenter-namespace`): it refuses to touch Karpenter's nodes and says so
//!    (Event on each node, the pool's `KarpenterNodesAdopted=False`), and creates nothing;
//! 3. Karpenter removed (its Lease released, as it is on a clean stop): the nodes become
//!    joiner NodeClaims, Initialized, their instances tagged as the cluster's, Karpenter's
//!    claims released and deleted, its finalizer off the Nodes;
//! 4. zero pods evicted or deleted by the switch (one pod watch from before the agent
//!    starts to after the adoption);
//! 5. afterwards a scale-out goes through joiner (new claims), and a consolidation removes
//!    an adopted node through joiner: its instance terminated by the agent's own role.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::{
    Filter, IamInstanceProfileSpecification, InstanceType, ResourceType, Tag, TagSpecification,
};
use base64::Engine;
use futures::StreamExt;
use joiner_agent::api::{NodeClaim, NodePool};
use joiner_agent_world::{wait_for, Opts, World, CLUSTER, NODE_ROLE};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

const KARPENTER_NS: &str = "karpenter";

fn karpenter_claims_api(w: &World) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(
        w.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "nodeclaims"),
    )
}

/// Karpenter v1's NodePool and NodeClaim CRDs, as far as this test writes them (names,
/// scope, version; the schema left open).
async fn karpenter_crds(w: &World) {
    let crds: Api<CustomResourceDefinition> = Api::all(w.client.clone());
    for (kind, plural) in [("NodePool", "nodepools"), ("NodeClaim", "nodeclaims")] {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.karpenter.sh")},
            "spec": {
                "group": "karpenter.sh",
                "scope": "Cluster",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            }
        }))
        .unwrap();
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("Karpenter CRD create");
        let name = crd.name_any();
        wait_for(
            &format!("CRD {name} Established"),
            Duration::from_secs(30),
            || async {
                crds.get(&name)
                    .await
                    .ok()?
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
}

/// One node as Karpenter launches it: an instance with Karpenter's tags and the node
/// role's instance profile, its kubelet registering with Karpenter's labels, and a
/// `karpenter.sh/v1` NodeClaim naming it once it registered. Returns (claim, node, instance).
async fn karpenter_node(w: &World, claim: &str, zone: &str) -> (String, String, String) {
    let subnet = w
        .ec2
        .describe_subnets()
        .filters(
            Filter::builder()
                .name("availability-zone")
                .values(zone)
                .build(),
        )
        .filters(
            Filter::builder()
                .name("default-for-az")
                .values("true")
                .build(),
        )
        .send()
        .await
        .expect("EC2 DescribeSubnets")
        .subnets()[0]
        .subnet_id()
        .unwrap()
        .to_string();
    let labels = "karpenter.sh/nodepool=general,karpenter.sh/capacity-type=on-demand,\
        karpenter.k8s.aws/ec2nodeclass=default,karpenter.sh/registered=true,\
        karpenter.sh/initialized=true,karpenter.k8s.aws/instance-category=m";
    let user_data = format!(
        "#!/bin/bash\n/etc/eks/bootstrap.sh {CLUSTER} --kubelet-extra-args '--node-labels={labels}'\n"
    );
    let tags = [
        (
            format!("kubernetes.io/cluster/{CLUSTER}"),
            "owned".to_string(),
        ),
        ("karpenter.sh/nodepool".into(), "general".into()),
        ("karpenter.sh/nodeclaim".into(), claim.to_string()),
        ("karpenter.k8s.aws/ec2nodeclass".into(), "default".into()),
        ("eks:eks-cluster-name".into(), CLUSTER.into()),
        ("Name".into(), format!("karpenter/{claim}")),
    ];
    let mut spec = TagSpecification::builder().resource_type(ResourceType::Instance);
    for (k, v) in &tags {
        spec = spec.tags(Tag::builder().key(k).value(v).build());
    }
    let out = w
        .ec2
        .run_instances()
        .image_id(&w.image_id)
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet)
        // Karpenter's EC2NodeClass selects the cluster security group, as ours does.
        .security_group_ids(
            kube_sim::network::cluster_security_group(
                &joiner_agent_world::sdk_config(&w.moto.endpoint()).await,
                CLUSTER,
            )
            .await
            .expect("the cluster security group"),
        )
        .iam_instance_profile(
            IamInstanceProfileSpecification::builder()
                .name(NODE_ROLE)
                .build(),
        )
        .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
        .tag_specifications(spec.build())
        .send()
        .await
        .expect("EC2 RunInstances (as Karpenter)");
    let id = out.instances()[0].instance_id().unwrap().to_string();
    let nodes: Api<Node> = Api::all(w.client.clone());
    let node = wait_for(
        &format!("Karpenter's instance {id} registered"),
        Duration::from_secs(60),
        || async {
            nodes
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_some_and(|p| p.ends_with(&id))
                })
        },
    )
    .await;
    let node_name = node.name_any();
    // What Karpenter's controller adds once the node registered.
    nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}})),
        )
        .await
        .expect("Karpenter's finalizer on its node");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": claim, "finalizers": ["karpenter.sh/termination"],
            "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]},
        "status": {"nodeName": node_name, "providerID": node.spec.as_ref().unwrap().provider_id, "imageID": w.image_id},
    }))
    .unwrap();
    karpenter_claims_api(w)
        .create(&PostParams::default(), &obj)
        .await
        .expect("Karpenter's NodeClaim");
    (claim.to_string(), node_name, id)
}

/// Karpenter's leader Lease, renewed every second until `stop` turns true; then released
/// (holder emptied) as controller-runtime does on a clean stop.
async fn karpenter_running(w: &World) -> tokio::sync::watch::Sender<bool> {
    let ns: Api<Namespace> = Api::all(w.client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": KARPENTER_NS}})).unwrap(),
    )
    .await
    .expect("namespace karpenter");
    let leases: Api<Lease> = Api::namespaced(w.client.clone(), KARPENTER_NS);
    let lease = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "karpenter-leader-election"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()}})
    };
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(lease("karpenter-6b9d5c_8f1e")).unwrap(),
        )
        .await
        .expect("Karpenter's Lease");
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    let _ = leases.patch("karpenter-leader-election", &PatchParams::default(),
                        &Patch::Merge(lease("karpenter-6b9d5c_8f1e"))).await;
                }
                _ = async { let _ = rx.wait_for(|s| *s).await; } => {
                    leases.patch("karpenter-leader-election", &PatchParams::default(),
                        &Patch::Merge(lease(""))).await.expect("Lease released");
                    return;
                }
            }
        }
    });
    tx
}

/// Every pod deletion or eviction in `default` from now on, by one watch.
fn pod_disruptions(w: &World) -> Arc<Mutex<BTreeSet<String>>> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = seen.clone();
    let api: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Delete(p)) => {
                    s.lock()
                        .unwrap()
                        .insert(format!("deleted {}", p.name_any()));
                }
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p))
                    if p.metadata.deletion_timestamp.is_some() =>
                {
                    s.lock()
                        .unwrap()
                        .insert(format!("deleting {}", p.name_any()));
                }
                _ => {}
            }
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpenter_nodes_are_adopted_without_moving_a_pod_and_only_once_karpenter_stops() {
    let w = World::start(Opts::default()).await;
    karpenter_crds(&w).await;
    let karpenter = karpenter_running(&w).await;
    let mut adopted_from = Vec::new();
    for (claim, zone) in [
        ("general-k7x2p", "us-east-1a"),
        ("general-m4q9z", "us-east-1b"),
    ] {
        adopted_from.push(karpenter_node(&w, claim, zone).await);
    }
    // The workload on Karpenter's nodes: 2 vCPU each, three 500m pods fit on one.
    w.deployment("web", 4, "500m", "512Mi").await;
    wait_for(
        "4 pods Running on Karpenter's nodes",
        Duration::from_secs(60),
        || async { (w.running("web").await == 4).then_some(()) },
    )
    .await;
    let on_karpenter: BTreeSet<String> = adopted_from.iter().map(|(_, n, _)| n.clone()).collect();
    for p in w.pods("web").await {
        let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
        assert!(on_karpenter.contains(&node), "pod on {node}");
    }
    let uids_before: BTreeSet<String> =
        w.pods("web").await.iter().filter_map(|p| p.uid()).collect();
    let disruptions = pod_disruptions(&w);

    // joiner beside Karpenter.
    w.node_class("default").await;
    let mut spec = World::general_pool_spec("default");
    spec["disruption"] = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s", "budgets": [{"nodes": "100%"}]});
    w.node_pool("general", spec).await;
    let agent = w
        .agent(&["--adopt-karpenter-namespace", KARPENTER_NS])
        .await;
    let (_, first_node, _) = &adopted_from[0];
    let refused = wait_for(
        "an AdoptionRefused Event on Karpenter's node",
        Duration::from_secs(60),
        || async {
            w.events_for("default", first_node)
                .await
                .into_iter()
                .find(|e| e.starts_with("AdoptionRefused"))
        },
    )
    .await;
    assert!(
        refused.contains("karpenter/karpenter-leader-election"),
        "{refused}"
    );
    let pools: Api<NodePool> = Api::all(w.client.clone());
    wait_for(
        "the pool's KarpenterNodesAdopted=False",
        Duration::from_secs(30),
        || async {
            pools
                .get("general")
                .await
                .ok()?
                .status?
                .conditions
                .into_iter()
                .find(|c| {
                    c.type_ == "KarpenterNodesAdopted"
                        && c.status == "False"
                        && c.reason == "KarpenterRunning"
                })
        },
    )
    .await;
    assert!(
        w.claims().await.is_empty(),
        "nothing adopted (nor launched) while Karpenter runs"
    );

    // Karpenter removed.
    karpenter.send(true).unwrap();
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    for (claim, node, instance) in &adopted_from {
        let c = wait_for(
            &format!("NodeClaim {claim} adopted, Initialized"),
            Duration::from_secs(60),
            || async {
                let c = claims.get_opt(claim).await.ok()??;
                c.status
                    .as_ref()?
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Initialized" && c.status == "True")
                    .then_some(c)
            },
        )
        .await;
        let status = c.status.clone().unwrap();
        assert_eq!(status.node_name.as_deref(), Some(node.as_str()));
        assert!(status.provider_id.as_deref().unwrap().ends_with(instance));
        assert_eq!(c.labels()["joiner.dev/nodepool"], "general");
        assert_eq!(c.labels()["node.kubernetes.io/instance-type"], "m5.large");
        assert!(
            c.annotations()
                .contains_key(joiner_agent::disruption::drift::NODEPOOL_HASH),
            "stamped with the pool's hashes: not drifted"
        );
        let n = wait_for(
            &format!("node {node} handed over"),
            Duration::from_secs(60),
            || async {
                let n: Node = Api::<Node>::all(w.client.clone()).get(node).await.ok()?;
                (!n.finalizers()
                    .iter()
                    .any(|f| f == "karpenter.sh/termination"))
                .then_some(n)
            },
        )
        .await;
        assert_eq!(n.labels()["joiner.dev/nodeclaim"], *claim);
        assert!(n.finalizers().iter().any(|f| f == "joiner.dev/termination"));
        let tags: std::collections::BTreeMap<String, String> = w
            .ec2
            .describe_instances()
            .instance_ids(instance)
            .send()
            .await
            .unwrap()
            .reservations()[0]
            .instances()[0]
            .tags()
            .iter()
            .map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string()))
            .collect();
        assert_eq!(tags["joiner.dev/cluster"], CLUSTER);
        assert_eq!(tags["joiner.dev/nodeclaim"], *claim);
    }
    wait_for(
        "Karpenter's NodeClaims released",
        Duration::from_secs(30),
        || async {
            karpenter_claims_api(&w)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let uids_after: BTreeSet<String> = w.pods("web").await.iter().filter_map(|p| p.uid()).collect();
    assert_eq!(uids_after, uids_before, "the same pods, never replaced");
    assert_eq!(
        disruptions.lock().unwrap().clone(),
        BTreeSet::new(),
        "zero pods evicted or deleted by the switch"
    );

    // A scale-out through joiner: 4 more pods do not fit on the adopted nodes.
    w.scale("web", 10).await;
    wait_for("10 pods Running", Duration::from_secs(90), || async {
        (w.running("web").await == 10).then_some(())
    })
    .await;
    let adopted_names: BTreeSet<String> = adopted_from.iter().map(|(c, _, _)| c.clone()).collect();
    assert!(
        w.claims()
            .await
            .iter()
            .any(|c| !adopted_names.contains(&c.name_any())),
        "joiner launched capacity for the scale-out"
    );

    // Consolidation through joiner: down to 1 pod, the adopted nodes are not all needed.
    w.scale("web", 1).await;
    wait_for(
        "an adopted node consolidated away, its instance terminated",
        Duration::from_secs(180),
        || async {
            let live: BTreeSet<String> = w
                .live_instances()
                .await
                .into_iter()
                .map(|(id, _, _)| id)
                .collect();
            let claims_left: BTreeSet<String> =
                w.claims().await.iter().map(|c| c.name_any()).collect();
            adopted_from
                .iter()
                .any(|(c, _, id)| !live.contains(id) && !claims_left.contains(c))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        w.iam_refused(),
        Vec::<String>::new(),
        "every call of the agent's role allowed (the adoption tags and the termination included)"
    );
    agent.stop().await.expect("agent stops cleanly");
}
