//! Per-NodePool facts computed once per round: which instance types the pool allows, what
//! each can hold once the pool's NodeClass settings and the DaemonSets that land there are
//! accounted for, where each is offered, and the pool's limit budget.

use std::collections::BTreeMap;

use crate::catalog::daemonsets::{node_requirements, overhead, DaemonSet};
use crate::catalog::{volume_limits, CapacityType, Catalog, InstanceType, KubeletSettings};
use crate::labels;
use crate::resources::{Resources, NODES};
use crate::taints::first_untolerated;

use super::bitset::Bitset;
use super::input::{Input, NodePoolInput};
use super::reserved::ResOffer;

/// Zone indexes are bits of a u64: a region has far fewer than 64 zones.
pub(crate) type ZoneMask = u64;
pub(crate) const CT_SPOT: u8 = 1;
pub(crate) const CT_ON_DEMAND: u8 = 2;
pub(crate) const CT_RESERVED: u8 = 4;
pub(crate) const CT_ALL: u8 = CT_SPOT | CT_ON_DEMAND | CT_RESERVED;

pub(crate) fn ct_bit(ct: CapacityType) -> u8 {
    match ct {
        CapacityType::Spot => CT_SPOT,
        CapacityType::OnDemand => CT_ON_DEMAND,
        CapacityType::Reserved => CT_RESERVED,
    }
}

pub(crate) struct Pool {
    pub input: NodePoolInput,
    /// Types the pool's requirements allow with at least one available offering.
    pub types: Bitset,
    /// Allocatable minus DaemonSet overhead, per type index.
    pub alloc: Vec<Resources>,
    pub overhead: Vec<Resources>,
    /// Zones with an available Spot / on-demand offering the pool allows, per type.
    pub spot_zones: Vec<ZoneMask>,
    pub od_zones: Vec<ZoneMask>,
    /// Zones with a reservation of the pool's NodeClass for the type (however full), and
    /// those reservations, by type index; empty unless the class selects reservations.
    pub res_zones: Vec<ZoneMask>,
    pub reserved: BTreeMap<usize, Vec<ResOffer>>,
    /// Cheapest allowed price per type (Spot when the pool allows it), for sizing.
    pub price: Vec<f64>,
    pub zone_mask: ZoneMask,
    pub ct_mask: u8,
    pub has_limits: bool,
    /// Some requirement sets minValues.
    pub has_min_values: bool,
}

impl Pool {
    pub fn viable(&self, t: usize, zones: ZoneMask, cts: u8) -> bool {
        (cts & CT_SPOT != 0 && self.spot_zones[t] & zones != 0)
            || (cts & CT_ON_DEMAND != 0 && self.od_zones[t] & zones != 0)
            || (cts & CT_RESERVED != 0 && self.res_zones[t] & zones != 0)
    }

    /// Whether `t` can be bought on the market (Spot or on-demand) under these masks.
    pub fn market_viable(&self, t: usize, zones: ZoneMask, cts: u8) -> bool {
        (cts & CT_SPOT != 0 && self.spot_zones[t] & zones != 0)
            || (cts & CT_ON_DEMAND != 0 && self.od_zones[t] & zones != 0)
    }

    /// Zones where `t` can be launched under these masks.
    pub fn zones_of(&self, t: usize, zones: ZoneMask, cts: u8) -> ZoneMask {
        let mut m = 0;
        if cts & CT_SPOT != 0 {
            m |= self.spot_zones[t] & zones;
        }
        if cts & CT_ON_DEMAND != 0 {
            m |= self.od_zones[t] & zones;
        }
        if cts & CT_RESERVED != 0 {
            m |= self.res_zones[t] & zones;
        }
        m
    }

    /// Whether adding a node of capacity `cap` keeps the pool within its limits, given
    /// what is already committed by other new claims.
    pub fn within_limits(&self, committed: &Resources, cap: &Resources) -> bool {
        if !self.has_limits {
            return true;
        }
        self.input.limits.iter().all(|(k, lim)| {
            resource_value(&self.input.usage, k)
                + resource_value(committed, k)
                + resource_value(&one_node(cap), k)
                <= *lim
        })
    }

    /// The first limit a node of capacity `cap` would exceed, for messages.
    pub fn exceeded_limit(&self, committed: &Resources, cap: &Resources) -> Option<String> {
        self.input.limits.iter().find_map(|(k, lim)| {
            let total = resource_value(&self.input.usage, k)
                + resource_value(committed, k)
                + resource_value(&one_node(cap), k);
            (total > *lim).then(|| {
                let shown = if k == "cpu" {
                    crate::resources::fmt_cpu(*lim)
                } else if k == "memory" {
                    crate::resources::fmt_bytes(*lim)
                } else {
                    lim.to_string()
                };
                format!("{k}={shown}")
            })
        })
    }
}

/// A node's capacity as counted against limits: its resources and one node.
pub(crate) fn one_node(cap: &Resources) -> Resources {
    let mut r = cap.clone();
    r.extended.insert(NODES.to_string(), 1);
    r
}

pub(crate) fn resource_value(r: &Resources, name: &str) -> i64 {
    match name {
        "cpu" => r.cpu_milli,
        "memory" => r.memory_bytes,
        "pods" => r.pods,
        "ephemeral-storage" => r.ephemeral_storage_bytes,
        other => r.extended.get(other).copied().unwrap_or(0),
    }
}

/// Zone names and their bit positions.
#[derive(Default)]
pub(crate) struct Zones {
    pub names: Vec<String>,
    /// Per catalogue type, the bit of each of its offerings' zones (None: a zone past the
    /// 64 kept). Looked up once a round: pricing every claim reads every offering, and a
    /// string-keyed lookup there was a fixed cost that dominated small rounds.
    pub of_offering: Vec<Vec<Option<u8>>>,
}

impl Zones {
    pub fn from_catalog(catalog: &Catalog, input: &Input) -> Zones {
        let mut all: std::collections::BTreeSet<String> = catalog.zones();
        for n in &input.nodes {
            if let Some(z) = n.labels.get(labels::ZONE) {
                all.insert(z.clone());
            }
        }
        let names: Vec<String> = all.into_iter().take(64).collect();
        let index: BTreeMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let of_offering = catalog
            .types
            .iter()
            .map(|it| {
                it.offerings
                    .iter()
                    .map(|o| index.get(&o.zone).map(|&i| i as u8))
                    .collect()
            })
            .collect();
        Zones { names, of_offering }
    }

    pub fn names_of(&self, mask: ZoneMask) -> Vec<String> {
        self.names
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| n.clone())
            .collect()
    }
}

pub(crate) fn build_pools(
    catalog: &Catalog,
    input: &Input,
    zones: &Zones,
    ledger: &super::reserved::Ledger,
) -> Vec<Pool> {
    let mut pools: Vec<&NodePoolInput> = input.node_pools.iter().collect();
    // Highest weight first; the name breaks ties so the order never depends on input order.
    pools.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    let sources = PoolSources {
        catalog,
        input,
        zones,
        ledger,
    };
    pools.into_iter().map(|np| sources.pool(np)).collect()
}

/// What every pool of a round is built from.
struct PoolSources<'a> {
    catalog: &'a Catalog,
    input: &'a Input,
    zones: &'a Zones,
    ledger: &'a super::reserved::Ledger,
}

impl PoolSources<'_> {
    fn pool(&self, np: &NodePoolInput) -> Pool {
        let n = self.catalog.types.len();
        let kubelet = self
            .input
            .node_classes
            .iter()
            .find(|c| c.name == np.node_class)
            .map(|c| c.kubelet.clone())
            .unwrap_or_else(KubeletSettings::default);
        let (zone_mask, ct_mask) = self.masks(np);
        let mut pool = Pool {
            input: np.clone(),
            types: Bitset::empty(n),
            alloc: Vec::with_capacity(n),
            overhead: Vec::with_capacity(n),
            spot_zones: vec![0; n],
            od_zones: vec![0; n],
            res_zones: vec![0; n],
            reserved: Default::default(),
            price: vec![f64::INFINITY; n],
            zone_mask,
            ct_mask,
            has_limits: !np.limits.is_empty(),
            has_min_values: np.requirements.iter().any(|(_, r)| r.min_values.is_some()),
        };
        let default_kubelet = kubelet == KubeletSettings::default();
        // DaemonSets that cannot tolerate the pool's taints land on none of its nodes; with
        // none left, the node's label picture (built per type, the costliest step of a
        // small round) is not needed.
        let daemonsets: Vec<DaemonSet> = self
            .input
            .daemonsets
            .iter()
            .filter(|ds| first_untolerated(&np.taints, &ds.tolerations).is_none())
            .cloned()
            .collect();
        for (t, it) in self.catalog.types.iter().enumerate() {
            let base = if default_kubelet {
                it.allocatable.clone()
            } else {
                it.allocatable_with(&kubelet)
            };
            // A node of the type attaches only so many EBS volumes.
            let base = volume_limits::with_ebs_limit(&base, &it.record);
            if !it.labels_match(&np.requirements) {
                pool.alloc.push(base);
                pool.overhead.push(Resources::default());
                continue;
            }
            let ds = if daemonsets.is_empty() {
                Resources::default()
            } else {
                let node = node_requirements(&np.name, &np.requirements, it);
                overhead(&daemonsets, &node, &np.taints)
            };
            pool.price[t] = self.offerings(&mut pool, np, t, it);
            let mut alloc = base.clone();
            alloc.sub(&ds);
            if (pool.spot_zones[t] | pool.od_zones[t] | pool.res_zones[t]) != 0
                && alloc.cpu_milli > 0
                && alloc.memory_bytes > 0
                && alloc.pods > 0
            {
                pool.types.set(t);
            }
            pool.alloc.push(alloc);
            pool.overhead.push(ds);
        }
        pool
    }

    /// The zones and capacity types the pool's requirements allow, as masks.
    fn masks(&self, np: &NodePoolInput) -> (ZoneMask, u8) {
        let zone_req = np.requirements.get(labels::ZONE);
        let ct_req = np.requirements.get(labels::CAPACITY_TYPE);
        let mut zone_mask = 0;
        for (i, z) in self.zones.names.iter().enumerate() {
            if zone_req.is_none_or(|r| r.has(z)) {
                zone_mask |= 1 << i;
            }
        }
        let mut ct_mask = 0;
        for ct in [
            CapacityType::Spot,
            CapacityType::OnDemand,
            CapacityType::Reserved,
        ] {
            if ct_req.is_none_or(|r| r.has(ct.as_str())) {
                ct_mask |= ct_bit(ct);
            }
        }
        // A required reservation label (`capacity-reservation-type In [capacity-block]`)
        // is met by reserved offerings alone.
        if np
            .requirements
            .iter()
            .any(|(k, r)| labels::is_reservation_label(k) && !r.matches(None))
        {
            ct_mask &= CT_RESERVED;
        }
        (zone_mask, ct_mask)
    }

    /// Records where type `t` is offered to the pool (its Spot, on-demand and reserved
    /// zones, and its reservations) and returns its cheapest market price there.
    fn offerings(&self, pool: &mut Pool, np: &NodePoolInput, t: usize, it: &InstanceType) -> f64 {
        let mut price = f64::INFINITY;
        for (oi, o) in it.offerings.iter().enumerate() {
            let Some(zi) = self.zones.of_offering[t][oi].map(usize::from) else {
                continue;
            };
            if pool.zone_mask & (1 << zi) == 0 || pool.ct_mask & ct_bit(o.capacity_type) == 0 {
                continue;
            }
            if self
                .input
                .unavailable
                .contains(o.capacity_type, &it.name, &o.zone)
            {
                continue;
            }
            match (o.capacity_type, &o.reservation) {
                (CapacityType::Spot, _) => pool.spot_zones[t] |= 1 << zi,
                (CapacityType::OnDemand, _) => pool.od_zones[t] |= 1 << zi,
                (CapacityType::Reserved, Some(r)) => {
                    // Only the class that selected the reservation, and only if
                    // the pool's reservation requirements admit it.
                    let res = self.ledger.index(&r.id);
                    if r.node_class != np.node_class
                        || !crate::catalog::offering_allowed(o, &np.requirements)
                        || res.is_none()
                    {
                        continue;
                    }
                    pool.res_zones[t] |= 1 << zi;
                    pool.reserved.entry(t).or_default().push(ResOffer {
                        offering: oi,
                        res: res.unwrap_or_default(),
                        zone: zi,
                    });
                    // Sizing prices the market; reservations are sized apart.
                    continue;
                }
                (CapacityType::Reserved, None) => continue,
            }
            price = price.min(o.price);
        }
        price
    }
}
