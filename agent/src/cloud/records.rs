//! The plain data the EC2 cloud caches and its parts hand each other: resolved images,
//! the region's raw instance data, subnets, and a fetched-at wrapper. Kept apart from
//! `ec2.rs` (which holds the caches) and from `ami.rs`, `catalog.rs` and `discovery.rs`
//! (which fill them), so that neither side imports the other's module for a type.

use std::time::Instant;

use super::user_data::AmiFamily;
use crate::api::NodeSelectorRequirementWithMinValues;
use crate::catalog::{InstanceTypeRecord, OfferingRecord, SpotPricing};
use crate::labels;

/// The kind of instance type an EKS-optimized image is built for, as the public parameter
/// it was read from says (Karpenter's AMI variants, `amifamily/types.go`): the standard
/// image has no accelerator driver, the `nvidia` one has the NVIDIA driver (G and P types),
/// the `neuron` one the Neuron driver (Inferentia and Trainium).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AmiVariant {
    Standard,
    Nvidia,
    Neuron,
}

impl AmiVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            AmiVariant::Standard => "standard",
            AmiVariant::Nvidia => "nvidia",
            AmiVariant::Neuron => "neuron",
        }
    }

    /// Whether an image of this variant is the one for `record`, by Karpenter's
    /// requirements: standard for types with neither GPUs nor accelerators, `nvidia` for
    /// types with GPUs, `neuron` for types with accelerators. The record's counts are
    /// exactly what decides whether the type carries the `instance-gpu-count` and
    /// `instance-accelerator-count` labels the requirements name ([`Self::requirements`]).
    pub fn serves(self, record: &InstanceTypeRecord) -> bool {
        match self {
            AmiVariant::Standard => record.gpu_count == 0 && record.accelerator_count == 0,
            AmiVariant::Nvidia => record.gpu_count > 0,
            AmiVariant::Neuron => record.accelerator_count > 0,
        }
    }

    /// The requirements on an instance type's labels that say the same as [`Self::serves`],
    /// as the NodeClass status lists them.
    pub fn requirements(self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let req = |key: &str, operator: &str| NodeSelectorRequirementWithMinValues {
            key: key.into(),
            operator: operator.into(),
            values: vec![],
            min_values: None,
        };
        match self {
            AmiVariant::Standard => vec![
                req(labels::INSTANCE_GPU_COUNT, "DoesNotExist"),
                req(labels::INSTANCE_ACCELERATOR_COUNT, "DoesNotExist"),
            ],
            AmiVariant::Nvidia => vec![req(labels::INSTANCE_GPU_COUNT, "Exists")],
            AmiVariant::Neuron => vec![req(labels::INSTANCE_ACCELERATOR_COUNT, "Exists")],
        }
    }
}

/// One image a NodeClass launches from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    pub id: String,
    /// EC2 architecture (`x86_64`, `arm64`).
    pub arch: String,
    /// The kinds of instance type it is for, when an alias's public parameter said so
    /// (one image may serve several: Bottlerocket's standard x86_64 image carries the
    /// Neuron driver). None for an image a term selected by ID, name or tags: it serves
    /// every type of its architecture.
    pub variants: Option<Vec<AmiVariant>>,
}

impl ResolvedImage {
    pub fn serves(&self, record: &InstanceTypeRecord) -> bool {
        record.architectures.contains(&self.arch)
            && self
                .variants
                .as_ref()
                .is_none_or(|vs| vs.iter().any(|v| v.serves(record)))
    }
}

/// The images a NodeClass resolves to, and how they join the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAmis {
    pub family: AmiFamily,
    /// In order of preference: an instance type launches from the first that serves it.
    pub images: Vec<ResolvedImage>,
}

impl ResolvedAmis {
    /// The image an instance type launches from (Karpenter's `MapToInstanceTypes`: the
    /// first image whose requirements the type meets), None when no image serves it.
    pub fn image_for(&self, record: &InstanceTypeRecord) -> Option<&ResolvedImage> {
        self.images.iter().find(|i| i.serves(record))
    }

    /// The status entries (Karpenter's `status.amis`): one per image and kind of instance
    /// type it serves, with the requirements that say which types those are, sorted by key
    /// length then key as Karpenter sorts them.
    pub fn status(&self) -> Vec<crate::api::node_class::ResolvedAmi> {
        let mut out = Vec::new();
        for image in &self.images {
            let arch = NodeSelectorRequirementWithMinValues {
                key: labels::ARCH.into(),
                operator: "In".into(),
                values: vec![if image.arch == "x86_64" {
                    "amd64".into()
                } else {
                    image.arch.clone()
                }],
                min_values: None,
            };
            let sets: Vec<Vec<NodeSelectorRequirementWithMinValues>> = match &image.variants {
                None => vec![vec![]],
                Some(vs) => vs.iter().map(|v| v.requirements()).collect(),
            };
            for extra in sets {
                let mut requirements = vec![arch.clone()];
                requirements.extend(extra);
                requirements.sort_by(|a, b| (a.key.len(), &a.key).cmp(&(b.key.len(), &b.key)));
                out.push(crate::api::node_class::ResolvedAmi {
                    id: image.id.clone(),
                    name: None,
                    requirements,
                });
            }
        }
        out
    }
}

/// The region's instance data as EC2 reported it.
#[derive(Debug, Clone, Default)]
pub struct RawCatalog {
    pub records: Vec<InstanceTypeRecord>,
    pub offerings: Vec<OfferingRecord>,
    /// [`SpotPricing::Observed`] once a price history has been read, [`SpotPricing::None`]
    /// until then: never the model.
    pub spot: SpotPricing,
    /// The Region's on-demand prices: its embedded table under what its price list said
    /// when last read.
    pub on_demand: crate::catalog::prices::OnDemandPrices,
    /// When the price list is next to be read (now when None).
    pub on_demand_due: Option<Instant>,
}

/// A subnet the NodeClass may launch into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub available_ips: i32,
}

/// A value with the time it was fetched.
pub(crate) struct Cached<T> {
    pub at: Instant,
    pub value: T,
}
