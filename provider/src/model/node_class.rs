//! `joiner_node_class` as a struct, and its mapping to and from the agent's `NodeClassSpec`.

use std::collections::BTreeMap;

use joiner_agent::api::node_class::{
    AmiSelectorTerm, BlockDevice, BlockDeviceMapping, CapacityReservationSelectorTerm,
    InstanceStorePolicy, KubeletConfiguration, MetadataOptions, NodeClassSpec,
    SecurityGroupSelectorTerm, SubnetSelectorTerm,
};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct NodeClassModel {
        pub id: Option<String>,
        pub cluster_name: Option<String>,
        pub name: Option<String>,
        /// Planned: "role or instance profile" is judged only once both are known.
        pub role: Planned<Option<String>>,
        pub instance_profile: Planned<Option<String>>,
        pub user_data: Option<String>,
        pub tags: BTreeMap<String, String>,
        pub associate_public_ip_address: Option<bool>,
        pub detailed_monitoring: Option<bool>,
        pub ami_selector_terms: Vec<AmiTermModel> => "ami_selector_term",
        pub subnet_selector_terms: Vec<SubnetTermModel> => "subnet_selector_term",
        pub security_group_selector_terms: Vec<SecurityGroupTermModel>
            => "security_group_selector_term",
        pub metadata_options: Option<MetadataOptionsModel>,
        pub block_device_mappings: Vec<BlockDeviceModel> => "block_device_mapping",
        pub instance_store_policy: Option<String>,
        pub kubelet: Option<KubeletModel>,
        pub capacity_reservation_selector_terms: Vec<ReservationTermModel>
            => "capacity_reservation_selector_term",
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ReservationTermModel {
        pub id: Option<String>,
        pub owner_id: Option<String>,
        pub instance_match_criteria: Option<String>,
        pub tags: BTreeMap<String, String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AmiTermModel {
        pub alias: Option<String>,
        pub id: Option<String>,
        pub name: Option<String>,
        pub owner: Option<String>,
        pub tags: BTreeMap<String, String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SubnetTermModel {
        pub id: Option<String>,
        pub tags: BTreeMap<String, String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SecurityGroupTermModel {
        pub id: Option<String>,
        pub name: Option<String>,
        pub tags: BTreeMap<String, String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct MetadataOptionsModel {
        pub http_endpoint: Option<String>,
        pub http_protocol_ipv6: Option<String>,
        pub http_put_response_hop_limit: Option<i64>,
        pub http_tokens: Option<String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct BlockDeviceModel {
        pub device_name: String,
        pub root_volume: Option<bool>,
        pub volume_size: Option<String>,
        pub volume_type: Option<String>,
        pub iops: Option<i64>,
        pub throughput: Option<i64>,
        pub encrypted: Option<bool>,
        pub kms_key_id: Option<String>,
        pub delete_on_termination: Option<bool>,
        pub snapshot_id: Option<String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct KubeletModel {
        pub max_pods: Option<i64>,
        pub pods_per_core: Option<i64>,
        pub system_reserved: BTreeMap<String, String>,
        pub kube_reserved: BTreeMap<String, String>,
        pub eviction_hard: BTreeMap<String, String>,
        pub eviction_soft: BTreeMap<String, String>,
        pub eviction_soft_grace_period: BTreeMap<String, String>,
        pub eviction_max_pod_grace_period: Option<i64>,
        pub cluster_dns: Vec<String>,
    }
}

impl NodeClassModel {
    /// The CRD spec this configuration declares, CRD defaults filled in.
    pub fn spec(&self) -> NodeClassSpec {
        let d = MetadataOptions::default();
        let m = self.metadata_options.clone().unwrap_or_default();
        NodeClassSpec {
            subnet_selector_terms: self
                .subnet_selector_terms
                .iter()
                .map(|t| SubnetSelectorTerm {
                    tags: t.tags.clone(),
                    id: t.id.clone(),
                })
                .collect(),
            security_group_selector_terms: self
                .security_group_selector_terms
                .iter()
                .map(|t| SecurityGroupSelectorTerm {
                    tags: t.tags.clone(),
                    id: t.id.clone(),
                    name: t.name.clone(),
                })
                .collect(),
            ami_selector_terms: self
                .ami_selector_terms
                .iter()
                .map(|t| AmiSelectorTerm {
                    alias: t.alias.clone(),
                    tags: t.tags.clone(),
                    id: t.id.clone(),
                    name: t.name.clone(),
                    owner: t.owner.clone(),
                })
                .collect(),
            role: (*self.role).clone(),
            instance_profile: (*self.instance_profile).clone(),
            user_data: self.user_data.clone(),
            block_device_mappings: self
                .block_device_mappings
                .iter()
                .map(|b| BlockDeviceMapping {
                    device_name: b.device_name.clone(),
                    root_volume: b.root_volume.unwrap_or(false),
                    ebs: Some(BlockDevice {
                        volume_size: b.volume_size.clone(),
                        volume_type: b.volume_type.clone(),
                        iops: b.iops,
                        throughput: b.throughput,
                        encrypted: b.encrypted.unwrap_or(true),
                        kms_key_id: b.kms_key_id.clone(),
                        delete_on_termination: b.delete_on_termination.unwrap_or(true),
                        snapshot_id: b.snapshot_id.clone(),
                    }),
                })
                .collect(),
            instance_store_policy: self
                .instance_store_policy
                .as_deref()
                .filter(|p| *p == "RAID0")
                .map(|_| InstanceStorePolicy::RAID0),
            metadata_options: MetadataOptions {
                http_endpoint: m.http_endpoint.unwrap_or(d.http_endpoint),
                http_protocol_ipv6: m.http_protocol_ipv6.unwrap_or(d.http_protocol_ipv6),
                http_put_response_hop_limit: m
                    .http_put_response_hop_limit
                    .unwrap_or(d.http_put_response_hop_limit),
                http_tokens: m.http_tokens.unwrap_or(d.http_tokens),
            },
            tags: self.tags.clone(),
            kubelet: self.kubelet.as_ref().map(|k| KubeletConfiguration {
                max_pods: k.max_pods.map(|v| v as i32),
                pods_per_core: k.pods_per_core.map(|v| v as i32),
                system_reserved: k.system_reserved.clone(),
                kube_reserved: k.kube_reserved.clone(),
                eviction_hard: k.eviction_hard.clone(),
                eviction_soft: k.eviction_soft.clone(),
                eviction_soft_grace_period: k.eviction_soft_grace_period.clone(),
                eviction_max_pod_grace_period: k.eviction_max_pod_grace_period.map(|v| v as i32),
                cluster_dns: Some(k.cluster_dns.clone()).filter(|c| !c.is_empty()),
            }),
            associate_public_ip_address: self.associate_public_ip_address,
            detailed_monitoring: self.detailed_monitoring,
            capacity_reservation_selector_terms: self
                .capacity_reservation_selector_terms
                .iter()
                .map(|t| CapacityReservationSelectorTerm {
                    tags: t.tags.clone(),
                    id: t.id.clone(),
                    owner_id: t.owner_id.clone(),
                    instance_match_criteria: t.instance_match_criteria.clone(),
                })
                .collect(),
        }
    }

    /// The configuration a stored spec corresponds to; CRD defaults read as omitted.
    pub fn from_spec(cluster: &str, name: &str, s: &NodeClassSpec) -> NodeClassModel {
        let d = MetadataOptions::default();
        let m = &s.metadata_options;
        let metadata_options = (*m != d).then(|| MetadataOptionsModel {
            http_endpoint: Some(m.http_endpoint.clone()).filter(|v| *v != d.http_endpoint),
            http_protocol_ipv6: Some(m.http_protocol_ipv6.clone())
                .filter(|v| *v != d.http_protocol_ipv6),
            http_put_response_hop_limit: Some(m.http_put_response_hop_limit)
                .filter(|v| *v != d.http_put_response_hop_limit),
            http_tokens: Some(m.http_tokens.clone()).filter(|v| *v != d.http_tokens),
        });
        NodeClassModel {
            id: Some(format!("{cluster}:{name}")),
            cluster_name: Some(cluster.into()),
            name: Some(name.into()),
            role: s.role.clone().into(),
            instance_profile: s.instance_profile.clone().into(),
            user_data: s.user_data.clone(),
            tags: s.tags.clone(),
            associate_public_ip_address: s.associate_public_ip_address,
            detailed_monitoring: s.detailed_monitoring,
            ami_selector_terms: s
                .ami_selector_terms
                .iter()
                .map(|t| AmiTermModel {
                    alias: t.alias.clone(),
                    id: t.id.clone(),
                    name: t.name.clone(),
                    owner: t.owner.clone(),
                    tags: t.tags.clone(),
                })
                .collect(),
            subnet_selector_terms: s
                .subnet_selector_terms
                .iter()
                .map(|t| SubnetTermModel {
                    id: t.id.clone(),
                    tags: t.tags.clone(),
                })
                .collect(),
            security_group_selector_terms: s
                .security_group_selector_terms
                .iter()
                .map(|t| SecurityGroupTermModel {
                    id: t.id.clone(),
                    name: t.name.clone(),
                    tags: t.tags.clone(),
                })
                .collect(),
            metadata_options,
            block_device_mappings: s
                .block_device_mappings
                .iter()
                .map(|b| {
                    let e = b.ebs.clone().unwrap_or_default();
                    BlockDeviceModel {
                        device_name: b.device_name.clone(),
                        root_volume: Some(b.root_volume).filter(|r| *r),
                        volume_size: e.volume_size,
                        volume_type: e.volume_type,
                        iops: e.iops,
                        throughput: e.throughput,
                        encrypted: Some(e.encrypted).filter(|v| !*v),
                        kms_key_id: e.kms_key_id,
                        delete_on_termination: Some(e.delete_on_termination).filter(|v| !*v),
                        snapshot_id: e.snapshot_id,
                    }
                })
                .collect(),
            instance_store_policy: s.instance_store_policy.map(|_| "RAID0".to_string()),
            kubelet: s.kubelet.as_ref().map(|k| KubeletModel {
                max_pods: k.max_pods.map(i64::from),
                pods_per_core: k.pods_per_core.map(i64::from),
                system_reserved: k.system_reserved.clone(),
                kube_reserved: k.kube_reserved.clone(),
                eviction_hard: k.eviction_hard.clone(),
                eviction_soft: k.eviction_soft.clone(),
                eviction_soft_grace_period: k.eviction_soft_grace_period.clone(),
                eviction_max_pod_grace_period: k.eviction_max_pod_grace_period.map(i64::from),
                cluster_dns: k.cluster_dns.clone().unwrap_or_default(),
            }),
            capacity_reservation_selector_terms: s
                .capacity_reservation_selector_terms
                .iter()
                .map(|t| ReservationTermModel {
                    id: t.id.clone(),
                    owner_id: t.owner_id.clone(),
                    instance_match_criteria: t.instance_match_criteria.clone(),
                    tags: t.tags.clone(),
                })
                .collect(),
            timeouts: Value::Null,
        }
    }
}
