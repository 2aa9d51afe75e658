//! The `joiner.dev/v1` API: `NodePool`, `NodeClass` and `NodeClaim`.
//!
//! Field names follow Karpenter v1 (`NodePool`, `EC2NodeClass`, `NodeClaim`) where the
//! concept is the same, so that manifests translate 1:1. The CRD YAML in `agent/crds/` is
//! generated from these types (`UPDATE_CRDS=1 cargo test -p joiner-agent crds`).
//!
//! [`validate`] checks a spec and returns every problem with its field path; the provider
//! calls the same functions at plan time, so they use no Kubernetes client. [`schema::crds`]
//! is the CRDs with what of it the API server can check itself (enums, patterns, bounds,
//! CEL rules), so that a bad object is refused at `kubectl apply`.

pub mod cron;
pub mod duration;
pub mod launch_policy;
pub mod node_claim;
pub mod node_class;
pub mod node_overlay;
pub mod node_pool;
pub mod schema;
pub mod served;
pub mod tags;
pub mod validate;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use node_claim::{ClaimView, NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use node_class::{NodeClass, NodeClassSpec, NodeClassStatus};
pub use node_overlay::{NodeOverlay, NodeOverlaySpec};
pub use node_pool::{NodePool, NodePoolSpec, NodePoolStatus};

pub const GROUP: &str = "joiner.dev";
pub const VERSION: &str = "v1";

/// A node selector requirement with Karpenter's `minValues`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    pub key: String,
    /// One of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// The minimum number of distinct values the launch must keep among its candidate
    /// instance types (for example 3 instance families for Spot diversity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i32>,
}

/// A node taint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
}

/// Reference to the NodeClass a NodePool or NodeClaim launches with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    #[serde(default = "default_group")]
    pub group: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    pub name: String,
}

fn default_group() -> String {
    GROUP.to_string()
}

fn default_kind() -> String {
    "NodeClass".to_string()
}

/// A map of resource quantities, each written as a string or a number: Karpenter's CRDs
/// declare quantities int-or-string, so `cpu: 1000` is kept as the number 1000.
pub fn quantity_map<'de, D>(d: D) -> Result<std::collections::BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(i64),
        Float(f64),
        Str(String),
    }
    let m: std::collections::BTreeMap<String, IntOrString> = Deserialize::deserialize(d)?;
    Ok(m.into_iter()
        .map(|(k, v)| {
            let v = match v {
                IntOrString::Int(i) => i.to_string(),
                IntOrString::Float(f) => f.to_string(),
                IntOrString::Str(s) => s,
            };
            (k, v)
        })
        .collect())
}

/// A status condition, as in `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    // Reason and message are written even when empty: `metav1.Condition` requires both,
    // and Karpenter's CRDs refuse a condition without its message.
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Converts API taints into the scheduler's, reporting the first invalid effect.
pub fn convert_taints(taints: &[Taint]) -> Result<Vec<crate::taints::Taint>, String> {
    taints
        .iter()
        .map(|t| {
            Ok(crate::taints::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: crate::taints::Effect::parse(&t.effect)?,
            })
        })
        .collect()
}

/// Converts API requirements into the algebra's, reporting the first invalid one.
pub fn convert_requirements(
    reqs: &[NodeSelectorRequirementWithMinValues],
) -> Result<crate::requirements::Requirements, String> {
    parse_requirements(reqs).merged()
}

/// Why one requirement entry does not read: its operator is unknown, or its values do not
/// suit its operator.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryError {
    Operator(String),
    Values(crate::requirements::Operator, String),
}

/// A requirement list read once, entry by entry in the spec's order, so that the checks
/// that need it each way share one parse: validation reports each bad entry at its own
/// path, drift names the entry a node violates, the scheduler takes their intersection.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequirements {
    /// Each entry's key and its operator and requirement (with its `minValues`), or why it
    /// does not read.
    pub entries: Vec<(String, Result<ParsedEntry, EntryError>)>,
}

/// An entry that reads: its operator as written (`Gte` stays `Gte`) and its requirement.
pub type ParsedEntry = (
    crate::requirements::Operator,
    crate::requirements::Requirement,
);

/// Reads every entry of a requirement list; see [`ParsedRequirements`].
pub fn parse_requirements(reqs: &[NodeSelectorRequirementWithMinValues]) -> ParsedRequirements {
    let entries = reqs
        .iter()
        .map(|r| {
            let read = match r.operator.parse::<crate::requirements::Operator>() {
                Err(e) => Err(EntryError::Operator(e)),
                Ok(op) => crate::requirements::Requirement::new(op, &r.values)
                    .map(|req| {
                        (
                            op,
                            req.with_min_values(r.min_values.map(|m| m.max(0) as usize)),
                        )
                    })
                    .map_err(|e| EntryError::Values(op, e)),
            };
            (r.key.clone(), read)
        })
        .collect();
    ParsedRequirements { entries }
}

impl ParsedRequirements {
    /// The entries' intersection by key, or the first entry that does not read, by its
    /// field (`requirements[2].operator: ...`).
    pub fn merged(&self) -> Result<crate::requirements::Requirements, String> {
        let mut out = crate::requirements::Requirements::new();
        for (i, (key, read)) in self.entries.iter().enumerate() {
            match read {
                Ok((_, req)) => out.add(key, req.clone()),
                Err(EntryError::Operator(e)) => {
                    return Err(format!("requirements[{i}].operator: {e}"))
                }
                Err(EntryError::Values(_, e)) => {
                    return Err(format!("requirements[{i}].values: {e}"))
                }
            }
        }
        Ok(out)
    }
}

/// Writes requirements back in the API's form (one entry per operator; `minValues` kept).
pub fn requirements_to_api(
    reqs: &crate::requirements::Requirements,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    let mut out = Vec::new();
    for (key, r) in reqs.iter() {
        for (i, (op, values)) in r.to_selector_terms().into_iter().enumerate() {
            out.push(NodeSelectorRequirementWithMinValues {
                key: key.clone(),
                operator: op.to_string(),
                values,
                min_values: if i == 0 {
                    r.min_values.map(|m| m as i32)
                } else {
                    None
                },
            });
        }
    }
    out
}
