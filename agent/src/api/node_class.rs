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
    /// What to do with the instance store of types that have one. Unset, it is left
    /// unmounted and the kubelet uses the EBS volume. Karpenter's `instanceStorePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Karpenter's EC2NodeClass spells it `associatePublicIPAddress`; both are read.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "associatePublicIPAddress"
    )]
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

/// How the instance store is used.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe every instance-store volume into one RAID0 array and put the kubelet's and
    /// containerd's data on it: the node's ephemeral storage is the instance store.
    RAID0,
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
    /// Whether the nodes boot Bottlerocket: an alias `bottlerocket@...`, or an image name
    /// term naming it (the agent's AMI resolution reads the same from the image's name).
    pub fn is_bottlerocket(&self) -> bool {
        self.ami_selector_terms.iter().any(|t| {
            t.alias
                .as_deref()
                .is_some_and(|a| a.starts_with("bottlerocket"))
                || t.name
                    .as_deref()
                    .is_some_and(|n| n.to_ascii_lowercase().contains("bottlerocket"))
        })
    }

    /// The device whose volume holds the kubelet's data when no mapping is marked
    /// `rootVolume`: AL2023's root volume, Bottlerocket's data volume (Karpenter's
    /// `EphemeralBlockDevice`, `pkg/providers/amifamily/al2023.go` and `bottlerocket.go`).
    pub fn ephemeral_block_device(&self) -> &'static str {
        if self.is_bottlerocket() {
            "/dev/xvdb"
        } else {
            "/dev/xvda"
        }
    }

    /// Whether the instance store of types that have one holds the kubelet's data.
    pub fn instance_store_raid0(&self) -> bool {
        self.instance_store_policy == Some(InstanceStorePolicy::RAID0)
    }

    /// The disk the kubelet's data lands on, as Karpenter's `ephemeralStorage`
    /// (`pkg/providers/instancetype/types.go`) decides it: the instance store with RAID0
    /// (for types that have one); else the mapping marked `rootVolume`; else the family's
    /// ephemeral device among the mappings; else the family's default volume (20 GiB).
    /// Sizes are whole GiB, rounded up, as the launch template asks EC2 for them.
    pub fn node_disk(&self) -> crate::catalog::NodeDisk {
        let size = |m: &BlockDeviceMapping| {
            let q = m.ebs.as_ref()?.volume_size.as_deref()?;
            let b = crate::resources::parse_bytes(q).ok()?;
            Some((b + (1 << 30) - 1) >> 30 << 30)
        };
        let maps = &self.block_device_mappings;
        let device = self.ephemeral_block_device();
        let volume_bytes = maps
            .iter()
            .find(|m| m.root_volume)
            .and_then(size)
            .or_else(|| maps.iter().find(|m| m.device_name == device).and_then(size))
            .unwrap_or(crate::catalog::NodeDisk::DEFAULT_VOLUME_BYTES);
        crate::catalog::NodeDisk {
            volume_bytes,
            instance_store_raid0: self.instance_store_raid0(),
        }
    }

    /// The kubelet settings the catalogue uses for capacity and allocatable. Assumes the
    /// spec passed validation; unparsable quantities fall back to the EKS defaults.
    pub fn kubelet_settings(&self) -> crate::catalog::KubeletSettings {
        let mut s = crate::catalog::KubeletSettings {
            disk: self.node_disk(),
            reserve_memory_for_eni_pods: !self.is_bottlerocket(),
            ..Default::default()
        };
        if let Some(k) = &self.kubelet {
            kubelet_overrides(&mut s, k);
        }
        s
    }
}

/// The NodeClass's kubelet reservations and hard eviction thresholds over `s`.
fn kubelet_overrides(s: &mut crate::catalog::KubeletSettings, k: &KubeletConfiguration) {
    use crate::catalog::allocatable::Threshold;
    use crate::resources::{parse_bytes, parse_cpu_milli};
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
    if let Some(b) = k
        .kube_reserved
        .get("ephemeral-storage")
        .and_then(|q| parse_bytes(q).ok())
    {
        s.kube_reserved_ephemeral_bytes = b;
    }
    if let Some(b) = k
        .system_reserved
        .get("ephemeral-storage")
        .and_then(|q| parse_bytes(q).ok())
    {
        s.system_reserved_ephemeral_bytes = b;
    }
    if let Some(q) = k.eviction_hard.get("nodefs.available") {
        let t = match q.strip_suffix('%') {
            Some(p) => p.parse().ok().map(Threshold::Percent),
            None => parse_bytes(q).ok().map(Threshold::Bytes),
        };
        if let Some(t) = t {
            s.eviction_hard_nodefs = t;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn volume(device: &str, size: &str, root: bool) -> BlockDeviceMapping {
        BlockDeviceMapping {
            device_name: device.into(),
            ebs: Some(BlockDevice {
                volume_size: Some(size.into()),
                ..Default::default()
            }),
            root_volume: root,
        }
    }

    fn class(alias: &str, mappings: Vec<BlockDeviceMapping>) -> NodeClassSpec {
        NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some(alias.into()),
                ..Default::default()
            }],
            block_device_mappings: mappings,
            ..Default::default()
        }
    }

    #[test]
    fn the_kubelets_disk_follows_karpenters_order() {
        // No mappings: the family's default, 20 GiB either way.
        for alias in ["al2023@latest", "bottlerocket@latest"] {
            assert_eq!(class(alias, vec![]).node_disk().volume_bytes, 20 * GI);
        }
        // The family's ephemeral device: AL2023's root, Bottlerocket's data volume.
        let both = || {
            vec![
                volume("/dev/xvda", "8Gi", false),
                volume("/dev/xvdb", "60Gi", false),
            ]
        };
        assert_eq!(
            class("al2023@latest", both()).node_disk().volume_bytes,
            8 * GI
        );
        assert_eq!(
            class("bottlerocket@latest", both())
                .node_disk()
                .volume_bytes,
            60 * GI
        );
        // The mapping marked rootVolume wins over the family's device.
        let marked = vec![
            volume("/dev/xvda", "8Gi", false),
            volume("/dev/xvdc", "100Gi", true),
        ];
        assert_eq!(
            class("al2023@latest", marked).node_disk().volume_bytes,
            100 * GI
        );
        // Mappings without the family's device: the default volume size.
        let other = vec![volume("/dev/xvdc", "100Gi", false)];
        assert_eq!(
            class("bottlerocket@latest", other).node_disk().volume_bytes,
            20 * GI
        );
        // Whole GiB, rounded up, as the launch template asks EC2 for them.
        let decimal = vec![volume("/dev/xvda", "20G", true)];
        assert_eq!(
            class("al2023@latest", decimal).node_disk().volume_bytes,
            19 * GI
        );
    }

    #[test]
    fn raid0_and_kubelet_settings_reach_the_catalogue() {
        let mut c = class("al2023@latest", vec![volume("/dev/xvda", "40Gi", true)]);
        assert!(!c.node_disk().instance_store_raid0);
        c.instance_store_policy = Some(InstanceStorePolicy::RAID0);
        assert!(c.node_disk().instance_store_raid0);
        c.kubelet = Some(KubeletConfiguration {
            kube_reserved: [("ephemeral-storage".to_string(), "2Gi".to_string())].into(),
            system_reserved: [("ephemeral-storage".to_string(), "1Gi".to_string())].into(),
            eviction_hard: [("nodefs.available".to_string(), "5%".to_string())].into(),
            ..Default::default()
        });
        let s = c.kubelet_settings();
        assert_eq!(s.disk.volume_bytes, 40 * GI);
        assert_eq!(s.kube_reserved_ephemeral_bytes, 2 * GI);
        assert_eq!(s.system_reserved_ephemeral_bytes, GI);
        assert_eq!(
            crate::catalog::allocatable::ephemeral_allocatable(40 * GI, &s),
            40 * GI - 2 * GI - GI - 2 * GI
        );
        let default = class("al2023@latest", vec![]).kubelet_settings();
        assert_eq!(default, crate::catalog::KubeletSettings::default());
    }
}
