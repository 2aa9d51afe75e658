//! `NodeClass`: how EC2 instances are launched (subnets, security groups, AMI, IAM role,
//! user data, disks, instance metadata, tags, kubelet settings). Follows Karpenter v1's
//! `EC2NodeClass`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.dev",
    version = "v1",
    kind = "NodeClass",
    plural = "nodeclasses",
    status = "NodeClassStatus",
    shortname = "nc",
    category = "joiner"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSpec {
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// IAM role for the nodes; the agent manages an instance profile for it. Exactly one of
    /// `role` and `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Extra user data, merged with what the AMI family needs to join the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// EC2 capacity reservations (on-demand capacity reservations and capacity blocks) the
    /// class launches into, for NodePools that allow capacity type `reserved`. Terms are
    /// ORed. Karpenter's `capacityReservationSelectorTerms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
}

/// One way to select capacity reservations: by ID, or by tags, owner and match criteria
/// (ANDed within the term).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation carries; `*` as a value matches any value of the key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// `cr-0123456789abcdef0`; may not be combined with the other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The AWS account that owns the reservation (a shared reservation's owner).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ownerID")]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
}

/// Checks the capacity reservation selector terms (called by `validate::node_class`).
pub fn check_reservation_terms(spec: &NodeClassSpec, path: &str) -> Vec<(String, String)> {
    let mut e = Vec::new();
    let terms = &spec.capacity_reservation_selector_terms;
    let base = format!("{path}.capacityReservationSelectorTerms");
    if terms.len() > 30 {
        e.push((base.clone(), "at most 30 terms".to_string()));
    }
    for (i, t) in terms.iter().enumerate() {
        let p = format!("{base}[{i}]");
        let others =
            !t.tags.is_empty() || t.owner_id.is_some() || t.instance_match_criteria.is_some();
        match (&t.id, others) {
            (None, false) => e.push((
                p.clone(),
                "one of id, tags, ownerID or instanceMatchCriteria is required".into(),
            )),
            (Some(_), true) => e.push((
                p.clone(),
                "id may not be combined with tags, ownerID or instanceMatchCriteria".into(),
            )),
            _ => {}
        }
        if let Some(id) = &t.id {
            let ok = id.strip_prefix("cr-").is_some_and(|r| {
                !r.is_empty()
                    && r.chars()
                        .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            });
            if !ok {
                e.push((
                    format!("{p}.id"),
                    "must look like cr-0123456789abcdef0".into(),
                ));
            }
        }
        if let Some(o) = &t.owner_id {
            if o.len() != 12 || !o.chars().all(|c| c.is_ascii_digit()) {
                e.push((
                    format!("{p}.ownerID"),
                    "must be a 12-digit AWS account ID".into(),
                ));
            }
        }
        if let Some(m) = &t.instance_match_criteria {
            if m != "open" && m != "targeted" {
                e.push((
                    format!("{p}.instanceMatchCriteria"),
                    "must be one of open, targeted".into(),
                ));
            }
        }
        if t.tags.len() > 50 {
            e.push((format!("{p}.tags"), "at most 50 tags".into()));
        }
        for (k, v) in &t.tags {
            if k.is_empty() || v.is_empty() {
                e.push((
                    format!("{p}.tags[{k:?}]"),
                    "tag keys and values must not be empty (use * to match any value)".into(),
                ));
            }
        }
    }
    e
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest`, `bottlerocket@v1.20.0`; resolved through SSM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    pub device_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Marks the volume kubelet and containerd use; its size becomes ephemeral-storage.
    #[serde(default)]
    pub root_volume: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Size as a quantity (`20Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<String>,
    /// gp2, gp3, io1, io2, sc1, st1 or standard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default = "default_true")]
    pub encrypted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    #[serde(default = "default_true")]
    pub delete_on_termination: bool,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
}

fn default_true() -> bool {
    true
}

/// Instance metadata service options. IMDSv2 (`httpTokens: required`) and a hop limit of 1
/// are the defaults, so that pods cannot reach the node's credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default = "default_enabled")]
    pub http_endpoint: String,
    #[serde(default = "default_disabled", rename = "httpProtocolIPv6")]
    pub http_protocol_ipv6: String,
    #[serde(default = "default_hop_limit")]
    pub http_put_response_hop_limit: i64,
    #[serde(default = "default_required")]
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: default_enabled(),
            http_protocol_ipv6: default_disabled(),
            http_put_response_hop_limit: default_hop_limit(),
            http_tokens: default_required(),
        }
    }
}

fn default_enabled() -> String {
    "enabled".into()
}
fn default_disabled() -> String {
    "disabled".into()
}
fn default_hop_limit() -> i64 {
    1
}
fn default_required() -> String {
    "required".into()
}

/// Kubelet settings that change what a node can hold, as in Karpenter's
/// `EC2NodeClass.spec.kubelet`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds (`memory.available: 100Mi`, `nodefs.available: 10%`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "clusterDNS"
    )]
    pub cluster_dns: Option<Vec<String>>,
}

impl NodeClassSpec {
    /// The kubelet settings the catalogue uses for allocatable. Assumes the spec passed
    /// validation; unparsable quantities fall back to the EKS defaults.
    pub fn kubelet_settings(&self) -> crate::catalog::KubeletSettings {
        use crate::resources::{parse_bytes, parse_cpu_milli};
        let mut s = crate::catalog::KubeletSettings::default();
        let Some(k) = &self.kubelet else { return s };
        s.max_pods = k.max_pods.filter(|m| *m > 0).map(|m| m as u32);
        s.pods_per_core = k.pods_per_core.filter(|p| *p > 0).map(|p| p as u32);
        if let Some(c) = k
            .kube_reserved
            .get("cpu")
            .and_then(|q| parse_cpu_milli(q).ok())
        {
            s.kube_reserved_cpu_milli = Some(c);
        }
        if let Some(m) = k
            .kube_reserved
            .get("memory")
            .and_then(|q| parse_bytes(q).ok())
        {
            s.kube_reserved_memory_bytes = Some(m);
        }
        if let Some(c) = k
            .system_reserved
            .get("cpu")
            .and_then(|q| parse_cpu_milli(q).ok())
        {
            s.system_reserved_cpu_milli = c;
        }
        if let Some(m) = k
            .system_reserved
            .get("memory")
            .and_then(|q| parse_bytes(q).ok())
        {
            s.system_reserved_memory_bytes = m;
        }
        if let Some(m) = k
            .eviction_hard
            .get("memory.available")
            .filter(|q| !q.ends_with('%'))
            .and_then(|q| parse_bytes(q).ok())
        {
            s.eviction_hard_memory_bytes = m;
        }
        s
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub id: String,
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedId {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Requirements the AMI imposes (architecture, GPU support).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<super::NodeSelectorRequirementWithMinValues>,
}
