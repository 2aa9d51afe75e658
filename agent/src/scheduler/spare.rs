//! Spare room for pods displaced from several spread domains at once.
//!
//! [`super::schedule`] plans displaced pods back into the domains they leave, room for
//! room. That is enough while one domain is short at a time. When a storm drains nodes of
//! several domains together and the pods spread over two keys (zone and a capacity split,
//! `maxSkew: 1`), kube-scheduler sees several domains short at once, and a recreated pod
//! that finds two domains equally short may take the room planned for the other domain's
//! pods: the last of those then fits nowhere its spreads allow and waits for a new node.
//! So such a round also plans one spare pod's room in each domain pods leave: a copy of
//! the largest pod leaving it, pinned there. The spare sizes the claims it lands on and
//! then leaves the plan; a claim that would hold only spares is not made, so the spare
//! costs at most a larger instance type, never a node of its own (a domain whose spare
//! would need one goes without).

use std::collections::BTreeMap;

use super::headroom::{PLACEHOLDER_LABEL, PLACEHOLDER_NAMESPACE};
use super::{schedule, Input, Plan, Pod};
use crate::catalog::Catalog;

/// What [`PLACEHOLDER_LABEL`] says on a spare.
const SPARE: &str = "spare-for-displaced";

/// [`schedule`], with one spare pod's room in each domain displaced pods leave when they
/// leave more than one.
pub fn schedule_with_spare_room(catalog: &Catalog, input: &Input) -> Plan {
    let spares = spares(&input.pods);
    if spares.is_empty() {
        return schedule(catalog, input);
    }
    let real = input.pods.len();
    let mut with = input.clone();
    with.pods.extend(spares);
    without_spares(schedule(catalog, &with), real)
}

/// How many spare pods' room [`schedule_with_spare_room`] adds for these pods (for the
/// round's log).
pub fn spare_rooms(pods: &[Pod]) -> usize {
    spares(pods).len()
}

/// One spare per home when the displaced pods have more than one: the largest pod of that
/// home (memory, then CPU), renamed into the placeholder namespace so no spread or
/// affinity counts it, and pinned to the home so it is never planned elsewhere.
fn spares(pods: &[Pod]) -> Vec<Pod> {
    let mut largest: BTreeMap<&BTreeMap<String, String>, &Pod> = BTreeMap::new();
    for p in pods.iter().filter(|p| !p.home.is_empty()) {
        let e = largest.entry(&p.home).or_insert(p);
        let size = |q: &Pod| (q.requests.memory_bytes, q.requests.cpu_milli);
        if size(p) > size(e) {
            *e = p;
        }
    }
    if largest.len() < 2 {
        return Vec::new();
    }
    largest
        .into_values()
        .enumerate()
        .map(|(i, p)| {
            let mut s = p.clone();
            s.namespace = PLACEHOLDER_NAMESPACE.into();
            s.name = format!("{SPARE}-{i}");
            s.labels = BTreeMap::from([(PLACEHOLDER_LABEL.to_string(), SPARE.to_string())]);
            s.topology_spread.clear();
            s.pod_affinity.clear();
            s.pod_anti_affinity.clear();
            s.preferred_pod_affinity.clear();
            s.preferred_pod_anti_affinity.clear();
            s.node_selector
                .extend(p.home.iter().map(|(k, v)| (k.clone(), v.clone())));
            s
        })
        .collect()
}

/// The plan of the first `real` pods: spares' placements, reasons and claim slots dropped,
/// and claims left with no real pod not made.
fn without_spares(mut plan: Plan, real: usize) -> Plan {
    plan.placements.retain(|p| p.pod < real);
    plan.unschedulable.retain(|u| u.pod < real);
    plan.preferences.relaxed.retain(|(pod, _)| *pod < real);
    for c in &mut plan.new_claims {
        c.pods.retain(|&k| k < real);
    }
    plan.new_claims.retain(|c| !c.pods.is_empty());
    plan
}
