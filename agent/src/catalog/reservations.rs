//! EC2 capacity reservations as offerings (Karpenter v1.3-v1.10): the reservations a
//! NodeClass's `capacityReservationSelectorTerms` select become `reserved` offerings of
//! their instance type in their zone, priced near zero so that they are used first, and
//! carrying how many more instances they take.
//!
//! Pure: DescribeCapacityReservations records and the time in, a catalogue out.
//!
//! Facts this follows (EC2 and Karpenter's documentation):
//! - a reservation is for one instance type in one zone; only `active` ones take launches;
//! - its instances are paid for whether used or not, so a launch into it costs nothing
//!   more. Karpenter prices it at a tiny fraction of on-demand, not zero, so that a small
//!   reservation still beats a large one and consolidation can move down; so do we
//!   ([`reserved_price`]);
//! - a capacity block's instances are terminated by EC2 from 30 minutes before its end
//!   date; Karpenter drains them 10 minutes before that ([`block_drain_at`]) and stops
//!   launching into the block then;
//! - an interruptible reservation's instances get a 2-minute `EC2 Capacity Reservation
//!   Instance Interruption Warning` when the owner reclaims the capacity (handled as a Spot
//!   interruption by the interruption controller).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{CapacityType, Catalog, Offering};

/// `default` (an on-demand capacity reservation) or `capacity-block`, as EC2's
/// `ReservationType` and Karpenter's `karpenter.k8s.aws/capacity-reservation-type` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationKind {
    Default,
    CapacityBlock,
}

impl ReservationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationKind::Default => "default",
            ReservationKind::CapacityBlock => "capacity-block",
        }
    }

    pub fn parse(s: &str) -> Option<ReservationKind> {
        match s {
            "default" => Some(ReservationKind::Default),
            "capacity-block" => Some(ReservationKind::CapacityBlock),
            _ => None,
        }
    }
}

/// What makes an offering a capacity reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservedOffering {
    pub id: String,
    pub kind: ReservationKind,
    pub interruptible: bool,
    /// Instances it still takes: EC2's `AvailableInstanceCount`, less the NodeClaims planned
    /// into it and not launched yet.
    pub available: u32,
    /// The NodeClass whose selector terms chose it: only that class's NodePools launch into
    /// it (catalogues of several classes are merged for one scheduling round).
    pub node_class: String,
    /// A capacity block's end date, Unix seconds.
    pub end_date: Option<i64>,
}

/// One reservation as DescribeCapacityReservations reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationRecord {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub available: u32,
    pub total: u32,
    pub kind: ReservationKind,
    pub interruptible: bool,
    /// `active`, `expired`, `cancelled`, `pending`, ...
    pub state: String,
    pub end_date: Option<i64>,
    pub owner_id: String,
    /// `open` or `targeted`.
    pub match_criteria: String,
}

impl ReservationRecord {
    /// From the SDK's record; `None` when a field every reservation has is missing.
    pub fn from_ec2(r: &aws_sdk_ec2::types::CapacityReservation) -> Option<ReservationRecord> {
        Some(ReservationRecord {
            id: r.capacity_reservation_id()?.to_string(),
            instance_type: r.instance_type()?.to_string(),
            zone: r.availability_zone()?.to_string(),
            available: r.available_instance_count().unwrap_or(0).max(0) as u32,
            total: r.total_instance_count().unwrap_or(0).max(0) as u32,
            kind: r
                .reservation_type()
                .and_then(|t| ReservationKind::parse(t.as_str()))
                .unwrap_or(ReservationKind::Default),
            interruptible: r.interruptible().unwrap_or(false),
            state: r
                .state()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            end_date: r.end_date().map(|d| d.secs()),
            owner_id: r.owner_id().unwrap_or_default().to_string(),
            match_criteria: r
                .instance_match_criteria()
                .map(|c| c.as_str().to_string())
                .unwrap_or_default(),
        })
    }

    /// Whether launches may go into it at `now`: active, and for a capacity block not yet
    /// in the drain window before EC2 reclaims it.
    pub fn usable(&self, now: i64) -> bool {
        self.state == "active"
            && (self.kind != ReservationKind::CapacityBlock
                || self.end_date.is_none_or(|e| now < block_drain_at(e)))
    }
}

/// EC2 starts terminating a capacity block's instances this long before its end date.
pub const BLOCK_RECLAIM_SECS: i64 = 30 * 60;
/// The agent drains them this long before EC2 starts (Karpenter's 10 minutes, when EC2's
/// own warning event is sent).
pub const BLOCK_DRAIN_LEAD_SECS: i64 = 10 * 60;

/// When the nodes of a capacity block ending at `end_date` are drained (Unix seconds).
pub fn block_drain_at(end_date: i64) -> i64 {
    end_date - BLOCK_RECLAIM_SECS - BLOCK_DRAIN_LEAD_SECS
}

/// What becomes of a node launched into a reservation, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedFate {
    Keep,
    /// A capacity block nearing its end (or gone): drain it, pods out by `deadline` (Unix
    /// seconds: when EC2 starts terminating).
    Drain {
        deadline: i64,
    },
    /// An on-demand reservation that expired, was cancelled or no longer has the instance:
    /// the instance runs on as ordinary on-demand capacity (Karpenter relabels it
    /// `on-demand`; a pool that requires `reserved` then drifts it).
    NoLongerReserved,
}

/// The fate of a node in reservation `kind` (its label), given the reservation's record
/// now (`None`: EC2 no longer knows it).
pub fn fate(kind: ReservationKind, record: Option<&ReservationRecord>, now: i64) -> ReservedFate {
    match (kind, record) {
        (ReservationKind::CapacityBlock, None) => ReservedFate::Drain { deadline: now },
        (ReservationKind::CapacityBlock, Some(r)) => match r.end_date {
            Some(end) if now >= block_drain_at(end) => ReservedFate::Drain {
                deadline: end - BLOCK_RECLAIM_SECS,
            },
            _ if r.state != "active" => ReservedFate::Drain { deadline: now },
            _ => ReservedFate::Keep,
        },
        (ReservationKind::Default, Some(r)) if r.state == "active" => ReservedFate::Keep,
        (ReservationKind::Default, _) => ReservedFate::NoLongerReserved,
    }
}

/// The price of a launch into a reservation: paid already, so near zero; proportional to
/// the on-demand price so that, among reservations, the smaller type still wins. 10^-7 of
/// on-demand keeps the dearest type's (about $400/h) below the cheapest market offering
/// (about $0.001/h).
pub fn reserved_price(on_demand: f64) -> f64 {
    on_demand * 1e-7
}

/// `catalog` with the reservations `node_class` selected added as `reserved` offerings.
/// A reservation is left out when unusable at `now`, or when its type or zone is not in
/// the catalogue (another architecture, a zone none of the class's subnets is in).
pub fn add(
    catalog: &Catalog,
    records: &[ReservationRecord],
    node_class: &str,
    now: i64,
) -> Catalog {
    let mut by_type: BTreeMap<&str, Vec<&ReservationRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.usable(now)) {
        by_type.entry(&r.instance_type).or_default().push(r);
    }
    if by_type.is_empty() {
        return catalog.clone();
    }
    let types = catalog
        .types
        .iter()
        .map(|t| {
            let Some(rs) = by_type.get(t.name.as_str()) else {
                return t.clone();
            };
            let od = t.on_demand_price();
            let mut it = (**t).clone();
            for r in rs {
                let offered = it
                    .offerings
                    .iter()
                    .any(|o| o.zone == r.zone && o.capacity_type == CapacityType::OnDemand);
                let (Some(od), true) = (od, offered) else {
                    continue;
                };
                it.offerings.push(Offering {
                    zone: r.zone.clone(),
                    capacity_type: CapacityType::Reserved,
                    price: reserved_price(od),
                    reservation: Some(Box::new(ReservedOffering {
                        id: r.id.clone(),
                        kind: r.kind,
                        interruptible: r.interruptible,
                        available: r.available,
                        node_class: node_class.to_string(),
                        end_date: r.end_date,
                    })),
                });
            }
            it.offerings
                .sort_by(|a, b| (a.capacity_type, &a.zone).cmp(&(b.capacity_type, &b.zone)));
            Arc::new(it)
        })
        .collect();
    catalog.derive(types)
}

/// `catalog` with `pending[id]` fewer instances available in each reservation: NodeClaims
/// planned into it whose instance is not launched yet (EC2's count does not know them).
pub fn subtract(catalog: &Catalog, pending: &BTreeMap<String, u32>) -> Catalog {
    if pending.is_empty() {
        return catalog.clone();
    }
    let types = catalog
        .types
        .iter()
        .map(|t| {
            let hit = t.offerings.iter().any(|o| {
                o.reservation
                    .as_ref()
                    .is_some_and(|r| pending.contains_key(&r.id))
            });
            if !hit {
                return t.clone();
            }
            let mut it = (**t).clone();
            for o in &mut it.offerings {
                if let Some(r) = o.reservation.as_mut() {
                    if let Some(n) = pending.get(&r.id) {
                        r.available = r.available.saturating_sub(*n);
                    }
                }
            }
            Arc::new(it)
        })
        .collect();
    catalog.derive(types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{InstanceType, InstanceTypeRecord, KubeletSettings};

    fn catalog() -> Catalog {
        let rec = InstanceTypeRecord {
            name: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["x86_64".into()],
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
        };
        let offers = ["us-east-1a", "us-east-1b"]
            .iter()
            .map(|z| Offering {
                zone: z.to_string(),
                capacity_type: CapacityType::OnDemand,
                price: 0.096,
                reservation: None,
            })
            .collect();
        Catalog::from_types(vec![InstanceType::new(
            rec,
            offers,
            &KubeletSettings::default(),
        )])
    }

    fn record(id: &str, zone: &str, kind: ReservationKind, end: Option<i64>) -> ReservationRecord {
        ReservationRecord {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: zone.into(),
            available: 3,
            total: 4,
            kind,
            interruptible: false,
            state: "active".into(),
            end_date: end,
            owner_id: "123456789012".into(),
            match_criteria: "targeted".into(),
        }
    }

    #[test]
    fn usable_reservations_become_near_free_offerings_of_their_class() {
        let now = 1_000_000;
        let records = vec![
            record("cr-a", "us-east-1a", ReservationKind::Default, None),
            // A zone the class has no subnet in.
            record("cr-c", "us-east-1c", ReservationKind::Default, None),
            // A block 45 minutes from its end: still usable (drain starts at 40).
            record(
                "cr-b",
                "us-east-1b",
                ReservationKind::CapacityBlock,
                Some(now + 45 * 60),
            ),
            // A block 39 minutes from its end: in its drain window.
            record(
                "cr-x",
                "us-east-1b",
                ReservationKind::CapacityBlock,
                Some(now + 39 * 60),
            ),
            ReservationRecord {
                state: "expired".into(),
                ..record("cr-e", "us-east-1a", ReservationKind::Default, None)
            },
        ];
        let c = add(&catalog(), &records, "gpu", now);
        let m5 = c.get("m5.large").unwrap();
        let reserved: Vec<(&str, &str, u32)> = m5
            .offerings
            .iter()
            .filter_map(|o| {
                let r = o.reservation.as_ref()?;
                assert_eq!(o.capacity_type, CapacityType::Reserved);
                assert!(o.price < 0.0001 && o.price > 0.0);
                assert_eq!(r.node_class, "gpu");
                Some((r.id.as_str(), o.zone.as_str(), r.available))
            })
            .collect();
        assert_eq!(
            reserved,
            [("cr-a", "us-east-1a", 3), ("cr-b", "us-east-1b", 3)]
        );
        let pending = BTreeMap::from([("cr-a".to_string(), 2u32), ("cr-b".to_string(), 5)]);
        let c = subtract(&c, &pending);
        let left: Vec<u32> = c
            .get("m5.large")
            .unwrap()
            .offerings
            .iter()
            .filter_map(|o| o.reservation.as_ref().map(|r| r.available))
            .collect();
        assert_eq!(left, [1, 0]);
        assert_eq!(block_drain_at(10_000), 10_000 - 2_400);
    }

    #[test]
    fn blocks_drain_forty_minutes_before_their_end_and_reservations_lapse_to_on_demand() {
        let now = 1_000_000;
        let end = now + 41 * 60;
        let block = record(
            "cr-b",
            "us-east-1a",
            ReservationKind::CapacityBlock,
            Some(end),
        );
        use ReservationKind::*;
        assert_eq!(fate(CapacityBlock, Some(&block), now), ReservedFate::Keep);
        assert_eq!(
            fate(CapacityBlock, Some(&block), now + 60),
            ReservedFate::Drain {
                deadline: end - 30 * 60
            }
        );
        assert_eq!(
            fate(CapacityBlock, None, now),
            ReservedFate::Drain { deadline: now }
        );
        let odcr = record("cr-a", "us-east-1a", Default, None);
        assert_eq!(fate(Default, Some(&odcr), now), ReservedFate::Keep);
        let expired = ReservationRecord {
            state: "expired".into(),
            ..odcr.clone()
        };
        assert_eq!(
            fate(Default, Some(&expired), now),
            ReservedFate::NoLongerReserved
        );
        assert_eq!(fate(Default, None, now), ReservedFate::NoLongerReserved);
    }
}
