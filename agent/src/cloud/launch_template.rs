//! Launch templates: one per distinct set of launch inputs (NodeClass spec, image, security
//! groups, instance profile, user data with the NodePool's labels and taints and the
//! kubelet's max pods). A launch gets one template per image and max-pods figure its
//! candidate types need: per architecture, for an alias per variant (GPU and Neuron types
//! launch from their accelerated images), and per max pods, which the user data always
//! sets to the figure the scheduler counted for the type (as Karpenter's templates do).
//!
//! The name is `joiner/<cluster>/<nodeclass>/<hash of the inputs>`, so the same inputs always
//! find the same template (after a restart too) and changed inputs get a new one instead of a
//! new version that in-flight launches might pick up half-way. Templates are tagged with the
//! cluster, the NodeClass and a hash of the NodeClass spec; pruning deletes those whose
//! NodeClass is gone or whose spec has changed since, and those no launch has used for
//! [`TEMPLATE_TTL`]. Inputs change without the spec changing (a new AMI under
//! `al2023@latest`, a NodePool's labels or taints in the user data, a Kubernetes upgrade),
//! and every set of inputs gets its own template; kept until the NodeClass changes, they
//! would pile up to EC2's 5,000 templates per Region, which the whole account shares, and
//! then nothing launches. Karpenter keeps its templates in a cache whose entries expire a
//! minute after their last use and deletes each on expiry, those it finds at start-up
//! included (`pkg/providers/launchtemplate/launchtemplate.go`: `hydrateCache`,
//! `cachedEvictedFunc`; `pkg/cache/cache.go`: `DefaultTTL`). A template deleted between
//! the choice and the launch costs one retry: CreateFleet names it missing and the launch
//! makes it again (`forget_template`).
//!
//! Spot launches get templates of their own. A launch authorized as `ec2:RunInstances` on a
//! `spot-instances-request` needs that request tagged for the cluster (the agent's policy
//! grants launches only on tagged objects), and only a launch template can tag it: EC2
//! Fleet's own TagSpecifications take the fleet, instances and volumes. But a template
//! that tags a resource type the launched instance does not have fails the launch (EC2 API
//! reference, `LaunchTemplateTagSpecificationRequest`: "If the instance does not include
//! the resource type that you specify, the instance launch fails"), and an on-demand or
//! reserved instance has no Spot request. So a template used for Spot tags the Spot
//! request and is never used for another capacity type, as Karpenter keys its templates
//! by capacity type.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::builders::RequestLaunchTemplateDataBuilder;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget, Filter,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    RequestLaunchTemplateData, ResourceType, Tag, TagSpecification, VolumeType,
};
use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::ami::ResolvedImage;
use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::user_data::{self, AmiFamily, NodeBootstrap};
use super::{CloudError, LaunchRequest, ReservedLaunch, TAG_CLUSTER, TAG_NODECLASS};
use crate::api::node_class::{BlockDevice, BlockDeviceMapping, MetadataOptions};
use crate::api::NodeClass;
use crate::catalog::reservations::ReservationKind;
use crate::catalog::CapacityType;

/// How long a template may go unused before pruning deletes it: Karpenter's (a minute), so
/// that an idle cluster keeps no templates and a busy one only those it launches from.
pub const TEMPLATE_TTL: Duration = Duration::from_secs(60);

/// A template known to exist: its ID, and when a launch last used it (or pruning first
/// found it, so that one made by an earlier agent gets a full TTL too).
#[derive(Debug, Clone)]
pub(crate) struct KnownTemplate {
    pub id: String,
    pub used: Instant,
}

/// Tag with the hash of the NodeClass spec a template was made from.
pub const TAG_NODECLASS_HASH: &str = "joiner.dev/nodeclass-hash";

/// A template ready for CreateFleet, for one image and max-pods figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRef {
    pub id: String,
    pub name: String,
    /// EC2 architecture (`x86_64`, `arm64`).
    pub arch: String,
    pub image_id: String,
    /// The kubelet's max pods its user data sets.
    pub max_pods: u32,
}

/// What differs between the templates of one launch: the image a type boots and the max
/// pods its kubelet gets (per type, from its network interfaces, so a launch over several
/// types needs several templates).
/// Keys compare by image ID and max pods.
#[derive(Debug, Clone, Copy)]
pub struct TemplateKey<'a> {
    pub image: &'a ResolvedImage,
    pub max_pods: u32,
}

impl Ord for TemplateKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.image.id, self.max_pods).cmp(&(&other.image.id, other.max_pods))
    }
}

impl PartialEq for TemplateKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for TemplateKey<'_> {}

impl PartialOrd for TemplateKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Everything that goes into a template; its hash names the template.
#[derive(Debug, Serialize)]
struct TemplateInputs<'a> {
    cluster: &'a str,
    node_class: &'a str,
    image_id: &'a str,
    security_groups: &'a [String],
    instance_profile: &'a str,
    user_data: &'a str,
    block_devices: &'a [BlockDeviceMapping],
    metadata: &'a MetadataOptions,
    public_ip: Option<bool>,
    monitoring: Option<bool>,
    /// A `reserved` launch's target: only this reservation (`capacity-reservations-only`),
    /// with the market type a capacity block or an interruptible reservation needs. Left
    /// out of the hash when unset, so templates of classes without reservations keep their
    /// names.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation: Option<&'a ReservedLaunch>,
    /// The NodeClass selects reservations: its Spot and on-demand launches opt out of open
    /// reservations (`none`), so EC2 never puts them into one it did not select (Karpenter's
    /// rule; otherwise drift and the reservation's count would disagree with EC2's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    no_open_reservations: bool,
    /// A Spot launch's template: it also tags the Spot request (see the module docs). Left
    /// out of the hash otherwise, so on-demand and reserved templates keep their names.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    spot: bool,
}

fn short_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))[..16].to_string()
}

/// The hash of a NodeClass spec, as tagged on its templates.
pub fn spec_hash(node_class: &NodeClass) -> String {
    short_hash(
        serde_json::to_string(&node_class.spec)
            .unwrap_or_default()
            .as_bytes(),
    )
}

/// `joiner/<cluster>/<nodeclass>/<hash>`, cut to EC2's 128 characters keeping the hash.
pub fn template_name(cluster: &str, node_class: &str, hash: &str) -> String {
    let mut prefix = format!("joiner/{cluster}/{node_class}");
    let max = 128 - 1 - hash.len();
    if prefix.len() > max {
        prefix.truncate(max);
    }
    format!("{prefix}/{hash}")
}

/// The NodeClass's volumes, or the family's defaults: an encrypted gp3 root volume (20 GiB;
/// Bottlerocket: a 4 GiB OS volume plus a 20 GiB data volume).
pub fn block_devices(node_class: &NodeClass, family: AmiFamily) -> Vec<BlockDeviceMapping> {
    if !node_class.spec.block_device_mappings.is_empty() {
        return node_class.spec.block_device_mappings.clone();
    }
    let vol = |dev: &str, size: &str, root: bool| BlockDeviceMapping {
        device_name: dev.into(),
        ebs: Some(BlockDevice {
            volume_size: Some(size.into()),
            volume_type: Some("gp3".into()),
            encrypted: true,
            delete_on_termination: true,
            ..Default::default()
        }),
        root_volume: root,
    };
    match family {
        AmiFamily::Al2023 => vec![vol("/dev/xvda", "20Gi", true)],
        AmiFamily::Bottlerocket => {
            vec![
                vol("/dev/xvda", "4Gi", false),
                vol("/dev/xvdb", "20Gi", true),
            ]
        }
    }
}

/// A volume size quantity in GiB, rounded up (EC2 sizes volumes in GiB).
fn size_gib(q: &str) -> Option<i32> {
    let bytes = crate::resources::parse_bytes(q).ok()?;
    Some(((bytes + (1 << 30) - 1) >> 30) as i32)
}

fn ebs_request(b: &BlockDevice) -> LaunchTemplateEbsBlockDeviceRequest {
    LaunchTemplateEbsBlockDeviceRequest::builder()
        .set_volume_size(b.volume_size.as_deref().and_then(size_gib))
        .volume_type(VolumeType::from(b.volume_type.as_deref().unwrap_or("gp3")))
        .set_iops(b.iops.map(|v| v as i32))
        .set_throughput(b.throughput.map(|v| v as i32))
        .encrypted(b.encrypted)
        .set_kms_key_id(b.kms_key_id.clone())
        .delete_on_termination(b.delete_on_termination)
        .set_snapshot_id(b.snapshot_id.clone())
        .build()
}

fn metadata_options(m: &MetadataOptions) -> LaunchTemplateInstanceMetadataOptionsRequest {
    LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_tokens(LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
        .http_put_response_hop_limit(m.http_put_response_hop_limit as i32)
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            m.http_endpoint.as_str(),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            m.http_protocol_ipv6.as_str(),
        ))
        // Pinned off, as Karpenter does: left unset, an account whose instance-metadata
        // defaults allow tags in IMDS would apply that, and EC2 then refuses to launch an
        // instance with a `/` in a tag key (the EC2 user guide's IMDS tag restrictions),
        // as every one of ours has.
        .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
        .build()
}

/// A reserved launch's template targets its reservation only (a capacity block or an
/// interruptible reservation with its own market type); a NodeClass that selects
/// reservations keeps its other launches out of open ones.
fn with_reservation(
    data: RequestLaunchTemplateDataBuilder,
    inputs: &TemplateInputs<'_>,
) -> RequestLaunchTemplateDataBuilder {
    if let Some(r) = inputs.reservation {
        let data = data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(
                    CapacityReservationPreference::CapacityReservationsOnly,
                )
                .capacity_reservation_target(
                    CapacityReservationTarget::builder()
                        .capacity_reservation_id(&r.id)
                        .build(),
                )
                .build(),
        );
        let market = match (r.kind, r.interruptible) {
            (ReservationKind::CapacityBlock, _) => Some(MarketType::CapacityBlock),
            (_, true) => Some(MarketType::InterruptibleCapacityReservation),
            _ => None,
        };
        match market {
            Some(m) => data.instance_market_options(
                LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(m)
                    .build(),
            ),
            None => data,
        }
    } else if inputs.no_open_reservations {
        data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::None)
                .build(),
        )
    } else {
        data
    }
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

impl Ec2Cloud {
    /// The launch templates for a NodeClaim's launch as `capacity`, one per key of `keys`
    /// (the images and max pods its candidate types launch with), in that order; created
    /// when missing. `reservation`: the templates of a launch into that reservation. Spot has
    /// templates of its own (see the module docs).
    pub(crate) async fn ensure_templates(
        &self,
        request: &LaunchRequest,
        (family, keys): (AmiFamily, &[TemplateKey<'_>]),
        capacity: CapacityType,
        reservation: Option<&ReservedLaunch>,
    ) -> Result<Vec<TemplateRef>, CloudError> {
        let nc = &request.node_class;
        let nc_name = nc.metadata.name.clone().unwrap_or_default();
        let cluster = self.cluster_info().await?;
        let security_groups = self.security_groups_for(nc).await?;
        if security_groups.is_empty() {
            return Err(CloudError::new(
                "ec2:DescribeSecurityGroups",
                "NoSecurityGroupFound",
                format!(
                    "NodeClass {nc_name}: no security group matches its securityGroupSelectorTerms"
                ),
            ));
        }
        let instance_profile = nc
            .spec
            .instance_profile
            .clone()
            .or_else(|| nc.status.as_ref().and_then(|s| s.instance_profile.clone()))
            // joiner_node_role creates an instance profile named after the role.
            .or_else(|| nc.spec.role.clone())
            .unwrap_or_default();
        let mut taints = request.taints.clone();
        taints.extend(request.startup_taints.iter().cloned());
        let devices = block_devices(nc, family);
        let mut out = Vec::new();
        for key in keys {
            let image = key.image;
            // The max pods is always written, never left to the node's own computation.
            let mut kubelet = nc.spec.kubelet.clone().unwrap_or_default();
            kubelet.max_pods = Some(key.max_pods as i32);
            let ud = user_data::render(
                family,
                &NodeBootstrap {
                    cluster: &cluster,
                    labels: &request.labels,
                    taints: &taints,
                    kubelet: Some(&kubelet),
                    custom: nc.spec.user_data.as_deref(),
                    instance_store_raid0: nc.spec.instance_store_raid0(),
                },
            );
            let inputs = TemplateInputs {
                cluster: &cluster.name,
                node_class: &nc_name,
                image_id: &image.id,
                security_groups: &security_groups,
                instance_profile: &instance_profile,
                user_data: &ud,
                block_devices: &devices,
                metadata: &nc.spec.metadata_options,
                public_ip: nc.spec.associate_public_ip_address,
                monitoring: nc.spec.detailed_monitoring,
                reservation,
                no_open_reservations: reservation.is_none()
                    && !nc.spec.capacity_reservation_selector_terms.is_empty(),
                spot: capacity == CapacityType::Spot,
            };
            let hash = short_hash(
                serde_json::to_string(&inputs)
                    .unwrap_or_default()
                    .as_bytes(),
            );
            let name = template_name(&cluster.name, &nc_name, &hash);
            let now = self.options.clock.now();
            let known = self
                .templates
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&name)
                .map(|t| {
                    t.used = now;
                    t.id.clone()
                });
            let id = match known {
                Some(id) => id,
                None => {
                    let id = match self.find_template(&name).await? {
                        Some(id) => id,
                        None => self.create_template(&name, nc, &inputs).await?,
                    };
                    self.templates
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(
                            name.clone(),
                            KnownTemplate {
                                id: id.clone(),
                                used: now,
                            },
                        );
                    id
                }
            };
            out.push(TemplateRef {
                id,
                name,
                arch: image.arch.clone(),
                image_id: image.id.clone(),
                max_pods: key.max_pods,
            });
        }
        Ok(out)
    }

    /// Forgets a template the cache believed in (CreateFleet said it is gone).
    pub(crate) fn forget_template(&self, id: &str) {
        self.templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, v| v.id != id);
    }

    async fn find_template(&self, name: &str) -> Result<Option<String>, CloudError> {
        match self
            .ec2
            .describe_launch_templates()
            .launch_template_names(name)
            .send()
            .await
            .cloud("ec2:DescribeLaunchTemplates")
        {
            Ok(out) => Ok(out
                .launch_templates()
                .first()
                .and_then(|t| t.launch_template_id())
                .map(str::to_string)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_template(
        &self,
        name: &str,
        nc: &NodeClass,
        inputs: &TemplateInputs<'_>,
    ) -> Result<String, CloudError> {
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(self.template_data(inputs))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(self.template_tags(nc, inputs)))
                    .build(),
            )
            .send()
            .await
            .cloud("ec2:CreateLaunchTemplate");
        match created {
            Ok(out) => out
                .launch_template()
                .and_then(|t| t.launch_template_id())
                .map(str::to_string)
                .ok_or_else(|| {
                    CloudError::new(
                        "ec2:CreateLaunchTemplate",
                        "Unknown",
                        "no launch template ID in the answer",
                    )
                }),
            // Another replica (or an earlier attempt) made it first.
            Err(e) if e.code.contains("AlreadyExists") => self.find_template(name).await?.ok_or(e),
            Err(e) => Err(e),
        }
    }

    /// What an instance launched from the template gets: image, user data, metadata
    /// options, disks, instance profile, reservation, monitoring, network, and the tags of
    /// the resources a launch creates besides the instance.
    fn template_data(&self, inputs: &TemplateInputs<'_>) -> RequestLaunchTemplateData {
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(inputs.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(inputs.user_data))
            .metadata_options(metadata_options(inputs.metadata))
            .set_block_device_mappings(Some(
                inputs
                    .block_devices
                    .iter()
                    .map(|b| {
                        LaunchTemplateBlockDeviceMappingRequest::builder()
                            .device_name(&b.device_name)
                            .set_ebs(b.ebs.as_ref().map(ebs_request))
                            .build()
                    })
                    .collect(),
            ));
        if !inputs.instance_profile.is_empty() {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(inputs.instance_profile)
                    .build(),
            );
        }
        data = with_reservation(data, inputs);
        if let Some(on) = inputs.monitoring {
            data = data.monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(on)
                    .build(),
            );
        }
        data = match inputs.public_ip {
            // The public-IP choice lives on the network interface, and then so must the groups.
            Some(public) => data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(inputs.security_groups.to_vec()))
                    .build(),
            ),
            None => data.set_security_group_ids(Some(inputs.security_groups.to_vec())),
        };
        // The network interface and the Spot request a launch creates cannot be tagged
        // through CreateFleet; the agent's policy only lets it create tagged ones, so the
        // template tags them (the Spot request only in a Spot template: see the module docs).
        let launched = |kind: ResourceType| {
            crate::api::tags::ownership(&self.options.cluster_name)
                .iter()
                .fold(
                    LaunchTemplateTagSpecificationRequest::builder().resource_type(kind),
                    |b, (k, v)| b.tags(tag(k, v)),
                )
                .tags(tag(TAG_NODECLASS, inputs.node_class))
                .build()
        };
        data = data.tag_specifications(launched(ResourceType::NetworkInterface));
        if inputs.spot {
            data = data.tag_specifications(launched(ResourceType::SpotInstancesRequest));
        }
        data.build()
    }

    /// The template's own tags: the cluster, the NodeClass and its spec's hash (which
    /// pruning compares), then the NodeClass's tags except any in joiner's namespace.
    fn template_tags(&self, nc: &NodeClass, inputs: &TemplateInputs<'_>) -> Vec<Tag> {
        let mut tags = vec![
            tag(TAG_CLUSTER, &self.options.cluster_name),
            tag(TAG_NODECLASS, inputs.node_class),
            tag(TAG_NODECLASS_HASH, &spec_hash(nc)),
        ];
        for (k, v) in &nc.spec.tags {
            if !k.starts_with("joiner.dev/") {
                tags.push(tag(k, v));
            }
        }
        tags
    }

    /// Deletes this cluster's templates whose NodeClass is not in `in_use`, whose NodeClass
    /// spec has changed since they were made, or that no launch has used for
    /// [`Ec2Options::template_ttl`](super::Ec2Options::template_ttl).
    pub(crate) async fn prune_templates(&self, in_use: &[NodeClass]) -> Result<(), CloudError> {
        let now = self.options.clock.now();
        let current: BTreeMap<String, String> = in_use
            .iter()
            .map(|nc| (nc.metadata.name.clone().unwrap_or_default(), spec_hash(nc)))
            .collect();
        let mut doomed = Vec::new();
        let mut listed = 0usize;
        let mut pages = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:{TAG_CLUSTER}"))
                    .values(&self.options.cluster_name)
                    .build(),
            )
            // EC2's page maximum. The emulator (moto) returns 15 templates when none is
            // given, with no NextToken: the rest were never pruned.
            .max_results(200)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("ec2:DescribeLaunchTemplates")?;
            for t in page.launch_templates() {
                listed += 1;
                let tags: BTreeMap<&str, &str> = t
                    .tags()
                    .iter()
                    .filter_map(|t| Some((t.key()?, t.value()?)))
                    .collect();
                if tags.get(TAG_CLUSTER) != Some(&self.options.cluster_name.as_str()) {
                    continue;
                }
                let current_spec = tags
                    .get(TAG_NODECLASS)
                    .and_then(|nc| current.get(*nc))
                    .is_some_and(|h| tags.get(TAG_NODECLASS_HASH) == Some(&h.as_str()));
                let keep = current_spec
                    && t.launch_template_name()
                        .zip(t.launch_template_id())
                        .is_some_and(|(name, id)| self.used_lately(name, id, now));
                if !keep {
                    if let Some(id) = t.launch_template_id() {
                        doomed.push(id.to_string());
                    }
                }
            }
        }
        if !doomed.is_empty() {
            tracing::info!(listed, deleting = doomed.len(), "pruning launch templates");
        }
        let gone: HashSet<String> = doomed.iter().cloned().collect();
        for id in &doomed {
            match self
                .ec2
                .delete_launch_template()
                .launch_template_id(id)
                .send()
                .await
                .cloud("ec2:DeleteLaunchTemplate")
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    // Those deleted already must not stay cached as if they existed.
                    self.forget_templates(&gone, Some(id));
                    return Err(e);
                }
            }
        }
        self.forget_templates(&gone, None);
        Ok(())
    }

    /// Drops the cached templates among `ids`, except `kept` (one whose delete failed).
    fn forget_templates(&self, ids: &HashSet<String>, kept: Option<&String>) {
        self.templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, t| !ids.contains(&t.id) || kept == Some(&t.id));
    }

    /// Whether a launch used the template within the TTL. One the agent has not seen yet
    /// (made before it started, or by another replica) starts its TTL now.
    fn used_lately(&self, name: &str, id: &str, now: Instant) -> bool {
        let mut known = self.templates.lock().unwrap_or_else(|e| e.into_inner());
        let entry = known
            .entry(name.to_string())
            .or_insert_with(|| KnownTemplate {
                id: id.to_string(),
                used: now,
            });
        // A template of that name made again elsewhere is a new one: its TTL starts now.
        if entry.id != id {
            *entry = KnownTemplate {
                id: id.to_string(),
                used: now,
            };
        }
        now.saturating_duration_since(entry.used) <= self.options.template_ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_hash_within_128_characters() {
        assert_eq!(
            template_name("prod", "default", "0123456789abcdef"),
            "joiner/prod/default/0123456789abcdef"
        );
        let long = template_name(&"c".repeat(100), &"n".repeat(60), "0123456789abcdef");
        assert_eq!(long.len(), 128);
        assert!(long.ends_with("/0123456789abcdef"));
    }

    #[test]
    fn default_volumes_are_encrypted_gp3() {
        let nc = NodeClass::new("default", Default::default());
        for family in [AmiFamily::Al2023, AmiFamily::Bottlerocket] {
            for d in block_devices(&nc, family) {
                let ebs = d.ebs.unwrap();
                assert!(ebs.encrypted);
                assert_eq!(ebs.volume_type.as_deref(), Some("gp3"));
            }
        }
        assert_eq!(size_gib("20Gi"), Some(20));
        assert_eq!(size_gib("20G"), Some(19), "20e9 bytes round up to 19 GiB");
    }

    /// Bottlerocket keeps its OS on a small /dev/xvda and the kubelet's and containerd's
    /// data on /dev/xvdb (Karpenter's `DefaultBlockDeviceMappings`,
    /// `pkg/providers/amifamily/bottlerocket.go`); AL2023 has one root volume.
    #[test]
    fn bottlerocket_maps_an_os_volume_and_a_data_volume() {
        let nc = NodeClass::new("default", Default::default());
        let sizes = |family| -> Vec<(String, Option<i32>, bool)> {
            block_devices(&nc, family)
                .iter()
                .map(|d| {
                    let ebs = ebs_request(d.ebs.as_ref().unwrap());
                    (
                        d.device_name.clone(),
                        ebs.volume_size(),
                        ebs.encrypted() == Some(true),
                    )
                })
                .collect()
        };
        assert_eq!(
            sizes(AmiFamily::Bottlerocket),
            [
                ("/dev/xvda".to_string(), Some(4), true),
                ("/dev/xvdb".to_string(), Some(20), true)
            ]
        );
        assert_eq!(
            sizes(AmiFamily::Al2023),
            [("/dev/xvda".to_string(), Some(20), true)]
        );
        // The data volume is the one whose size the scheduler counts as ephemeral storage.
        let mut br = NodeClass::new("br", Default::default());
        br.spec.ami_selector_terms = vec![crate::api::node_class::AmiSelectorTerm {
            alias: Some("bottlerocket@latest".into()),
            ..Default::default()
        }];
        br.spec.block_device_mappings = block_devices(&br, AmiFamily::Bottlerocket);
        br.spec.block_device_mappings[1].root_volume = false;
        br.spec.block_device_mappings[1]
            .ebs
            .as_mut()
            .unwrap()
            .volume_size = Some("60Gi".into());
        assert_eq!(br.spec.node_disk().volume_bytes, 60 << 30);
    }
}
