//! The instance catalogue: every instance type with its labels, capacity, allocatable and
//! priced offerings (zone × capacity type).
//!
//! Entry points (stable; the provider's `joiner_instance_types` data source uses them):
//! - [`Catalog::from_ec2`]`(types, offerings)`: from the SDK's DescribeInstanceTypes and
//!   DescribeInstanceTypeOfferings items, with on-demand prices from the Region's embedded
//!   table ([`prices::OnDemandPrices`], us-east-1's by default) and Spot prices from the documented model
//!   ([`prices::spot_model`]); [`Catalog::from_ec2_with`] takes [`CatalogOptions`]
//!   (where Spot prices come from, kubelet settings). The agent on an account builds its
//!   catalogue with [`SpotPricing::Observed`] only: it never invents a Spot price.
//! - [`Catalog::from_dump`]: the same from a committed JSON dump ([`Ec2Dump`]).
//! - [`Catalog::filter`]`(&Requirements)`: the types (and offerings) a set of NodePool
//!   requirements allows, sorted by name.
//! - [`InstanceType`]: `name`, `labels`, `capacity`, `allocatable`, `offerings`,
//!   [`InstanceType::cheapest_price`].

pub mod allocatable;
pub mod daemonsets;
pub mod instance_types;
pub mod kwok;
pub mod max_pods;
pub mod overlay;
pub mod prices;
pub mod reservations;
pub mod volume_limits;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::labels;
use crate::requirements::Requirements;
use crate::resources::Resources;

pub use allocatable::{KubeletSettings, NodeDisk};
pub use instance_types::{Ec2Dump, InstanceTypeRecord, OfferingRecord};
pub use prices::SpotPrices;

/// Spot, on-demand or reserved, with Karpenter's label values. The order is the order of
/// preference when several are allowed: Spot, then on-demand; reserved capacity sorts last
/// here but is chosen first by price (it is priced near zero, see [`reservations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapacityType {
    Spot,
    OnDemand,
    /// An EC2 capacity reservation (ODCR or capacity block) a NodeClass selects.
    Reserved,
}

impl CapacityType {
    pub fn as_str(&self) -> &'static str {
        match self {
            CapacityType::Spot => labels::CAPACITY_TYPE_SPOT,
            CapacityType::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
            CapacityType::Reserved => labels::CAPACITY_TYPE_RESERVED,
        }
    }

    pub fn parse(s: &str) -> Option<CapacityType> {
        match s {
            labels::CAPACITY_TYPE_SPOT => Some(CapacityType::Spot),
            labels::CAPACITY_TYPE_ON_DEMAND => Some(CapacityType::OnDemand),
            labels::CAPACITY_TYPE_RESERVED => Some(CapacityType::Reserved),
            _ => None,
        }
    }
}

/// The EC2 vCPU quota an instance type counts against, within its capacity type. EC2 sets
/// Spot and on-demand vCPU quotas per group of families ("All Standard (A, C, D, H, I, M,
/// R, T, Z) Spot Instance Requests", "All G and VT ...", and so on: the EC2 user guide's
/// Spot Instance quotas page; on-demand's "Running On-Demand ... instances" quotas are
/// taken to group the same way, not verified against their own page), so a quota refusal
/// for one type holds for every type of its group and for no other. P is one group here
/// although Spot splits P5 from P4, P3 and P2.
pub fn vcpu_quota_group(instance_type: &str) -> &'static str {
    match prices::category_of(instance_type) {
        "dl" => "dl",
        "f" => "f",
        "g" | "gr" | "vt" => "g-vt",
        "inf" => "inf",
        "p" => "p",
        "trn" => "trn",
        "x" => "x",
        "u" => "high-memory",
        "hpc" => "hpc",
        "mac" => "mac",
        _ => "standard",
    }
}

/// A place and way to buy an instance type, with its price per hour in the Region's currency
/// (USD, or CNY in the China Regions: [`prices::Currency`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
    /// The capacity reservation behind a `Reserved` offering. Boxed: a catalogue holds
    /// tens of thousands of offerings and almost none is reserved, so inline the field
    /// would more than double every offering's size.
    pub reservation: Option<Box<reservations::ReservedOffering>>,
}

impl Offering {
    /// The offering's value of a capacity-reservation label (none unless reserved).
    pub fn reservation_label(&self, key: &str) -> Option<&str> {
        let r = self.reservation.as_ref()?;
        match key {
            labels::CAPACITY_RESERVATION_ID => Some(&r.id),
            labels::CAPACITY_RESERVATION_TYPE => Some(r.kind.as_str()),
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE => {
                Some(if r.interruptible { "true" } else { "false" })
            }
            _ => None,
        }
    }
}

/// One instance type as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub record: InstanceTypeRecord,
    /// Well-known labels (not zone or capacity type, which depend on the offering).
    pub labels: BTreeMap<String, String>,
    /// What the kubelet reports as capacity (memory after the VM overhead).
    pub capacity: Resources,
    /// Capacity minus reservations and eviction threshold, before DaemonSets.
    pub allocatable: Resources,
    /// Sorted by capacity type (Spot first), then zone.
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// Builds a type from its record and offerings, computing capacity and allocatable
    /// with `settings` (max pods: record override, then settings override, then ENIs).
    pub fn new(
        record: InstanceTypeRecord,
        mut offerings: Vec<Offering>,
        settings: &KubeletSettings,
    ) -> InstanceType {
        let max_pods = record.kubelet_max_pods(settings);
        let mut capacity =
            allocatable::capacity(record.vcpus, record.memory_mib, max_pods, settings);
        if record.gpu_count > 0 {
            let key = match record.gpu_manufacturer.to_ascii_lowercase().as_str() {
                "amd" => "amd.com/gpu",
                _ => crate::resources::NVIDIA_GPU,
            };
            capacity
                .extended
                .insert(key.to_string(), record.gpu_count as i64);
        }
        // Neuron devices (the record names AWS as the maker of Inferentia and Trainium
        // only), counted as Karpenter counts `aws.amazon.com/neuron` (`instancetype/types.go`).
        if record.accelerator_count > 0 && record.accelerator_manufacturer == "AWS" {
            capacity.extended.insert(
                crate::resources::AWS_NEURON.to_string(),
                record.accelerator_count as i64,
            );
        }
        // The kubelet's disk, not the instance store: that is the kubelet's only when the
        // NodeClass asks for it to be striped and mounted (`instanceStorePolicy: RAID0`).
        capacity.ephemeral_storage_bytes = settings.disk.capacity_bytes(record.local_storage_gb);
        let allocatable =
            allocatable::allocatable(&capacity, record.vcpus, record.eni_max_pods(), settings);
        offerings.sort_by(|a, b| (a.capacity_type, &a.zone).cmp(&(b.capacity_type, &b.zone)));
        InstanceType {
            name: record.name.clone(),
            labels: record.labels(),
            record,
            capacity,
            allocatable,
            offerings,
        }
    }

    /// Whether the type is bought for hardware ordinary pods do not use: GPUs, Inferentia
    /// and Trainium (their accelerator counts), other accelerators EC2 does not count (FPGAs,
    /// video transcoders, Gaudi: their families exist only for them) or a whole bare-metal
    /// host. Such a type also fits CPU pods, at many times the price of an ordinary one.
    pub fn is_exotic(&self) -> bool {
        const ACCELERATOR_FAMILIES: &[&str] = &["inf", "trn", "f1", "f2", "vt1", "dl1", "dl2q"];
        let family = self
            .labels
            .get(crate::labels::INSTANCE_FAMILY)
            .map(String::as_str)
            .unwrap_or("");
        self.record.gpu_count > 0
            || self.record.accelerator_count > 0
            || self.record.bare_metal
            || self.name.contains(".metal")
            || ACCELERATOR_FAMILIES
                .iter()
                .any(|f| family == *f || (f.len() == 3 && family.starts_with(f)))
    }

    /// Allocatable under different kubelet settings (a NodeClass's overrides). Without
    /// overrides it is the type's own figure, as the scheduler's pools take it: a catalogue
    /// whose nodes are not EKS's (the KWOK world's, [`kwok`]) states its allocatable there,
    /// and recomputing it with EKS's reservations would plan against nodes that do not exist.
    pub fn allocatable_with(&self, settings: &KubeletSettings) -> Resources {
        if *settings == KubeletSettings::default() {
            return self.allocatable.clone();
        }
        allocatable::allocatable(
            &self.capacity_with(settings),
            self.record.vcpus,
            self.record.eni_max_pods(),
            settings,
        )
    }

    /// Capacity under a NodeClass's settings: its max pods and its disk (ephemeral storage
    /// is the NodeClass's volume, or the instance store with RAID0).
    pub fn capacity_with(&self, settings: &KubeletSettings) -> Resources {
        if *settings == KubeletSettings::default() {
            return self.capacity.clone();
        }
        let max_pods = self.record.kubelet_max_pods(settings);
        let mut cap = allocatable::capacity(
            self.record.vcpus,
            self.record.memory_mib,
            max_pods,
            settings,
        );
        cap.extended = self.capacity.extended.clone();
        cap.ephemeral_storage_bytes = settings.disk.capacity_bytes(self.record.local_storage_gb);
        cap
    }

    /// The lowest price among offerings that `reqs` allows (zone and capacity type).
    pub fn cheapest_price(&self, reqs: &Requirements) -> Option<f64> {
        self.offerings
            .iter()
            .filter(|o| offering_allowed(o, reqs))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
    }

    pub fn on_demand_price(&self) -> Option<f64> {
        self.offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| o.price)
    }

    /// Whether the type's own labels satisfy `reqs` (zone / capacity type ignored).
    pub fn labels_match(&self, reqs: &Requirements) -> bool {
        reqs.iter().all(|(k, r)| {
            // The zone ID is the zone's: decided by the offering (the agent turns a zone-ID
            // requirement into a zone requirement through the NodeClass's subnets).
            if k == labels::ZONE
                || k == labels::CAPACITY_TYPE
                || k == labels::ZONE_ID
                || labels::is_reservation_label(k)
            {
                return true;
            }
            // The NodePool's name and its NodeClass's are well known but no instance type
            // carries them: a pod's `karpenter.sh/nodepool` selector is checked against the
            // pool's own requirements, never against the type's labels.
            if k == labels::KARPENTER_NODEPOOL
                || k == labels::JOINER_NODEPOOL
                || k == labels::NODE_CLASS
            {
                return true;
            }
            match self.labels.get(k) {
                Some(v) => r.has(v),
                // Labels the catalogue does not model (custom NodePool labels) are decided
                // by the NodePool, not by the instance type.
                None => !labels::is_well_known(k) || r.matches(None),
            }
        })
    }

    /// Whether `reqs` allows this type and at least one of its offerings.
    pub fn allowed_by(&self, reqs: &Requirements) -> bool {
        self.labels_match(reqs) && self.offerings.iter().any(|o| offering_allowed(o, reqs))
    }
}

/// Whether an offering's zone, capacity type and reservation satisfy `reqs`.
pub fn offering_allowed(o: &Offering, reqs: &Requirements) -> bool {
    reqs.get(labels::ZONE).is_none_or(|r| r.has(&o.zone))
        && reqs
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.has(o.capacity_type.as_str()))
        && [
            labels::CAPACITY_RESERVATION_ID,
            labels::CAPACITY_RESERVATION_TYPE,
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
        ]
        .iter()
        .all(|k| {
            reqs.get(k)
                .is_none_or(|r| r.matches(o.reservation_label(k)))
        })
}

/// How to build a catalogue from EC2 data.
#[derive(Debug, Clone, Default)]
pub struct CatalogOptions {
    pub kubelet: KubeletSettings,
    pub spot: SpotPricing,
    /// The Region's on-demand list (us-east-1's by default). Its currency must be the Spot
    /// prices' (see [`prices`]).
    pub on_demand: prices::OnDemandPrices,
}

/// Where a catalogue's Spot offerings and their prices come from. In every case a type
/// whose SupportedUsageClasses lack `spot` has none (Karpenter's capacity types come from
/// that list: `instancetype/types.go`, `computeRequirements`).
#[derive(Debug, Clone, Default)]
pub enum SpotPricing {
    /// The documented model ([`prices::spot_model`]) in every zone the type is offered:
    /// for what has no account behind it (benchmarks, synthetic catalogues, plan-time
    /// estimates), where only the order between offerings matters.
    #[default]
    Modelled,
    /// What DescribeSpotPriceHistory answered: a Spot offering only where it priced the
    /// type in the zone. EC2 prices every Spot market it has, so a missing price means no
    /// market, as in Karpenter (`offering/base_resolver.go`: an offering without a price is
    /// unavailable; `pricing/pricing.go`, `SpotPrice`).
    Observed(SpotPrices),
    /// No Spot offering anywhere: no price history was ever read, and inventing one would
    /// plan onto markets that may not exist.
    None,
}

impl SpotPricing {
    /// The Spot price of `record` in `zone` (whose on-demand price is `on_demand`), or None
    /// when the catalogue has no Spot offering there.
    pub fn price(&self, record: &InstanceTypeRecord, zone: &str, on_demand: f64) -> Option<f64> {
        if record.spot_unsupported {
            return None;
        }
        match self {
            SpotPricing::Modelled => Some(prices::spot_model(
                on_demand,
                prices::category_of(&record.name),
                zone,
            )),
            SpotPricing::Observed(observed) => observed.get(&record.name, zone),
            SpotPricing::None => None,
        }
    }
}

/// Every known instance type, sorted by name.
///
/// The types are shared: a clone of a catalogue is a vector of reference counts, not a copy
/// of some 1,300 types with their labels and offerings (about 2 MB). The cloud hands out the
/// same catalogue to every scheduling round and every launch, and 64 concurrent launches
/// each holding their own copy were most of the agent's memory (docs/performance.md).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub types: Vec<Arc<InstanceType>>,
    /// The list the catalogue was priced from, for types it lacks ([`Catalog::price_of`]).
    pub on_demand: prices::OnDemandPrices,
}

impl Catalog {
    /// From the SDK's DescribeInstanceTypes and DescribeInstanceTypeOfferings items, with the
    /// default options (embedded on-demand prices, modelled Spot prices, EKS kubelet defaults):
    /// an estimate, not what the agent would see on an account (see [`SpotPricing`]).
    pub fn from_ec2(
        types: &[aws_sdk_ec2::types::InstanceTypeInfo],
        offerings: &[aws_sdk_ec2::types::InstanceTypeOffering],
    ) -> Catalog {
        Catalog::from_ec2_with(types, offerings, &CatalogOptions::default())
    }

    pub fn from_ec2_with(
        types: &[aws_sdk_ec2::types::InstanceTypeInfo],
        offerings: &[aws_sdk_ec2::types::InstanceTypeOffering],
        options: &CatalogOptions,
    ) -> Catalog {
        let records: Vec<InstanceTypeRecord> = types
            .iter()
            .filter_map(InstanceTypeRecord::from_ec2)
            .collect();
        let offers: Vec<OfferingRecord> = offerings
            .iter()
            .filter_map(OfferingRecord::from_ec2)
            .collect();
        Catalog::from_records(records, &offers, options)
    }

    /// From a JSON dump (see `agent/fixtures/`).
    pub fn from_dump(dump: &Ec2Dump, options: &CatalogOptions) -> Catalog {
        Catalog::from_records(dump.instance_types.clone(), &dump.offerings, options)
    }

    /// Parses a JSON dump; the error names what is wrong.
    pub fn from_dump_json(json: &str, options: &CatalogOptions) -> Result<Catalog, String> {
        let dump: Ec2Dump =
            serde_json::from_str(json).map_err(|e| format!("instance type dump: {e}"))?;
        Ok(Catalog::from_dump(&dump, options))
    }

    /// Types EKS cannot run (no amd64/arm64 architecture) and types without an on-demand
    /// price (nothing to compare Spot against) are left out.
    pub fn from_records(
        records: Vec<InstanceTypeRecord>,
        offerings: &[OfferingRecord],
        options: &CatalogOptions,
    ) -> Catalog {
        let mut zones_by_type: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for o in offerings {
            zones_by_type
                .entry(&o.instance_type)
                .or_default()
                .insert(&o.zone);
        }
        let mut types: Vec<Arc<InstanceType>> = records
            .into_iter()
            .filter(|r| r.kubernetes_arch().is_some())
            .filter_map(|r| {
                let od = options.on_demand.get(&r.name)?;
                let mut offers = Vec::new();
                for zone in zones_by_type.get(r.name.as_str()).into_iter().flatten() {
                    offers.push(Offering {
                        zone: zone.to_string(),
                        capacity_type: CapacityType::OnDemand,
                        price: od,
                        reservation: None,
                    });
                    if let Some(price) = options.spot.price(&r, zone, od) {
                        offers.push(Offering {
                            zone: zone.to_string(),
                            capacity_type: CapacityType::Spot,
                            price,
                            reservation: None,
                        });
                    }
                }
                Some(Arc::new(InstanceType::new(r, offers, &options.kubelet)))
            })
            .collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        Catalog {
            types,
            on_demand: options.on_demand.clone(),
        }
    }

    pub fn from_types(types: Vec<InstanceType>) -> Catalog {
        Catalog::from_shared(types.into_iter().map(Arc::new).collect())
    }

    /// From types shared with other catalogues (see [`Catalog`]).
    pub fn from_shared(mut types: Vec<Arc<InstanceType>>) -> Catalog {
        types.sort_by(|a, b| a.name.cmp(&b.name));
        Catalog {
            types,
            on_demand: Default::default(),
        }
    }

    /// A catalogue of `types` priced from the same Region's list as this one: what a
    /// catalogue made from another (reservations, overlays, a merge) must keep.
    pub fn derive(&self, types: Vec<Arc<InstanceType>>) -> Catalog {
        Catalog {
            on_demand: self.on_demand.clone(),
            ..Catalog::from_shared(types)
        }
    }

    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.types
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &*self.types[i])
    }

    /// What a running node of `itype` in `zone` with capacity type `ct` costs an hour, as
    /// disruption weighs its candidates and the inventory gauges report it; a type the
    /// catalogue lacks is priced on demand from the Region's embedded list.
    pub fn price_of(&self, itype: &str, zone: &str, ct: Option<CapacityType>) -> f64 {
        let Some(it) = self.get(itype) else {
            return self.on_demand.get(itype).unwrap_or(0.0);
        };
        // A reserved node is paid for already, whether or not its reservation still has room
        // (or is still selected): priced as reservations are, never as on-demand.
        if ct == Some(CapacityType::Reserved) {
            return it
                .offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type == CapacityType::Reserved)
                .map(|o| o.price)
                .or_else(|| it.on_demand_price().map(reservations::reserved_price))
                .unwrap_or(0.0);
        }
        it.offerings
            .iter()
            .find(|o| o.zone == zone && Some(o.capacity_type) == ct)
            .or_else(|| it.offerings.iter().find(|o| Some(o.capacity_type) == ct))
            .map(|o| o.price)
            .or_else(|| it.on_demand_price())
            .unwrap_or(0.0)
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The types `reqs` allows, each with at least one allowed offering, sorted by name.
    pub fn filter(&self, reqs: &Requirements) -> Vec<&InstanceType> {
        self.types
            .iter()
            .map(|t| &**t)
            .filter(|t| t.allowed_by(reqs))
            .collect()
    }

    /// Every zone some type is offered in.
    pub fn zones(&self) -> BTreeSet<String> {
        self.types
            .iter()
            .flat_map(|t| t.offerings.iter().map(|o| o.zone.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::{Operator, Requirement};

    fn record(name: &str, vcpus: u32, mem: u64, arch: &str) -> InstanceTypeRecord {
        InstanceTypeRecord {
            name: name.into(),
            vcpus,
            memory_mib: mem,
            architectures: vec![arch.into()],
            hypervisor: "nitro".into(),
            bare_metal: false,
            current_generation: true,
            burstable: false,
            max_enis: 3,
            ipv4_per_eni: 10,
            gpu_count: 0,
            gpu_manufacturer: String::new(),
            gpu_name: String::new(),
            local_storage_gb: 0,
            max_pods: None,
            ..Default::default()
        }
    }

    fn sample() -> Catalog {
        let records = [
            record("m5.large", 2, 8192, "x86_64"),
            record("m6g.large", 2, 8192, "arm64"),
            record("c5.large", 2, 4096, "x86_64"),
            record("mac1.metal", 12, 32768, "x86_64_mac"),
            record("zz9.large", 2, 4096, "x86_64"),
        ];
        let offers = [
            "m5.large",
            "m6g.large",
            "c5.large",
            "mac1.metal",
            "zz9.large",
        ]
        .iter()
        .flat_map(|t| {
            ["us-east-1a", "us-east-1b"]
                .iter()
                .map(move |z| OfferingRecord {
                    instance_type: t.to_string(),
                    zone: z.to_string(),
                })
        })
        .collect::<Vec<_>>();
        let sdk_types: Vec<_> = records.iter().map(|r| r.to_ec2()).collect();
        let sdk_offers: Vec<_> = offers.iter().map(|o| o.to_ec2()).collect();
        Catalog::from_ec2(&sdk_types, &sdk_offers)
    }

    /// GPUs and Neuron devices are capacity, as the device plugins advertise them.
    #[test]
    fn accelerators_are_extended_capacity() {
        let settings = KubeletSettings::default();
        let mut g4dn = record("g4dn.xlarge", 4, 16384, "x86_64");
        g4dn.gpu_count = 1;
        g4dn.gpu_manufacturer = "NVIDIA".into();
        let mut inf2 = record("inf2.xlarge", 4, 16384, "x86_64");
        inf2.accelerator_count = 1;
        inf2.accelerator_manufacturer = "AWS".into();
        inf2.accelerator_name = "Inferentia2".into();
        let mut dl2q = record("dl2q.24xlarge", 96, 786432, "x86_64");
        dl2q.accelerator_count = 8;
        dl2q.accelerator_manufacturer = "Qualcomm".into();
        let ext = |r: &InstanceTypeRecord| {
            InstanceType::new(r.clone(), vec![], &settings)
                .allocatable
                .extended
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(ext(&g4dn), [("nvidia.com/gpu".to_string(), 1)]);
        assert_eq!(ext(&inf2), [("aws.amazon.com/neuron".to_string(), 1)]);
        assert!(
            ext(&dl2q).is_empty(),
            "no device plugin for another maker's accelerator"
        );
    }

    #[test]
    fn builds_priced_offerings() {
        let c = sample();
        let names: Vec<&str> = c.types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["c5.large", "m5.large", "m6g.large"],
            "mac and unpriced types are left out"
        );
        let m5 = c.get("m5.large").unwrap();
        assert_eq!(m5.offerings.len(), 4);
        assert_eq!(
            m5.on_demand_price(),
            prices::on_demand("us-east-1", "m5.large")
        );
        let spot = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::Spot)
            .unwrap();
        assert!(spot.price < m5.on_demand_price().unwrap());
        assert_eq!(m5.capacity.pods, 29);
        assert_eq!(m5.allocatable.cpu_milli, 1930);
    }

    /// On an account a Spot offering exists only where the price history priced the type in
    /// the zone and the type is sold as Spot at all; the model (benchmarks, estimates) fills
    /// every zone but still never offers Spot for a type EC2 does not sell as Spot.
    #[test]
    fn spot_offerings_only_where_a_spot_market_exists() {
        let mut nano = record("t2.nano", 1, 512, "x86_64");
        nano.spot_unsupported = true;
        let records = vec![
            record("m5.large", 2, 8192, "x86_64"),
            record("c5.large", 2, 4096, "x86_64"),
            nano,
        ];
        let offers: Vec<OfferingRecord> = ["m5.large", "c5.large", "t2.nano"]
            .iter()
            .flat_map(|t| {
                ["us-east-1a", "us-east-1b"].map(|z| OfferingRecord {
                    instance_type: t.to_string(),
                    zone: z.to_string(),
                })
            })
            .collect();
        let mut observed = SpotPrices::default();
        observed.insert("m5.large", "us-east-1a", 0.0321, 1);
        // Priced, yet EC2 does not sell t2.nano as Spot: its usage classes decide.
        observed.insert("t2.nano", "us-east-1a", 0.0017, 1);
        let build = |spot: SpotPricing| {
            let options = CatalogOptions {
                spot,
                ..Default::default()
            };
            Catalog::from_records(records.clone(), &offers, &options)
        };
        let spot_zones = |c: &Catalog, t: &str| -> Vec<(String, f64)> {
            c.get(t)
                .unwrap()
                .offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::Spot)
                .map(|o| (o.zone.clone(), o.price))
                .collect()
        };
        let on_demand_zones = |c: &Catalog, t: &str| -> usize {
            c.get(t)
                .unwrap()
                .offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .count()
        };

        let c = build(SpotPricing::Observed(observed));
        assert_eq!(spot_zones(&c, "m5.large"), [("us-east-1a".into(), 0.0321)]);
        assert!(spot_zones(&c, "c5.large").is_empty(), "no price, no market");
        assert!(spot_zones(&c, "t2.nano").is_empty());
        for t in ["m5.large", "c5.large", "t2.nano"] {
            assert_eq!(on_demand_zones(&c, t), 2, "{t}: on-demand is not affected");
        }
        // The scheduler sees the hole: Spot in us-east-1b is nowhere to be had.
        let spot_in = |zone: &str| {
            let mut r = Requirements::new();
            r.add(
                labels::CAPACITY_TYPE,
                Requirement::new(Operator::In, &["spot"]).unwrap(),
            );
            r.add(
                labels::ZONE,
                Requirement::new(Operator::In, &[zone]).unwrap(),
            );
            c.filter(&r)
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(spot_in("us-east-1a"), ["m5.large"]);
        assert!(spot_in("us-east-1b").is_empty());

        let c = build(SpotPricing::None);
        for t in ["m5.large", "c5.large", "t2.nano"] {
            assert!(spot_zones(&c, t).is_empty(), "{t}: no history, no Spot");
            assert_eq!(on_demand_zones(&c, t), 2);
        }

        let c = build(SpotPricing::Modelled);
        assert_eq!(spot_zones(&c, "c5.large").len(), 2);
        assert_eq!(
            spot_zones(&c, "m5.large")[0].1,
            prices::spot_fallback("us-east-1", "m5.large", "us-east-1a").unwrap()
        );
        assert!(spot_zones(&c, "t2.nano").is_empty(), "not sold as Spot");
    }

    #[test]
    fn filter_by_requirements() {
        let c = sample();
        let mut r = Requirements::new();
        r.add(
            labels::ARCH,
            Requirement::new(Operator::In, &["arm64"]).unwrap(),
        );
        let f: Vec<&str> = c.filter(&r).iter().map(|t| t.name.as_str()).collect();
        assert_eq!(f, ["m6g.large"]);
        let mut r = Requirements::new();
        r.add(
            labels::ZONE,
            Requirement::new(Operator::In, &["us-east-1c"]).unwrap(),
        );
        assert!(c.filter(&r).is_empty());
        let mut r = Requirements::new();
        r.add(
            labels::INSTANCE_CATEGORY,
            Requirement::new(Operator::In, &["c", "m"]).unwrap(),
        );
        r.add(
            labels::INSTANCE_MEMORY,
            Requirement::new(Operator::Gt, &["4096"]).unwrap(),
        );
        r.add(
            labels::CAPACITY_TYPE,
            Requirement::new(Operator::In, &["spot"]).unwrap(),
        );
        assert_eq!(c.filter(&r).len(), 2);
        let m5 = c.get("m5.large").unwrap();
        let spot = m5.cheapest_price(&r).unwrap();
        assert!(spot < m5.on_demand_price().unwrap());
    }
}
