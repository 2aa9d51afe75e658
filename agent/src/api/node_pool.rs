//! `NodePool`: what nodes may be launched for pending pods, with which constraints,
//! limits and disruption rules. Follows Karpenter v1's `NodePool`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.dev",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    status = "NodePoolStatus",
    shortname = "np",
    category = "joiner",
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the total capacity of the pool's nodes, as resource quantities
    /// (`cpu: "1000"`, `memory: 1000Gi`, `nvidia.com/gpu: "8"`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "super::quantity_map"
    )]
    pub limits: BTreeMap<String, String>,
    /// Pools are tried from the highest weight down (1–100); pools without a weight come last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    // Launch policies: how a claim's candidate list is cut. See `launch_policy`.
    /// What a launch does when a requirement's `minValues` cannot be met: `Strict` (the
    /// default) plans nothing on this pool; `BestEffort` launches with the values it has and
    /// marks the NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed: "true"`. Karpenter's
    /// global `--min-values-policy`, per pool here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values_policy: Option<String>,
    /// How much dearer than a NodeClaim's cheapest candidate type its dearest may be, as a
    /// ratio (`"2"`, the default: at most twice the price; at least `"1"`), compared within a
    /// capacity type. Types above it are left out of the launch, so a shortage of the cheap
    /// types never falls back to a node costing many times as much. Types kept for
    /// `minValues` are exempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_price_ratio: Option<String>,
    // The capacity fields (static replicas, headroom, repair), kept together.
    /// Static capacity (Karpenter v1.8 `spec.replicas`): the pool keeps exactly this many
    /// nodes whatever the pods need, and never launches for pending pods. Only
    /// `limits.nodes` applies; `weight` and `headroom` may not be set; consolidation is off
    /// (drift, expiry and repair still replace nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Warm capacity (joiner; Karpenter has no such field): room kept free on the pool's
    /// nodes for pods that have not arrived yet, so a burst starts without a boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headroom: Vec<Headroom>,
    /// Node repair (Karpenter v1.1's `NodeRepair`, opted into per pool): a node whose
    /// condition matches a policy for its toleration is replaced, unless more than 20 % of
    /// the pool's nodes are unhealthy. No policies: Karpenter's AWS defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    pub node_class_ref: NodeClassReference,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints present only while the node starts (a CNI or agent removes them); pods need
    /// not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Nodes are replaced after this long (`720h` by default, or `Never`).
    #[serde(default = "default_expire_after")]
    pub expire_after: String,
    /// How long a draining node may wait for pods before it is terminated anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
}

fn default_expire_after() -> String {
    "720h".to_string()
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// `WhenEmpty` or `WhenEmptyOrUnderutilized` (default).
    #[serde(default = "default_consolidation_policy")]
    pub consolidation_policy: String,
    /// How long a node must be consolidatable before it is disrupted (`0s` default, or `Never`).
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: String,
    /// At most this many nodes may be disrupted at once; defaults to one budget of `10%`.
    #[serde(default = "default_budgets")]
    pub budgets: Vec<Budget>,
    /// Replace Spot nodes by cheaper Spot nodes (Karpenter's `SpotToSpotConsolidation`
    /// feature gate, per pool here): a single node needs at least 15 cheaper Spot types, and
    /// its replacement launches from the 15 cheapest. Off by default, as in Karpenter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot_to_spot_consolidation: bool,
    /// At most this many pods evicted by consolidation in any hour (joiner; Karpenter has no
    /// cap). Unset: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_evictions_per_hour: Option<u32>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: default_consolidation_policy(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
            spot_to_spot_consolidation: false,
            consolidation_evictions_per_hour: None,
        }
    }
}

fn default_consolidation_policy() -> String {
    "WhenEmptyOrUnderutilized".to_string()
}

fn default_consolidate_after() -> String {
    "0s".to_string()
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".to_string(),
        ..Default::default()
    }]
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// A node count (`5`) or a percentage of the pool's nodes (`10%`).
    pub nodes: String,
    /// Cron schedule (5 fields or `@daily`-style macro, UTC) when the budget is active;
    /// requires `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Disruption reasons the budget applies to: Underutilized, Empty, Drifted. All when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Capacity of the pool's nodes, counted against `limits`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "super::quantity_map"
    )]
    pub resources: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Consolidation's evictions of the last hour, kept here so that
    /// `consolidationEvictionsPerHour` survives a change of leader.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consolidation_evictions: Vec<EvictionRecord>,
}

/// Pods evicted by one consolidation decision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRecord {
    /// RFC 3339.
    pub time: String,
    pub pods: u32,
}

/// Room kept for pods to come: `pods` pods of `cpu`/`memory` each, or `nodes` spare (empty)
/// nodes; during a cron window when `schedule` and `duration` are set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Headroom {
    /// CPU of one pod to make room for (`"1"`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory of one pod to make room for (`2Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// How many such pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// Spare nodes with no pods; may not be combined with cpu, memory or pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Cron schedule (UTC) when this headroom is kept; requires `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

/// Node repair settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Repair {
    /// Empty: Karpenter's AWS policies (Ready False/Unknown 30m, AcceleratedHardwareReady
    /// False 10m, StorageReady, NetworkingReady, KernelReady, ContainerRuntimeReady False 30m).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<RepairPolicy>,
}

/// A node condition that, held for `tolerationDuration`, gets the node replaced (the
/// fields of Karpenter's cloud provider `RepairPolicy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepairPolicy {
    /// `Ready`, or a node-problem condition such as `KernelReady`.
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub condition_status: String,
    /// How long the condition may hold before the node is replaced (`30m`).
    pub toleration_duration: String,
}
