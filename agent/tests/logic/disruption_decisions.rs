//! The pure disruption decision on hand-built clusters: which nodes go, why, with which
//! replacement, and what blocks them. Prices are the synthetic catalogue's (see
//! `joiner_workloads`): type `fake-it-i` has i+1 vCPU and 2(i+1) GiB.

use std::collections::BTreeMap;

use joiner_agent::api::node_pool::Budget;
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::disruption::decide::{decide, Candidate, Config, Policy, PoolPolicy, World};
use joiner_agent::disruption::{quiet, Budgets, Reason};
use joiner_agent::labels;
use joiner_agent::requirements::{Requirement, Requirements};
use joiner_agent::scheduler::{self, BoundPod, Input, MovablePod, Pod};
use joiner_workloads::{karpenter_catalog, node_pool};
use proptest::prelude::*;

const MI: i64 = 1 << 20;
const NOW: i64 = 1_795_392_000 + 12 * 3600; // Monday 2026-11-23 12:00 UTC

fn catalog() -> Catalog {
    karpenter_catalog(40)
}

fn pool_reqs(ct: &[&str]) -> Requirements {
    let mut r = Requirements::new();
    r.add(
        labels::CAPACITY_TYPE,
        Requirement::new(joiner_agent::requirements::Operator::In, ct).unwrap(),
    );
    r
}

fn policy(budgets: &[Budget]) -> PoolPolicy {
    PoolPolicy {
        name: "default".into(),
        policy: Policy::WhenEmptyOrUnderutilized,
        consolidate_after: Some(30),
        budgets: Budgets::from_api(budgets).unwrap(),
        ..Default::default()
    }
}

fn budget(nodes: &str) -> Budget {
    Budget {
        nodes: nodes.into(),
        ..Default::default()
    }
}

fn pod(name: &str, cpu: i64, mem_mi: i64) -> Pod {
    let mut p = Pod::new("default", name, cpu, mem_mi * MI);
    p.labels.insert("app".into(), name.into());
    p
}

/// A node of type `fake-it-{i}` in zone a with these pods, old and quiet.
fn node(cat: &Catalog, name: &str, i: usize, ct: CapacityType, pods: Vec<Pod>) -> Candidate {
    let it = cat.get(&format!("fake-it-{i}")).unwrap();
    let zone = "test-zone-a";
    let mut l: BTreeMap<String, String> = it.labels.clone();
    l.insert(labels::ZONE.into(), zone.into());
    l.insert(labels::CAPACITY_TYPE.into(), ct.as_str().into());
    l.insert(labels::HOSTNAME.into(), name.into());
    l.insert(labels::JOINER_NODEPOOL.into(), "default".into());
    l.insert(labels::KARPENTER_NODEPOOL.into(), "default".into());
    let price = it
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == ct)
        .unwrap()
        .price;
    Candidate {
        node: scheduler::Node {
            name: name.into(),
            labels: l,
            taints: vec![],
            allocatable: it.allocatable.clone(),
            pods: pods.iter().map(BoundPod::from_pod).collect(),
            unschedulable: false,
        },
        pods: pods.iter().map(MovablePod::from_pod).collect(),
        nodeclaim: format!("claim-{name}"),
        nodepool: "default".into(),
        instance_type: it.name.clone(),
        zone: zone.into(),
        capacity_type: Some(ct),
        price,
        created: NOW - 86_400,
        last_pod_change: NOW - 3600,
        initialized: true,
        expire_after: None,
        ..Default::default()
    }
}

fn world(cat: &Catalog, candidates: Vec<Candidate>, pool: PoolPolicy, ct: &[&str]) -> World {
    let _ = cat;
    World {
        candidates,
        pools: vec![pool],
        sched: Input {
            node_pools: vec![node_pool("default", pool_reqs(ct))],
            ..Default::default()
        },
        now: NOW,
        ..Default::default()
    }
}

fn nodes_of(d: &joiner_agent::disruption::Decision) -> Vec<&str> {
    d.nodes.iter().map(|n| n.node.as_str()).collect()
}

#[test]
fn empty_nodes_go_unless_blocked() {
    let cat = catalog();
    let mut young = node(&cat, "young", 3, CapacityType::OnDemand, vec![]);
    young.created = NOW - 10;
    young.last_pod_change = NOW - 10;
    let mut dnd = node(&cat, "dnd", 3, CapacityType::OnDemand, vec![]);
    dnd.do_not_disrupt = true;
    let mut init = node(&cat, "init", 3, CapacityType::OnDemand, vec![]);
    init.initialized = false;
    let mut quiet_recently = node(&cat, "recent", 3, CapacityType::OnDemand, vec![]);
    quiet_recently.last_pod_change = NOW - 5;
    let w = world(
        &cat,
        vec![
            node(&cat, "empty", 3, CapacityType::OnDemand, vec![]),
            young,
            dnd,
            init,
            quiet_recently,
        ],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &w, &Config::default());
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    let d = &out.decisions[0];
    assert_eq!(d.reason, Reason::Empty);
    assert_eq!(nodes_of(d), vec!["empty"]);
    assert!(d.replacements.is_empty());
    assert!(
        d.saving > 0.0 && d.message.contains("saving"),
        "{}",
        d.message
    );
    let why = |n: &str| {
        out.blocked
            .iter()
            .find(|b| b.node == n)
            .map(|b| b.why.clone())
            .unwrap_or_default()
    };
    assert!(why("young").contains("younger"), "{}", why("young"));
    assert!(why("dnd").contains("do-not-disrupt"));
    assert!(why("init").contains("initialising"));
    assert!(why("recent").contains("changed less than"));
}

#[test]
fn consolidate_after_never_and_when_empty_policy() {
    let cat = catalog();
    let mut p = policy(&[budget("100%")]);
    p.consolidate_after = None;
    let w = world(
        &cat,
        vec![node(&cat, "empty", 3, CapacityType::OnDemand, vec![])],
        p,
        &["on-demand"],
    );
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());

    // WhenEmpty: an underutilised node that could move stays.
    let mut p = policy(&[budget("100%")]);
    p.policy = Policy::WhenEmpty;
    let w = world(
        &cat,
        vec![
            node(
                &cat,
                "big",
                15,
                CapacityType::OnDemand,
                vec![pod("a", 250, 256)],
            ),
            node(
                &cat,
                "other",
                15,
                CapacityType::OnDemand,
                vec![pod("b", 250, 256)],
            ),
        ],
        p,
        &["on-demand"],
    );
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());
}

#[test]
fn underutilised_node_deleted_when_its_pods_fit_elsewhere() {
    let cat = catalog();
    // "full" has room for a 500m pod; "light" holds one and costs more. Replacing both
    // with one 4-vCPU node would cost what keeping "full" costs: deleting "light" wins.
    let w = world(
        &cat,
        vec![
            node(
                &cat,
                "full",
                3,
                CapacityType::OnDemand,
                vec![pod("x", 3000, 1024)],
            ),
            node(
                &cat,
                "light",
                7,
                CapacityType::OnDemand,
                vec![pod("y", 500, 512)],
            ),
        ],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &w, &Config::default());
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    let d = &out.decisions[0];
    assert_eq!(d.reason, Reason::Underutilized);
    assert_eq!(nodes_of(d), vec!["light"]);
    assert!(d.replacements.is_empty());
    assert!(d.message.contains("fit on other nodes"), "{}", d.message);
}

#[test]
fn several_nodes_into_one_cheaper_replacement() {
    let cat = catalog();
    let w = world(
        &cat,
        vec![
            node(
                &cat,
                "a",
                7,
                CapacityType::OnDemand,
                vec![pod("p1", 500, 512)],
            ),
            node(
                &cat,
                "b",
                7,
                CapacityType::OnDemand,
                vec![pod("p2", 500, 512)],
            ),
            node(
                &cat,
                "c",
                7,
                CapacityType::OnDemand,
                vec![pod("p3", 500, 512)],
            ),
        ],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &w, &Config::default());
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    let d = &out.decisions[0];
    assert_eq!(d.nodes.len(), 3, "{}", d.message);
    assert_eq!(d.replacements.len(), 1);
    let old: f64 = d.nodes.iter().map(|n| n.price).sum();
    let new = d.replacements[0].instance_types[0].price;
    assert!(new <= old * 0.95, "replacement {new} vs {old}");
    // Every candidate type keeps the minimum saving, whichever one EC2 picks.
    assert!(d.replacements[0]
        .instance_types
        .iter()
        .all(|t| t.price <= old * 0.95));
    assert!((d.saving - (old - new)).abs() < 1e-9);
}

#[test]
fn replacement_needs_the_minimum_saving() {
    let cat = catalog();
    // A 3-vCPU node with a 1500m pod: a 2-vCPU node holds it for 2/3 of the price.
    let mk = || {
        world(
            &cat,
            vec![node(
                &cat,
                "n",
                2,
                CapacityType::OnDemand,
                vec![pod("p", 1500, 1024)],
            )],
            policy(&[budget("100%")]),
            &["on-demand"],
        )
    };
    let out = decide(&cat, &mk(), &Config::default());
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    assert_eq!(
        out.decisions[0].replacements[0].instance_types[0].instance_type,
        "fake-it-1"
    );
    assert!(
        out.decisions[0].message.contains("33%"),
        "{}",
        out.decisions[0].message
    );
    let strict = Config {
        min_saving_fraction: 0.5,
        ..Config::default()
    };
    assert!(decide(&cat, &mk(), &strict).decisions.is_empty());
    // Same size, same price: never churn.
    let w = world(
        &cat,
        vec![node(
            &cat,
            "n",
            1,
            CapacityType::OnDemand,
            vec![pod("p", 1500, 1024)],
        )],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());
}

#[test]
fn spot_to_spot_needs_enough_cheaper_candidates() {
    let cat = catalog();
    let mk = || {
        world(
            &cat,
            vec![node(
                &cat,
                "s",
                7,
                CapacityType::Spot,
                vec![pod("p", 500, 512)],
            )],
            policy(&[budget("100%")]),
            &["spot"],
        )
    };
    // Off by default, as Karpenter's SpotToSpotConsolidation gate: said, not done.
    let lax = Config {
        spot_to_spot_min_candidates: 5,
        ..Config::default()
    };
    let out = decide(&cat, &mk(), &lax);
    assert!(out.decisions.is_empty(), "{out:#?}");
    assert!(
        out.blocked.iter().any(|b| b
            .why
            .contains("spot-to-spot consolidation is off for NodePool default")),
        "{out:#?}"
    );
    let opted = |mut w: World| {
        w.pools[0].spot_to_spot = true;
        w
    };
    // fake-it-0..6 are the only cheaper types: 7 < 15.
    let out = decide(&cat, &opted(mk()), &Config::default());
    assert!(out.decisions.is_empty());
    assert!(
        out.blocked
            .iter()
            .any(|b| b.why == "spot-to-spot consolidation needs 15 cheaper Spot types, 7 found"),
        "{out:#?}"
    );
    let out = decide(&cat, &opted(mk()), &lax);
    assert_eq!(out.decisions.len(), 1);
    let r = &out.decisions[0].replacements[0];
    assert_eq!(r.instance_types.len(), 5, "launches from the 5 cheapest");
    assert!(r
        .instance_types
        .iter()
        .all(|t| t.capacity_type == CapacityType::Spot));
    // With 16+ cheaper Spot types it is allowed by default, from the 15 cheapest.
    let w = world(
        &cat,
        vec![node(
            &cat,
            "s",
            30,
            CapacityType::Spot,
            vec![pod("p", 500, 512)],
        )],
        policy(&[budget("100%")]),
        &["spot"],
    );
    let out = decide(&cat, &opted(w), &Config::default());
    assert_eq!(out.decisions.len(), 1);
    assert_eq!(out.decisions[0].replacements[0].instance_types.len(), 15);
}

/// `first`, then nine 8-vCPU nodes each filled by 8 pods (no room for anything more).
fn pool_of_ten(cat: &Catalog, first: Candidate) -> Vec<Candidate> {
    let a = &cat.get("fake-it-7").unwrap().allocatable;
    let (cpu, mem) = (a.cpu_milli / 8, a.memory_bytes / 8 / MI);
    let mut out = vec![first];
    for i in 1..10 {
        let pods = (0..8)
            .map(|k| pod(&format!("busy-{i}-{k}"), cpu, mem))
            .collect();
        let mut n = node(cat, &format!("busy-{i}"), 7, CapacityType::OnDemand, pods);
        n.do_not_disrupt = true;
        out.push(n);
    }
    out
}

#[test]
fn balanced_weighs_the_saving_against_the_pods_it_moves() {
    let cat = catalog();
    // The nine other nodes are full (8 pods each). "light" holds 8 pods of 250m (2 vCPU) on
    // 8 vCPU; a 3-vCPU node holds them for 3/8 of the price. Saving: 5/8 of one node of ten
    // (6.25 % of the pool's cost) for 9 of the pool's 90 units of disruption (a node counts
    // 1, each pod 1): 10 %, score 0.63, approved.
    let light = |pods: usize| {
        node(
            &cat,
            "light",
            7,
            CapacityType::OnDemand,
            (0..pods).map(|k| pod(&format!("l{k}"), 250, 256)).collect(),
        )
    };
    let balanced = |w: World| {
        let mut w = w;
        w.pools[0].policy = Policy::Balanced;
        w
    };
    let w = world(
        &cat,
        pool_of_ten(&cat, light(8)),
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &balanced(w), &Config::default());
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    let d = &out.decisions[0];
    assert_eq!(nodes_of(d), vec!["light"]);
    assert!(
        d.message.contains("; Balanced score 0.63 >= 0.50"),
        "{}",
        d.message
    );
    // 14 pods of 130m fit a 2-vCPU node: a bigger saving (7.5 %) for 15 of 96 units of
    // disruption (15.6 %): score 0.48, refused, where WhenEmptyOrUnderutilized moves them.
    // (Deleting it outright would score 0.64, so it passes the candidate filter.)
    let crowded = || {
        node(
            &cat,
            "light",
            7,
            CapacityType::OnDemand,
            (0..14).map(|k| pod(&format!("l{k}"), 130, 64)).collect(),
        )
    };
    let w = world(
        &cat,
        pool_of_ten(&cat, crowded()),
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    assert_eq!(decide(&cat, &w, &Config::default()).decisions.len(), 1);
    let out = decide(&cat, &balanced(w), &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
    let why = out
        .blocked
        .iter()
        .find(|b| b.node == "light")
        .map(|b| b.why.clone())
        .unwrap_or_default();
    assert!(why.starts_with("Balanced: score 0.48 < 0.50"), "{why}");
    // Pods that say they are expensive to restart weigh more: 8 such pods (10 each) keep
    // their node (even deleting it would score 0.10 / (81/162) = 0.20).
    let mut dear = light(8);
    dear.eviction_cost = Some(8.0 * 10.0);
    let w = world(
        &cat,
        pool_of_ten(&cat, dear),
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &balanced(w), &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
    assert!(out.blocked.iter().any(|b| b.node == "light"
        && b.why
            .starts_with("Balanced: even deleting it would not pay: score 0.20")));
}

#[test]
fn the_eviction_cap_holds_within_a_pass_and_across_the_hour() {
    let cat = catalog();
    // Three 4-vCPU nodes with 2 pods of 500m each, and a big node with room for them all.
    let mut big = node(
        &cat,
        "big",
        15,
        CapacityType::OnDemand,
        vec![pod("anchor", 8000, 8192)],
    );
    big.do_not_disrupt = true;
    let mut nodes = vec![big];
    for n in ["a", "b", "c"] {
        nodes.push(node(
            &cat,
            n,
            3,
            CapacityType::OnDemand,
            vec![
                pod(&format!("{n}1"), 500, 512),
                pod(&format!("{n}2"), 500, 512),
            ],
        ));
    }
    let mk = |cap: Option<u32>, used: u32| {
        let mut p = policy(&[budget("100%")]);
        p.evictions_per_hour = cap;
        p.evictions_last_hour = used;
        world(&cat, nodes.clone(), p, &["on-demand"])
    };
    let moved = |w: &World| -> usize {
        decide(&cat, w, &Config::default())
            .decisions
            .iter()
            .flat_map(|d| d.nodes.iter())
            .count()
    };
    assert_eq!(moved(&mk(None, 0)), 3, "no cap: all three go");
    assert_eq!(
        moved(&mk(Some(5), 0)),
        2,
        "a cap of 5 pods: two nodes of 2 pods"
    );
    let out = decide(&cat, &mk(Some(5), 3), &Config::default());
    assert_eq!(
        out.decisions.iter().map(|d| d.nodes.len()).sum::<usize>(),
        1
    );
    assert!(
        out.blocked.iter().any(|b| b.why
            == "the NodePool's cap of 5 consolidation evictions per hour would be exceeded (5 in the last hour, 2 more needed)"),
        "{out:#?}"
    );
    assert_eq!(moved(&mk(Some(0), 0)), 0, "a cap of 0 moves no pod");
}

#[test]
fn a_node_under_consolidate_after_is_no_destination_and_a_destination_cools() {
    let cat = catalog();
    // "x" and "y" (2 vCPU each; no cheaper type holds their pods, and together they need a
    // 4-vCPU node that costs as much as both) could each move their pod to "dest", which has
    // room for one of them. With dest's pods changed 10 s ago
    // (consolidateAfter 30 s) it may receive none; quiet, it receives one, and then cools:
    // the other stays.
    // Pods that nearly fill a 2-vCPU node; dest has room for one.
    let size = cat.get("fake-it-1").unwrap().allocatable.cpu_milli - 100;
    let room = cat.get("fake-it-7").unwrap().allocatable.cpu_milli - size - 50;
    let mk = |dest_quiet: bool| {
        let mut dest = node(
            &cat,
            "dest",
            7,
            CapacityType::OnDemand,
            vec![pod("d", room, 1024)],
        );
        dest.do_not_disrupt = true;
        if !dest_quiet {
            dest.last_pod_change = NOW - 10;
        }
        world(
            &cat,
            vec![
                dest,
                node(
                    &cat,
                    "x",
                    1,
                    CapacityType::OnDemand,
                    vec![pod("x", size, 512)],
                ),
                node(
                    &cat,
                    "y",
                    1,
                    CapacityType::OnDemand,
                    vec![pod("y", size, 512)],
                ),
            ],
            policy(&[budget("100%")]),
            &["on-demand"],
        )
    };
    let out = decide(&cat, &mk(false), &Config::default());
    assert!(
        out.decisions.is_empty(),
        "nothing may move onto dest: {out:#?}"
    );
    let out = decide(&cat, &mk(true), &Config::default());
    let deleted: Vec<&str> = out
        .decisions
        .iter()
        .filter(|d| d.replacements.is_empty())
        .flat_map(|d| d.nodes.iter().map(|n| n.node.as_str()))
        .collect();
    assert_eq!(
        deleted.len(),
        1,
        "one of x, y moves to dest, then dest cools: {out:#?}"
    );
}

#[test]
fn headroom_keeps_its_room_and_spare_nodes_stay() {
    use joiner_agent::api::node_pool::Headroom;
    let cat = catalog();
    // "free" is empty (4 vCPU); "half" has 3 of 4 vCPU used. Headroom: room for one pod of
    // 3 vCPU. Only "free" has it: the empty node stays, and so does "half" (its pod could
    // go to "free", but then the room would be gone).
    let mk = |h: Vec<Headroom>| {
        let mut p = policy(&[budget("100%")]);
        p.headroom = joiner_agent::scheduler::headroom::parse(&h).unwrap();
        world(
            &cat,
            vec![
                node(&cat, "free", 3, CapacityType::OnDemand, vec![]),
                node(
                    &cat,
                    "half",
                    3,
                    CapacityType::OnDemand,
                    vec![pod("h", 3000, 1024)],
                ),
            ],
            p,
            &["on-demand"],
        )
    };
    let room = Headroom {
        cpu: Some("3".into()),
        memory: Some("1Gi".into()),
        ..Default::default()
    };
    let out = decide(&cat, &mk(vec![]), &Config::default());
    assert_eq!(
        out.decisions.len(),
        1,
        "without headroom the empty node goes: {out:#?}"
    );
    let out = decide(&cat, &mk(vec![room]), &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
    assert!(out
        .blocked
        .iter()
        .any(|b| b.node == "free" && b.why == "its room is its NodePool's headroom"));
    // Spare nodes: one empty node is kept as the pool's spare.
    let spare = Headroom {
        nodes: Some(1),
        ..Default::default()
    };
    let out = decide(&cat, &mk(vec![spare]), &Config::default());
    assert!(
        out.decisions.iter().all(|d| d.reason != Reason::Empty),
        "{out:#?}"
    );
    assert!(out
        .blocked
        .iter()
        .any(|b| b.node == "free" && b.why.contains("spare nodes")));
}

#[test]
fn static_pools_are_never_consolidated() {
    let cat = catalog();
    let mut p = policy(&[budget("100%")]);
    p.replicas = Some(2);
    let w = world(
        &cat,
        vec![
            node(&cat, "empty", 3, CapacityType::OnDemand, vec![]),
            node(
                &cat,
                "light",
                7,
                CapacityType::OnDemand,
                vec![pod("y", 500, 512)],
            ),
        ],
        p,
        &["on-demand"],
    );
    let out = decide(&cat, &w, &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
    assert!(
        out.blocked.is_empty(),
        "not blocked either: not considered: {out:#?}"
    );
}

#[test]
fn budget_of_one_and_schedule_bound_zero() {
    let cat = catalog();
    let empties = || {
        (0..4)
            .map(|i| node(&cat, &format!("e{i}"), 3, CapacityType::OnDemand, vec![]))
            .collect::<Vec<_>>()
    };
    let out = decide(
        &cat,
        &world(&cat, empties(), policy(&[budget("1")]), &["on-demand"]),
        &Config::default(),
    );
    let total: usize = out.decisions.iter().map(|d| d.nodes.len()).sum();
    assert_eq!(total, 1, "{out:#?}");
    assert_eq!(
        out.blocked
            .iter()
            .filter(|b| b.why.contains("budget"))
            .count(),
        3
    );

    // A node already disrupting uses the budget up.
    let mut nodes = empties();
    nodes[0].disrupting = true;
    let out = decide(
        &cat,
        &world(&cat, nodes, policy(&[budget("1")]), &["on-demand"]),
        &Config::default(),
    );
    assert!(out.decisions.is_empty(), "{out:#?}");

    // 0 during business hours (NOW is Monday 12:00), 100% otherwise.
    let hours = Budget {
        nodes: "0".into(),
        schedule: Some("0 9 * * mon-fri".into()),
        duration: Some("8h".into()),
        reasons: vec![],
    };
    let w = world(
        &cat,
        empties(),
        policy(&[budget("100%"), hours.clone()]),
        &["on-demand"],
    );
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());
    let mut w = world(
        &cat,
        empties(),
        policy(&[budget("100%"), hours.clone()]),
        &["on-demand"],
    );
    w.now = NOW + 6 * 3600;
    let out = decide(&cat, &w, &Config::default());
    assert_eq!(
        out.decisions.iter().map(|d| d.nodes.len()).sum::<usize>(),
        4
    );
    // A budget for another reason does not apply.
    let drift_only = Budget {
        reasons: vec!["Drifted".into()],
        ..hours
    };
    let w = world(
        &cat,
        empties(),
        policy(&[budget("100%"), drift_only]),
        &["on-demand"],
    );
    assert_eq!(decide(&cat, &w, &Config::default()).decisions.len(), 1);
}

#[test]
fn pdbs_and_pod_do_not_disrupt_block() {
    let cat = catalog();
    let mut guarded = node(
        &cat,
        "guarded",
        7,
        CapacityType::OnDemand,
        vec![pod("p", 500, 512)],
    );
    guarded.pdb_blocked = true;
    let roomy = node(
        &cat,
        "roomy",
        7,
        CapacityType::OnDemand,
        vec![pod("q", 500, 512)],
    );
    let mut w = world(
        &cat,
        vec![guarded, roomy],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    let out = decide(&cat, &w, &Config::default());
    // Only "roomy" may move (onto "guarded").
    assert!(
        out.decisions
            .iter()
            .all(|d| !nodes_of(d).contains(&"guarded")),
        "{out:#?}"
    );
    assert!(out
        .blocked
        .iter()
        .any(|b| b.node == "guarded" && b.why.contains("PodDisruptionBudget")));
    w.candidates[1].do_not_disrupt = true;
    let out = decide(&cat, &w, &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
}

#[test]
fn expired_and_drifted_nodes_are_replaced_within_budget() {
    let cat = catalog();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut n = node(
            &cat,
            &format!("d{i}"),
            3,
            CapacityType::OnDemand,
            vec![pod(&format!("p{i}"), 3000, 2048)],
        );
        n.drift = Some("the NodePool's template changed".into());
        n.created = NOW - 86_400 + i;
        nodes.push(n);
    }
    let out = decide(
        &cat,
        &world(&cat, nodes.clone(), policy(&[budget("1")]), &["on-demand"]),
        &Config::default(),
    );
    assert_eq!(out.decisions.len(), 1, "{out:#?}");
    let d = &out.decisions[0];
    assert_eq!(d.reason, Reason::Drifted);
    assert_eq!(nodes_of(d), vec!["d0"], "oldest first");
    assert_eq!(d.replacements.len(), 1, "its pod needs a new node");
    assert!(d.message.contains("drifted"), "{}", d.message);

    // Two at once with a budget of 2: the second simulation sees the first replacement.
    let out = decide(
        &cat,
        &world(&cat, nodes, policy(&[budget("2")]), &["on-demand"]),
        &Config::default(),
    );
    assert_eq!(out.decisions.len(), 2, "{out:#?}");
    assert!(out.decisions.iter().all(|d| d.replacements.len() == 1));

    let mut old = node(
        &cat,
        "old",
        3,
        CapacityType::OnDemand,
        vec![pod("p", 3000, 2048)],
    );
    old.expire_after = Some(3600);
    let mut never = node(
        &cat,
        "never",
        3,
        CapacityType::OnDemand,
        vec![pod("q", 3000, 2048)],
    );
    never.expire_after = None;
    let out = decide(
        &cat,
        &world(
            &cat,
            vec![old, never],
            policy(&[budget("100%")]),
            &["on-demand"],
        ),
        &Config::default(),
    );
    let expired: Vec<_> = out
        .decisions
        .iter()
        .filter(|d| d.reason == Reason::Expired)
        .collect();
    assert_eq!(expired.len(), 1);
    assert_eq!(nodes_of(expired[0]), vec!["old"]);
    assert!(expired[0].message.contains("expired"));
}

#[test]
fn pending_pods_pause_consolidation_but_not_drift() {
    let cat = catalog();
    let mut w = world(
        &cat,
        vec![
            node(
                &cat,
                "full",
                3,
                CapacityType::OnDemand,
                vec![pod("x", 2000, 1024)],
            ),
            node(
                &cat,
                "light",
                7,
                CapacityType::OnDemand,
                vec![pod("y", 500, 512)],
            ),
            node(&cat, "empty", 3, CapacityType::OnDemand, vec![]),
        ],
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    w.pending_pods = 2;
    let out = decide(&cat, &w, &Config::default());
    assert!(out.decisions.is_empty(), "{out:#?}");
    assert!(out
        .blocked
        .iter()
        .any(|b| b.why.contains("waiting for capacity")));
    w.candidates[1].drift = Some("the NodeClass changed".into());
    let out = decide(&cat, &w, &Config::default());
    assert_eq!(out.decisions.len(), 1);
    assert_eq!(out.decisions[0].reason, Reason::Drifted);
}

#[test]
fn seed_scale_in_ends_with_the_nodes_four_pods_need() {
    // 25 nodes of 4 vCPU after 100 replicas of 250m/512Mi; 96 pods gone, 4 left on 4 nodes.
    let cat = catalog();
    let mut nodes = Vec::new();
    for i in 0..25 {
        let pods = if i % 6 == 0 && i < 24 {
            vec![pod(&format!("web-{i}"), 250, 512)]
        } else {
            vec![]
        };
        nodes.push(node(
            &cat,
            &format!("n{i:02}"),
            3,
            CapacityType::OnDemand,
            pods,
        ));
    }
    let w = world(&cat, nodes, policy(&[budget("100%")]), &["on-demand"]);
    let out = decide(&cat, &w, &Config::default());
    let removed: usize = out.decisions.iter().map(|d| d.nodes.len()).sum();
    let added: usize = out.decisions.iter().map(|d| d.replacements.len()).sum();
    // 21 empty nodes go; the 4 single-pod nodes fold into one small node.
    assert_eq!(removed, 25, "{out:#?}");
    assert_eq!(added, 1);
}

/// The disruption loop skips passes over an unchanged world until `quiet::recheck_at`
/// (what keeps the agent's steady CPU low). Here the clock is what moves: an empty node quiet for less
/// than consolidateAfter is kept until exactly its recheck second, and goes at it.
#[test]
fn a_quiet_world_is_rechecked_when_consolidate_after_ends() {
    let cat = catalog();
    let mut n = node(&cat, "e", 3, CapacityType::OnDemand, vec![]);
    n.last_pod_change = NOW - 10;
    let mut w = world(&cat, vec![n], policy(&[budget("100%")]), &["on-demand"]);
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());
    let at = quiet::recheck_at(&w).expect("consolidateAfter ends");
    assert_eq!(at, NOW + 20, "30 s after the pods last changed");
    w.now = at - 1;
    assert!(decide(&cat, &w, &Config::default()).decisions.is_empty());
    w.now = at;
    assert_eq!(decide(&cat, &w, &Config::default()).decisions.len(), 1);

    // A changed world has another fingerprint; the same world built again has the same.
    let again = world(
        &cat,
        w.candidates.clone(),
        policy(&[budget("100%")]),
        &["on-demand"],
    );
    assert_eq!(
        quiet::fingerprint(&w, &cat),
        quiet::fingerprint(&again, &cat),
        "the clock is not part of it"
    );
    let mut busier = again.clone();
    busier.candidates[0]
        .pods
        .push(MovablePod::from_pod(&pod("p", 100, 100)));
    assert_ne!(
        quiet::fingerprint(&w, &cat),
        quiet::fingerprint(&busier, &cat)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Skipping is sound: whenever decide finds nothing, it finds nothing at any second
    /// before `recheck_at`, whatever the nodes' ages, pod changes, expiry, consolidateAfter
    /// and a budget window that closes the pool for part of every few minutes.
    #[test]
    fn nothing_to_decide_stays_so_until_the_recheck(
        nodes in proptest::collection::vec(
            (0usize..3, 0i64..900, 0i64..900, proptest::option::of(60u64..1_800)),
            1..5,
        ),
        after in proptest::option::of(0u64..400),
        window in proptest::option::of((1u32..10, 1u64..400)),
        offset in 0i64..3_600,
    ) {
        let cat = catalog();
        let now = NOW + offset;
        let candidates: Vec<Candidate> = nodes
            .iter()
            .enumerate()
            .map(|(i, &(pods, age, quiet_for, expire))| {
                let pods = (0..pods).map(|j| pod(&format!("p{i}-{j}"), 250, 256)).collect();
                let mut c = node(&cat, &format!("n{i}"), 3, CapacityType::OnDemand, pods);
                c.created = now - age;
                c.last_pod_change = now - quiet_for.min(age);
                c.expire_after = expire;
                c
            })
            .collect();
        let mut budgets = vec![budget("100%")];
        if let Some((every, secs)) = window {
            budgets.push(Budget {
                nodes: "0".into(),
                schedule: Some(format!("*/{every} * * * *")),
                duration: Some(format!("{secs}s")),
                reasons: vec![],
            });
        }
        let mut pool = policy(&budgets);
        pool.consolidate_after = after;
        let mut w = world(&cat, candidates, pool, &["on-demand"]);
        w.now = now;
        if !decide(&cat, &w, &Config::default()).decisions.is_empty() {
            return Ok(());
        }
        let until = quiet::recheck_at(&w).unwrap_or(now + quiet::MAX_QUIET_SECS);
        for t in [now + 1, now + (until - now) / 2, until - 1] {
            if t <= now || t >= until {
                continue;
            }
            w.now = t;
            let out = decide(&cat, &w, &Config::default());
            prop_assert!(
                out.decisions.is_empty(),
                "quiet at {now}, recheck at {until}, but at {t}: {:?}",
                out.decisions
            );
        }
    }

    /// A trial simulated on the nodes with room alone decides as one on every node: the
    /// same cluster plus a cordoned node elsewhere holding a pod whose anti-affinity selects
    /// nothing (which makes every trial see every node, as any placed anti-affinity does)
    /// gets the same decisions and the same blocks. The clusters are small and nearly full,
    /// the case where trials are narrowed.
    #[test]
    fn trials_on_the_nodes_with_room_decide_as_trials_on_every_node(
        nodes in proptest::collection::vec(
            (0usize..4, proptest::collection::vec((1i64..16, 1i64..16), 0..7)),
            2..10,
        ),
    ) {
        let cat = catalog();
        let candidates: Vec<Candidate> = nodes
            .iter()
            .enumerate()
            .map(|(i, (size, asks))| {
                let t = 2 * size + 1;
                let it = cat.get(&format!("fake-it-{t}")).unwrap();
                let (mut cpu, mut mem) = (0, 0);
                let mut pods = Vec::new();
                for (j, &(c, m)) in asks.iter().enumerate() {
                    let (c, m) = (c * 125, m * 128);
                    if cpu + c > it.allocatable.cpu_milli || (mem + m) * MI > it.allocatable.memory_bytes {
                        continue;
                    }
                    cpu += c;
                    mem += m;
                    pods.push(pod(&format!("p{i}-{j}"), c, m));
                }
                node(&cat, &format!("n{i}"), t, CapacityType::OnDemand, pods)
            })
            .collect();
        let narrowed = world(&cat, candidates, policy(&[budget("100%")]), &["on-demand"]);
        let mut every = narrowed.clone();
        every.other_nodes.push(scheduler::Node {
            name: "elsewhere".into(),
            unschedulable: true,
            pods: vec![BoundPod::from_pod(&joiner_agent::scheduler::Pod {
                namespace: "default".into(),
                pod_anti_affinity: vec![scheduler::PodAffinityTerm {
                    label_selector: Some(scheduler::LabelSelector::labels([("selects", "nothing")])),
                    topology_key: labels::ZONE.into(),
                    ..Default::default()
                }],
                ..Default::default()
            })],
            ..Default::default()
        });
        let a = decide(&cat, &narrowed, &Config::default());
        let b = decide(&cat, &every, &Config::default());
        prop_assert_eq!(format!("{:?}", a.decisions), format!("{:?}", b.decisions));
        prop_assert_eq!(format!("{:?}", a.blocked), format!("{:?}", b.blocked));
    }
}
