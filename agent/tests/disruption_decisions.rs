//! The pure disruption decision on hand-built clusters: which nodes go, why, with which
//! replacement, and what blocks them. Prices are the synthetic catalogue's (see
//! `joiner_agent::workloads`): type `fake-it-i` has i+1 vCPU and 2(i+1) GiB.

use std::collections::BTreeMap;

use joiner_agent::api::node_pool::Budget;
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::disruption::decide::{decide, Candidate, Config, Policy, PoolPolicy, World};
use joiner_agent::disruption::{Budgets, Reason};
use joiner_agent::labels;
use joiner_agent::requirements::{Requirement, Requirements};
use joiner_agent::scheduler::{self, BoundPod, Input, Pod};
use joiner_agent::workloads::{karpenter_catalog, node_pool};

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
        pods,
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
    // fake-it-0..6 are the only cheaper types: 7 < 15.
    assert!(decide(&cat, &mk(), &Config::default()).decisions.is_empty());
    let lax = Config {
        spot_to_spot_min_candidates: 5,
        ..Config::default()
    };
    let out = decide(&cat, &mk(), &lax);
    assert_eq!(out.decisions.len(), 1);
    let r = &out.decisions[0].replacements[0];
    assert!(r.instance_types.len() >= 5);
    assert!(r
        .instance_types
        .iter()
        .all(|t| t.capacity_type == CapacityType::Spot));
    // With 16+ cheaper Spot types it is allowed by default.
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
    assert_eq!(decide(&cat, &w, &Config::default()).decisions.len(), 1);
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
