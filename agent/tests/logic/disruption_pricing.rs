//! Consolidation with overlaid prices: a NodeOverlay changes which replacement is worth
//! it (the disruption loop decides on the provisioning round's overlaid catalogue and
//! prices its nodes from it).

use std::collections::BTreeMap;

use joiner_agent::api::node_overlay::NodeOverlaySpec;
use joiner_agent::api::node_pool::Budget;
use joiner_agent::catalog::overlay::{self, Overlay};
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::disruption::decide::{decide, Candidate, Config, Policy, PoolPolicy, World};
use joiner_agent::disruption::Budgets;
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{self, BoundPod, Input, MovablePod, Pod};
use joiner_workloads::{karpenter_catalog, node_pool};

const NOW: i64 = 1_795_392_000 + 12 * 3600;

/// A quiet, day-old node of `itype` (on-demand, zone a) holding one 500m pod, priced from
/// `cat` as the disruption loop prices its nodes.
fn node(cat: &Catalog, itype: &str) -> Candidate {
    let it = cat.get(itype).unwrap();
    let zone = "test-zone-a";
    let mut l: BTreeMap<String, String> = it.labels.clone();
    l.insert(labels::ZONE.into(), zone.into());
    l.insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
    l.insert(labels::HOSTNAME.into(), "n".into());
    l.insert(labels::KARPENTER_NODEPOOL.into(), "default".into());
    let pods = [Pod::new("default", "p", 500, 512 << 20)];
    Candidate {
        node: scheduler::Node {
            name: "n".into(),
            labels: l,
            allocatable: it.allocatable.clone(),
            pods: pods.iter().map(BoundPod::from_pod).collect(),
            ..Default::default()
        },
        pods: pods.iter().map(MovablePod::from_pod).collect(),
        nodeclaim: "claim-n".into(),
        nodepool: "default".into(),
        instance_type: itype.into(),
        zone: zone.into(),
        capacity_type: Some(CapacityType::OnDemand),
        price: it
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == CapacityType::OnDemand)
            .unwrap()
            .price,
        created: NOW - 86_400,
        last_pod_change: NOW - 3600,
        initialized: true,
        ..Default::default()
    }
}

fn world(candidate: Candidate) -> World {
    let mut reqs = Requirements::new();
    reqs.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["on-demand"]).unwrap(),
    );
    World {
        candidates: vec![candidate],
        pools: vec![PoolPolicy {
            name: "default".into(),
            policy: Policy::WhenEmptyOrUnderutilized,
            consolidate_after: Some(30),
            budgets: Budgets::from_api(&[Budget {
                nodes: "100%".into(),
                ..Default::default()
            }])
            .unwrap(),
            ..Default::default()
        }],
        sched: Input {
            node_pools: vec![node_pool("default", reqs)],
            ..Default::default()
        },
        now: NOW,
        ..Default::default()
    }
}

fn overlay(json: serde_json::Value) -> Overlay {
    let spec: NodeOverlaySpec = serde_json::from_value(json).unwrap();
    assert_eq!(
        joiner_agent::api::node_overlay::validate(&spec, "spec"),
        vec![]
    );
    Overlay::from_spec("o", &spec)
}

#[test]
fn an_overlay_decides_whether_a_replacement_saves() {
    let list = karpenter_catalog(40);
    // On the price list, an 8-vCPU node holding one 500m pod is replaced by a small one.
    let out = decide(&list, &world(node(&list, "fake-it-7")), &Config::default());
    assert_eq!(out.decisions.len(), 1, "{:?}", out.blocked);
    let small = &out.decisions[0].replacements[0].instance_types[0].instance_type;
    assert_ne!(small, "fake-it-7");
    // A Savings Plan covering fake-it-7 at a tenth of its price: nothing smaller is cheaper
    // any more, so the node stays.
    let covered = overlay::apply(
        &list,
        &[overlay(
            serde_json::json!({"priceAdjustment": "-90%", "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["fake-it-7"]}]}),
        )],
    );
    let out = decide(
        &covered,
        &world(node(&covered, "fake-it-7")),
        &Config::default(),
    );
    assert!(out.decisions.is_empty(), "{:?}", out.decisions);
    // An overlay making the smallest types dear moves the replacement elsewhere.
    let dear_small = overlay::apply(
        &list,
        &[overlay(
            serde_json::json!({"priceAdjustment": "+500%", "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [small]}]}),
        )],
    );
    let out = decide(
        &dear_small,
        &world(node(&dear_small, "fake-it-7")),
        &Config::default(),
    );
    assert_eq!(out.decisions.len(), 1);
    assert_ne!(
        &out.decisions[0].replacements[0].instance_types[0].instance_type,
        small
    );
}
