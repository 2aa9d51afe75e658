//! `NodeClaim`: one node the agent decided to launch, with the requirements and candidate
//! instance types the scheduler chose. Follows Karpenter v1's `NodeClaim`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.dev",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    status = "NodeClaimStatus",
    category = "joiner",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    pub node_class_ref: NodeClassReference,
    /// Includes `node.kubernetes.io/instance-type In [...]` with the candidate types, cheapest
    /// first, and the allowed zones and capacity types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default)]
    pub resources: ResourceRequirements,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Sum of the requests of the pods planned onto this claim, DaemonSets included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A NodeClaim's requirements read once through [`crate::requirements`], for the code that
/// acts on a claim (launch, the provisioner's in-flight capacity) instead of string tests
/// on `operator == "In"`, which miss `NotIn`, `Exists` and bounds.
#[derive(Debug, Clone)]
pub struct ClaimView {
    pub requirements: crate::requirements::Requirements,
    /// The instance types in the claim's own order (cheapest first: the launch order),
    /// when the claim lists them.
    pub instance_types: Option<Vec<String>>,
}

impl ClaimView {
    /// Whether the claim allows `value` for the label `key` (no requirement allows any).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.requirements.get(key).is_none_or(|r| r.has(value))
    }

    /// The finite set of values the claim allows for `key`, when it lists them.
    pub fn listed(&self, key: &str) -> Option<&std::collections::BTreeSet<String>> {
        self.requirements.get(key)?.finite_values()
    }
}

impl NodeClaim {
    /// The typed view of the claim's requirements; errors name the field.
    pub fn view(&self) -> Result<ClaimView, String> {
        let requirements = super::convert_requirements(&self.spec.requirements)
            .map_err(|e| format!("spec.{e}"))?;
        let instance_types = self
            .spec
            .requirements
            .iter()
            .find(|r| r.key == crate::labels::INSTANCE_TYPE)
            .filter(|_| {
                requirements
                    .get(crate::labels::INSTANCE_TYPE)
                    .is_some_and(|r| r.finite_values().is_some())
            })
            .map(|r| r.values.clone());
        Ok(ClaimView {
            requirements,
            instance_types,
        })
    }

    /// The candidate instance types of the claim: the launched type when it is known, else
    /// the types its requirements list (`view`), in the claim's order.
    pub fn candidate_types<'a>(
        &self,
        view: &ClaimView,
        catalog: &'a crate::catalog::Catalog,
    ) -> Vec<&'a crate::catalog::InstanceType> {
        if let Some(t) = self
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::labels::INSTANCE_TYPE))
        {
            return catalog.get(t).into_iter().collect();
        }
        view.instance_types
            .iter()
            .flatten()
            .filter_map(|t| catalog.get(t))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
        serde_json::from_value(serde_json::json!({
            "key": key, "operator": operator, "values": values,
        }))
        .unwrap()
    }

    #[test]
    fn the_view_reads_every_operator_and_keeps_the_launch_order() {
        let mut c = NodeClaim::new("c", Default::default());
        c.spec.requirements = vec![
            req(
                crate::labels::INSTANCE_TYPE,
                "In",
                &["m5.large", "c5.large"],
            ),
            req(crate::labels::CAPACITY_TYPE, "NotIn", &["spot"]),
            req(crate::labels::ZONE, "In", &["us-east-1a"]),
        ];
        let v = c.view().unwrap();
        assert_eq!(
            v.instance_types,
            Some(vec!["m5.large".to_string(), "c5.large".to_string()]),
            "cheapest first, as written, not sorted"
        );
        assert!(!v.allows(crate::labels::CAPACITY_TYPE, "spot"));
        assert!(v.allows(crate::labels::CAPACITY_TYPE, "on-demand"));
        assert!(v.allows(crate::labels::ZONE, "us-east-1a"));
        assert!(!v.allows(crate::labels::ZONE, "us-east-1b"));
        assert!(v.allows("unconstrained", "anything"));
        assert_eq!(v.listed(crate::labels::CAPACITY_TYPE), None);

        c.spec.requirements = vec![req(crate::labels::INSTANCE_TYPE, "NotIn", &["t3.nano"])];
        assert_eq!(c.view().unwrap().instance_types, None);
        c.spec.requirements = vec![req("k", "Sometimes", &[])];
        assert!(c.view().unwrap_err().starts_with("spec."));
    }
}
