//! The KWOK cloud (`joiner-agent run --cloud kwok`, `cloud::kwok`) on a real control plane
//! with KWOK: pending pods become a NodeClaim, the claim becomes a Node the cloud created
//! for KWOK to play (providerID `kwok://`, the type's labels, capacity and allocatable from
//! the KWOK catalogue), the pods run on it, the cloud lists it as the claim's instance; an
//! emptied pool gives the Node back and the cloud forgets it.
//!
//! This is what `agent/benches/perf_suite.rs` measures against Karpenter's KWOK provider,
//! proven correct here without Karpenter. The agent runs in-process through the same
//! entry points as the binary (`Config` from flags, `kwok_cloud`, `controllers::run`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::{NodeClaim, NodeClass, NodePool};
use joiner_agent::catalog::kwok;
use joiner_agent::cloud::kwok::{KWOK_ANNOTATION, PROVIDER_PREFIX};
use joiner_agent::cloud::{TAG_CLUSTER, TAG_NODECLAIM};
use joiner_agent::controllers::{self, Config};

const CLUSTER: &str = "kwok-test";

/// Polls `f` for an end state (never a transient one) until it holds or `timeout` passes.
async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn a_claim_becomes_a_kwok_node_and_an_empty_one_goes() {
        let cp = tokio::task::spawn_blocking(|| {
            joiner_control_plane::ControlPlane::start(Default::default())
        })
        .await
        .unwrap()
        .expect("control plane (scripts/install-tools.sh --go-cluster)");
        let kubeconfig = cp.kubeconfig_path().display().to_string();
        let kc = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
        let client = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .unwrap(),
        )
        .unwrap();

        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let joiner = || {
            use joiner_agent::api::schema;
            [
                schema::node_pool(),
                schema::node_class(),
                schema::node_claim(),
            ]
        };
        for crd in joiner() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        for crd in joiner() {
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
        // Nothing in EC2 is resolved in a KWOK world: the selectors select nothing.
        let class: NodeClass = serde_json::from_value(json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "default"},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"joiner.dev/world": "kwok"}}],
                "securityGroupSelectorTerms": [{"tags": {"joiner.dev/world": "kwok"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "kwok-nodes",
            },
        }))
        .unwrap();
        Api::<NodeClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": kwok::INSTANCE_SIZE, "operator": "Lt", "values": ["32"]},
                    ],
                }},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s",
                    "budgets": [{"nodes": "100%"}]},
            },
        }))
        .unwrap();
        Api::<NodePool>::all(client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();

        let config = Config::from_args([
            "run",
            "--cluster-name",
            CLUSTER,
            "--cloud",
            "kwok",
            "--kubeconfig",
            &kubeconfig,
            "--leader-elect",
            "false",
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
            "--batch-idle",
            "300ms",
        ])
        .unwrap();
        let cloud = controllers::kwok_cloud(&config).await.unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let agent = tokio::spawn(controllers::run(config, Arc::clone(&cloud), stopped));

        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10",
                     "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}},
            },
        }))
        .unwrap();
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();

        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let running = wait_for("3 pods Running", Duration::from_secs(180), || async {
            let l = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let on: Vec<String> = l
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (on.len() == 3).then_some(on)
        })
        .await;

        // The claim, its Node, and what the cloud knows of them.
        let claims = Api::<NodeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert!(!claims.is_empty(), "a NodeClaim was created");
        let nodes: Api<Node> = Api::all(client.clone());
        let catalog = kwok::catalog();
        for node_name in &running {
            let node = nodes.get(node_name).await.unwrap();
            let provider_id = node.spec.as_ref().unwrap().provider_id.clone().unwrap();
            assert_eq!(provider_id, format!("{PROVIDER_PREFIX}{node_name}"));
            assert_eq!(
                node.annotations()
                    .get(KWOK_ANNOTATION.0)
                    .map(String::as_str),
                Some(KWOK_ANNOTATION.1),
                "KWOK plays the Node's kubelet"
            );
            let l = node.labels();
            let claim = &l[TAG_NODECLAIM];
            assert_eq!(l[TAG_CLUSTER], CLUSTER);
            assert_eq!(l["karpenter.sh/capacity-type"], "on-demand");
            assert!(kwok::ZONES.contains(&l["topology.kubernetes.io/zone"].as_str()));
            let it = catalog
                .get(&l["node.kubernetes.io/instance-type"])
                .expect("a KWOK catalogue type");
            assert!(it.labels[kwok::INSTANCE_SIZE].parse::<u32>().unwrap() < 32);
            let alloc = node.status.as_ref().unwrap().allocatable.clone().unwrap();
            assert_eq!(
                joiner_agent::resources::parse_cpu_milli(&alloc["cpu"].0).unwrap(),
                it.allocatable.cpu_milli,
                "the Node's allocatable is the catalogue's"
            );
            assert!(
                node.spec
                    .as_ref()
                    .unwrap()
                    .taints
                    .iter()
                    .flatten()
                    .all(|t| t.key != "joiner.dev/unregistered"),
                "registration removed the unregistered taint"
            );
            let c = claims.iter().find(|c| &c.name_any() == claim).unwrap();
            assert_eq!(
                c.status.as_ref().unwrap().provider_id.as_deref(),
                Some(provider_id.as_str())
            );
            let instance = cloud
                .instance_for(claim)
                .await
                .unwrap()
                .expect("the claim's instance");
            assert_eq!(&instance.instance_id, node_name);
            assert_eq!(instance.state, "running");
        }
        println!(
            "KWOK cloud: 3 pods Running on {:?} for {} NodeClaim(s)",
            running.iter().collect::<std::collections::BTreeSet<_>>(),
            claims.len()
        );

        // Emptied, the pool gives its Nodes back.
        deployments
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .unwrap();
        wait_for(
            "every Node and NodeClaim gone",
            Duration::from_secs(180),
            || async {
                let n = nodes
                    .list(&ListParams::default().labels(&format!("{TAG_CLUSTER}={CLUSTER}")))
                    .await
                    .ok()?;
                let c = Api::<NodeClaim>::all(client.clone())
                    .list(&ListParams::default())
                    .await
                    .ok()?;
                (n.items.is_empty() && c.items.is_empty()).then_some(())
            },
        )
        .await;
        wait_for(
            "the cloud forgets the Nodes",
            Duration::from_secs(30),
            || async { cloud.instances().await.ok()?.is_empty().then_some(()) },
        )
        .await;
        let _ = stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), agent).await;
    }
}
