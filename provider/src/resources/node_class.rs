//! `joiner_node_class`: a `joiner.dev/v1` NodeClass (how instances are launched), validated
//! at plan time by the agent's own validator and written with server-side apply.

use std::time::Duration;

use joiner_agent::api::node_class::NodeClassSpec;
use joiner_agent::api::validate::FieldError;
use serde_json::Value as Json;

use super::custom_object::CustomObject;
use crate::context::ProviderContext;
use crate::kubernetes::{kinds, Kind, Kube};
use crate::model::node_class::NodeClassModel;
use crate::model::paths::PathMap;
use crate::model::Model;
use crate::protocol::prelude::*;

/// The resource, a [`CustomObject`]: its lifecycle is shared, the rest of this module is the
/// NodeClass's own.
pub struct NodeClass;

pub const PATHS: PathMap = PathMap {
    dropped: &["spec", "ebs"],
    renamed: &[
        ("subnetSelectorTerms", "subnet_selector_term"),
        ("securityGroupSelectorTerms", "security_group_selector_term"),
        ("amiSelectorTerms", "ami_selector_term"),
        ("blockDeviceMappings", "block_device_mapping"),
        ("httpProtocolIPv6", "http_protocol_ipv6"),
        ("kmsKeyID", "kms_key_id"),
        ("snapshotID", "snapshot_id"),
        ("clusterDNS", "cluster_dns"),
        (
            "capacityReservationSelectorTerms",
            "capacity_reservation_selector_term",
        ),
        ("ownerID", "owner_id"),
    ],
};

fn tags_block() -> Attribute {
    Attribute::string_map("tags").optional()
}

#[async_trait]
impl CustomObject for NodeClass {
    const TYPE_NAME: &'static str = "joiner_node_class";
    const DESCRIPTION: &'static str = "A joiner.dev/v1 NodeClass: subnets, security groups, AMI, IAM role, disks, metadata options, user data, tags and kubelet settings for launched instances (Karpenter v1 EC2NodeClass fields).";
    const KIND: Kind = kinds::NODE_CLASS;
    const PATHS: &'static PathMap = &PATHS;
    const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

    type Model = NodeClassModel;
    type Spec = NodeClassSpec;

    fn attributes(schema: Schema) -> Schema {
        schema
            .attribute(Attribute::string("role").optional())
            .attribute(Attribute::string("instance_profile").optional())
            .attribute(Attribute::string("user_data").optional())
            .attribute(tags_block())
            .attribute(Attribute::bool("associate_public_ip_address").optional())
            .attribute(Attribute::bool("detailed_monitoring").optional())
            .block(
                NestedBlock::list(
                    "ami_selector_term",
                    Block::new()
                        .attribute(Attribute::string("alias").optional())
                        .attribute(Attribute::string("id").optional())
                        .attribute(Attribute::string("name").optional())
                        .attribute(Attribute::string("owner").optional())
                        .attribute(tags_block()),
                )
                .min_items(1),
            )
            .block(
                NestedBlock::list(
                    "subnet_selector_term",
                    Block::new()
                        .attribute(Attribute::string("id").optional())
                        .attribute(tags_block()),
                )
                .min_items(1),
            )
            .block(
                NestedBlock::list(
                    "security_group_selector_term",
                    Block::new()
                        .attribute(Attribute::string("id").optional())
                        .attribute(Attribute::string("name").optional())
                        .attribute(tags_block()),
                )
                .min_items(1),
            )
            .block(NestedBlock::single(
                "metadata_options",
                Block::new()
                    .attribute(Attribute::string("http_endpoint").optional())
                    .attribute(Attribute::string("http_protocol_ipv6").optional())
                    .attribute(Attribute::number("http_put_response_hop_limit").optional())
                    .attribute(Attribute::string("http_tokens").optional()),
            ))
            .block(NestedBlock::list(
                "block_device_mapping",
                Block::new()
                    .attribute(Attribute::string("device_name").required())
                    .attribute(Attribute::bool("root_volume").optional())
                    .attribute(Attribute::string("volume_size").optional())
                    .attribute(Attribute::string("volume_type").optional())
                    .attribute(Attribute::number("iops").optional())
                    .attribute(Attribute::number("throughput").optional())
                    .attribute(Attribute::bool("encrypted").optional())
                    .attribute(Attribute::string("kms_key_id").optional())
                    .attribute(Attribute::bool("delete_on_termination").optional())
                    .attribute(Attribute::string("snapshot_id").optional()),
            ))
            .attribute(
                Attribute::string("instance_store_policy")
                    .optional()
                    .validate(instance_store_policy)
                    .description(
                        "`RAID0`: stripe the instance store of types that have one into a RAID0 \
                         array holding the kubelet's and containerd's data, so that their \
                         ephemeral storage is the instance store. Unset, the instance store is \
                         left unmounted and ephemeral storage is the root (AL2023) or data \
                         (Bottlerocket) volume.",
                    ),
            )
            .block(NestedBlock::single(
                "kubelet",
                Block::new()
                    .attribute(Attribute::number("max_pods").optional())
                    .attribute(Attribute::number("pods_per_core").optional())
                    .attribute(Attribute::string_map("system_reserved").optional())
                    .attribute(Attribute::string_map("kube_reserved").optional())
                    .attribute(Attribute::string_map("eviction_hard").optional())
                    .attribute(Attribute::string_map("eviction_soft").optional())
                    .attribute(Attribute::string_map("eviction_soft_grace_period").optional())
                    .attribute(Attribute::number("eviction_max_pod_grace_period").optional())
                    .attribute(Attribute::string_list("cluster_dns").optional()),
            ))
            .block(NestedBlock::list(
                "capacity_reservation_selector_term",
                Block::new()
                    .description("EC2 capacity reservations (on-demand capacity reservations, capacity blocks) this class launches into for NodePools allowing capacity type `reserved`; terms are ORed (Karpenter's capacityReservationSelectorTerms).")
                    .attribute(Attribute::string("id").optional().description("`cr-...`; not combined with the other fields."))
                    .attribute(Attribute::string("owner_id").optional().description("The 12-digit account that owns the reservation."))
                    .attribute(Attribute::string("instance_match_criteria").optional().description("`open` or `targeted`."))
                    .attribute(tags_block()),
            ))
    }

    fn spec(m: &NodeClassModel) -> NodeClassSpec {
        m.spec()
    }

    fn from_live(cluster: &str, name: &str, spec: &NodeClassSpec, _obj: &Json) -> NodeClassModel {
        NodeClassModel::from_spec(cluster, name, spec)
    }

    fn agent_errors(spec: &NodeClassSpec) -> Vec<FieldError> {
        joiner_agent::api::validate::node_class(spec, "spec")
    }

    /// "role and instanceProfile are mutually exclusive" (or both missing) is about the
    /// spec; it points at role, once both are known.
    fn whole_spec_at(m: &NodeClassModel) -> Option<(&'static str, bool)> {
        Some(("role", m.role.is_known() && m.instance_profile.is_known()))
    }

    async fn plan(
        ctx: &ProviderContext,
        plan: &mut Plan,
        m: &NodeClassModel,
    ) -> Result<(), Diagnostics> {
        if plan.is_create() || plan.is_replace() || !plan.planned.is_fully_known() {
            return Ok(());
        }
        let prior = NodeClassModel::from_value(&plan.prior);
        let (mut a, mut b) = (prior.spec(), m.spec());
        if a.capacity_reservation_selector_terms != b.capacity_reservation_selector_terms {
            plan.warn(reservations_warning(m.name.as_deref().unwrap_or("")));
        }
        a.capacity_reservation_selector_terms.clear();
        b.capacity_reservation_selector_terms.clear();
        if a != b {
            if let (Some(c), Some(n)) = (&m.cluster_name, &m.name) {
                let path = first_changed(&plan.prior, &plan.planned);
                let preview = super::node_pool::preview::node_class(ctx, c, n, path).await;
                plan.warn(super::node_pool::preview::warning("NodeClass", n, preview));
            }
        }
        Ok(())
    }

    async fn deleting(_kube: &Kube, _name: &str, obj: &Json) -> String {
        let f = &obj["metadata"]["finalizers"];
        let why = "the agent releases them once no NodeClaim uses the class";
        format!("finalizers {f} ({why})")
    }
}

/// Karpenter's one instance-store policy.
fn instance_store_policy(v: &Value) -> Result<(), String> {
    match v.as_str() {
        None | Some("RAID0") => Ok(()),
        Some(s) => Err(format!(
            "{s:?} is not an instance store policy; allowed: RAID0"
        )),
    }
}

/// A change to the reservations a class selects drifts no node, unlike its other fields.
fn reservations_warning(name: &str) -> Diagnostic {
    Diagnostic::warning_at(
        "capacity_reservation_selector_term",
        "NodeClass capacity reservation selection changes",
        format!(
            "NodeClass {name}: the capacity reservations its pools launch into change \
             from the next NodeClaim on. No live node drifts for this (which \
             reservations a class selects is not part of its drift hash, as in \
             Karpenter); nodes in a reservation no longer selected keep running \
             until it ends."
        ),
    )
}

/// The first top-level input that differs between two states: what a NodeClass warning
/// points at (every change to the class drifts all its nodes alike).
fn first_changed(prior: &Value, planned: &Value) -> Option<AttributePath> {
    let Value::Object(attrs) = planned else {
        return None;
    };
    attrs
        .iter()
        .find(|(k, v)| !matches!(k.as_str(), "id" | "timeouts") && prior.get(k) != *v)
        .map(|(k, _)| AttributePath::new(k.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;
    use crate::model::node_class::*;

    fn full() -> NodeClassModel {
        let tags = || [("k".to_string(), "v".to_string())].into();
        NodeClassModel {
            id: Some("c:d".into()),
            cluster_name: Some("c".into()),
            name: Some("d".into()),
            role: Some("r".into()).into(),
            instance_profile: None.into(),
            user_data: Some("#!/bin/sh".into()),
            tags: tags(),
            associate_public_ip_address: Some(false),
            detailed_monitoring: Some(true),
            ami_selector_terms: vec![AmiTermModel {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            }],
            subnet_selector_terms: vec![SubnetTermModel {
                id: None,
                tags: tags(),
            }],
            security_group_selector_terms: vec![SecurityGroupTermModel {
                id: Some("sg-1".into()),
                name: None,
                tags: Default::default(),
            }],
            metadata_options: Some(MetadataOptionsModel {
                http_endpoint: Some("enabled".into()),
                http_protocol_ipv6: Some("enabled".into()),
                http_put_response_hop_limit: Some(2),
                http_tokens: Some("required".into()),
            }),
            block_device_mappings: vec![BlockDeviceModel {
                device_name: "/dev/xvda".into(),
                root_volume: Some(true),
                volume_size: Some("20Gi".into()),
                volume_type: Some("gp3".into()),
                iops: Some(3000),
                throughput: Some(125),
                encrypted: Some(false),
                kms_key_id: Some("k".into()),
                delete_on_termination: Some(false),
                snapshot_id: Some("snap-1".into()),
            }],
            instance_store_policy: Some("RAID0".into()),
            kubelet: Some(KubeletModel {
                max_pods: Some(110),
                pods_per_core: Some(10),
                system_reserved: [("cpu".to_string(), "100m".to_string())].into(),
                kube_reserved: [("memory".to_string(), "1Gi".to_string())].into(),
                eviction_hard: [("memory.available".to_string(), "5%".to_string())].into(),
                eviction_soft: Default::default(),
                eviction_soft_grace_period: Default::default(),
                eviction_max_pod_grace_period: Some(30),
                cluster_dns: vec!["10.0.0.10".into()],
            }),
            capacity_reservation_selector_terms: vec![
                ReservationTermModel {
                    id: Some("cr-0123456789abcdef0".into()),
                    ..Default::default()
                },
                ReservationTermModel {
                    id: None,
                    owner_id: Some("123456789012".into()),
                    instance_match_criteria: Some("targeted".into()),
                    tags: tags(),
                },
            ],
            timeouts: Value::Null,
        }
    }

    #[test]
    fn reservation_terms_errors_name_their_attribute() {
        let mut m = full();
        m.capacity_reservation_selector_terms[0].tags = [("a".to_string(), "b".to_string())].into();
        m.capacity_reservation_selector_terms[1].owner_id = Some("me".into());
        m.capacity_reservation_selector_terms[1].instance_match_criteria = Some("any".into());
        let d = NodeClass.validate(&m.to_value());
        let paths: Vec<String> = d
            .iter()
            .map(|d| d.path.clone().unwrap().to_string())
            .collect();
        for want in [
            "capacity_reservation_selector_term[0]",
            "capacity_reservation_selector_term[1].owner_id",
            "capacity_reservation_selector_term[1].instance_match_criteria",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
    }

    #[test]
    fn instance_store_policy_is_raid0_or_unset() {
        let mut m = full();
        assert_eq!(
            m.spec().instance_store_policy,
            Some(joiner_agent::api::node_class::InstanceStorePolicy::RAID0)
        );
        let raid = |v: &str| instance_store_policy(&Value::string(v));
        assert!(raid("RAID0").is_ok());
        assert!(raid("raid0").unwrap_err().contains("allowed: RAID0"));
        m.instance_store_policy = None;
        assert_eq!(m.spec().instance_store_policy, None);
    }

    #[test]
    fn model_matches_schema() {
        let r = NodeClass;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(NodeClassModel::from_value(&full().to_value()), full());
        let back = NodeClassModel::from_spec("c", "d", &full().spec());
        assert_eq!(back.spec(), full().spec());
    }

    #[test]
    fn agent_errors_carry_attribute_paths() {
        let mut m = full();
        m.metadata_options.as_mut().unwrap().http_tokens = Some("sometimes".into());
        m.block_device_mappings[0].volume_type = Some("gp9".into());
        m.kubelet.as_mut().unwrap().max_pods = Some(0);
        m.instance_profile = Some("p".into()).into();
        let d = NodeClass.validate(&m.to_value());
        let paths: Vec<String> = d
            .iter()
            .map(|d| d.path.clone().unwrap().to_string())
            .collect();
        for want in [
            "metadata_options.http_tokens",
            "block_device_mapping[0].volume_type",
            "kubelet.max_pods",
            "role",
        ] {
            assert!(paths.contains(&want.to_string()), "{want} not in {paths:?}");
        }
    }
}
