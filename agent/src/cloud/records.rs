//! The plain data the EC2 cloud caches and its parts hand each other: resolved images,
//! the region's raw instance data, subnets, and a fetched-at wrapper. Kept apart from
//! `ec2.rs` (which holds the caches) and from `ami.rs`, `catalog.rs` and `discovery.rs`
//! (which fill them), so that neither side imports the other's module for a type.

use std::collections::BTreeMap;
use std::time::Instant;

use super::user_data::AmiFamily;
use crate::catalog::{InstanceTypeRecord, OfferingRecord, SpotPricing};

/// One image per EC2 architecture (`x86_64`, `arm64`), and how it joins the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAmis {
    pub family: AmiFamily,
    /// EC2 architecture -> image ID.
    pub images: BTreeMap<String, String>,
}

impl ResolvedAmis {
    /// The image for an instance type's Kubernetes architecture (`amd64`/`arm64`).
    pub fn for_kubernetes_arch(&self, arch: &str) -> Option<&str> {
        let ec2 = if arch == "amd64" { "x86_64" } else { arch };
        self.images.get(ec2).map(String::as_str)
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
