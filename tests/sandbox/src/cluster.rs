//! The Kubernetes side, through kube-rs against kube-sim: the seed's workload, and a
//! snapshot of what runs where.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::Client;

pub const WORKLOAD: &str = "inflate";
pub const NAMESPACE: &str = "default";
/// The seed's workload is the pause container: it asks for capacity and does nothing.
const IMAGE: &str = "public.ecr.aws/eks-distro/kubernetes/pause:3.7";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";

pub async fn client(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read kubeconfig {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn node_pools_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "joiner.dev".into(),
        version: "v1".into(),
        api_version: "joiner.dev/v1".into(),
        kind: "NodePool".into(),
        plural: "nodepools".into(),
    };
    Api::all_with(client.clone(), &ar)
}

/// The live NodePools' `spec` by name.
pub async fn node_pools(client: &Client) -> Result<BTreeMap<String, serde_json::Value>> {
    let list = node_pools_api(client)
        .list(&ListParams::default())
        .await
        .context("list nodepools.joiner.dev")?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|o| Some((o.metadata.name.clone()?, o.data.get("spec")?.clone())))
        .collect())
}

/// The label a NodePool requirement splits capacity over (`capacity-spread` in the
/// examples), if any pool has one.
pub fn spread_key(pools: &BTreeMap<String, serde_json::Value>) -> Option<String> {
    for spec in pools.values() {
        let reqs = spec["template"]["spec"]["requirements"].as_array()?;
        for r in reqs {
            let key = r["key"].as_str().unwrap_or_default();
            if !key.contains('/') && !key.is_empty() {
                return Some(key.to_string());
            }
        }
    }
    None
}

/// The seed workload's termination grace: the storm's notice must cover a boot plus this.
pub const GRACE_SECS: u64 = 0;

/// The seed's Deployment: `replicas` × 250m / 512Mi, spread evenly over zones and, when the
/// pools offer one, over the capacity split label.
pub async fn create_workload(client: &Client, replicas: i32, spread: Option<&str>) -> Result<()> {
    let mut constraints = vec![serde_json::json!({
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": WORKLOAD}}
    })];
    if let Some(key) = spread {
        constraints.push(serde_json::json!({
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": WORKLOAD}}
        }));
    }
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WORKLOAD, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": WORKLOAD}},
            "template": {
                "metadata": {"labels": {"app": WORKLOAD}},
                "spec": {
                    "terminationGracePeriodSeconds": GRACE_SECS,
                    "topologySpreadConstraints": constraints,
                    "containers": [{
                        "name": "inflate",
                        "image": IMAGE,
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}
                    }]
                }
            }
        }
    }))?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    api.create(&PostParams::default(), &d)
        .await
        .context("create deployment inflate")?;
    Ok(())
}

pub async fn scale(client: &Client, replicas: i32) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    api.patch(
        WORKLOAD,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await
    .with_context(|| format!("scale deployment {WORKLOAD} to {replicas}"))?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct PodView {
    pub uid: String,
    pub phase: String,
    pub node: Option<String>,
    pub deleting: bool,
}

#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub instance_id: Option<String>,
    pub capacity_type: String,
    pub zone: String,
    pub instance_type: String,
    pub node_pool: String,
    pub fargate: bool,
    pub cordoned: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub pods: Vec<PodView>,
    pub nodes: Vec<NodeView>,
}

impl Snapshot {
    pub fn running(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| p.phase == "Running" && !p.deleting)
            .count()
    }

    /// Workload pods that are not running yet (the agent's pending work).
    pub fn pending(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| p.phase == "Pending" && !p.deleting)
            .count()
    }

    pub fn ec2_nodes(&self) -> impl Iterator<Item = &NodeView> {
        self.nodes.iter().filter(|n| !n.fargate)
    }

    pub fn node(&self, name: &str) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

pub async fn snapshot(client: &Client) -> Result<Snapshot> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let pods = pods
        .list(&ListParams::default().labels(&format!("app={WORKLOAD}")))
        .await
        .context("list pods")?;
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .context("list nodes")?;
    let pods = pods
        .items
        .into_iter()
        .map(|p| PodView {
            uid: p.metadata.uid.clone().unwrap_or_default(),
            phase: p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            deleting: p.metadata.deletion_timestamp.is_some(),
        })
        .collect();
    let nodes = nodes
        .items
        .into_iter()
        .map(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned().unwrap_or_else(|| "?".into());
            let provider_id = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .unwrap_or_default();
            NodeView {
                name: n.metadata.name.clone().unwrap_or_default(),
                instance_id: provider_id
                    .rsplit('/')
                    .next()
                    .filter(|s| s.starts_with("i-"))
                    .map(str::to_string),
                capacity_type: label(CAPACITY_TYPE),
                zone: label(ZONE),
                instance_type: label(INSTANCE_TYPE),
                node_pool: label(NODEPOOL),
                fargate: labels
                    .get("eks.amazonaws.com/compute-type")
                    .map(String::as_str)
                    == Some("fargate"),
                cordoned: n
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false),
            }
        })
        .collect();
    Ok(Snapshot { pods, nodes })
}

/// The agent's pods in `namespace`: (name, phase, node) for the "is it running" check.
pub async fn agent_pods(client: &Client, namespace: &str) -> Result<Vec<(String, String, String)>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.status.and_then(|s| s.phase).unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
            )
        })
        .collect())
}

/// The IAM role each pod's ServiceAccount names for IRSA (`eks.amazonaws.com/role-arn`), by
/// pod: (pod, ServiceAccount, role ARN).
pub async fn irsa_roles(client: &Client, namespace: &str) -> Result<Vec<(String, String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    for p in pods.list(&ListParams::default()).await?.items {
        let sa = p
            .spec
            .and_then(|s| s.service_account_name)
            .unwrap_or_else(|| "default".into());
        let role = accounts
            .get_opt(&sa)
            .await?
            .and_then(|a| a.metadata.annotations)
            .and_then(|a| a.get("eks.amazonaws.com/role-arn").cloned());
        if let Some(role) = role {
            out.push((p.metadata.name.unwrap_or_default(), sa, role));
        }
    }
    Ok(out)
}
