//! The kubelet bridge to the AWS emulator: EC2 instances tagged for the cluster become
//! Nodes after a boot delay, and stopped or terminated instances take their Nodes down.
//!
//! This is what lets the agent's real launch path (CreateFleet against the emulator) end in
//! schedulable capacity, as it would on EKS. A Node is named after the instance's private
//! DNS name, carries `aws:///<zone>/<instance-id>` as providerID, capacity from
//! DescribeInstanceTypes, the well-known labels, and the labels and taints asked for in the
//! instance's tags or user data (see docs/kube-sim.md for the format). GPUs and Neuron
//! devices are advertised (`nvidia.com/gpu`, `aws.amazon.com/neuron`) only when the image
//! the instance booted from carries their driver ([`Drivers`]): the device plugins find
//! devices only there.
//!
//! User data with a NodeConfig (AL2023's) is read by nodeadm itself ([`nodeadm_check`]: its
//! decoding, merging and validation, built from tools/go/nodeadm): a NodeConfig nodeadm
//! refuses never becomes a Node, as `nodeadm init` stops before the kubelet starts, and the
//! Node of one it accepts gets the labels, taints and max pods of nodeadm's merged config.
//! Without a `maxPods`, the kubelet gets nodeadm's figure: ENIs of the default network card
//! × (IPv4 addresses per ENI − 1) + 2.
//!
//! Only an instance whose IAM role may join registers (see [`crate::node_auth`]): an access
//! entry of type EC2_LINUX on the EKS cluster named `cluster`, or a `system:nodes` mapping
//! in the cluster's `kube-system/aws-auth`; and only one whose security groups let its
//! kubelet reach the API server on 443 (see [`crate::network`]). Any other instance stays
//! unregistered, and the bridge says why once per instance, which is what a kubelet's
//! failed bootstrap looks like from outside.
//!
//! The bridge writes Nodes through a [`NodeSink`]: kube-sim's store in-process, or any API
//! server through kube-rs. On a real control plane the Node carries KWOK's annotation, and
//! KWOK plays its kubelet (conditions, heartbeats, pod status); when the instance goes
//! away the bridge takes the annotation off, which is what a dead kubelet looks like to the
//! node-lifecycle controller, and deletes the Node after the grace period, as the cloud
//! controller manager does for a terminated instance.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use aws_sdk_ec2::types::{InstanceAttributeName, InstanceStateName, InstanceType};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::controllers::node_is_ready;
use crate::network::{Judge, Verdicts};
use crate::node_auth::{Authorizer, Verdict};
use crate::store::{DeleteOptions, Store, Write};

/// KWOK's default selector: the Nodes it plays the kubelet for.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// A test hook, set on a Node by a test (value `"true"`): its kubelet stops posting status,
/// as a hung kubelet or a dead network would look. The bridge marks the Node
/// `Ready=Unknown` with the unreachable taints and keeps it so, where it would otherwise
/// report Ready again on its next poll; removing the annotation brings it back. On a real
/// control plane the bridge takes KWOK's annotation off instead, and the node-lifecycle
/// controller marks the Node Unknown after its grace period (no way back there).
pub const KUBELET_STOPPED_ANNOTATION: &str = "kube-sim.joiner.dev/kubelet-stopped";

/// Set by the bridge on each Node it registers: `reachable` when the node's security groups
/// let its pods reach CoreDNS (on Fargate, in the cluster security group) on UDP 53, else
/// `unreachable: <why>` ([`crate::network`]). kube-sim runs no DNS, so this is the check the
/// sandbox and the tests assert.
pub const CLUSTER_DNS_ANNOTATION: &str = "kube-sim.joiner.dev/cluster-dns";

/// Whether a test stopped this Node's kubelet ([`KUBELET_STOPPED_ANNOTATION`]).
pub fn kubelet_stopped(node: &Value) -> bool {
    node["metadata"]["annotations"][KUBELET_STOPPED_ANNOTATION] == "true"
}

/// Where the bridge registers Nodes.
#[derive(Clone)]
pub enum NodeSink {
    /// kube-sim's own store: the bridge plays the kubelet itself (Ready after boot,
    /// NotReady with the unreachable taints when the instance stops).
    Store(Arc<Store>),
    /// Any API server. With `kwok`, Nodes are annotated for KWOK and their status is left
    /// to it; without, the bridge writes the Ready condition through the status subresource.
    Api { client: kube::Client, kwok: bool },
}

impl NodeSink {
    /// Creates the Node; `Ok(false)` when it already exists.
    async fn create(&self, mut node: Value) -> anyhow::Result<bool> {
        let name = node["metadata"]["name"].as_str().unwrap_or("").to_string();
        match self {
            NodeSink::Store(store) => {
                let nodes_t = store.find_type("", "v1", "nodes").expect("nodes");
                match store.create(&nodes_t, None, node) {
                    Ok(_) => Ok(true),
                    Err(e) if e.code == 409 => Ok(false),
                    Err(e) => anyhow::bail!("create node {name}: {}", e.message),
                }
            }
            NodeSink::Api { client, kwok } => {
                if *kwok {
                    node["metadata"]["annotations"][KWOK_NODE_ANNOTATION] = json!("fake");
                }
                let api = Self::nodes(client);
                let obj: Node = serde_json::from_value(node).context("node object")?;
                match api.create(&PostParams::default(), &obj).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e).with_context(|| format!("create Node {name}")),
                }
            }
        }
    }

    /// Marks a registered Node Ready (booted) or not (instance stopped or terminated, or its
    /// kubelet stopped by a test: [`KUBELET_STOPPED_ANNOTATION`]).
    async fn set_ready(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        match self {
            NodeSink::Store(store) => {
                let nodes_t = store.find_type("", "v1", "nodes").expect("nodes");
                let _ = store.modify(&nodes_t, None, name, Write::Internal, |cur| {
                    let mut n = cur.clone();
                    let ready = ready && !kubelet_stopped(cur);
                    if node_is_ready(cur) != ready {
                        mark_ready(&mut n, ready);
                    }
                    Ok(n)
                });
                Ok(())
            }
            // KWOK reports Ready; a stopped instance is a kubelet that stopped posting:
            // take KWOK's annotation off and let the node-lifecycle controller notice.
            NodeSink::Api { client, kwok: true } => {
                let stopped = || async {
                    Self::nodes(client)
                        .get_opt(name)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|n| serde_json::to_value(n).ok())
                        .is_some_and(|n| {
                            kubelet_stopped(&n)
                                && !n["metadata"]["annotations"][KWOK_NODE_ANNOTATION].is_null()
                        })
                };
                if !ready || stopped().await {
                    let patch = json!({"metadata": {"annotations": {KWOK_NODE_ANNOTATION: null}}});
                    Self::nodes(client)
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("patch Node {name}"))?;
                }
                Ok(())
            }
            NodeSink::Api {
                client,
                kwok: false,
            } => {
                let api = Self::nodes(client);
                let cur = api
                    .get(name)
                    .await
                    .with_context(|| format!("get Node {name}"))?;
                let cur = serde_json::to_value(&cur)?;
                let ready = ready && !kubelet_stopped(&cur);
                if node_is_ready(&cur) == ready {
                    return Ok(());
                }
                let mut n = cur;
                mark_ready(&mut n, ready);
                let patch = json!({"status": {"conditions": n["status"]["conditions"]}});
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("patch Node {name} status"))?;
                if !ready {
                    let taints = json!({"spec": {"taints": n["spec"]["taints"]}});
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&taints))
                        .await
                        .with_context(|| format!("patch Node {name} taints"))?;
                }
                Ok(())
            }
        }
    }

    /// Deletes the Node; a Node already gone is not an error.
    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        match self {
            NodeSink::Store(store) => {
                let nodes_t = store.find_type("", "v1", "nodes").expect("nodes");
                match store.delete(&nodes_t, None, name, &DeleteOptions::default()) {
                    Ok(_) => Ok(()),
                    Err(e) if e.code == 404 => Ok(()),
                    Err(e) => anyhow::bail!("delete node {name}: {}", e.message),
                }
            }
            NodeSink::Api { client, .. } => {
                match Self::nodes(client)
                    .delete(name, &kube::api::DeleteParams::default())
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    Err(e) => Err(e).with_context(|| format!("delete Node {name}")),
                }
            }
        }
    }

    /// `data.mapRoles` of `kube-system/aws-auth`, None when there is no such ConfigMap.
    async fn aws_auth_map_roles(&self) -> anyhow::Result<Option<String>> {
        let cm: Option<Value> = match self {
            NodeSink::Store(store) => {
                let t = store.find_type("", "v1", "configmaps").expect("configmaps");
                store
                    .get(&t, Some("kube-system"), "aws-auth")
                    .ok()
                    .map(|v| (*v).clone())
            }
            NodeSink::Api { client, .. } => {
                let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                    kube::Api::namespaced(client.clone(), "kube-system");
                api.get_opt("aws-auth")
                    .await
                    .context("get ConfigMap kube-system/aws-auth")?
                    .map(serde_json::to_value)
                    .transpose()?
            }
        };
        Ok(cm.and_then(|c| c["data"]["mapRoles"].as_str().map(str::to_string)))
    }

    fn nodes(client: &kube::Client) -> kube::Api<Node> {
        kube::Api::all(client.clone())
    }
}

/// Tag naming the instance's cluster (value `owned` or `shared`), as EKS uses it.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
/// Alternative tag: value = cluster name.
pub const JOINER_CLUSTER_TAG: &str = "joiner.dev/cluster";
/// Comma-separated `key=value` node labels.
pub const NODE_LABELS_TAG: &str = "joiner.dev/node-labels";
/// Comma-separated `key[=value]:Effect` node taints.
pub const NODE_TAINTS_TAG: &str = "joiner.dev/node-taints";

#[derive(Debug, Clone)]
pub struct BridgeOptions {
    pub endpoint: String,
    pub cluster: String,
    pub region: String,
    pub boot_delay: Duration,
    /// How long a Node of a stopped or terminated instance stays NotReady before deletion.
    pub node_grace: Duration,
    pub poll: Duration,
}

struct Tracked {
    first_seen: Instant,
    node: Option<String>,
    down_since: Option<Instant>,
    /// Why the kubelet cannot join, as last logged (logged again only when it changes).
    refused: Option<String>,
    /// nodeadm's or Bottlerocket's refusal of the user data, once judged: user data never
    /// changes, so it is judged (and logged) once.
    user_data_refused: Option<String>,
}

/// The words kube-sim logs once per instance whose user data nodeadm or Bottlerocket's
/// settings model refuses; the sandbox counts them.
pub const USER_DATA_REFUSED_LOG: &str = "refused the user data";

#[derive(Clone)]
struct TypeInfo {
    vcpus: i64,
    memory_mib: i64,
    arch: String,
    max_pods: i64,
    /// NVIDIA GPUs (GpuInfo of manufacturer NVIDIA).
    nvidia_gpus: i64,
    /// Inferentia and Trainium devices (NeuronInfo).
    neuron_devices: i64,
    /// Instance store, decimal GB (InstanceStorageInfo.TotalSizeInGB); 0 without one.
    instance_store_gb: i64,
}

/// What the bridge has learnt from EC2 and keeps: instance types by name, images by ID.
#[derive(Default)]
struct Facts {
    types: HashMap<String, TypeInfo>,
    images: HashMap<String, Drivers>,
    /// Launch template versions' EBS volumes: (device, GiB), keyed by (id, version).
    volumes: HashMap<(String, String), Vec<(String, i64)>>,
    /// Instance types' EBS attachment facts, for the CSINode ([`crate::attach`]).
    ebs: HashMap<String, crate::attach::EbsFacts>,
}

/// The accelerator drivers an image carries, read from its name as EKS and Bottlerocket
/// name their images (EKS user guide, "Use EKS-optimized accelerated AMIs for GPU
/// instances"): `amazon-eks-node-al2023-<arch>-nvidia-...` and
/// `bottlerocket-aws-k8s-<k8s>-nvidia-...` carry the NVIDIA driver,
/// `amazon-eks-node-al2023-x86_64-neuron-...` the Neuron driver, and so does Bottlerocket's
/// standard x86_64 image (`bottlerocket-aws-k8s-<k8s>-x86_64-...`), which ships it for
/// Inferentia and Trainium. Any other image (a plain Amazon Linux, the standard EKS image)
/// carries neither. The node's device plugins (Bottlerocket's built-in NVIDIA plugin, or
/// the DaemonSets a cluster deploys) advertise a device only where its driver is loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drivers {
    pub nvidia: bool,
    pub neuron: bool,
}

impl Drivers {
    pub fn of_image(name: &str, arch: &str) -> Drivers {
        let name = name.to_ascii_lowercase();
        if let Some(rest) = name.strip_prefix("amazon-eks-node-al2023-") {
            // <arch>-<variant>-<k8s>-<release>
            let variant = rest.split('-').nth(1).unwrap_or("");
            return Drivers {
                nvidia: variant == "nvidia",
                neuron: variant == "neuron",
            };
        }
        if let Some(rest) = name.strip_prefix("bottlerocket-aws-k8s-") {
            // <k8s>[-nvidia]-<machine>-<release>
            let nvidia = rest.split('-').nth(1) == Some("nvidia");
            return Drivers {
                nvidia,
                neuron: !nvidia && arch == "x86_64",
            };
        }
        Drivers::default()
    }
}

/// Parses `a=b,c=d` into label pairs.
pub fn parse_labels(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Parses `key=value:Effect,key:Effect` into taints.
pub fn parse_taints(s: &str) -> Vec<Value> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (kv, effect) = p.rsplit_once(':')?;
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
                return None;
            }
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let mut t = json!({"key": k, "effect": effect});
            if !v.is_empty() {
                t["value"] = json!(v);
            }
            Some(t)
        })
        .collect()
}

/// Finds kubelet flags `--node-labels=...` and `--register-with-taints=...` anywhere in the
/// user data (EKS bootstrap.sh `--kubelet-extra-args`, nodeadm `kubelet.flags`, or a script).
pub fn labels_and_taints_from_user_data(text: &str) -> (Vec<(String, String)>, Vec<Value>) {
    let mut labels = Vec::new();
    let mut taints = Vec::new();
    let token_after = |from: usize| -> &str {
        let rest = &text[from..];
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ']')
            .unwrap_or(rest.len());
        &rest[..end]
    };
    for (flag, is_label) in [("--node-labels=", true), ("--register-with-taints=", false)] {
        let mut start = 0;
        while let Some(i) = text[start..].find(flag) {
            let at = start + i + flag.len();
            let tok = token_after(at);
            if is_label {
                labels.extend(parse_labels(tok));
            } else {
                taints.extend(parse_taints(tok));
            }
            start = at;
        }
    }
    (labels, taints)
}

/// What a node's user data sets for its kubelet that changes what the kubelet reports:
/// `maxPods` and the reservations. A real kubelet reports the `maxPods` it was configured
/// with (a NodeClass's `kubelet.maxPods` reaches it through the user data the agent writes),
/// not the ENI table's figure, so the emulated one must too, or the Nodes disagree with the
/// agent's catalogue, which models the same settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletConfig {
    pub max_pods: Option<i64>,
    pub kube_reserved_cpu_m: Option<i64>,
    pub kube_reserved_memory_mi: Option<i64>,
    pub system_reserved_cpu_m: i64,
    pub system_reserved_memory_mi: i64,
    pub eviction_hard_memory_mi: Option<i64>,
    /// kube-reserved and system-reserved `ephemeral-storage`, bytes.
    pub kube_reserved_ephemeral: Option<i64>,
    pub system_reserved_ephemeral: i64,
    /// The `nodefs.available` hard eviction threshold as written (`10%`, `2Gi`).
    pub eviction_hard_nodefs: Option<String>,
    /// The instance store is striped and mounted for the kubelet (nodeadm's
    /// `localStorage.strategy: RAID0`, Bottlerocket's `apiclient ephemeral-storage init`).
    pub instance_store_raid0: bool,
    /// Default kube-reserved memory counts `max_pods` (Bottlerocket) rather than the type's
    /// ENI figure, which nodeadm counts whatever `maxPods` its NodeConfig sets
    /// (`internal/kubelet/config.go`, `withDefaultReservedResources`).
    pub reserves_for_max_pods: bool,
}

/// Reads [`KubeletConfig`] from user data: AL2023 NodeConfig documents (`spec.kubelet.config`,
/// later documents overriding earlier ones, as nodeadm merges them), a bootstrap.sh
/// `--max-pods=` flag, or Bottlerocket's `max-pods = N`.
pub fn kubelet_config_from_user_data(text: &str) -> KubeletConfig {
    let mut k = KubeletConfig::default();
    let text = text.replace("\r\n", "\n");
    for part in text.split("\n--") {
        if !part.contains("kind: NodeConfig") {
            continue;
        }
        // A MIME part's body follows its headers' blank line; a bare document has none.
        let body = match part.split_once("\n\n") {
            Some((head, body)) if head.to_ascii_lowercase().contains("content-type") => body,
            _ => part,
        };
        let Ok(doc) = serde_yaml::from_str::<Value>(body) else {
            continue;
        };
        apply_kubelet_config(&mut k, &doc["spec"]["kubelet"]["config"]);
    }
    for (flag, sep) in [("--max-pods", '='), ("max-pods", ' ')] {
        let mut start = 0;
        while let Some(i) = text[start..].find(flag) {
            let at = start + i + flag.len();
            let rest = text[at..].trim_start_matches([sep, ' ', '=']);
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(m) = digits.parse() {
                k.max_pods = Some(m);
            }
            start = at;
        }
    }
    k
}

/// Sets what a NodeConfig's `spec.kubelet.config` says onto `k`, over what it had.
fn apply_kubelet_config(k: &mut KubeletConfig, c: &Value) {
    {
        if let Some(m) = c["maxPods"].as_i64() {
            k.max_pods = Some(m);
        }
        let cpu_m = |v: &Value| {
            v.as_str()
                .and_then(crate::quantity::parse)
                .map(|c| (c * 1000.0).round() as i64)
        };
        let mem_mi = |v: &Value| {
            v.as_str()
                .filter(|q| !q.ends_with('%'))
                .and_then(crate::quantity::parse)
                .map(|b| (b / (1u64 << 20) as f64).ceil() as i64)
        };
        if let Some(v) = cpu_m(&c["kubeReserved"]["cpu"]) {
            k.kube_reserved_cpu_m = Some(v);
        }
        if let Some(v) = mem_mi(&c["kubeReserved"]["memory"]) {
            k.kube_reserved_memory_mi = Some(v);
        }
        if let Some(v) = cpu_m(&c["systemReserved"]["cpu"]) {
            k.system_reserved_cpu_m = v;
        }
        if let Some(v) = mem_mi(&c["systemReserved"]["memory"]) {
            k.system_reserved_memory_mi = v;
        }
        if let Some(v) = mem_mi(&c["evictionHard"]["memory.available"]) {
            k.eviction_hard_memory_mi = Some(v);
        }
        let bytes = |v: &Value| {
            v.as_str()
                .and_then(crate::quantity::parse)
                .map(|b| b as i64)
        };
        if let Some(v) = bytes(&c["kubeReserved"]["ephemeral-storage"]) {
            k.kube_reserved_ephemeral = Some(v);
        }
        if let Some(v) = bytes(&c["systemReserved"]["ephemeral-storage"]) {
            k.system_reserved_ephemeral = v;
        }
        if let Some(v) = c["evictionHard"]["nodefs.available"].as_str() {
            k.eviction_hard_nodefs = Some(v.to_string());
        }
    }
}

/// Where an image keeps the kubelet's data: the root volume `/dev/xvda` (AL2023, AL2), or
/// Bottlerocket's data volume `/dev/xvdb` (its `/dev/xvda` holds the OS only). Karpenter
/// names the same devices (`EphemeralBlockDevice` in `pkg/providers/amifamily/al2023.go`
/// and `bottlerocket.go`).
pub fn kubelet_device(bottlerocket: bool) -> &'static str {
    if bottlerocket {
        "/dev/xvdb"
    } else {
        "/dev/xvda"
    }
}

/// The size of a volume the launch template does not map: the image's own mapping, 20 GiB
/// for the EKS-optimized images' root and Bottlerocket's data volume.
const IMAGE_VOLUME_GIB: i64 = 20;

/// The node's ephemeral-storage capacity in bytes, the size of the filesystem the kubelet's
/// root directory is on: the instance store's total with RAID0 (when the type has one),
/// else the volume at `device` among `volumes` (device, GiB), else the image's own.
pub fn ephemeral_capacity(
    device: &str,
    volumes: &[(String, i64)],
    instance_store_gb: i64,
    raid0: bool,
) -> i64 {
    if raid0 && instance_store_gb > 0 {
        return instance_store_gb * 1_000_000_000;
    }
    volumes
        .iter()
        .find(|(d, _)| d == device)
        .map_or(IMAGE_VOLUME_GIB, |(_, gib)| *gib)
        << 30
}

/// Allocatable ephemeral storage: capacity less kube-reserved (1 GiB, the EKS images'
/// default), system-reserved and the `nodefs.available` hard eviction threshold (the
/// kubelet's default 10 %). The kubelet takes a percentage of capacity truncated to whole
/// bytes (`GetThresholdQuantity`, `pkg/kubelet/eviction/api/types.go`) and subtracts the
/// sum (`GetNodeAllocatableReservation`, `pkg/kubelet/cm/node_container_manager_linux.go`).
pub fn ephemeral_allocatable(capacity: i64, k: &KubeletConfig) -> i64 {
    let nodefs = k.eviction_hard_nodefs.as_deref().unwrap_or("10%");
    let eviction = match nodefs.strip_suffix('%') {
        Some(p) => p
            .parse::<f64>()
            .map_or(0, |p| (capacity as f64 * p / 100.0) as i64),
        None => crate::quantity::parse(nodefs).map_or(0, |b| b as i64),
    };
    let reserved = k.kube_reserved_ephemeral.unwrap_or(1 << 30) + k.system_reserved_ephemeral;
    (capacity - reserved - eviction).max(0)
}

/// The keys of `settings.kubernetes` in Bottlerocket's settings model
/// (`KubernetesSettingsV1` of bottlerocket-settings-sdk, kebab-cased by its `model` macro,
/// which also denies unknown fields): Bottlerocket refuses user data that sets any other,
/// and the node never boots into the cluster.
pub const BOTTLEROCKET_KUBERNETES_SETTINGS: &[&str] = &[
    "cluster-name",
    "cluster-certificate",
    "api-server",
    "node-labels",
    "node-taints",
    "static-pods",
    "authentication-mode",
    "bootstrap-token",
    "standalone-mode",
    "eviction-hard",
    "eviction-soft",
    "eviction-soft-grace-period",
    "eviction-max-pod-grace-period",
    "kube-reserved",
    "system-reserved",
    "allowed-unsafe-sysctls",
    "server-tls-bootstrap",
    "cloud-provider",
    "registry-qps",
    "registry-burst",
    "event-qps",
    "event-burst",
    "kube-api-qps",
    "kube-api-burst",
    "container-log-max-size",
    "container-log-max-files",
    "container-log-max-workers",
    "container-log-monitor-interval",
    "cpu-cfs-quota-enforced",
    "cpu-manager-policy",
    "cpu-manager-reconcile-period",
    "cpu-manager-policy-options",
    "topology-manager-scope",
    "topology-manager-policy",
    "topology-manager-policy-options",
    "pod-pids-limit",
    "image-gc-high-threshold-percent",
    "image-gc-low-threshold-percent",
    "image-minimum-gc-age",
    "image-maximum-gc-age",
    "provider-id",
    "log-level",
    "credential-providers",
    "server-certificate",
    "server-key",
    "shutdown-grace-period",
    "shutdown-grace-period-for-critical-pods",
    "memory-manager-reserved-memory",
    "memory-manager-policy",
    "reserved-cpus",
    "memory-swap-behavior",
    "hostname-override-source",
    "seccomp-default",
    "device-ownership-from-security-context",
    "single-process-oom-kill",
    "static-pods-enabled",
    "max-pods",
    "cluster-dns-ip",
    "cluster-domain",
    "node-ip",
    "pod-infra-container-image",
    "hostname-override",
    "ids-per-pod",
    "max-parallel-image-pulls",
    "kubelet-extra-config",
];

/// What Bottlerocket makes of an instance's user data.
#[derive(Debug, Clone, PartialEq)]
pub enum Bottlerocket {
    /// No `[settings...]` table: not Bottlerocket user data.
    NotSettings,
    /// The node joins with these labels, taints and kubelet settings.
    Accepted(Vec<(String, String)>, Vec<Value>, KubeletConfig),
    /// Bottlerocket refuses the settings (not TOML, a setting its model does not know, a
    /// value of the wrong type) or they cannot join a cluster (no cluster name, API server
    /// or CA): the instance runs and never registers.
    Refused(String),
}

/// Reads Bottlerocket user data as its settings model does: TOML whose
/// `settings.kubernetes` keys are the model's ([`BOTTLEROCKET_KUBERNETES_SETTINGS`]), each of
/// its type, with the three a joining node needs.
pub fn bottlerocket_check(user_data: &str) -> Bottlerocket {
    use toml_edit::{DocumentMut, Item};
    if has_node_config(user_data)
        || !user_data
            .lines()
            .any(|l| l.trim_start().starts_with("[settings"))
    {
        return Bottlerocket::NotSettings;
    }
    let doc: DocumentMut = match user_data.parse() {
        Ok(d) => d,
        Err(e) => return Bottlerocket::Refused(format!("not TOML: {e}")),
    };
    let Some(k8s) = doc
        .get("settings")
        .and_then(|s| s.get("kubernetes"))
        .and_then(Item::as_table_like)
    else {
        return Bottlerocket::Refused(
            "no settings.kubernetes: the kubelet has no cluster to join".into(),
        );
    };
    let key = |k: &str| format!("settings.kubernetes.{k}");
    for (k, _) in k8s.iter() {
        if !BOTTLEROCKET_KUBERNETES_SETTINGS.contains(&k) {
            return Bottlerocket::Refused(format!("unknown setting {}", key(k)));
        }
    }
    for k in ["cluster-name", "api-server", "cluster-certificate"] {
        match k8s.get(k).and_then(Item::as_str) {
            Some(v) if !v.is_empty() => {}
            Some(_) | None => {
                return Bottlerocket::Refused(format!(
                    "{} is missing or not a string: the kubelet cannot join",
                    key(k)
                ))
            }
        }
    }
    let strings = |k: &str| -> Result<Vec<(String, String)>, String> {
        let Some(item) = k8s.get(k) else {
            return Ok(Vec::new());
        };
        let table = item
            .as_table_like()
            .ok_or_else(|| format!("{} is not a table", key(k)))?;
        table
            .iter()
            .map(|(name, v)| {
                v.as_str()
                    .map(|v| (name.to_string(), v.to_string()))
                    .ok_or_else(|| format!("{}.{name} is not a string", key(k)))
            })
            .collect()
    };
    let result = (|| -> Result<Bottlerocket, String> {
        let labels = strings("node-labels")?;
        let mut taints = Vec::new();
        if let Some(item) = k8s.get("node-taints") {
            let table = item
                .as_table_like()
                .ok_or_else(|| format!("{} is not a table", key("node-taints")))?;
            for (name, v) in table.iter() {
                let values: Vec<String> = match (v.as_str(), v.as_array()) {
                    (Some(s), _) => vec![s.to_string()],
                    (None, Some(a)) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("{}.{name}: not strings", key("node-taints")))?,
                    _ => {
                        return Err(format!(
                            "{}.{name}: not a string or array",
                            key("node-taints")
                        ))
                    }
                };
                for value in values {
                    let parsed = parse_taints(&format!("{name}={value}"));
                    if parsed.is_empty() {
                        return Err(format!(
                            "{}.{name} = \"{value}\": not value:Effect",
                            key("node-taints")
                        ));
                    }
                    taints.extend(parsed);
                }
            }
        }
        for k in [
            "eviction-hard",
            "eviction-soft",
            "eviction-soft-grace-period",
        ] {
            strings(k)?;
        }
        for k in ["max-pods", "eviction-max-pod-grace-period"] {
            if let Some(item) = k8s.get(k) {
                if item.as_integer().is_none_or(|n| n < 0) {
                    return Err(format!("{} is not a non-negative integer", key(k)));
                }
            }
        }
        if let Some(item) = k8s.get("cluster-dns-ip") {
            let ok = item.as_str().is_some()
                || item
                    .as_array()
                    .is_some_and(|a| a.iter().all(|x| x.as_str().is_some()));
            if !ok {
                return Err(format!(
                    "{} is not a string or array of strings",
                    key("cluster-dns-ip")
                ));
            }
        }
        let mut kubelet = KubeletConfig {
            max_pods: k8s.get("max-pods").and_then(Item::as_integer),
            reserves_for_max_pods: true,
            ..Default::default()
        };
        let as_map = |pairs: Vec<(String, String)>| -> Value {
            Value::Object(pairs.into_iter().map(|(k, v)| (k, json!(v))).collect())
        };
        apply_kubelet_config(
            &mut kubelet,
            &json!({
                "kubeReserved": as_map(strings("kube-reserved")?),
                "systemReserved": as_map(strings("system-reserved")?),
                "evictionHard": as_map(strings("eviction-hard")?),
            }),
        );
        kubelet.instance_store_raid0 = mounts_instance_store(&doc);
        Ok(Bottlerocket::Accepted(labels, taints, kubelet))
    })();
    result.unwrap_or_else(Bottlerocket::Refused)
}

/// Whether Bottlerocket settings run `apiclient ephemeral-storage init` at boot (a
/// `settings.bootstrap-commands` entry, as Karpenter's `bootstrap/bottlerocket.go` writes
/// for `instanceStorePolicy: RAID0`): the instance store becomes the kubelet's disk.
fn mounts_instance_store(doc: &toml_edit::DocumentMut) -> bool {
    let Some(cmds) = doc
        .get("settings")
        .and_then(|s| s.get("bootstrap-commands"))
        .and_then(toml_edit::Item::as_table_like)
    else {
        return false;
    };
    cmds.iter().any(|(_, entry)| {
        entry
            .get("commands")
            .and_then(toml_edit::Item::as_array)
            .is_some_and(|a| {
                a.iter().any(|c| {
                    let words: Vec<&str> = c
                        .as_array()
                        .map(|w| w.iter().filter_map(|x| x.as_str()).collect())
                        .unwrap_or_default();
                    words == ["apiclient", "ephemeral-storage", "init"]
                })
            })
    })
}

/// What nodeadm makes of an instance's user data.
#[derive(Debug, Clone, PartialEq)]
pub enum Nodeadm {
    /// No NodeConfig in it: not user data an AL2023 node boots from, so not nodeadm's to judge.
    NotNodeConfig,
    /// nodeadm's merged NodeConfig (JSON), which configures the kubelet.
    Accepted(Value),
    /// nodeadm's error: `nodeadm init` stops there, the kubelet never starts, and the instance
    /// runs on EC2 without ever registering.
    Refused(String),
}

/// User data with a NodeConfig: a MIME part of nodeadm's media type, or a bare document.
pub fn has_node_config(user_data: &str) -> bool {
    user_data.contains("application/node.eks.aws") || user_data.contains("kind: NodeConfig")
}

/// Where `nodeadm-check` is (tools/go/nodeadm, built by `scripts/install-tools.sh --base`):
/// `JOINER_NODEADM_CHECK`, else the workspace's `.tools/bin`.
pub fn nodeadm_check_bin() -> std::path::PathBuf {
    match std::env::var_os("JOINER_NODEADM_CHECK") {
        Some(p) if !p.is_empty() => p.into(),
        _ => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/nodeadm-check")
        }
    }
}

/// Runs nodeadm's own decoding, merging and validation on the user data, as `nodeadm init`
/// does first thing on an AL2023 node. A missing tool is a refusal that says how to install
/// it, so that no node registers unjudged.
pub fn nodeadm_check(user_data: &str) -> Nodeadm {
    use std::io::Write;
    use std::process::{Command, Stdio};
    if !has_node_config(user_data) {
        return Nodeadm::NotNodeConfig;
    }
    let bin = nodeadm_check_bin();
    let child = Command::new(&bin)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return Nodeadm::Refused(format!(
                "cannot run {} ({e}); scripts/install-tools.sh --base builds it",
                bin.display()
            ))
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(user_data.as_bytes());
    }
    let out = match child.wait_with_output() {
        Ok(o) => o,
        Err(e) => return Nodeadm::Refused(format!("{}: {e}", bin.display())),
    };
    if !out.status.success() {
        return Nodeadm::Refused(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    match serde_json::from_slice(&out.stdout) {
        Ok(v) => Nodeadm::Accepted(v),
        Err(e) => Nodeadm::Refused(format!("{}: unreadable answer: {e}", bin.display())),
    }
}

/// The labels, taints and kubelet settings a NodeConfig that nodeadm merged gives the
/// kubelet: its flags (`--node-labels`, `--register-with-taints`, `--max-pods`) and its
/// `kubelet.config` (`registerWithTaints`, `maxPods`, the reservations).
pub fn kubelet_from_node_config(
    merged: &Value,
) -> (Vec<(String, String)>, Vec<Value>, KubeletConfig) {
    let kubelet = &merged["spec"]["kubelet"];
    let flags: Vec<&str> = kubelet["flags"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let flags = flags.join("\n");
    let (labels, mut taints) = labels_and_taints_from_user_data(&flags);
    let mut k = kubelet_config_from_user_data(&flags);
    let config = &kubelet["config"];
    apply_kubelet_config(&mut k, config);
    k.instance_store_raid0 =
        merged["spec"]["instance"]["localStorage"]["strategy"].as_str() == Some("RAID0");
    if let Some(ts) = config["registerWithTaints"].as_array() {
        taints.extend(ts.iter().cloned());
    }
    (labels, taints, k)
}

/// The pods figure the kubelet reports: its configured `maxPods`, else the ENI table's.
fn max_pods(t: &TypeInfo, k: &KubeletConfig) -> i64 {
    k.max_pods.filter(|m| *m > 0).unwrap_or(t.max_pods)
}

/// EKS's kube-reserved model: CPU 6% of the first core, 1% of the second, 0.5% of the next
/// two, 0.25% above; memory 255Mi + 11Mi per pod: the type's ENI figure under nodeadm, the
/// max pods under Bottlerocket; plus the 100Mi hard eviction threshold. The user data's
/// reservations, when it sets them, replace these.
fn allocatable(t: &TypeInfo, k: &KubeletConfig) -> (i64, i64) {
    let cores = t.vcpus;
    let mut reserved_m: f64 = 0.0;
    for c in 1..=cores {
        reserved_m += match c {
            1 => 60.0,
            2 => 10.0,
            3 | 4 => 5.0,
            _ => 2.5,
        };
    }
    let kube_cpu = k.kube_reserved_cpu_m.unwrap_or(reserved_m.ceil() as i64);
    let cpu_m = cores * 1000 - kube_cpu - k.system_reserved_cpu_m;
    let kube_mem = k.kube_reserved_memory_mi.unwrap_or_else(|| {
        let pods = if k.reserves_for_max_pods {
            max_pods(t, k)
        } else {
            t.max_pods
        };
        255 + 11 * pods
    });
    let mem_mi = t.memory_mib
        - kube_mem
        - k.system_reserved_memory_mi
        - k.eviction_hard_memory_mi.unwrap_or(100);
    (cpu_m.max(0), mem_mi.max(0))
}

pub async fn ec2_client(endpoint: &str, region: &str) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::new(&sdk_config(endpoint, region).await)
}

/// The emulator's SDK configuration, with the environment's credentials (default `testing`).
pub async fn sdk_config(endpoint: &str, region: &str) -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let env = |k: &str, d: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| d.to_string())
    };
    let creds = aws_credential_types::Credentials::new(
        env("AWS_ACCESS_KEY_ID", "testing"),
        env("AWS_SECRET_ACCESS_KEY", "testing"),
        std::env::var("AWS_SESSION_TOKEN").ok(),
        None,
        "kube-sim",
    );
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(region.to_string()))
        .credentials_provider(creds)
        .load()
        .await
}

/// Runs the bridge on kube-sim's store until shutdown.
pub fn spawn(store: Arc<Store>, opts: BridgeOptions, shutdown: tokio::sync::watch::Receiver<bool>) {
    spawn_on(NodeSink::Store(store), opts, shutdown)
}

/// Runs the bridge against `sink` until shutdown. Errors reaching the emulator or the API
/// server are logged and retried at the next poll.
pub fn spawn_on(
    sink: NodeSink,
    opts: BridgeOptions,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let conf = sdk_config(&opts.endpoint, &opts.region).await;
        let client = aws_sdk_ec2::Client::new(&conf);
        let mut auth = Authorizer::new(&conf, &opts.cluster);
        let judge = Judge::new(client.clone());
        let mut tracked: HashMap<String, Tracked> = HashMap::new();
        let mut facts = Facts::default();
        let mut interval = tokio::time::interval(opts.poll);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = interval.tick() => {}
            }
            if let Err(e) = poll_once(
                &sink,
                &client,
                (&mut auth, &judge),
                &opts,
                &mut tracked,
                &mut facts,
            )
            .await
            {
                tracing::warn!("kubelet bridge: {e:#}");
            }
        }
    });
}

async fn poll_once(
    sink: &NodeSink,
    client: &aws_sdk_ec2::Client,
    (auth, judge): (&mut Authorizer, &Judge),
    opts: &BridgeOptions,
    tracked: &mut HashMap<String, Tracked>,
    facts: &mut Facts,
) -> anyhow::Result<()> {
    let cluster_tag = cluster_tag_key(&opts.cluster);
    auth.begin_poll();
    let mut token = None;
    let mut instances = Vec::new();
    loop {
        let out = client
            .describe_instances()
            .set_next_token(token)
            .send()
            .await
            .context("EC2 DescribeInstances")?;
        for r in out.reservations() {
            instances.extend(r.instances().iter().cloned());
        }
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    for inst in instances {
        let tags: HashMap<&str, &str> = inst
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value().unwrap_or(""))))
            .collect();
        let ours = tags.contains_key(cluster_tag.as_str())
            || tags.get(JOINER_CLUSTER_TAG) == Some(&opts.cluster.as_str());
        let Some(id) = inst.instance_id().map(str::to_string) else {
            continue;
        };
        if !ours {
            continue;
        }
        let state = inst
            .state()
            .and_then(|s| s.name())
            .cloned()
            .unwrap_or(InstanceStateName::Pending);
        let entry = tracked.entry(id.clone()).or_insert_with(|| Tracked {
            first_seen: Instant::now(),
            node: None,
            down_since: None,
            refused: None,
            user_data_refused: None,
        });
        match state {
            InstanceStateName::Running => {
                if let Some(node_name) = &entry.node {
                    // Registered: finish booting (NotReady -> Ready), or recover after a restart.
                    if let Err(e) = sink.set_ready(node_name, true).await {
                        tracing::warn!("kubelet bridge: {e:#}");
                    }
                    entry.down_since = None;
                } else if entry.user_data_refused.is_some() {
                    // Judged already: the instance runs, unregistered, as on EC2.
                } else if entry.first_seen.elapsed() >= opts.boot_delay {
                    let profile = inst.iam_instance_profile().and_then(|p| p.arn());
                    match auth.check(profile, || sink.aws_auth_map_roles()).await? {
                        Verdict::Refused(why) => {
                            if entry.refused.as_deref() != Some(why.as_str()) {
                                tracing::warn!(instance = %id, "kubelet cannot join the cluster: {why}");
                                entry.refused = Some(why);
                            }
                            continue;
                        }
                        Verdict::Authorized(how) => {
                            tracing::debug!(instance = %id, "kubelet authorized: {how}");
                        }
                    }
                    let network = match auth.cluster_network().await? {
                        Some(cluster) => Some(judge.judge(&cluster, &inst).await?),
                        None => None,
                    };
                    if let Some(Verdicts {
                        api_server: Err(why),
                        ..
                    }) = &network
                    {
                        if entry.refused.as_deref() != Some(why.as_str()) {
                            tracing::warn!(instance = %id, "kubelet cannot join the cluster: {why}");
                            entry.refused = Some(why.clone());
                        }
                        continue;
                    }
                    entry.refused = None;
                    let itype = inst
                        .instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default();
                    let info = match facts.types.get(&itype) {
                        Some(i) => i.clone(),
                        None => {
                            let i = describe_type(client, &itype).await?;
                            facts.types.insert(itype.clone(), i.clone());
                            i
                        }
                    };
                    let image = inst.image_id().unwrap_or_default().to_string();
                    let drivers = match facts.images.get(&image) {
                        Some(d) => *d,
                        None => {
                            let d = describe_image(client, &image).await?;
                            facts.images.insert(image.clone(), d);
                            d
                        }
                    };
                    let user_data = client
                        .describe_instance_attribute()
                        .instance_id(&id)
                        .attribute(InstanceAttributeName::UserData)
                        .send()
                        .await
                        .ok()
                        .and_then(|o| o.user_data().and_then(|u| u.value()).map(str::to_string))
                        .map(|b| {
                            use base64::Engine;
                            // The API returns user data base64-encoded; be lenient if not.
                            match base64::engine::general_purpose::STANDARD.decode(b.trim()) {
                                Ok(raw) => String::from_utf8_lossy(&raw).into_owned(),
                                Err(_) => b,
                            }
                        })
                        .unwrap_or_default();
                    let mut bottlerocket = false;
                    let (mut labels, mut taints, kubelet) = match nodeadm_check(&user_data) {
                        Nodeadm::Accepted(merged) => kubelet_from_node_config(&merged),
                        Nodeadm::Refused(why) => {
                            tracing::warn!(instance = %id, "nodeadm {USER_DATA_REFUSED_LOG}, the kubelet never starts: {why}");
                            entry.user_data_refused = Some(why);
                            continue;
                        }
                        Nodeadm::NotNodeConfig => match bottlerocket_check(&user_data) {
                            Bottlerocket::Accepted(labels, taints, kubelet) => {
                                bottlerocket = true;
                                (labels, taints, kubelet)
                            }
                            Bottlerocket::Refused(why) => {
                                tracing::warn!(instance = %id, "Bottlerocket {USER_DATA_REFUSED_LOG}, the kubelet never starts: {why}");
                                entry.user_data_refused = Some(why);
                                continue;
                            }
                            Bottlerocket::NotSettings => {
                                let (labels, taints) = labels_and_taints_from_user_data(&user_data);
                                (labels, taints, kubelet_config_from_user_data(&user_data))
                            }
                        },
                    };
                    if let Some(l) = tags.get(NODE_LABELS_TAG) {
                        labels.extend(parse_labels(l));
                    }
                    if let Some(t) = tags.get(NODE_TAINTS_TAG) {
                        taints.extend(parse_taints(t));
                    }
                    // A template pruned since the launch must not stop the whole pass:
                    // the node then reports the family's default disk, and says why.
                    let volumes = template_volumes(client, &tags, facts)
                        .await
                        .unwrap_or_else(|e| {
                            tracing::warn!(instance = %id, error = %format!("{e:#}"), "the launch template's disks are unknown; the node reports the default disk");
                            Vec::new()
                        });
                    let disk = ephemeral_capacity(
                        kubelet_device(bottlerocket),
                        &volumes,
                        info.instance_store_gb,
                        kubelet.instance_store_raid0,
                    );
                    let node = node_object(
                        &inst,
                        &id,
                        &itype,
                        (&info, &kubelet, drivers, disk),
                        &opts.region,
                        labels,
                        taints,
                    );
                    let mut node = node;
                    if let Some(v) = &network {
                        node["metadata"]["annotations"][CLUSTER_DNS_ANNOTATION] =
                            json!(match &v.cluster_dns {
                                Ok(()) => "reachable".to_string(),
                                Err(why) => format!("unreachable: {why}"),
                            });
                    }
                    let name = node["metadata"]["name"].as_str().unwrap_or(&id).to_string();
                    if sink.create(node).await? {
                        tracing::info!(instance = %id, node = %name, "node registered");
                    }
                    // The EBS CSI driver registers: the root volume is one of `volumes`.
                    let extra = (volumes.len() as i64 - 1).max(0);
                    let enis = inst.network_interfaces().len() as i64;
                    if let Err(e) =
                        csi_node(sink, client, facts, (&name, &id, &itype), (enis, extra)).await
                    {
                        tracing::warn!(instance = %id, "kubelet bridge: {e:#}");
                    }
                    entry.node = Some(name);
                }
            }
            InstanceStateName::Pending => {}
            _ => {
                let Some(node_name) = entry.node.clone() else {
                    continue;
                };
                let since = *entry.down_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= opts.node_grace {
                    match sink.delete(&node_name).await {
                        Ok(()) => tracing::info!(instance = %id, node = %node_name, "node deleted"),
                        Err(e) => tracing::warn!("kubelet bridge: {e:#}"),
                    }
                    entry.node = None;
                    entry.first_seen = Instant::now() + Duration::from_secs(365 * 86400);
                } else if let Err(e) = sink.set_ready(&node_name, false).await {
                    tracing::warn!("kubelet bridge: {e:#}");
                }
            }
        }
    }
    Ok(())
}

/// Writes the Node's CSINode with the count the EBS CSI driver reports for the instance.
async fn csi_node(
    sink: &NodeSink,
    client: &aws_sdk_ec2::Client,
    facts: &mut Facts,
    (node, id, itype): (&str, &str, &str),
    (enis, extra_volumes): (i64, i64),
) -> anyhow::Result<()> {
    let ebs = match facts.ebs.get(itype) {
        Some(f) => f.clone(),
        None => {
            let f = crate::attach::describe_ebs(client, itype).await?;
            facts.ebs.insert(itype.to_string(), f.clone());
            f
        }
    };
    let count = crate::attach::ebs_allocatable_count(&ebs, enis, extra_volumes);
    crate::attach::register_csi_node(sink, node, id, count).await
}

/// The EBS volumes (device, GiB) of the launch template version the instance was launched
/// from, which EC2 tags it with (`aws:ec2launchtemplate:id` and `:version`); none for an
/// instance launched without one.
async fn template_volumes(
    client: &aws_sdk_ec2::Client,
    tags: &HashMap<&str, &str>,
    facts: &mut Facts,
) -> anyhow::Result<Vec<(String, i64)>> {
    let (Some(id), Some(version)) = (
        tags.get("aws:ec2launchtemplate:id"),
        tags.get("aws:ec2launchtemplate:version"),
    ) else {
        return Ok(Vec::new());
    };
    let key = (id.to_string(), version.to_string());
    if let Some(v) = facts.volumes.get(&key) {
        return Ok(v.clone());
    }
    let out = client
        .describe_launch_template_versions()
        .launch_template_id(*id)
        .versions(*version)
        .send()
        .await
        .with_context(|| format!("EC2 DescribeLaunchTemplateVersions {id} {version}"))?;
    let volumes: Vec<(String, i64)> = out
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .map(|d| {
            d.block_device_mappings()
                .iter()
                .filter_map(|m| {
                    let size = m.ebs()?.volume_size()?;
                    Some((m.device_name()?.to_string(), size as i64))
                })
                .collect()
        })
        .unwrap_or_default();
    facts.volumes.insert(key, volumes.clone());
    Ok(volumes)
}

fn mark_ready(node: &mut Value, ready: bool) {
    use crate::controllers::set_condition;
    let mut taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    taints.retain(|t| {
        !matches!(
            t["key"].as_str(),
            Some("node.kubernetes.io/not-ready") | Some("node.kubernetes.io/unreachable")
        )
    });
    if ready {
        set_condition(
            node,
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        );
    } else {
        set_condition(
            node,
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        );
        taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": crate::store::now_rfc3339()}));
        taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": crate::store::now_rfc3339()}));
    }
    node["spec"]["taints"] = json!(taints);
}

async fn describe_type(client: &aws_sdk_ec2::Client, itype: &str) -> anyhow::Result<TypeInfo> {
    let out = client
        .describe_instance_types()
        .instance_types(InstanceType::from(itype))
        .send()
        .await
        .with_context(|| format!("EC2 DescribeInstanceTypes {itype}"))?;
    let t = out
        .instance_types()
        .first()
        .with_context(|| format!("EC2 DescribeInstanceTypes: no such type {itype}"))?;
    let vcpus = t.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or(2) as i64;
    let memory_mib = t
        .memory_info()
        .and_then(|m| m.size_in_mib())
        .unwrap_or(4096);
    let arch = t
        .processor_info()
        .map(|p| p.supported_architectures())
        .and_then(|a| a.first())
        .map(|a| {
            if a.as_str().starts_with("arm64") {
                "arm64"
            } else {
                "amd64"
            }
        })
        .unwrap_or("amd64")
        .to_string();
    // nodeadm's derivation: the default network card's interfaces, since the VPC CNI gives
    // pods addresses only there (`CalcMaxPods`, `internal/kubelet/eni_max_pods.go`).
    let (enis, ips) = t
        .network_info()
        .map(|n| {
            let default = n.default_network_card_index().unwrap_or(0);
            let card = n
                .network_cards()
                .iter()
                .find(|c| c.network_card_index().unwrap_or(0) == default)
                .and_then(|c| c.maximum_network_interfaces());
            (
                card.or(n.maximum_network_interfaces()).unwrap_or(3) as i64,
                n.ipv4_addresses_per_interface().unwrap_or(10) as i64,
            )
        })
        .unwrap_or((3, 10));
    let nvidia_gpus = t
        .gpu_info()
        .map(|g| {
            g.gpus()
                .iter()
                .filter(|d| d.manufacturer() == Some("NVIDIA"))
                .map(|d| d.count().unwrap_or(0) as i64)
                .sum()
        })
        .unwrap_or(0);
    let neuron_devices = t
        .neuron_info()
        .map(|n| {
            n.neuron_devices()
                .iter()
                .map(|d| d.count().unwrap_or(0) as i64)
                .sum()
        })
        .unwrap_or(0);
    let instance_store_gb = t
        .instance_storage_info()
        .and_then(|i| i.total_size_in_gb())
        .unwrap_or(0);
    Ok(TypeInfo {
        instance_store_gb,
        vcpus,
        memory_mib,
        arch,
        max_pods: enis * (ips - 1) + 2,
        nvidia_gpus,
        neuron_devices,
    })
}

/// The drivers of the image an instance booted from ([`Drivers::of_image`]); none for an
/// image EC2 no longer describes.
async fn describe_image(client: &aws_sdk_ec2::Client, id: &str) -> anyhow::Result<Drivers> {
    if id.is_empty() {
        return Ok(Drivers::default());
    }
    let out = match client.describe_images().image_ids(id).send().await {
        Ok(out) => out,
        Err(e) => {
            let code = e.as_service_error().and_then(|s| {
                use aws_sdk_ec2::error::ProvideErrorMetadata;
                s.code().map(str::to_string)
            });
            if code.as_deref() == Some("InvalidAMIID.NotFound") {
                return Ok(Drivers::default());
            }
            return Err(e).with_context(|| format!("EC2 DescribeImages {id}"));
        }
    };
    Ok(out
        .images()
        .first()
        .map(|i| {
            Drivers::of_image(
                i.name().unwrap_or_default(),
                i.architecture().map(|a| a.as_str()).unwrap_or_default(),
            )
        })
        .unwrap_or_default())
}

fn node_object(
    inst: &aws_sdk_ec2::types::Instance,
    id: &str,
    itype: &str,
    (info, kubelet, drivers, disk): (&TypeInfo, &KubeletConfig, Drivers, i64),
    region: &str,
    extra_labels: Vec<(String, String)>,
    taints: Vec<Value>,
) -> Value {
    let zone = inst
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or("")
        .to_string();
    let name = inst
        .private_dns_name()
        .filter(|n| !n.is_empty())
        .unwrap_or(id)
        .to_string();
    let ip = inst.private_ip_address().unwrap_or("10.0.0.10").to_string();
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/arch", info.arch.clone()),
        ("kubernetes.io/os", "linux".into()),
        ("kubernetes.io/hostname", name.clone()),
        ("node.kubernetes.io/instance-type", itype.to_string()),
        ("topology.kubernetes.io/zone", zone.clone()),
        ("topology.kubernetes.io/region", region.to_string()),
        ("beta.kubernetes.io/arch", info.arch.clone()),
        ("beta.kubernetes.io/os", "linux".into()),
        ("beta.kubernetes.io/instance-type", itype.to_string()),
        ("failure-domain.beta.kubernetes.io/zone", zone.clone()),
        (
            "failure-domain.beta.kubernetes.io/region",
            region.to_string(),
        ),
    ] {
        labels.insert(k.into(), json!(v));
    }
    for (k, v) in extra_labels {
        labels.insert(k, json!(v));
    }
    let mut taints = taints;
    taints.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
    let (cpu_m, mem_mi) = allocatable(info, kubelet);
    let pods = max_pods(info, kubelet);
    let now = crate::store::now_rfc3339();
    let cond = |ty: &str, st: &str, reason: &str, msg: &str| json!({"type": ty, "status": st, "reason": reason, "message": msg, "lastHeartbeatTime": now, "lastTransitionTime": now});
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        // The kubelet (its default `enableControllerAttachDetach`) hands the Node's volumes
        // to kube-controller-manager's attach-detach controller, which manages only Nodes
        // carrying this annotation.
        "metadata": {"name": name, "labels": labels, "annotations": {"node.alpha.kubernetes.io/ttl": "0", "alpha.kubernetes.io/provided-node-ip": ip, "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": format!("aws:///{zone}/{id}"), "taints": taints},
        "status": {
            "capacity": {"cpu": info.vcpus.to_string(), "memory": format!("{}Mi", info.memory_mib), "pods": pods.to_string(), "ephemeral-storage": disk.to_string()},
            "allocatable": {"cpu": format!("{cpu_m}m"), "memory": format!("{mem_mi}Mi"), "pods": pods.to_string(), "ephemeral-storage": ephemeral_allocatable(disk, kubelet).to_string()},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "False", "KubeletNotReady", "container runtime status check may not have completed yet"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": info.arch, "operatingSystem": "linux", "kubeletVersion": "v1.33.0-kube-sim",
                "kubeProxyVersion": "v1.33.0-kube-sim", "containerRuntimeVersion": "containerd://1.7.0",
                "kernelVersion": "6.1.0", "osImage": "kube-sim", "machineID": id, "systemUUID": id, "bootID": id,
            },
        },
    });
    for (resource, count) in extended_resources(info, drivers) {
        node["status"]["capacity"][resource] = json!(count.to_string());
        node["status"]["allocatable"][resource] = json!(count.to_string());
    }
    node
}

/// The devices the node's device plugins advertise: those of the type whose driver the
/// image carries.
fn extended_resources(info: &TypeInfo, drivers: Drivers) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    if drivers.nvidia && info.nvidia_gpus > 0 {
        out.push(("nvidia.com/gpu", info.nvidia_gpus));
    }
    if drivers.neuron && info.neuron_devices > 0 {
        out.push(("aws.amazon.com/neuron", info.neuron_devices));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kubelet_flags_from_user_data() {
        let ud = "#!/bin/bash\n/etc/eks/bootstrap.sh c --kubelet-extra-args '--node-labels=team=a,karpenter.sh/capacity-type=spot --register-with-taints=dedicated=gpu:NoSchedule'\n";
        let (labels, taints) = labels_and_taints_from_user_data(ud);
        assert_eq!(
            labels,
            vec![
                ("team".into(), "a".into()),
                ("karpenter.sh/capacity-type".into(), "spot".into())
            ]
        );
        assert_eq!(
            taints,
            vec![json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})]
        );
    }

    #[test]
    fn eks_reserved_resources() {
        let (cpu, mem) = allocatable(
            &TypeInfo {
                vcpus: 2,
                memory_mib: 8192,
                arch: "amd64".into(),
                max_pods: 29,
                nvidia_gpus: 0,
                neuron_devices: 0,
                instance_store_gb: 0,
            },
            &KubeletConfig::default(),
        );
        assert_eq!(cpu, 1930);
        assert_eq!(mem, 8192 - 255 - 319 - 100);
    }

    #[test]
    fn kubelet_settings_from_user_data() {
        // What the agent writes for a NodeClass with `kubelet.maxPods: 110` and reservations
        // (a MIME archive holding a NodeConfig).
        let ud = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n  kubelet:\n    config:\n      maxPods: 110\n      kubeReserved:\n        cpu: 200m\n      systemReserved:\n        memory: 1Gi\n      evictionHard:\n        memory.available: 200Mi\n--//--\n";
        let k = kubelet_config_from_user_data(ud);
        assert_eq!(
            k,
            KubeletConfig {
                max_pods: Some(110),
                kube_reserved_cpu_m: Some(200),
                kube_reserved_memory_mi: None,
                system_reserved_cpu_m: 0,
                system_reserved_memory_mi: 1024,
                eviction_hard_memory_mi: Some(200),
                ..Default::default()
            }
        );
        let m5 = TypeInfo {
            vcpus: 2,
            memory_mib: 8192,
            arch: "amd64".into(),
            max_pods: 29,
            nvidia_gpus: 0,
            neuron_devices: 0,
            instance_store_gb: 0,
        };
        assert_eq!(max_pods(&m5, &k), 110);
        // nodeadm reserves memory for the type's ENI figure (29), not the maxPods it was given.
        assert_eq!(
            allocatable(&m5, &k),
            (2000 - 200, 8192 - (255 + 11 * 29) - 1024 - 200)
        );
        let bottlerocket = KubeletConfig {
            reserves_for_max_pods: true,
            ..k.clone()
        };
        assert_eq!(
            allocatable(&m5, &bottlerocket),
            (2000 - 200, 8192 - (255 + 11 * 110) - 1024 - 200)
        );
        // bootstrap.sh and Bottlerocket spell it their own ways.
        let al2 =
            "/etc/eks/bootstrap.sh c --use-max-pods false --kubelet-extra-args '--max-pods=58'";
        assert_eq!(kubelet_config_from_user_data(al2).max_pods, Some(58));
        let br = "[settings.kubernetes]\ncluster-name = \"c\"\nmax-pods = 17\n";
        assert_eq!(kubelet_config_from_user_data(br).max_pods, Some(17));
        // Nothing set: the ENI table's figure and EKS's reservations.
        assert_eq!(max_pods(&m5, &kubelet_config_from_user_data("")), 29);
    }

    #[test]
    fn devices_are_advertised_only_with_their_driver() {
        let al2023 = |v: &str| format!("amazon-eks-node-al2023-x86_64-{v}-1.33-v20250715");
        assert_eq!(
            Drivers::of_image(&al2023("standard"), "x86_64"),
            Drivers::default()
        );
        assert!(Drivers::of_image(&al2023("nvidia"), "x86_64").nvidia);
        assert!(!Drivers::of_image(&al2023("nvidia"), "x86_64").neuron);
        assert!(Drivers::of_image(&al2023("neuron"), "x86_64").neuron);
        assert!(
            Drivers::of_image(
                "bottlerocket-aws-k8s-1.33-nvidia-aarch64-v1.40.0-1a2b3c4d",
                "arm64"
            )
            .nvidia
        );
        // Bottlerocket's standard x86_64 image ships the Neuron driver; its arm64 one has
        // nothing to drive.
        assert!(
            Drivers::of_image(
                "bottlerocket-aws-k8s-1.33-x86_64-v1.40.0-1a2b3c4d",
                "x86_64"
            )
            .neuron
        );
        assert_eq!(
            Drivers::of_image(
                "bottlerocket-aws-k8s-1.33-aarch64-v1.40.0-1a2b3c4d",
                "arm64"
            ),
            Drivers::default()
        );
        // Only the EKS and Bottlerocket names say what an image carries.
        assert_eq!(
            Drivers::of_image(
                "al2022-ami-ecs-neuron-hvm-2022.0.20230127-kernel-5.15-x86_64",
                "x86_64"
            ),
            Drivers::default()
        );
        let g4dn = TypeInfo {
            vcpus: 4,
            memory_mib: 16384,
            arch: "amd64".into(),
            max_pods: 29,
            nvidia_gpus: 1,
            neuron_devices: 0,
            instance_store_gb: 0,
        };
        let nvidia = Drivers {
            nvidia: true,
            neuron: false,
        };
        assert_eq!(extended_resources(&g4dn, nvidia), [("nvidia.com/gpu", 1)]);
        assert!(extended_resources(&g4dn, Drivers::default()).is_empty());
    }

    #[test]
    fn ephemeral_storage_is_the_kubelets_disk() {
        let gi = 1i64 << 30;
        let volumes = vec![("/dev/xvda".to_string(), 4), ("/dev/xvdb".to_string(), 40)];
        // Bottlerocket's kubelet is on the data volume, AL2023's on the root volume.
        assert_eq!(
            ephemeral_capacity(kubelet_device(true), &volumes, 0, false),
            40 * gi
        );
        assert_eq!(
            ephemeral_capacity(kubelet_device(false), &volumes, 0, false),
            4 * gi
        );
        // An unmapped device keeps the image's own size.
        assert_eq!(ephemeral_capacity("/dev/xvda", &[], 0, false), 20 * gi);
        // RAID0: the instance store where the type has one; an unmounted store counts not.
        assert_eq!(
            ephemeral_capacity("/dev/xvda", &volumes, 474, true),
            474_000_000_000
        );
        assert_eq!(
            ephemeral_capacity("/dev/xvda", &volumes, 474, false),
            4 * gi
        );
        assert_eq!(ephemeral_capacity("/dev/xvda", &volumes, 0, true), 4 * gi);
        // 1 GiB kube-reserved and 10 % nodefs.available by default; the user data's
        // thresholds and reservations replace them.
        let k = KubeletConfig::default();
        assert_eq!(ephemeral_allocatable(40 * gi, &k), 40 * gi - gi - 4 * gi);
        let set = KubeletConfig {
            kube_reserved_ephemeral: Some(2 * gi),
            system_reserved_ephemeral: gi,
            eviction_hard_nodefs: Some("5Gi".into()),
            ..Default::default()
        };
        assert_eq!(ephemeral_allocatable(40 * gi, &set), 32 * gi);
        assert_eq!(ephemeral_allocatable(gi, &k), 0);
    }

    #[test]
    fn raid0_is_read_from_either_familys_user_data() {
        let nodeadm = json!({"spec": {"instance": {"localStorage": {"strategy": "RAID0"}},
            "kubelet": {"config": {"kubeReserved": {"ephemeral-storage": "2Gi"},
                "evictionHard": {"nodefs.available": "15%"}}}}});
        let (_, _, k) = kubelet_from_node_config(&nodeadm);
        assert!(k.instance_store_raid0);
        assert_eq!(k.kube_reserved_ephemeral, Some(2 << 30));
        assert_eq!(k.eviction_hard_nodefs.as_deref(), Some("15%"));
        let br = format!(
            "{BOTTLEROCKET}\n[settings.bootstrap-commands.000-mount-instance-storage]\n\
             commands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], [\"apiclient\", \"ephemeral-storage\", \"bind\"]]\n\
             essential = true\nmode = \"always\"\n"
        );
        let Bottlerocket::Accepted(_, _, k) = bottlerocket_check(&br) else {
            panic!("refused: {:?}", bottlerocket_check(&br));
        };
        assert!(k.instance_store_raid0);
        let Bottlerocket::Accepted(_, _, k) = bottlerocket_check(BOTTLEROCKET) else {
            panic!("refused");
        };
        assert!(!k.instance_store_raid0);
    }

    /// Bottlerocket user data as the agent renders it for a NodeClass with reservations.
    const BOTTLEROCKET: &str = "[settings.kubernetes]\ncluster-name = \"prod\"\napi-server = \"https://x.eks.amazonaws.com\"\ncluster-certificate = \"Y2E=\"\nmax-pods = 58\neviction-max-pod-grace-period = 60\n\n[settings.kubernetes.node-labels]\n\"joiner.dev/nodepool\" = \"general\"\n\n[settings.kubernetes.node-taints]\n\"dedicated\" = [\"gpu:NoSchedule\", \"gpu:NoExecute\"]\n\n[settings.kubernetes.kube-reserved]\n\"cpu\" = \"250m\"\n\"memory\" = \"1Gi\"\n\n[settings.kubernetes.system-reserved]\n\"memory\" = \"200Mi\"\n\n[settings.kubernetes.eviction-hard]\n\"memory.available\" = \"300Mi\"\n\n[settings.host-containers.admin]\nenabled = true\n";

    #[test]
    fn bottlerocket_settings_configure_the_kubelet() {
        let Bottlerocket::Accepted(labels, taints, kubelet) = bottlerocket_check(BOTTLEROCKET)
        else {
            panic!("refused: {:?}", bottlerocket_check(BOTTLEROCKET));
        };
        assert_eq!(
            labels,
            [("joiner.dev/nodepool".to_string(), "general".to_string())]
        );
        assert_eq!(
            taints,
            [
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                json!({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}),
            ]
        );
        assert_eq!(
            kubelet,
            KubeletConfig {
                max_pods: Some(58),
                kube_reserved_cpu_m: Some(250),
                kube_reserved_memory_mi: Some(1024),
                system_reserved_cpu_m: 0,
                system_reserved_memory_mi: 200,
                eviction_hard_memory_mi: Some(300),
                reserves_for_max_pods: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn bottlerocket_refuses_what_its_settings_model_refuses() {
        let refused = |ud: &str| match bottlerocket_check(ud) {
            Bottlerocket::Refused(why) => why,
            other => panic!("accepted {ud}: {other:?}"),
        };
        let unknown = BOTTLEROCKET.replace("max-pods = 58", "max-pod = 58");
        assert!(refused(&unknown).contains("unknown setting settings.kubernetes.max-pod"));
        let no_name = BOTTLEROCKET.replace("cluster-name = \"prod\"\n", "");
        assert!(refused(&no_name).contains("settings.kubernetes.cluster-name is missing"));
        let wrong_type = BOTTLEROCKET.replace("max-pods = 58", "max-pods = \"58\"");
        assert!(refused(&wrong_type).contains("max-pods is not a non-negative integer"));
        let bad_taint = BOTTLEROCKET.replace("gpu:NoExecute", "gpu:Sometimes");
        assert!(refused(&bad_taint).contains("node-taints.dedicated"));
        assert!(refused("[settings.kubernetes\n").contains("not TOML"));
        // Not Bottlerocket's: a script, or a NodeConfig.
        assert_eq!(
            bottlerocket_check("#!/bin/bash\necho hi\n"),
            Bottlerocket::NotSettings
        );
    }
}
