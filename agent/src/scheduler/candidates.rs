//! Turning planned claims into NodeClaims: every instance type that fits what the claim
//! holds, priced, with Spot offerings dearer than the cheapest on-demand dropped, cut to
//! 60 types (CreateFleet's override limit, as in Karpenter) while keeping zone and family
//! diversity for Spot and honouring minValues.
//!
//! Exotic types (GPU, accelerator, bare metal) are dropped from a claim whenever an
//! ordinary type fits it: they fit CPU pods too, and listed last among the candidates they
//! are still what CreateFleet falls back to when every cheaper offering is out of capacity:
//! a GPU node for CPU pods at tens of times the price. Pods that need the hardware fit only
//! such types, so they keep them.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::volume_limits::without_attach_limits;
use crate::catalog::CapacityType;
use crate::labels;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::pools::{one_node, Pool, CT_ON_DEMAND, CT_RESERVED, CT_SPOT};
use super::reserved::Hold;
use super::{Candidate, Claim, NewNodeClaim, Scheduler, Unschedulable};

pub const MAX_INSTANCE_TYPES: usize = 60;

struct Priced {
    t: usize,
    price: f64,
    ct: CapacityType,
    zones: u64,
}

/// Each planned claim as a NodeClaim with its candidate types, or its pods unschedulable
/// when limits and offerings leave it none.
pub(crate) fn finalize(s: &Scheduler<'_>) -> (Vec<NewNodeClaim>, Vec<Unschedulable>) {
    let mut out = Vec::new();
    let mut failed = Vec::new();
    // Limits: each claim may use what the others' targets leave; as claims are finalised
    // their reservation becomes the largest candidate they keep.
    let mut committed = s.committed.clone();
    for claim in &s.claims {
        let pool = &s.pools[claim.pool];
        let mut others = committed[claim.pool].clone();
        others.sub(&one_node(&s.catalog.types[claim.target].capacity));
        if claim.pods.is_empty() {
            // Opened up front for spreading (see `preferences`) and never used.
            committed[claim.pool] = others;
            continue;
        }
        if let Some(h) = claim.hold {
            committed[claim.pool] = others.plus(&one_node(&s.catalog.types[h.t].capacity));
            out.push(reserved_claim(s, claim, h));
            continue;
        }
        let priced = priced(s, claim, pool, &others);
        if priced.is_empty() {
            let reason = format!(
                "nodepool {:?}: no instance type is left for the claim after limits and offerings",
                pool.input.name
            );
            failed.extend(claim.pods.iter().map(|&p| Unschedulable {
                pod: p,
                reasons: vec![reason.clone()],
            }));
            continue;
        }
        let spot = priced.iter().any(|p| p.ct == CapacityType::Spot);
        let within = within_price_bound(pool, &priced);
        let chosen = select(s, &claim.reqs, &priced, spot, &within);
        let mut cap_max = Resources::default();
        for &k in &chosen {
            cap_max.max_with(&s.catalog.types[priced[k].t].capacity);
        }
        committed[claim.pool] = others.plus(&one_node(&cap_max));
        out.push(new_claim(s, claim, pool, &priced, &chosen, spot));
    }
    (out, failed)
}

/// The claim's fitting types (within limits, ordinary ones only when any fits), each at its
/// best allowed offering (Spot first), cheapest first.
fn priced(s: &Scheduler<'_>, claim: &Claim, pool: &Pool, others: &Resources) -> Vec<Priced> {
    let zm = claim.zone_mask;
    let ctm = claim.ct_mask;
    let fitting: Vec<usize> = claim
        .types
        .iter()
        .filter(|&t| {
            pool.viable(t, zm, ctm)
                && claim.used.fits_in(&pool.alloc[t])
                && (!pool.has_limits || pool.within_limits(others, &s.catalog.types[t].capacity))
        })
        .collect();
    let fitting = without_exotic(fitting, |t| s.exotic.get(t));
    // Cheapest on-demand price among fitting types, for dropping dearer Spot offerings.
    let od_min = if ctm & CT_ON_DEMAND != 0 {
        fitting
            .iter()
            .filter(|&&t| pool.od_zones[t] & zm != 0)
            .filter_map(|&t| s.catalog.types[t].on_demand_price())
            .min_by(f64::total_cmp)
    } else {
        None
    };
    let mut priced: Vec<Priced> = Vec::with_capacity(fitting.len());
    for &t in &fitting {
        let it = &s.catalog.types[t];
        let mut best: Option<Priced> = None;
        for (oi, o) in it.offerings.iter().enumerate() {
            let Some(zi) = s.zones.of_offering[t][oi] else {
                continue;
            };
            let bit = 1u64 << zi;
            let allowed = match o.capacity_type {
                CapacityType::Spot => ctm & CT_SPOT != 0 && pool.spot_zones[t] & zm & bit != 0,
                CapacityType::OnDemand => {
                    ctm & CT_ON_DEMAND != 0 && pool.od_zones[t] & zm & bit != 0
                }
                // Only a claim holding a place launches into a reservation.
                CapacityType::Reserved => false,
            };
            if !allowed {
                continue;
            }
            if o.capacity_type == CapacityType::Spot && od_min.is_some_and(|m| o.price > m) {
                continue;
            }
            // Spot first: an on-demand offering only counts when the type has no Spot one.
            let better = match &best {
                None => true,
                Some(b) => match (b.ct, o.capacity_type) {
                    (CapacityType::OnDemand, CapacityType::Spot) => true,
                    (CapacityType::Spot, CapacityType::OnDemand) => false,
                    _ => o.price < b.price,
                },
            };
            if better {
                best = Some(Priced {
                    t,
                    price: o.price,
                    ct: o.capacity_type,
                    zones: 0,
                });
            }
            if let Some(b) = best.as_mut() {
                if b.ct == o.capacity_type {
                    b.zones |= bit;
                }
            }
        }
        if let Some(mut b) = best {
            // Zones: every zone where the claim could launch this type.
            b.zones = pool.zones_of(t, zm, ctm & !CT_RESERVED);
            priced.push(b);
        }
    }
    priced.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| s.catalog.types[a.t].name.cmp(&s.catalog.types[b.t].name))
    });
    priced
}

/// Which of `priced` are within the pool's price bound.
fn within_price_bound(pool: &Pool, priced: &[Priced]) -> Vec<bool> {
    // The price bound, within each capacity type (a Spot candidate against the cheapest
    // Spot one, an on-demand one against the cheapest on-demand one: the on-demand
    // fallback of a Spot claim is not cut for costing more than Spot). Past it only
    // types kept for minValues may be listed.
    let ratio = pool.input.candidate_price_ratio;
    let cheapest = |ct: CapacityType| {
        priced
            .iter()
            .find(|p| p.ct == ct)
            .map(|p| ratio.ceiling(p.price))
            .unwrap_or(f64::INFINITY)
    };
    let (spot_ceiling, od_ceiling) = (
        cheapest(CapacityType::Spot),
        cheapest(CapacityType::OnDemand),
    );
    priced
        .iter()
        .map(|p| match p.ct {
            CapacityType::Spot => p.price <= spot_ceiling,
            _ => p.price <= od_ceiling,
        })
        .collect()
}

/// The NodeClaim of `claim` with the `chosen` of its priced types: their zones and capacity
/// types, the requirements pinned to them, and the requests with the first one's overhead.
fn new_claim(
    s: &Scheduler<'_>,
    claim: &Claim,
    pool: &Pool,
    priced: &[Priced],
    chosen: &[usize],
    spot: bool,
) -> NewNodeClaim {
    let (zm, ctm) = (claim.zone_mask, claim.ct_mask);
    let cands: Vec<Candidate> = chosen
        .iter()
        .map(|&k| {
            let p = &priced[k];
            Candidate {
                instance_type: s.catalog.types[p.t].name.clone(),
                price: p.price,
                capacity_type: p.ct,
                zones: s.zones.names_of(p.zones),
            }
        })
        .collect();
    let zone_union = chosen.iter().fold(0u64, |m, &k| m | priced[k].zones);
    let zones = s.zones.names_of(zone_union);
    let mut cts = Vec::new();
    if spot {
        cts.push(CapacityType::Spot);
    }
    if ctm & CT_ON_DEMAND != 0 && chosen.iter().any(|&k| pool.od_zones[priced[k].t] & zm != 0) {
        cts.push(CapacityType::OnDemand);
    }
    let mut reqs: Requirements = claim.reqs.clone();
    let min_values_relaxed = pool.has_min_values.then(|| {
        relax_min_values(
            &mut reqs,
            chosen.iter().map(|&k| &s.catalog.types[priced[k].t].labels),
        )
    });
    pin_pool_labels(&mut reqs);
    reqs.add(
        labels::INSTANCE_TYPE,
        Requirement::listed(cands.iter().map(|c| c.instance_type.clone()).collect()),
    );
    reqs.add(
        labels::ZONE,
        Requirement::listed(zones.iter().cloned().collect()),
    );
    reqs.add(
        labels::CAPACITY_TYPE,
        Requirement::listed(cts.iter().map(|c| c.as_str().to_string()).collect()),
    );
    let overhead = pool.overhead[priced[chosen[0]].t].clone();
    let mut pods = claim.pods.clone();
    pods.sort_unstable();
    NewNodeClaim {
        nodepool: pool.input.name.clone(),
        node_class: pool.input.node_class.clone(),
        pods,
        requirements: reqs,
        instance_types: cands,
        zones,
        capacity_types: cts,
        requests: without_attach_limits(&claim.used.plus(&overhead)),
        daemonset_overhead: overhead,
        min_values_relaxed,
    }
}

/// A NodePool-defined label still listing several values (no pod constrained it) gets
/// one, as Karpenter labels the node with one of them: deterministically the first, so the
/// node's domain is known to the next round.
fn pin_pool_labels(reqs: &mut Requirements) {
    let pin: Vec<(String, String)> = reqs
        .iter()
        .filter(|(k, _)| {
            !super::claims::is_type_label(k)
                && k.as_str() != labels::ZONE
                && k.as_str() != labels::CAPACITY_TYPE
                && !labels::is_reservation_label(k)
        })
        .filter_map(|(k, r)| {
            let vals = r.finite_values()?;
            let first = vals.iter().next()?;
            (vals.len() > 1).then(|| (k.clone(), first.clone()))
        })
        .collect();
    for (k, v) in pin {
        reqs.add(&k, Requirement::one(&v));
    }
}

/// The NodeClaim of a claim holding a place in a reservation: the reservation's type, zone
/// and ID, capacity type `reserved`. No minValues (the reservation pins one type; minValues
/// is flexibility for the market), no price bound.
fn reserved_claim(s: &Scheduler<'_>, claim: &Claim, h: Hold) -> NewNodeClaim {
    let pool = &s.pools[claim.pool];
    let it = &s.catalog.types[h.t];
    let o = &it.offerings[h.offer.offering];
    let zone = s.zones.names[h.offer.zone].clone();
    let mut reqs = Requirements::new();
    for (k, r) in claim.reqs.iter() {
        reqs.add(k, r.clone().with_min_values(None));
    }
    pin_pool_labels(&mut reqs);
    reqs.add(labels::INSTANCE_TYPE, Requirement::one(&it.name));
    reqs.add(labels::ZONE, Requirement::one(&zone));
    reqs.add(
        labels::CAPACITY_TYPE,
        Requirement::one(CapacityType::Reserved.as_str()),
    );
    for key in [
        labels::CAPACITY_RESERVATION_ID,
        labels::CAPACITY_RESERVATION_TYPE,
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
    ] {
        if let Some(v) = o.reservation_label(key) {
            reqs.add(key, Requirement::one(v));
        }
    }
    let overhead = pool.overhead[h.t].clone();
    let mut pods = claim.pods.clone();
    pods.sort_unstable();
    NewNodeClaim {
        nodepool: pool.input.name.clone(),
        node_class: pool.input.node_class.clone(),
        pods,
        requirements: reqs,
        instance_types: vec![Candidate {
            instance_type: it.name.clone(),
            price: o.price,
            capacity_type: CapacityType::Reserved,
            zones: vec![zone.clone()],
        }],
        zones: vec![zone],
        capacity_types: vec![CapacityType::Reserved],
        requests: without_attach_limits(&claim.used.plus(&overhead)),
        daemonset_overhead: overhead,
        min_values_relaxed: None,
    }
}

/// `types` without the exotic ones, unless only exotic ones are there.
fn without_exotic(types: Vec<usize>, exotic: impl Fn(usize) -> bool) -> Vec<usize> {
    if types.iter().all(|&t| exotic(t)) {
        return types;
    }
    types.into_iter().filter(|&t| !exotic(t)).collect()
}

/// Lowers each `minValues` of `reqs` to what the chosen types' labels meet, and says
/// whether any had to be (under `Strict` the scheduler only plans claims that meet them, so
/// this is `BestEffort`'s record of what it launched with).
fn relax_min_values<'a>(
    reqs: &mut Requirements,
    chosen: impl Iterator<Item = &'a BTreeMap<String, String>> + Clone,
) -> bool {
    let mut lowered: Vec<(String, Requirement)> = Vec::new();
    for (key, r) in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        let met: BTreeSet<&str> = chosen
            .clone()
            .filter_map(|l| l.get(key).map(String::as_str))
            .filter(|v| r.has(v))
            .collect();
        if met.len() < min {
            lowered.push((
                key.clone(),
                r.clone().with_min_values(Some(met.len().max(1))),
            ));
        }
    }
    let relaxed = !lowered.is_empty();
    for (key, r) in lowered {
        reqs.replace(&key, r);
    }
    relaxed
}

/// Indexes into `priced` (sorted by price) of at most 60 types, cheapest first. Only those
/// `within` the price bound are listed, except types kept for `minValues`.
fn select(
    s: &Scheduler<'_>,
    reqs: &Requirements,
    priced: &[Priced],
    spot: bool,
    within: &[bool],
) -> Vec<usize> {
    let mut chosen: BTreeSet<usize> = BTreeSet::new();
    let label = |k: usize, key: &str| s.catalog.types[priced[k].t].labels.get(key).cloned();
    // minValues first: the cheapest type for each new value until enough values are kept.
    for (key, r) in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        let mut seen: BTreeSet<String> = chosen.iter().filter_map(|&k| label(k, key)).collect();
        for k in 0..priced.len() {
            if seen.len() >= min || chosen.len() >= MAX_INSTANCE_TYPES {
                break;
            }
            if let Some(v) = label(k, key) {
                if seen.insert(v) {
                    chosen.insert(k);
                }
            }
        }
    }
    if spot {
        // Every zone keeps its cheapest type, then every family its cheapest, so that
        // price-capacity-optimized has deep pools to choose from.
        let mut zones_covered = 0u64;
        for (k, p) in priced.iter().enumerate() {
            if chosen.len() >= MAX_INSTANCE_TYPES {
                break;
            }
            if !within[k] {
                continue;
            }
            if p.zones & !zones_covered != 0 {
                zones_covered |= p.zones;
                chosen.insert(k);
            }
        }
        let mut families: BTreeMap<String, usize> = BTreeMap::new();
        for &k in &chosen {
            if let Some(f) = label(k, labels::INSTANCE_FAMILY) {
                families.entry(f).or_insert(k);
            }
        }
        // Families take at most half the list, so the cheapest types fill the rest.
        for (k, &ok) in within.iter().enumerate() {
            if chosen.len() >= MAX_INSTANCE_TYPES / 2 {
                break;
            }
            if !ok {
                continue;
            }
            if let Some(f) = label(k, labels::INSTANCE_FAMILY) {
                if let std::collections::btree_map::Entry::Vacant(e) = families.entry(f) {
                    e.insert(k);
                    chosen.insert(k);
                }
            }
        }
    }
    for (k, &ok) in within.iter().enumerate() {
        if chosen.len() >= MAX_INSTANCE_TYPES {
            break;
        }
        if ok {
            chosen.insert(k);
        }
    }
    chosen.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::without_exotic;

    #[test]
    fn exotic_types_go_only_when_an_ordinary_one_fits() {
        let exotic = |t: usize| t >= 10;
        assert_eq!(without_exotic(vec![1, 2, 10, 11], exotic), vec![1, 2]);
        assert_eq!(without_exotic(vec![10, 11], exotic), vec![10, 11]);
        assert_eq!(without_exotic(vec![], exotic), Vec::<usize>::new());
    }
}
