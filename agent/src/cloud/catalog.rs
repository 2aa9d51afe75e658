//! The per-NodeClass catalogue from EC2's raw data.
//!
//! DescribeInstanceTypes, DescribeInstanceTypeOfferings (by zone) and
//! DescribeSpotPriceHistory are region-wide and slow-moving, so they are fetched once per
//! `Ec2Options::catalog_ttl` and shared by every NodeClass; one caller refreshes while the
//! others wait for it rather than all asking EC2 at once. What is NodeClass-specific (the
//! zones of its subnets, its kubelet settings, the types its images serve) is applied
//! when one of those inputs changes; otherwise every caller (each scheduling round, each
//! launch) gets the catalogue built last time, whose types are shared, not copied (see
//! [`Catalog`]): a copy per launch in flight cost about 1.5 MB each, 95 MB with 64.

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_sdk_ec2::types::LocationType;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::price_list;
use super::records::Cached;
pub use super::records::RawCatalog;
use super::CloudError;
use crate::api::NodeClass;
use crate::catalog::prices::OnDemandPrices;
use crate::catalog::{
    Catalog, CatalogOptions, InstanceTypeRecord, OfferingRecord, SpotPrices, SpotPricing,
};

impl Ec2Cloud {
    pub(crate) async fn node_class_catalog(
        &self,
        node_class: &NodeClass,
    ) -> Result<Catalog, CloudError> {
        let subnets = self.subnets_for(node_class).await?;
        // A zone whose every subnet just ran out of addresses (CreateFleet's
        // InsufficientFreeAddressesInSubnet) is not offered until the mark expires, as
        // Karpenter leaves out a zone whose subnets are all marked.
        let zones: BTreeSet<&str> = subnets
            .iter()
            .filter(|s| !self.ice.subnet_unavailable(&s.id))
            .map(|s| s.zone.as_str())
            .collect();
        let raw = self.raw_catalog().await?;
        // Only types one of the NodeClass's images serves: its architectures, and for an
        // alias the variant a GPU or Neuron type needs. An unresolvable AMI is not the
        // catalogue's problem: launch reports it with the parameter or term that failed.
        let amis = match self.amis_for(node_class).await {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::warn!(error = %e, "AMI resolution failed; catalogue not narrowed by image");
                None
            }
        };
        let images: Option<Vec<(&str, &str, String)>> = amis.as_ref().map(|a| {
            a.images
                .iter()
                .map(|i| (i.id.as_str(), i.arch.as_str(), format!("{:?}", i.variants)))
                .collect()
        });
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
        // refresh makes a new one), the zones, the images, the kubelet settings and
        // the reservations (their places, and whether a block is still usable).
        let usable: Vec<(&str, u32)> = reservations
            .iter()
            .filter(|r| r.usable(now))
            .map(|r| (r.id.as_str(), r.available))
            .collect();
        let key = format!(
            "{:p}@{:?}|{zones:?}|{images:?}|{kubelet:?}|{usable:?}",
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
            .filter(|r| amis.as_ref().is_none_or(|a| a.image_for(r).is_some()))
            .cloned()
            .collect();
        let options = CatalogOptions {
            kubelet,
            spot: raw.value.spot.clone(),
            on_demand: raw.value.on_demand.clone(),
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
        let last = guard.as_ref().map(|c| &c.value);
        let fetched = Arc::new(Cached {
            at: now,
            value: self.fetch_raw(last).await?,
        });
        *guard = Some(fetched.clone());
        Ok(fetched)
    }

    /// `last`: the previous fetch, whose prices are kept when they cannot be read now
    /// (Karpenter keeps its last prices when an update fails, `pricing.go`).
    async fn fetch_raw(&self, last: Option<&RawCatalog>) -> Result<RawCatalog, CloudError> {
        let last_spot = last.map(|l| l.spot.clone());
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
        // A missing price means no Spot market, so prices are never made up here: without a
        // history (no permission, an error, an empty answer, which EC2 does not give where
        // Spot is sold and Karpenter also treats as a failure) the last one read is kept, and
        // before any was read there is no Spot offering. Karpenter prices Spot at the
        // on-demand list price until its first update; the agent reads the history before
        // it builds its first catalogue, so it has no such window to fill.
        let spot = match self.fetch_spot_prices().await {
            Ok(p) if !p.is_empty() => {
                tracing::debug!(priced = p.len(), "Spot price history read");
                SpotPricing::Observed(p)
            }
            outcome => {
                let why = match outcome {
                    Err(e) => e.to_string(),
                    Ok(_) => "the answer is empty".to_string(),
                };
                let kept = last_spot.unwrap_or(SpotPricing::None);
                if matches!(kept, SpotPricing::Observed(_)) {
                    tracing::warn!(error = %why, "Spot price history unavailable; keeping the prices read before");
                } else {
                    tracing::warn!(error = %why, "Spot price history unavailable; no Spot offering until it can be read");
                }
                kept
            }
        };
        let (on_demand, on_demand_due) = self.on_demand_prices(last).await;
        Ok(RawCatalog {
            records,
            offerings,
            spot,
            on_demand,
            on_demand_due,
        })
    }

    /// The Region's on-demand prices, and when to read the list next: the last ones until
    /// the read is due, then the list read again over them ([`price_list::REFRESH`] after a
    /// read, [`price_list::RETRY`] after a failure, which keeps what there was); the
    /// embedded table alone where the list cannot be asked. The read runs under the raw
    /// catalogue's lock, so the client's timeouts bound what a failing one costs a round.
    async fn on_demand_prices(
        &self,
        last: Option<&RawCatalog>,
    ) -> (OnDemandPrices, Option<std::time::Instant>) {
        let now = self.options.clock.now();
        let (kept, due) = match last {
            Some(l) => (l.on_demand.clone(), l.on_demand_due),
            None => (OnDemandPrices::for_region(&self.region), None),
        };
        let Some(client) = &self.price_list else {
            return (kept, due);
        };
        if due.is_some_and(|at| now < at) {
            return (kept, due);
        }
        match price_list::on_demand_prices(client, &self.region).await {
            Ok(listed) if !listed.is_empty() => {
                tracing::info!(
                    region = %self.region,
                    types = listed.len(),
                    "on-demand prices read from the price list"
                );
                let at = jiff::Timestamp::now().to_string();
                (
                    kept.with_listed(listed, &at),
                    Some(now + price_list::REFRESH),
                )
            }
            outcome => {
                let why = match outcome {
                    Err(e) => e.to_string(),
                    Ok(_) => "the answer is empty".to_string(),
                };
                tracing::warn!(
                    region = %self.region,
                    error = %why,
                    listed_at = kept.listed_at().unwrap_or("never"),
                    "the price list could not be read; keeping the on-demand prices there were, and asking again in an hour (--isolated-vpc where it cannot be reached)"
                );
                (kept, Some(now + price_list::RETRY))
            }
        }
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
