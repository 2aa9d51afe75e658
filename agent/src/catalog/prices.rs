//! EC2 prices: on-demand from an embedded table, Spot from DescribeSpotPriceHistory.
//!
//! Entry points:
//! - [`on_demand`]`(instance_type) -> Option<f64>`: USD per hour in us-east-1, from the
//!   public price list embedded at build time (`agent/data/ec2-ondemand-prices-us-east-1.csv`,
//!   1,367 types, July 2026). The agent cannot rely on the Pricing API (it is only served in
//!   a few regions and the emulator returns 500), so the table ships in the binary.
//! - [`SpotPrices`]: the latest price per (instance type, zone), built from the SDK's
//!   [`aws_sdk_ec2::types::SpotPrice`] records. On an account these are the only Spot
//!   prices: a type or zone missing from the history has no Spot market, so it gets no Spot
//!   offering at all ([`crate::catalog::SpotPricing::Observed`]).
//! - [`spot_model`], [`spot_fallback`]: the documented model, for what has no account
//!   behind it: benchmarks, synthetic catalogues, estimates made at plan time. The local
//!   AWS world serves the same model as its price history (`joiner_local.spot_prices`).
//!
//! ## Spot price model
//! The on-demand price times a fixed per-category factor (general purpose and compute 0.35,
//! memory 0.40, burstable 0.30, accelerated 0.45, anything else 0.40), times a per-zone
//! factor of 1 + 0.01 × (zone letter index mod 5) so that zones are not all exactly equal
//! and zone choice stays deterministic. The factors are round figures in line with the
//! usual 55–70 % Spot discount; they only steer preference between Spot offerings, and Spot
//! is never priced above on-demand by this model.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

const ON_DEMAND_CSV: &str = include_str!("../../data/ec2-ondemand-prices-us-east-1.csv");

fn table() -> &'static HashMap<&'static str, f64> {
    static TABLE: OnceLock<HashMap<&'static str, f64>> = OnceLock::new();
    TABLE.get_or_init(|| {
        ON_DEMAND_CSV
            .lines()
            .skip(1)
            .filter_map(|line| {
                let (name, price) = line.split_once(',')?;
                let p: f64 = price.trim().parse().ok()?;
                (p > 0.0).then_some((name.trim(), p))
            })
            .collect()
    })
}

/// On-demand price in USD per hour (us-east-1, Linux), or None when the type is unknown.
pub fn on_demand(instance_type: &str) -> Option<f64> {
    table().get(instance_type).copied()
}

/// Every instance type with a known on-demand price, sorted by name.
pub fn on_demand_types() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = table().keys().copied().collect();
    v.sort_unstable();
    v
}

/// The category letter(s) of an instance type name: `c` for `c5a.large`, `inf` for `inf2.xlarge`.
pub fn category_of(instance_type: &str) -> &str {
    let family = instance_type.split('.').next().unwrap_or(instance_type);
    let end = family
        .find(|c: char| c.is_ascii_digit() || c == '-')
        .unwrap_or(family.len());
    &family[..end]
}

/// The model's Spot factor for a category (see the module docs).
pub fn spot_factor(category: &str) -> f64 {
    match category {
        "c" | "m" => 0.35,
        "r" | "x" | "z" => 0.40,
        "t" => 0.30,
        "g" | "p" | "inf" | "trn" | "dl" | "vt" | "f" => 0.45,
        _ => 0.40,
    }
}

/// Modelled Spot price for a type in a zone, from its on-demand price.
pub fn spot_fallback(instance_type: &str, zone: &str) -> Option<f64> {
    let od = on_demand(instance_type)?;
    Some(spot_model(od, category_of(instance_type), zone))
}

/// The model itself, for callers that price types the table does not know.
pub fn spot_model(on_demand: f64, category: &str, zone: &str) -> f64 {
    let letter = zone
        .chars()
        .last()
        .filter(|c| c.is_ascii_lowercase())
        .unwrap_or('a');
    let zone_factor = 1.0 + 0.01 * (((letter as u32) - ('a' as u32)) % 5) as f64;
    on_demand * spot_factor(category) * zone_factor
}

/// Latest Spot prices per (instance type, zone).
#[derive(Debug, Clone, Default)]
pub struct SpotPrices {
    prices: BTreeMap<(String, String), (i64, f64)>,
}

impl SpotPrices {
    /// Builds the table from DescribeSpotPriceHistory records, keeping the newest price
    /// per type and zone. Records with unparsable or non-positive prices are skipped: they
    /// price nothing.
    pub fn from_ec2(history: &[aws_sdk_ec2::types::SpotPrice]) -> SpotPrices {
        let mut s = SpotPrices::default();
        for rec in history {
            let (Some(it), Some(zone), Some(price)) = (
                rec.instance_type().map(|t| t.as_str().to_string()),
                rec.availability_zone(),
                rec.spot_price().and_then(|p| p.parse::<f64>().ok()),
            ) else {
                continue;
            };
            let ts = rec.timestamp().map(|t| t.secs()).unwrap_or(0);
            s.insert(&it, zone, price, ts);
        }
        s
    }

    /// Records one price observed at `timestamp` (seconds); the newest wins.
    pub fn insert(&mut self, instance_type: &str, zone: &str, price: f64, timestamp: i64) {
        if !(price.is_finite() && price > 0.0) {
            return;
        }
        let key = (instance_type.to_string(), zone.to_string());
        match self.prices.get(&key) {
            Some((t, _)) if *t > timestamp => {}
            _ => {
                self.prices.insert(key, (timestamp, price));
            }
        }
    }

    pub fn get(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.prices
            .get(&(instance_type.to_string(), zone.to_string()))
            .map(|(_, p)| *p)
    }

    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// (type, zone) pairs with a price.
    pub fn len(&self) -> usize {
        self.prices.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table() {
        assert_eq!(on_demand("a1.large"), Some(0.051));
        assert!(on_demand("m5.large").unwrap() > 0.0);
        assert_eq!(on_demand("no.such"), None);
        assert!(on_demand_types().len() > 1300);
    }

    #[test]
    fn categories() {
        assert_eq!(category_of("c5a.large"), "c");
        assert_eq!(category_of("inf2.xlarge"), "inf");
        assert_eq!(category_of("m7i-flex.large"), "m");
        assert_eq!(category_of("u-6tb1.metal"), "u");
    }

    #[test]
    fn fallback_model() {
        let od = on_demand("m5.large").unwrap();
        let a = spot_fallback("m5.large", "us-east-1a").unwrap();
        let c = spot_fallback("m5.large", "us-east-1c").unwrap();
        assert!((a - od * 0.35).abs() < 1e-12);
        assert!((c - od * 0.35 * 1.02).abs() < 1e-12);
        assert!(c < od);
    }

    #[test]
    fn history_keeps_the_newest_price_and_skips_unusable_ones() {
        use aws_sdk_ec2::primitives::DateTime;
        use aws_sdk_ec2::types::{InstanceType, SpotPrice};
        let rec = |price: &str, ts: i64| {
            SpotPrice::builder()
                .instance_type(InstanceType::from("m5.large"))
                .availability_zone("us-east-1a")
                .spot_price(price)
                .timestamp(DateTime::from_secs(ts))
                .build()
        };
        let s = SpotPrices::from_ec2(&[
            rec("0.04", 10),
            rec("0.03", 20),
            rec("0.05", 5),
            rec("0", 30),
            rec("-1", 31),
            rec("NaN", 32),
            rec("cheap", 33),
        ]);
        assert_eq!(s.get("m5.large", "us-east-1a"), Some(0.03));
        assert_eq!(s.get("m5.large", "us-east-1b"), None, "no record, no price");
        // Small is not suspicious: a nano type's Spot price is a tenth of a cent.
        let s = SpotPrices::from_ec2(&[rec("0.000010", 1)]);
        assert_eq!(s.get("m5.large", "us-east-1a"), Some(0.00001));
    }
}
