//! `topology.k8s.aws/zone-id` as the zone it names.
//!
//! A zone name (`us-east-1a`) maps to a different physical zone in every account; the zone
//! ID (`use1-az1`) does not, which is why teams that share subnets across accounts select
//! by ID. The ID is a property of the zone, one to one, so the scheduler needs no dimension
//! of its own for it: before planning, a requirement on the ID becomes a requirement on
//! the zones whose ID satisfies it, and a topology key on the ID becomes the zone key (the
//! same domains under other names). Existing nodes carry both labels, so they match either
//! way. A zone whose ID is unknown satisfies no ID requirement: unknown is not a match.

use std::collections::{BTreeMap, BTreeSet};

use super::input::{Input, Pod};
use crate::labels;
use crate::requirements::{Requirement, Requirements};

/// Zone name → zone ID, from the NodeClasses' subnets.
pub type ZoneIds = BTreeMap<String, String>;

/// Rewrites every zone-ID requirement and topology key of the pending pods and NodePools.
pub fn rewrite(input: &mut Input, ids: &ZoneIds) {
    for pool in &mut input.node_pools {
        requirements(&mut pool.requirements, ids);
    }
    for pod in &mut input.pods {
        rewrite_pod(pod, ids);
    }
}

fn rewrite_pod(pod: &mut Pod, ids: &ZoneIds) {
    if let Some(id) = pod.node_selector.remove(labels::ZONE_ID) {
        // A selector is an `In` of one value; it joins the terms as a requirement.
        let mut r = Requirements::new();
        r.add(labels::ZONE_ID, Requirement::one(&id));
        requirements(&mut r, ids);
        if pod.required_node_affinity.is_empty() {
            pod.required_node_affinity.push(r);
        } else {
            for term in &mut pod.required_node_affinity {
                *term = term.intersect(&r);
            }
        }
    }
    for term in &mut pod.required_node_affinity {
        requirements(term, ids);
    }
    for (_, term) in &mut pod.preferred_node_affinity {
        requirements(term, ids);
    }
    for t in &mut pod.topology_spread {
        if t.topology_key == labels::ZONE_ID {
            t.topology_key = labels::ZONE.into();
        }
    }
    let terms = pod
        .pod_affinity
        .iter_mut()
        .chain(pod.pod_anti_affinity.iter_mut())
        .chain(pod.preferred_pod_affinity.iter_mut().map(|(_, t)| t))
        .chain(pod.preferred_pod_anti_affinity.iter_mut().map(|(_, t)| t));
    for t in terms {
        if t.topology_key == labels::ZONE_ID {
            t.topology_key = labels::ZONE.into();
        }
    }
}

/// Replaces a zone-ID requirement by the zones whose known ID satisfies it.
pub fn requirements(reqs: &mut Requirements, ids: &ZoneIds) {
    let Some(want) = reqs.remove(labels::ZONE_ID) else {
        return;
    };
    let zones: BTreeSet<String> = ids
        .iter()
        .filter(|(_, id)| want.has(id))
        .map(|(zone, _)| zone.clone())
        .collect();
    reqs.add(labels::ZONE, Requirement::listed(zones));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Operator;
    use crate::scheduler::input::TopologySpreadConstraint;

    fn ids() -> ZoneIds {
        [
            ("us-east-1a", "use1-az4"),
            ("us-east-1b", "use1-az6"),
            ("us-east-1c", "use1-az1"),
        ]
        .into_iter()
        .map(|(z, i)| (z.to_string(), i.to_string()))
        .collect()
    }

    fn zones(r: &Requirements) -> Vec<String> {
        ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
            .into_iter()
            .filter(|z| r.get(labels::ZONE).is_none_or(|q| q.has(z)))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn an_id_requirement_becomes_the_zones_it_names() {
        let mut r = Requirements::new();
        r.add(
            labels::ZONE_ID,
            Requirement::new(Operator::In, &["use1-az1", "use1-az4"]).unwrap(),
        );
        requirements(&mut r, &ids());
        assert!(r.get(labels::ZONE_ID).is_none());
        assert_eq!(zones(&r), ["us-east-1a", "us-east-1c"]);

        // NotIn keeps the other known zones; an already narrowed zone stays narrowed.
        let mut r = Requirements::new();
        r.add(
            labels::ZONE_ID,
            Requirement::new(Operator::NotIn, &["use1-az1"]).unwrap(),
        );
        r.add(labels::ZONE, Requirement::one("us-east-1b"));
        requirements(&mut r, &ids());
        assert_eq!(zones(&r), ["us-east-1b"]);
    }

    #[test]
    fn unknown_ids_match_nothing() {
        let mut r = Requirements::new();
        r.add(labels::ZONE_ID, Requirement::one("use1-az1"));
        requirements(&mut r, &ZoneIds::new());
        assert!(zones(&r).is_empty(), "no zone is known to have that ID");
    }

    #[test]
    fn pods_selectors_affinities_and_spreads_follow() {
        let mut pod = Pod::new("default", "p", 100, 1 << 20);
        pod.node_selector
            .insert(labels::ZONE_ID.into(), "use1-az6".into());
        pod.topology_spread.push(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE_ID.into(),
            ..Default::default()
        });
        rewrite_pod(&mut pod, &ids());
        assert!(pod.node_selector.is_empty());
        assert_eq!(pod.required_node_affinity.len(), 1);
        assert_eq!(zones(&pod.required_node_affinity[0]), ["us-east-1b"]);
        assert_eq!(pod.topology_spread[0].topology_key, labels::ZONE);
    }
}
