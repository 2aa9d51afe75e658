//! GPU pods on the accelerated images, kube-sim + moto, the agent in-process.
//!
//! The local world serves the accelerated parameters beside the standard ones
//! (`joiner_local.public_parameters`), and kube-sim's node advertises `nvidia.com/gpu` or
//! `aws.amazon.com/neuron` only when the image its instance booted from carries the driver
//! (`kube_sim::aws::Drivers`). So a GPU pod runs only if the agent launched its node from
//! the `nvidia` image, and a node launched from an image without the driver must not count
//! as initialized: its GPU never appears.
//!
//! Every wait here reads a watch: the pod's phase, the claim's conditions, the NodeClass's
//! status.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use joiner_agent::api::{NodeClaim, NodeClass};
use joiner_agent_world::{sdk_config, security_group_terms, Opts, World, CLUSTER, NODE_ROLE};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

const GPU: &str = "nvidia.com/gpu";

/// The public parameter of an AL2023 variant for the Kubernetes version the world's API server
/// reports, which is the one the agent resolves its aliases for.
async fn al2023_parameter(w: &World, arch: &str, variant: &str) -> String {
    let v = w.client.apiserver_version().await.expect("GET /version");
    let version = format!("{}.{}", v.major, v.minor);
    format!("/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id")
}

async fn parameter(w: &World, name: &str) -> String {
    aws_sdk_ssm::Client::new(&sdk_config(&w.moto.endpoint()).await)
        .get_parameter()
        .name(name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ssm:GetParameter {name}: {e:?}"))
        .parameter()
        .and_then(|p| p.value())
        .expect("a value")
        .to_string()
}

/// Watches `api` (objects `cfg` selects) until `f` returns Some for one of them, or panics
/// naming `what` after `timeout`.
async fn watch_until<K, T>(
    api: Api<K>,
    cfg: watcher::Config,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&K) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let mut stream = watcher(api, cfg)
        .default_backoff()
        .applied_objects()
        .boxed();
    let found = async {
        while let Some(obj) = stream.try_next().await.expect("watch") {
            if let Some(v) = f(&obj) {
                return v;
            }
        }
        panic!("the watch for {what} ended");
    };
    tokio::time::timeout(timeout, found)
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// A NodeClass on the world's subnets and security groups with these AMI terms.
async fn node_class(w: &World, name: &str, ami_terms: serde_json::Value) {
    let nc: NodeClass = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
        "metadata": {"name": name},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": security_group_terms(),
            "amiSelectorTerms": ami_terms,
            "role": NODE_ROLE,
        }
    }))
    .unwrap();
    Api::<NodeClass>::all(w.client.clone())
        .create(&PostParams::default(), &nc)
        .await
        .expect("NodeClass create");
}

/// A pool of the class's `categories`, Spot or on-demand, either architecture.
fn pool(class: &str, categories: &[&str]) -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": class},
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": categories},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
            ],
        }},
    })
}

/// One pod of `app` asking for a GPU (requests equal to limits, as for any extended
/// resource).
async fn gpu_deployment(w: &World, app: &str) {
    let resources = json!({"cpu": "500m", "memory": "1Gi", GPU: "1"});
    w.deployment_with(
        app,
        1,
        "500m",
        "1Gi",
        json!({}),
        json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": resources, "limits": resources}}]}),
    )
    .await;
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The image the instance behind a Node booted from, as EC2 reports it.
async fn image_of_node(w: &World, node: &Node) -> (String, String) {
    let provider = node.spec.as_ref().and_then(|s| s.provider_id.clone());
    let instance = provider
        .as_deref()
        .and_then(|p| p.rsplit('/').next())
        .expect("a providerID")
        .to_string();
    let out = w
        .ec2
        .describe_instances()
        .instance_ids(&instance)
        .send()
        .await
        .expect("EC2 DescribeInstances");
    let i = &out.reservations()[0].instances()[0];
    (
        i.image_id().unwrap_or_default().to_string(),
        i.architecture()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default(),
    )
}

fn allocatable(node: &Node, resource: &str) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .map(|q| q.0.clone())
}

/// An alias NodeClass admitting ordinary and GPU types (a pool of each on it): the GPU pod
/// goes from Pending to Running on a node the agent launched from the `nvidia` image, whose
/// device plugin advertises the GPU; the ordinary pod beside it gets a node from the
/// standard image; and the NodeClass's status lists the `nvidia` image with the requirement
/// that sends GPU types to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_pod_runs_on_a_node_from_the_nvidia_image() {
    let w = World::start(Opts::default()).await;
    node_class(&w, "accelerated", json!([{"alias": "al2023@latest"}])).await;
    w.node_pool("general", pool("accelerated", &["c"])).await;
    w.node_pool("gpu", pool("accelerated", &["g"])).await;
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    let _agent = w.agent(&[]).await;
    gpu_deployment(&w, "cuda").await;
    // The ordinary pod keeps to the ordinary pool, so that it gets a node of its own.
    w.deployment_with(
        "web",
        1,
        "250m",
        "256Mi",
        json!({}),
        json!({"nodeSelector": {"karpenter.sh/nodepool": "general"}}),
    )
    .await;

    let mut was_pending = false;
    let cuda = watch_until(
        pods.clone(),
        watcher::Config::default().labels("app=cuda"),
        "the GPU pod Running",
        Duration::from_secs(90),
        |p: &Pod| {
            was_pending |= phase(p) == "Pending";
            (phase(p) == "Running").then(|| p.clone())
        },
    )
    .await;
    assert!(was_pending, "the GPU pod was seen Pending first");
    let web = watch_until(
        pods,
        watcher::Config::default().labels("app=web"),
        "the ordinary pod Running",
        Duration::from_secs(60),
        |p: &Pod| (phase(p) == "Running").then(|| p.clone()),
    )
    .await;

    let nodes: Api<Node> = Api::all(w.client.clone());
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("a bound pod")
    };
    let gpu_node = nodes.get(&node_of(&cuda)).await.expect("the GPU node");
    let web_node = nodes.get(&node_of(&web)).await.expect("the ordinary node");
    assert_ne!(gpu_node.name_any(), web_node.name_any());

    let (image, arch) = image_of_node(&w, &gpu_node).await;
    let nvidia = parameter(&w, &al2023_parameter(&w, &arch, "nvidia").await).await;
    assert_eq!(
        image,
        nvidia,
        "{} ({arch}) booted from {image}, not the nvidia image",
        gpu_node.labels()["node.kubernetes.io/instance-type"]
    );
    assert!(
        allocatable(&gpu_node, GPU).is_some_and(|q| q != "0"),
        "{:?}",
        gpu_node.status.as_ref().and_then(|s| s.allocatable.clone())
    );
    let (image, arch) = image_of_node(&w, &web_node).await;
    assert_eq!(
        image,
        parameter(&w, &al2023_parameter(&w, &arch, "standard").await).await,
        "the ordinary node's image"
    );
    assert_eq!(allocatable(&web_node, GPU), None);

    // The claim records the image, and the class's status says which types it serves.
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let claim = claims
        .list(&Default::default())
        .await
        .expect("NodeClaims")
        .items
        .into_iter()
        .find(|c| {
            c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&gpu_node.name_any())
        })
        .expect("the GPU node's claim");
    assert_eq!(
        claim.status.as_ref().and_then(|s| s.image_id.as_deref()),
        Some(nvidia.as_str())
    );
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    watch_until(
        classes,
        watcher::Config::default(),
        "the nvidia image in the NodeClass status",
        Duration::from_secs(30),
        |c: &NodeClass| {
            c.status.as_ref()?.amis.iter().find(|a| {
                a.id == nvidia
                    && a.requirements.iter().any(|r| {
                        r.key == "karpenter.k8s.aws/instance-gpu-count" && r.operator == "Exists"
                    })
            })?;
            Some(())
        },
    )
    .await;
}

/// A GPU type launched from an image without the NVIDIA driver (a NodeClass that names the
/// standard image by ID, so the agent has no variant to choose): the node registers and
/// turns Ready, but never advertises `nvidia.com/gpu`, so its claim is never Initialized and
/// says why, and the GPU pod stays Pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_node_from_the_standard_image_never_initializes() {
    let w = World::start(Opts::default()).await;
    let standard = parameter(&w, &al2023_parameter(&w, "x86_64", "standard").await).await;
    node_class(&w, "pinned", json!([{"id": standard}])).await;
    w.node_pool("gpu", pool("pinned", &["g"])).await;
    let _agent = w.agent(&[]).await;
    gpu_deployment(&w, "cuda").await;

    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let (claim, why) = watch_until(
        claims,
        watcher::Config::default(),
        "the claim to say why it is not Initialized",
        Duration::from_secs(90),
        |c: &NodeClaim| {
            let conds = &c.status.as_ref()?.conditions;
            let init = conds.iter().find(|k| k.type_ == "Initialized")?;
            assert_ne!(
                init.status,
                "True",
                "{} Initialized on a node without its GPU",
                c.name_any()
            );
            init.message
                .contains(GPU)
                .then(|| (c.clone(), init.message.clone()))
        },
    )
    .await;
    assert!(why.contains("not registered"), "{why}");
    let status = claim.status.clone().unwrap_or_default();
    assert_eq!(status.image_id.as_deref(), Some(standard.as_str()));
    let registered = status
        .conditions
        .iter()
        .any(|k| k.type_ == "Registered" && k.status == "True");
    assert!(registered, "{:?}", status.conditions);
    let node = Api::<Node>::all(w.client.clone())
        .get(status.node_name.as_deref().expect("a node"))
        .await
        .expect("the node");
    assert_eq!(allocatable(&node, GPU), None, "no driver, no device plugin");
    let pods = w.pods("cuda").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(phase(&pods[0]), "Pending");
}
