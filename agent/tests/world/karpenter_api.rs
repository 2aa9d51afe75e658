//! `joiner-agent run --api karpenter` in the local world (the AWS emulator and kube-sim):
//! the NodePool and EC2NodeClass of Karpenter's getting-started guide, applied as written,
//! serve pods, with no `joiner.dev` object anywhere. What a Karpenter user sees is
//! Karpenter's: `karpenter.sh/v1` NodeClaims owned by their NodePool, Karpenter's
//! finalizer, the Launched/Registered/Initialized conditions, the class's resolved status;
//! and `kubectl delete nodeclaim` drains and terminates the instance.

use std::time::Duration;

use joiner_agent::api::served::{ApiFlavor, ClassCloud, Served};
use joiner_agent_world::{wait_for, Opts, World, CLUSTER, NODE_ROLE};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::ResourceExt;

const MANIFESTS: &str = include_str!("manifests/karpenter-getting-started.yaml");

fn served() -> Served {
    Served::new(ApiFlavor::Karpenter, ClassCloud::Ec2)
}

/// The guide's manifests with its placeholders filled, each with the resource it is.
fn manifests() -> Vec<(kube::api::ApiResource, DynamicObject)> {
    let text = MANIFESTS
        .replace("${CLUSTER_NAME}", CLUSTER)
        .replace("${NODE_ROLE}", NODE_ROLE)
        .replace("${ALIAS_VERSION}", "latest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let obj: DynamicObject =
                serde::Deserialize::deserialize(doc).expect("a manifest document");
            let kind = obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let resource = match kind.as_str() {
                "NodePool" => served().node_pools(),
                "EC2NodeClass" => served().node_classes(),
                other => panic!("unexpected kind {other} in the guide's manifests"),
            };
            (resource, obj)
        })
        .collect()
}

fn condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpenters_getting_started_manifests_serve_pods_unchanged() {
    let w = World::start(Opts {
        api: ApiFlavor::Karpenter,
        ..Opts::default()
    })
    .await;
    for (resource, obj) in manifests() {
        let api: Api<DynamicObject> = Api::all_with(w.client.clone(), &resource);
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{} create: {e}", resource.kind));
    }
    let _agent = w.agent(&[]).await;
    w.deployment("web", 3, "500m", "512Mi").await;
    wait_for("3 web pods Running", Duration::from_secs(120), || async {
        (w.running("web").await == 3).then_some(())
    })
    .await;

    let claims: Api<DynamicObject> = Api::all_with(w.client.clone(), &served().node_claims());
    let list = claims
        .list(&ListParams::default())
        .await
        .expect("list NodeClaims");
    assert!(
        !list.items.is_empty(),
        "karpenter.sh/v1 NodeClaims were made"
    );
    for c in &list.items {
        let name = c.name_any();
        assert_eq!(
            c.finalizers(),
            &["karpenter.sh/termination".to_string()],
            "{name}: Karpenter's finalizer"
        );
        let owner = &c.owner_references()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str()
            ),
            ("karpenter.sh/v1", "NodePool", "default"),
            "{name}: owned by its NodePool"
        );
        assert_eq!(
            c.data["spec"]["nodeClassRef"],
            serde_json::json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}),
            "{name}: the pool's class reference"
        );
        for cond in ["Launched", "Registered", "Initialized"] {
            assert_eq!(
                condition(c, cond).as_deref(),
                Some("True"),
                "{name}: {cond}"
            );
        }
    }

    // The pool is Ready, and the class carries what it resolved (the guide's discovery
    // tags selected this world's three subnets).
    let pools: Api<DynamicObject> = Api::all_with(w.client.clone(), &served().node_pools());
    let pool = pools.get("default").await.expect("get NodePool");
    assert_eq!(
        condition(&pool, "Ready").as_deref(),
        Some("True"),
        "{:?}",
        pool.data["status"]
    );
    let classes: Api<DynamicObject> = Api::all_with(w.client.clone(), &served().node_classes());
    let class = classes.get("default").await.expect("get EC2NodeClass");
    let subnets = class.data["status"]["subnets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        subnets.len(),
        3,
        "resolved subnets: {:?}",
        class.data["status"]
    );
    assert!(
        class
            .finalizers()
            .iter()
            .any(|f| f == "karpenter.sh/termination"),
        "the class holds Karpenter's finalizer while claims use it"
    );

    // No joiner.dev kind is served in this cluster, so none was involved.
    let joiner_claims: Api<DynamicObject> =
        Api::all_with(w.client.clone(), &Served::joiner().node_claims());
    match joiner_claims.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 404, "{e}"),
        other => panic!("joiner.dev NodeClaims are not served here: {other:?}"),
    }

    // `kubectl delete nodeclaim`: the node is drained, its instance terminated, the Node
    // and the claim gone; the pods find room again.
    let victim = list.items[0].name_any();
    let node_name = list.items[0].data["status"]["nodeName"]
        .as_str()
        .expect("a registered claim names its node")
        .to_string();
    claims
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete NodeClaim");
    let nodes: Api<Node> = Api::all(w.client.clone());
    wait_for(
        "the deleted claim and its Node gone",
        Duration::from_secs(120),
        || async {
            let claim_gone = matches!(claims.get_opt(&victim).await, Ok(None));
            let node_gone = matches!(nodes.get_opt(&node_name).await, Ok(None));
            (claim_gone && node_gone).then_some(())
        },
    )
    .await;
    let live = w.live_instances().await;
    assert!(
        live.iter()
            .all(|(_, _, tags)| tags.get("joiner.dev/nodeclaim") != Some(&victim)),
        "the claim's instance is terminated: {live:?}"
    );
    wait_for(
        "3 web pods Running again",
        Duration::from_secs(120),
        || async { (w.running("web").await == 3).then_some(()) },
    )
    .await;
    assert!(
        w.agent_refusals().is_empty(),
        "the rendered RBAC for api = karpenter let the agent do its work: {:?}",
        w.agent_refusals()
    );
}
