//! EC2 prices: on-demand from embedded per-Region tables, Spot from DescribeSpotPriceHistory.
//!
//! Entry points:
//! - [`OnDemandPrices::for_region`]`(region)`: the Region's on-demand table, Linux, shared
//!   tenancy, per hour, in the Region's own currency ([`Currency`]): CNY in the China
//!   Regions, USD elsewhere. DescribeSpotPriceHistory answers in that same currency (CNY in
//!   `cn-` Regions), so Spot and on-demand are only ever compared within one Region's table;
//!   Karpenter reads its price list in CNY for `cn-` Regions for the same reason
//!   (`pkg/providers/pricing/pricing.go`, `onDemandPage`). [`on_demand`]`(region, type)` is
//!   the shorthand.
//! - [`SpotPrices`]: the latest price per (instance type, zone), built from the SDK's
//!   [`aws_sdk_ec2::types::SpotPrice`] records. On an account these are the only Spot
//!   prices: a type or zone missing from the history has no Spot market, so it gets no Spot
//!   offering at all ([`crate::catalog::SpotPricing::Observed`]).
//! - [`spot_model`], [`spot_fallback`]: the documented model, for what has no account
//!   behind it: benchmarks, synthetic catalogues, estimates made at plan time. The local
//!   AWS world serves the same model as its price history (`joiner_local.spot_prices`).
//!
//! ## The tables
//! Embedded at build time from `agent/data/` (its README says where each comes from):
//! us-east-1 (USD, 1,367 types) from the public price list of July 2026; us-gov-east-1 and
//! us-gov-west-1 (USD) of 2026-07-20 and cn-north-1 (CNY) of 2024-11-06, the initial prices
//! Karpenter generates from the Pricing API. Each is parsed on first use only. Where the
//! agent may reach the Price List API it reads the Region's own list at start and every 12
//! hours, and those prices stand over the table's ([`OnDemandPrices::with_listed`],
//! `cloud::price_list`); in GovCloud, the isolated partitions and an isolated VPC the
//! tables alone price.
//!
//! Until then, a Region without a table of its own is priced from its partition's reference table, in
//! that partition's currency: `cn-` Regions (cn-northwest-1) from cn-north-1 in CNY, GovCloud
//! from us-gov-west-1, every other Region from us-east-1 in USD. This is what Karpenter does
//! until its Pricing API refresh answers (`Reset` falls back to us-east-1), except that a
//! China Region never falls back to USD: a CNY Spot history compared with USD on-demand
//! prices would make Spot look seven times dearer than it is. Such a table is an estimate
//! ([`OnDemandPrices::is_estimate`]; the agent logs it once at start): regional list prices
//! differ by a few tens of percent at most, which can misorder Spot against on-demand for
//! types whose Spot discount is small, but never hides a type nor mixes currencies.
//! Deriving no on-demand price at all there would leave every type without an offering.
//!
//! ## Spot price model
//! The on-demand price times a fixed per-category factor (general purpose and compute 0.35,
//! memory 0.40, burstable 0.30, accelerated 0.45, anything else 0.40), times a per-zone
//! factor of 1 + 0.01 × (zone letter index mod 5) so that zones are not all exactly equal
//! and zone choice stays deterministic. The factors are round figures in line with the
//! usual 55–70 % Spot discount; they only steer preference between Spot offerings, and Spot
//! is never priced above on-demand by this model. It is in the currency of the table it
//! starts from.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

/// The currency a Region's prices (on-demand list and Spot history alike) are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Currency {
    Usd,
    Cny,
}

impl Currency {
    /// The ISO 4217 code, as the price list keys its `pricePerUnit`.
    pub fn code(&self) -> &'static str {
        match self {
            Currency::Usd => "USD",
            Currency::Cny => "CNY",
        }
    }

    /// The currency of a Region's prices: CNY in the China Regions (`cn-`), USD elsewhere.
    pub fn of_region(region: &str) -> Currency {
        if region.starts_with("cn-") {
            Currency::Cny
        } else {
            Currency::Usd
        }
    }
}

/// One embedded table: `instance_type,<currency>_per_hour` lines under a header.
struct Table {
    region: &'static str,
    published: &'static str,
    csv: &'static str,
    parsed: OnceLock<HashMap<&'static str, f64>>,
}

impl Table {
    const fn new(region: &'static str, published: &'static str, csv: &'static str) -> Table {
        Table {
            region,
            published,
            csv,
            parsed: OnceLock::new(),
        }
    }

    fn prices(&self) -> &HashMap<&'static str, f64> {
        self.parsed.get_or_init(|| {
            self.csv
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
}

static US_EAST_1: Table = Table::new(
    "us-east-1",
    "2026-07",
    include_str!("../../data/ec2-ondemand-prices-us-east-1.csv"),
);
static US_GOV_WEST_1: Table = Table::new(
    "us-gov-west-1",
    "2026-07-20",
    include_str!("../../data/ec2-ondemand-prices-us-gov-west-1.csv"),
);
static US_GOV_EAST_1: Table = Table::new(
    "us-gov-east-1",
    "2026-07-20",
    include_str!("../../data/ec2-ondemand-prices-us-gov-east-1.csv"),
);
static CN_NORTH_1: Table = Table::new(
    "cn-north-1",
    "2024-11-06",
    include_str!("../../data/ec2-ondemand-prices-cn-north-1.csv"),
);

static TABLES: [&Table; 4] = [&US_EAST_1, &US_GOV_WEST_1, &US_GOV_EAST_1, &CN_NORTH_1];

/// A Region's on-demand prices: its own table, or its partition's reference table (see the
/// module docs), under the prices last read from the Region's price list when there are
/// any. Cheap to clone; each table is parsed once per process, on first use.
#[derive(Clone)]
pub struct OnDemandPrices {
    table: &'static Table,
    estimate: bool,
    listed: Option<Arc<ListedPrices>>,
}

/// Prices read from the AWS Price List Query API for the Region, in its currency.
#[derive(Debug)]
struct ListedPrices {
    prices: HashMap<String, f64>,
    /// When they were read (RFC 3339), for the operator.
    read_at: String,
}

impl std::fmt::Debug for OnDemandPrices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDemandPrices")
            .field("table", &self.table.region)
            .field("estimate", &self.estimate)
            .field(
                "listed",
                &self.listed.as_ref().map(|l| (l.prices.len(), &l.read_at)),
            )
            .field("currency", &self.currency())
            .finish()
    }
}

impl PartialEq for OnDemandPrices {
    fn eq(&self, other: &Self) -> bool {
        self.estimate == other.estimate
            && std::ptr::eq(self.table, other.table)
            && match (&self.listed, &other.listed) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

/// us-east-1's table: what benchmarks, synthetic catalogues and plan-time estimates use.
impl Default for OnDemandPrices {
    fn default() -> Self {
        OnDemandPrices::for_region("us-east-1")
    }
}

impl OnDemandPrices {
    pub fn for_region(region: &str) -> OnDemandPrices {
        if let Some(t) = TABLES.iter().find(|t| t.region == region) {
            return OnDemandPrices {
                table: t,
                estimate: false,
                listed: None,
            };
        }
        let table: &'static Table = if region.starts_with("cn-") {
            &CN_NORTH_1
        } else if region.starts_with("us-gov-") {
            &US_GOV_WEST_1
        } else {
            &US_EAST_1
        };
        OnDemandPrices {
            table,
            estimate: true,
            listed: None,
        }
    }

    /// These prices under `listed`, read from the Region's price list at `read_at`: a listed
    /// type takes the list's price, any other keeps the table's, as Karpenter keeps the
    /// prices it had for types an update does not mention (`UpdateOnDemandPricing`). Types
    /// only the list knows (sold in this Region, not in the table's) are priced too.
    pub fn with_listed(&self, listed: HashMap<String, f64>, read_at: &str) -> OnDemandPrices {
        let mut prices = self
            .listed
            .as_ref()
            .map(|l| l.prices.clone())
            .unwrap_or_default();
        prices.extend(listed);
        OnDemandPrices {
            table: self.table,
            estimate: self.estimate,
            listed: Some(Arc::new(ListedPrices {
                prices,
                read_at: read_at.to_string(),
            })),
        }
    }

    /// When the Region's price list was last read, if ever.
    pub fn listed_at(&self) -> Option<&str> {
        self.listed.as_ref().map(|l| l.read_at.as_str())
    }

    /// The price per hour in [`Self::currency`], or None when the table does not list the type.
    pub fn get(&self, instance_type: &str) -> Option<f64> {
        self.listed
            .as_ref()
            .and_then(|l| l.prices.get(instance_type))
            .or_else(|| self.table.prices().get(instance_type))
            .copied()
    }

    /// The Region whose table they come from (another Region's when [`Self::is_estimate`]).
    pub fn table_region(&self) -> &'static str {
        self.table.region
    }

    /// When the table was taken from the price list.
    pub fn published(&self) -> &'static str {
        self.table.published
    }

    pub fn currency(&self) -> Currency {
        Currency::of_region(self.table.region)
    }

    /// True when the Region has no table of its own and another Region's stands in, and its
    /// own price list has not been read.
    pub fn is_estimate(&self) -> bool {
        self.estimate && self.listed.is_none()
    }

    /// Every instance type the embedded table prices, sorted by name.
    pub fn types(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.table.prices().keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// On-demand price per hour in `region`'s currency (Linux), or None when the type is unknown.
pub fn on_demand(region: &str, instance_type: &str) -> Option<f64> {
    OnDemandPrices::for_region(region).get(instance_type)
}

/// Every instance type with a known on-demand price in us-east-1, sorted by name.
pub fn on_demand_types() -> Vec<&'static str> {
    OnDemandPrices::default().types()
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

/// Modelled Spot price for a type in a zone of `region`, from its on-demand price there (so
/// in the Region's currency).
pub fn spot_fallback(region: &str, instance_type: &str, zone: &str) -> Option<f64> {
    let od = on_demand(region, instance_type)?;
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
    fn listed_prices_replace_the_tables_and_keep_the_rest() {
        let table = OnDemandPrices::for_region("eu-west-1");
        assert!(table.is_estimate());
        let m5 = table.get("m5.large").unwrap();
        let listed = table.with_listed(
            HashMap::from([
                ("m5.large".to_string(), 0.107),
                ("x9.large".to_string(), 1.0),
            ]),
            "2026-12-03T08:00:00Z",
        );
        assert_eq!(listed.get("m5.large"), Some(0.107));
        assert_eq!(
            listed.get("x9.large"),
            Some(1.0),
            "a type only the list knows"
        );
        assert_eq!(listed.get("c5.large"), table.get("c5.large"));
        assert!(!listed.is_estimate());
        assert_eq!(listed.listed_at(), Some("2026-12-03T08:00:00Z"));
        assert_ne!(listed, table);
        // A later read that omits a type keeps its last listed price.
        let later = listed.with_listed(HashMap::from([("x9.large".to_string(), 2.0)]), "later");
        assert_eq!(later.get("m5.large"), Some(0.107));
        assert_eq!(later.get("x9.large"), Some(2.0));
        assert!(m5 > 0.0);
    }

    #[test]
    fn embedded_table() {
        assert_eq!(on_demand("us-east-1", "a1.large"), Some(0.051));
        assert!(on_demand("us-east-1", "m5.large").unwrap() > 0.0);
        assert_eq!(on_demand("us-east-1", "no.such"), None);
        assert!(on_demand_types().len() > 1300);
    }

    #[test]
    fn each_region_has_its_own_list_price() {
        // m5.large: 0.096 USD in us-east-1, 0.121 USD in GovCloud (US-West), 1.013 CNY in
        // Beijing, as the embedded tables say.
        let east = OnDemandPrices::for_region("us-east-1");
        let gov = OnDemandPrices::for_region("us-gov-west-1");
        let beijing = OnDemandPrices::for_region("cn-north-1");
        assert_eq!(east.get("m5.large"), Some(0.096));
        assert_eq!(gov.get("m5.large"), Some(0.121));
        assert_eq!(beijing.get("m5.large"), Some(1.013));
        assert_eq!(
            (east.currency(), gov.currency()),
            (Currency::Usd, Currency::Usd)
        );
        assert_eq!(beijing.currency(), Currency::Cny);
        assert_eq!(beijing.currency().code(), "CNY");
        for p in [&east, &gov, &beijing] {
            assert!(!p.is_estimate(), "{p:?} has a table of its own");
        }
        // A type sold in GovCloud and absent from the us-east-1 list is priced there.
        assert_eq!(east.get("hpc7a.96xlarge"), None);
        assert!(gov.get("hpc7a.96xlarge").is_some());
    }

    #[test]
    fn a_region_without_a_table_keeps_its_partitions_currency() {
        let ningxia = OnDemandPrices::for_region("cn-northwest-1");
        assert!(ningxia.is_estimate());
        assert_eq!(ningxia.table_region(), "cn-north-1");
        assert_eq!(
            ningxia.currency(),
            Currency::Cny,
            "never USD in a China Region"
        );
        let ireland = OnDemandPrices::for_region("eu-west-1");
        assert!(ireland.is_estimate());
        assert_eq!(ireland.table_region(), "us-east-1");
        assert_eq!(ireland.currency(), Currency::Usd);
        assert_eq!(
            OnDemandPrices::for_region("us-gov-east-2").table_region(),
            "us-gov-west-1"
        );
        assert_eq!(Currency::of_region("cn-northwest-1"), Currency::Cny);
    }

    #[test]
    fn a_cny_spot_history_is_compared_with_cny_list_prices() {
        // What DescribeSpotPriceHistory answers in Beijing: CNY. Against the us-east-1 USD
        // list (what the agent compared it with before it knew Regions) this Spot price
        // looks three times dearer than on-demand; against Beijing's CNY list it is the
        // usual discount.
        let mut spot = SpotPrices::default();
        spot.insert("m5.large", "cn-north-1a", 0.3039, 1);
        let observed = spot.get("m5.large", "cn-north-1a").unwrap();
        let usd = on_demand("us-east-1", "m5.large").unwrap();
        let cny = on_demand("cn-north-1", "m5.large").unwrap();
        assert!(
            observed > usd,
            "the currency mix-up: {observed} CNY vs {usd} USD"
        );
        assert!(observed < cny * 0.5, "{observed} CNY vs {cny} CNY");
        // The model follows the table's currency too.
        let modelled = spot_fallback("cn-north-1", "m5.large", "cn-north-1a").unwrap();
        assert!((modelled - cny * 0.35).abs() < 1e-12);
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
        let od = on_demand("us-east-1", "m5.large").unwrap();
        let a = spot_fallback("us-east-1", "m5.large", "us-east-1a").unwrap();
        let c = spot_fallback("us-east-1", "m5.large", "us-east-1c").unwrap();
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
