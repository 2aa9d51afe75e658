//! The per-NodeClass catalogue from EC2's raw data.
//!
//! DescribeInstanceTypes, DescribeInstanceTypeOfferings (by zone) and
//! DescribeSpotPriceHistory are region-wide and slow-moving, so they are fetched once per
//! `Ec2Options::catalog_ttl` and shared by every NodeClass; one caller refreshes while the
//! others wait for it rather than all asking EC2 at once. What is NodeClass-specific (the
//! zones of its subnets, its kubelet settings, the architectures its AMIs cover) is applied
//! when one of those inputs changes; otherwise every caller (each scheduling round, each
//! launch) gets the catalogue built last time, whose types are shared, not copied (see
//! [`Catalog`]): a copy per launch in flight cost about 1.5 MB each, 95 MB with 64.

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_sdk_ec2::types::LocationType;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::records::Cached;
pub use super::records::RawCatalog;
use super::CloudError;
use crate::api::NodeClass;
use crate::catalog::{Catalog, CatalogOptions, InstanceTypeRecord, OfferingRecord, SpotPrices};

impl Ec2Cloud {
    pub(crate) async fn node_class_catalog(
        &self,
        node_class: &NodeClass,
    ) -> Result<Catalog, CloudError> {
        let subnets = self.subnets_for(node_class).await?;
        let zones: BTreeSet<&str> = subnets.iter().map(|s| s.zone.as_str()).collect();
        let raw = self.raw_catalog().await?;
        // Only architectures the NodeClass has an image for. An unresolvable AMI is not
        // the catalogue's problem: launch reports it with the parameter or term that failed.
        let archs: Option<BTreeSet<String>> = match self.amis_for(node_class).await {
            Ok(a) => Some(a.images.keys().cloned().collect()),
            Err(e) => {
                tracing::warn!(error = %e, "AMI resolution failed; catalogue not narrowed by architecture");
                None
            }
        };
        let kubelet = node_class.spec.kubelet_settings();
        // Reservations move with every launch; without them (no permission, a throttled
        // call) the class still has the market.
        let reservations = match self.reservations_for(node_class).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "capacity reservations unavailable; launching without them");
                Vec::new()
            }
        };
        let now = jiff::Timestamp::now().as_second();
        // What the catalogue is built from: the raw data's fetch (its address and time: a
        // refresh makes a new one), the zones, the architectures, the kubelet settings and
        // the reservations (their places, and whether a block is still usable).
        let usable: Vec<(&str, u32)> = reservations
            .iter()
            .filter(|r| r.usable(now))
            .map(|r| (r.id.as_str(), r.available))
            .collect();
        let key = format!(
            "{:p}@{:?}|{zones:?}|{archs:?}|{kubelet:?}|{usable:?}",
            Arc::as_ptr(&raw),
            raw.at,
        );
        let class = node_class.metadata.name.clone().unwrap_or_default();
        if let Some((k, c)) = self.catalogs.lock().unwrap().get(&class) {
            if *k == key {
                return Ok(c.clone());
            }
        }
        let offerings: Vec<OfferingRecord> = raw
            .value
            .offerings
            .iter()
            .filter(|o| zones.contains(o.zone.as_str()))
            .cloned()
            .collect();
        let records: Vec<InstanceTypeRecord> = raw
            .value
            .records
            .iter()
            .filter(|r| {
                archs
                    .as_ref()
                    .is_none_or(|a| r.architectures.iter().any(|x| a.contains(x)))
            })
            .cloned()
            .collect();
        let options = CatalogOptions {
            kubelet,
            spot_prices: raw.value.spot_prices.clone(),
            no_spot: false,
        };
        let catalog = Catalog::from_records(records, &offerings, &options);
        let catalog = crate::catalog::reservations::add(&catalog, &reservations, &class, now);
        self.catalogs
            .lock()
            .unwrap()
            .insert(class, (key, catalog.clone()));
        Ok(catalog)
    }

    /// The cached raw data, refreshed when older than the TTL.
    pub(crate) async fn raw_catalog(&self) -> Result<Arc<Cached<RawCatalog>>, CloudError> {
        let mut guard = self.raw.lock().await;
        let now = self.options.clock.now();
        if let Some(c) = guard.as_ref() {
            if now.duration_since(c.at) < self.options.catalog_ttl {
                return Ok(c.clone());
            }
        }
        let fetched = Arc::new(Cached {
            at: now,
            value: self.fetch_raw().await?,
        });
        *guard = Some(fetched.clone());
        Ok(fetched)
    }

    async fn fetch_raw(&self) -> Result<RawCatalog, CloudError> {
        let mut records = Vec::new();
        let mut pages = self
            .ec2
            .describe_instance_types()
            .max_results(100)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("ec2:DescribeInstanceTypes")?;
            records.extend(
                page.instance_types()
                    .iter()
                    .filter_map(InstanceTypeRecord::from_ec2),
            );
        }
        let mut offerings = Vec::new();
        let mut pages = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .max_results(1000)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("ec2:DescribeInstanceTypeOfferings")?;
            offerings.extend(
                page.instance_type_offerings()
                    .iter()
                    .filter_map(OfferingRecord::from_ec2),
            );
        }
        let spot_prices = match self.fetch_spot_prices().await {
            Ok(p) => p,
            Err(e) => {
                // Without Spot prices the documented model still orders Spot offerings.
                tracing::warn!(error = %e, "Spot price history unavailable; using the price model");
                SpotPrices::default()
            }
        };
        Ok(RawCatalog {
            records,
            offerings,
            spot_prices,
        })
    }

    async fn fetch_spot_prices(&self) -> Result<SpotPrices, CloudError> {
        let mut history = Vec::new();
        let start =
            aws_sdk_ec2::primitives::DateTime::from_secs(jiff::Timestamp::now().as_second());
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .start_time(start)
            .max_results(1000)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("ec2:DescribeSpotPriceHistory")?;
            history.extend(page.spot_price_history().iter().cloned());
        }
        Ok(SpotPrices::from_ec2(&history))
    }
}
