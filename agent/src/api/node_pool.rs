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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
    /// Pools are tried from the highest weight down (1–100); pools without a weight come last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    // Launch policies (issue 21): how a claim's candidate list is cut. See `launch_policy`.
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
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: default_consolidation_policy(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
