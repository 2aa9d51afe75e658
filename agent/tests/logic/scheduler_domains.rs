//! Topology scenarios on the real catalogue fixture: topology domains that NodePools
//! define, limits that keep their headroom honest, preferences with a price, and one
//! scenario per field added to the scheduler's input. Every plan is also verified by the
//! independent checker (`checker/`).

use joiner_agent_world::checker;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use joiner_agent::catalog::{Catalog, CatalogOptions};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    schedule, schedule_with_spare_room, BoundPod, Input, LabelSelector, Node, NodeInclusionPolicy,
    NodePoolInput, Plan, Pod, PodAffinityTerm, PreferenceBudget, PreferenceMode, Target,
    TopologySpreadConstraint, WhenUnsatisfiable,
};
use joiner_agent::taints::{Effect, Taint};
use joiner_workloads::node_pool;

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;
const SPREAD_KEY: &str = "capacity-spread";

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| {
        Catalog::from_dump_json(
            include_str!("../../fixtures/ec2-instance-types.json"),
            &CatalogOptions::default(),
        )
        .expect("fixture parses")
    })
}

fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    let _ = key;
    Requirement::new(op, values).unwrap()
}

fn general(name: &str) -> NodePoolInput {
    let mut r = Requirements::new();
    r.add(
        labels::INSTANCE_CATEGORY,
        req("", Operator::In, &["c", "m", "r"]),
    );
    r.add(labels::INSTANCE_GENERATION, req("", Operator::Gt, &["4"]));
    r.add(labels::ARCH, req("", Operator::In, &["amd64"]));
    node_pool(name, r)
}

fn pods(n: usize, app: &str, cpu: i64, mem: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = Pod::new("default", &format!("{app}-{i:03}"), cpu, mem);
            p.labels.insert("app".into(), app.into());
            p
        })
        .collect()
}

fn spread(key: &str, app: &str, when: WhenUnsatisfiable) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when,
        label_selector: Some(LabelSelector::labels([("app", app)])),
        ..Default::default()
    }
}

/// Runs the scheduler and the independent checker.
fn plan(input: &Input) -> Plan {
    let plan = schedule(catalog(), input);
    checker::check(catalog(), input, &plan).unwrap_or_else(|e| panic!("checker: {e}"));
    plan
}

/// Karpenter's documented Spot/on-demand ratio: the split of `capacity-spread` values
/// between a Spot and an on-demand NodePool decides the ratio.
fn capacity_spread_split(spot_values: &[&str], od_values: &[&str]) -> BTreeMap<String, usize> {
    let mut spot = general("spot");
    spot.requirements
        .add(labels::CAPACITY_TYPE, req("", Operator::In, &["spot"]));
    spot.requirements
        .add(SPREAD_KEY, req("", Operator::In, spot_values));
    let mut od = general("on-demand");
    od.requirements
        .add(labels::CAPACITY_TYPE, req("", Operator::In, &["on-demand"]));
    od.requirements
        .add(SPREAD_KEY, req("", Operator::In, od_values));
    let mut ps = pods(100, "ratio", 250, 512 * MI);
    for p in &mut ps {
        p.topology_spread.push(spread(
            SPREAD_KEY,
            "ratio",
            WhenUnsatisfiable::DoNotSchedule,
        ));
    }
    let input = Input {
        pods: ps,
        node_pools: vec![spot, od],
        ..Default::default()
    };
    let plan = plan(&input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_value: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        let v = c
            .requirements
            .get(SPREAD_KEY)
            .and_then(|r| r.single_value())
            .expect("every claim is pinned to one capacity-spread value")
            .to_string();
        *per_value.entry(v).or_default() += c.pods.len();
        *per_pool.entry(c.nodepool.clone()).or_default() += c.pods.len();
        let ct = if c.nodepool == "spot" {
            "spot"
        } else {
            "on-demand"
        };
        assert!(c.capacity_types.iter().all(|t| t.as_str() == ct));
    }
    let n = (spot_values.len() + od_values.len()) as f64;
    for (v, count) in &per_value {
        assert!(
            (*count as f64 - 100.0 / n).abs() <= 1.0,
            "value {v} holds {count} pods: {per_value:?}"
        );
    }
    per_pool
}

#[test]
fn capacity_spread_80_20() {
    let split = capacity_spread_split(&["1", "2", "3", "4"], &["5"]);
    assert_eq!(
        split,
        BTreeMap::from([("on-demand".to_string(), 20), ("spot".to_string(), 80)])
    );
}

#[test]
fn capacity_spread_75_25() {
    let split = capacity_spread_split(&["1", "2", "3"], &["4"]);
    assert_eq!(
        split,
        BTreeMap::from([("on-demand".to_string(), 25), ("spot".to_string(), 75)])
    );
}

#[test]
fn capacity_type_spread_within_one_pool_stays_50_50() {
    let mut pool = general("default");
    pool.requirements.add(
        labels::CAPACITY_TYPE,
        req("", Operator::In, &["spot", "on-demand"]),
    );
    let mut ps = pods(100, "split", 250, 512 * MI);
    for p in &mut ps {
        p.topology_spread.push(spread(
            labels::CAPACITY_TYPE,
            "split",
            WhenUnsatisfiable::DoNotSchedule,
        ));
    }
    let plan = plan(&Input {
        pods: ps,
        node_pools: vec![pool],
        ..Default::default()
    });
    let mut per_ct: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        assert_eq!(c.capacity_types.len(), 1);
        *per_ct.entry(c.capacity_types[0].as_str()).or_default() += c.pods.len();
    }
    assert_eq!(per_ct, BTreeMap::from([("on-demand", 50), ("spot", 50)]));
}

#[test]
fn min_domains_counts_domains_node_pools_can_create() {
    // Two pools define three values between them; minDomains 3 is met by what they can
    // create, so the global minimum is real and pods spread 1/1/1 instead of piling up.
    let mut a = general("a");
    a.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["x", "y"]));
    let mut b = general("b");
    b.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["z"]));
    let mut ps = pods(9, "md", 500, GI);
    for p in &mut ps {
        let mut s = spread(SPREAD_KEY, "md", WhenUnsatisfiable::DoNotSchedule);
        s.min_domains = Some(3);
        p.topology_spread.push(s);
    }
    let plan = plan(&Input {
        pods: ps,
        node_pools: vec![a, b],
        ..Default::default()
    });
    let mut per_value: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        let v = c
            .requirements
            .get(SPREAD_KEY)
            .unwrap()
            .single_value()
            .unwrap();
        *per_value.entry(v.to_string()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_value,
        BTreeMap::from([("x".into(), 3), ("y".into(), 3), ("z".into(), 3)])
    );
}

/// A CPU limit of 8 vCPU and ten 1-CPU pods that must not share a node: reserving the
/// largest candidate (Karpenter) gives one node; choosing claims' candidates under the
/// limit gives as many nodes as the limit honestly holds, and the rest are named.
#[test]
fn limits_hold_in_the_worst_case_without_wasting_headroom() {
    let mut pool = general("limited");
    pool.limits.insert("cpu".into(), 8_000);
    let mut ps = pods(10, "solo", 1000, GI);
    for p in &mut ps {
        p.pod_anti_affinity.push(PodAffinityTerm {
            label_selector: Some(LabelSelector::labels([("app", "solo")])),
            topology_key: labels::HOSTNAME.into(),
            ..Default::default()
        });
    }
    let input = Input {
        pods: ps,
        node_pools: vec![pool],
        ..Default::default()
    };
    let plan = plan(&input);
    let worst: i64 = plan
        .new_claims
        .iter()
        .map(|c| {
            c.instance_types
                .iter()
                .map(|t| catalog().get(&t.instance_type).unwrap().capacity.cpu_milli)
                .max()
                .unwrap()
        })
        .sum();
    assert!(
        worst <= 8_000,
        "worst-case launch {worst}m exceeds the limit"
    );
    let placed: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
    // Reserving the largest candidate under an 8-vCPU limit leaves room for one node.
    assert!(placed >= 3, "only {placed} pods placed under the limit");
    assert_eq!(placed + plan.unschedulable.len(), 10);
    for u in &plan.unschedulable {
        assert!(
            u.reasons
                .iter()
                .any(|r| r.contains("limit cpu=8") && r.contains("limited")),
            "{:?}",
            u.reasons
        );
    }
}

/// Seed 004: 100 pods of 250m/512Mi with zone and hostname ScheduleAnyway spreads, on
/// that seed's NodePool (Spot and on-demand, large to 4xlarge, nitro, a family exclusion
/// list). Honoured as hard, they launch a node per pod and reach zones where only GPU
/// types are offered; priced, they cost at most the budget over the same pods without
/// preferences and still spread over the nodes and zones launched.
#[test]
fn seed_004_soft_spreads_do_not_multiply_the_bill() {
    let excluded = ["t2", "t3", "t3a", "m4", "c4", "r4", "a1", "m5zn"];
    let mut r = Requirements::new();
    r.add(labels::INSTANCE_FAMILY, req("", Operator::NotIn, &excluded));
    r.add(
        labels::INSTANCE_SIZE,
        req("", Operator::In, &["large", "xlarge", "2xlarge", "4xlarge"]),
    );
    r.add(
        labels::INSTANCE_HYPERVISOR,
        req("", Operator::In, &["nitro"]),
    );
    r.add(labels::ARCH, req("", Operator::In, &["amd64"]));
    r.add(labels::OS, req("", Operator::In, &["linux"]));
    r.add(
        labels::CAPACITY_TYPE,
        req("", Operator::In, &["spot", "on-demand"]),
    );
    let pool = node_pool("seed-004", r);
    let plain = pods(100, "shop", 250, 512 * MI);
    let mut soft = plain.clone();
    for p in &mut soft {
        p.topology_spread.push(spread(
            labels::ZONE,
            "shop",
            WhenUnsatisfiable::ScheduleAnyway,
        ));
        p.topology_spread.push(spread(
            labels::HOSTNAME,
            "shop",
            WhenUnsatisfiable::ScheduleAnyway,
        ));
    }
    let base = plan(&Input {
        pods: plain,
        node_pools: vec![pool.clone()],
        ..Default::default()
    });
    let input = Input {
        pods: soft,
        node_pools: vec![pool],
        ..Default::default()
    };
    let priced = plan(&input);
    assert!(priced.unschedulable.is_empty());
    let cost = |p: &Plan| -> f64 { p.new_claims.iter().map(|c| c.instance_types[0].price).sum() };
    let (base_cost, priced_cost) = (cost(&base), cost(&priced));
    assert!(
        priced_cost <= base_cost * 1.10 + 1e-9,
        "{priced_cost} $/h against {base_cost} $/h without preferences"
    );
    assert!(
        priced.new_claims.len() < 10,
        "{} nodes for 100 small pods",
        priced.new_claims.len()
    );
    for c in &priced.new_claims {
        // The type the claim is sized for (its cheapest) is never a GPU type; GPU types
        // may appear deeper in a Spot candidate list for diversity, as without preferences.
        let it = catalog().get(&c.instance_types[0].instance_type).unwrap();
        assert_eq!(it.record.gpu_count, 0, "GPU type {}", it.name);
    }
    // Spread as evenly as the launched nodes allow: node sizes differ by at most one pod
    // within a type, and the claims cover more than one zone.
    let report = &priced.preferences;
    assert_ne!(report.mode, PreferenceMode::Honoured);
    assert!(report.cost_honoured > report.cost_chosen);
    assert!((report.cost_without - base_cost).abs() < 1e-9);
    assert_eq!(report.relaxed.len(), 100);
    assert!(report.relaxed[0].1[1].contains("kubernetes.io/hostname"));
    let zones: BTreeSet<&String> = priced
        .new_claims
        .iter()
        .filter(|c| c.zones.len() == 1)
        .map(|c| &c.zones[0])
        .collect();
    if report.mode == PreferenceMode::WithinLaunchedCapacity && priced.new_claims.len() > 1 {
        assert!(zones.len() > 1, "claims all in one zone");
        let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for c in &priced.new_claims {
            by_type
                .entry(c.instance_types[0].instance_type.as_str())
                .or_default()
                .push(c.pods.len());
        }
        for (t, sizes) in by_type {
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{t}: uneven {sizes:?}");
        }
    }
    // A generous budget honours them all (one node per pod, as asked).
    let mut generous = input.clone();
    generous.preference_budget = PreferenceBudget(1_000.0);
    let honoured = schedule(catalog(), &generous);
    assert_eq!(honoured.preferences.mode, PreferenceMode::Honoured);
    assert_eq!(honoured.new_claims.len(), 100);
    // The figures docs/performance.md quotes for this seed.
    println!(
        "seed 004: {} nodes in {} zones, ${priced_cost:.3}/h; without preferences ${base_cost:.3}/h; \
         honoured as hard: {} nodes, ${:.2}/h",
        priced.new_claims.len(),
        zones.len(),
        honoured.new_claims.len(),
        cost(&honoured)
    );
}

#[test]
fn cheap_preferences_are_honoured_in_full() {
    // Three pods that need a 4-vCPU node each: spreading them over three zones costs no
    // more than packing them, so the soft zone spread is honoured exactly.
    let mut pool = general("default");
    pool.requirements.add(
        labels::ZONE,
        req(
            "",
            Operator::In,
            &["us-east-1a", "us-east-1b", "us-east-1c"],
        ),
    );
    let mut ps = pods(3, "web", 3500, 6 * GI);
    for p in &mut ps {
        p.topology_spread.push(spread(
            labels::ZONE,
            "web",
            WhenUnsatisfiable::ScheduleAnyway,
        ));
    }
    let plan = plan(&Input {
        pods: ps,
        node_pools: vec![pool],
        ..Default::default()
    });
    assert_eq!(plan.preferences.mode, PreferenceMode::Honoured);
    assert!(plan.preferences.relaxed.is_empty());
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        assert_eq!(c.zones.len(), 1);
        *per_zone.entry(c.zones[0].clone()).or_default() += c.pods.len();
    }
    assert_eq!(per_zone.len(), 3, "{per_zone:?}");
    assert!(per_zone.values().all(|&n| n == 1), "{per_zone:?}");
}

#[test]
fn preferred_pod_affinity_joins_the_preferred_node() {
    // A cache pod prefers the node of its database; the node has room, so it goes there.
    let db = BoundPod::from_pod(&joiner_agent::scheduler::Pod {
        namespace: "default".into(),
        labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
        requests: Resources::pod(500, GI),
        ..Default::default()
    });
    let node = |name: &str, pods: Vec<BoundPod>| Node {
        name: name.into(),
        labels: BTreeMap::from([
            (labels::HOSTNAME.to_string(), name.to_string()),
            (labels::ZONE.to_string(), "us-east-1a".to_string()),
        ]),
        allocatable: Resources {
            cpu_milli: 4000,
            memory_bytes: 8 * GI,
            pods: 20,
            ..Default::default()
        },
        pods,
        ..Default::default()
    };
    let mut cache = Pod::new("default", "cache", 250, 256 * MI);
    cache.preferred_pod_affinity.push((
        80,
        PodAffinityTerm {
            label_selector: Some(LabelSelector::labels([("app", "db")])),
            topology_key: labels::HOSTNAME.into(),
            ..Default::default()
        },
    ));
    let mut lonely = Pod::new("default", "lonely", 250, 256 * MI);
    lonely.labels.insert("app".into(), "lonely".into());
    lonely.preferred_pod_anti_affinity.push((
        100,
        PodAffinityTerm {
            label_selector: Some(LabelSelector::labels([("app", "db")])),
            topology_key: labels::HOSTNAME.into(),
            ..Default::default()
        },
    ));
    let plan = plan(&Input {
        pods: vec![cache, lonely],
        nodes: vec![node("a-empty", vec![]), node("b-db", vec![db])],
        node_pools: vec![general("default")],
        ..Default::default()
    });
    assert_eq!(plan.preferences.mode, PreferenceMode::Honoured);
    let at: BTreeMap<usize, Target> = plan
        .placements
        .iter()
        .map(|p| (p.pod, p.target.clone()))
        .collect();
    assert_eq!(at[&0], Target::Node("b-db".into()));
    assert_eq!(at[&1], Target::Node("a-empty".into()));
}

#[test]
fn namespace_selector_and_namespaces_on_affinity_terms() {
    // An anti-affinity term selecting namespaces labelled team=data sees the db pod in
    // "analytics"; the same term without the selector (own namespace only) would not.
    let db = BoundPod::from_pod(&joiner_agent::scheduler::Pod {
        namespace: "analytics".into(),
        labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
        requests: Resources::pod(500, GI),
        ..Default::default()
    });
    let node = Node {
        name: "n1".into(),
        labels: BTreeMap::from([(labels::HOSTNAME.to_string(), "n1".to_string())]),
        allocatable: Resources {
            cpu_milli: 4000,
            memory_bytes: 8 * GI,
            pods: 20,
            ..Default::default()
        },
        pods: vec![db],
        ..Default::default()
    };
    let term = |sel: Option<LabelSelector>, namespaces: Vec<String>| PodAffinityTerm {
        label_selector: Some(LabelSelector::labels([("app", "db")])),
        namespace_selector: sel,
        namespaces,
        topology_key: labels::HOSTNAME.into(),
    };
    let mut by_selector = Pod::new("web", "by-selector", 250, 256 * MI);
    by_selector.pod_anti_affinity.push(term(
        Some(LabelSelector::labels([("team", "data")])),
        vec![],
    ));
    let mut by_name = Pod::new("web", "by-name", 250, 256 * MI);
    by_name
        .pod_anti_affinity
        .push(term(None, vec!["analytics".into()]));
    let mut own_ns = Pod::new("web", "own-namespace", 250, 256 * MI);
    own_ns.pod_anti_affinity.push(term(None, vec![]));
    let input = Input {
        pods: vec![by_selector, by_name, own_ns],
        nodes: vec![node],
        node_pools: vec![general("default")],
        namespace_labels: BTreeMap::from([(
            "analytics".to_string(),
            BTreeMap::from([("team".to_string(), "data".to_string())]),
        )]),
        ..Default::default()
    };
    let plan = plan(&input);
    let on_node: BTreeSet<usize> = plan.placements.iter().map(|p| p.pod).collect();
    assert_eq!(on_node, BTreeSet::from([2]), "{plan:?}");
    let launched: BTreeSet<usize> = plan
        .new_claims
        .iter()
        .flat_map(|c| c.pods.iter().copied())
        .collect();
    assert_eq!(launched, BTreeSet::from([0, 1]));
}

#[test]
fn match_label_keys_spread_each_revision_on_its_own() {
    // Revision r2's pods spread over zones on their own: r1's three pods in zone a do not
    // push them away, as they would without matchLabelKeys.
    let mut pool = general("default");
    pool.requirements.add(
        labels::ZONE,
        req(
            "",
            Operator::In,
            &["us-east-1a", "us-east-1b", "us-east-1c"],
        ),
    );
    let old = BoundPod::from_pod(&joiner_agent::scheduler::Pod {
        namespace: "default".into(),
        labels: BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("pod-template-hash".to_string(), "r1".to_string()),
        ]),
        requests: Resources::pod(100, 128 * MI),
        ..Default::default()
    });
    let node = Node {
        name: "old".into(),
        labels: BTreeMap::from([
            (labels::HOSTNAME.to_string(), "old".to_string()),
            (labels::ZONE.to_string(), "us-east-1a".to_string()),
        ]),
        allocatable: Resources {
            cpu_milli: 1000,
            memory_bytes: GI,
            pods: 10,
            ..Default::default()
        },
        pods: vec![old.clone(), old.clone(), old],
        ..Default::default()
    };
    let mut ps = pods(3, "web", 1000, GI);
    for p in &mut ps {
        p.labels.insert("pod-template-hash".into(), "r2".into());
        let mut s = spread(labels::ZONE, "web", WhenUnsatisfiable::DoNotSchedule);
        s.match_label_keys = vec!["pod-template-hash".into()];
        p.topology_spread.push(s);
    }
    let plan = plan(&Input {
        pods: ps,
        nodes: vec![node],
        node_pools: vec![pool],
        ..Default::default()
    });
    let zones: BTreeSet<String> = plan
        .new_claims
        .iter()
        .flat_map(|c| c.zones.clone())
        .collect();
    assert_eq!(
        zones.len(),
        3,
        "one r2 pod per zone, zone a included: {zones:?}"
    );
}

#[test]
fn node_taints_policy_decides_whether_tainted_pools_count() {
    // A tainted pool defines value "gpu"; a pod that does not tolerate it cannot land there.
    // Ignore (the default): "gpu" counts with 0 pods, so at most one pod per other value.
    // Honor: only the tolerated values count and all pods schedule.
    let mut open = general("open");
    open.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["a", "b"]));
    let mut tainted = general("tainted");
    tainted
        .requirements
        .add(SPREAD_KEY, req("", Operator::In, &["gpu"]));
    tainted.taints = vec![Taint::new("gpu", "true", Effect::NoSchedule)];
    let run = |policy: Option<NodeInclusionPolicy>| {
        let mut ps = pods(4, "tp", 500, GI);
        for p in &mut ps {
            let mut s = spread(SPREAD_KEY, "tp", WhenUnsatisfiable::DoNotSchedule);
            s.node_taints_policy = policy;
            p.topology_spread.push(s);
        }
        plan(&Input {
            pods: ps,
            node_pools: vec![open.clone(), tainted.clone()],
            ..Default::default()
        })
    };
    let ignore = run(None);
    assert_eq!(ignore.unschedulable.len(), 2, "{ignore:?}");
    assert!(ignore.unschedulable[0].reasons[0].contains("maxSkew 1"));
    let honor = run(Some(NodeInclusionPolicy::Honor));
    assert!(honor.unschedulable.is_empty(), "{:?}", honor.unschedulable);
}

#[test]
fn node_affinity_policy_decides_whether_unselected_domains_count() {
    // Pods select value "a" only. Honor (default): only "a" counts and all schedule.
    // Ignore: "b" counts too, stays empty, and caps "a" at maxSkew.
    let mut pool = general("p");
    pool.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["a", "b"]));
    let run = |policy: Option<NodeInclusionPolicy>| {
        let mut ps = pods(3, "ap", 500, GI);
        for p in &mut ps {
            p.node_selector.insert(SPREAD_KEY.into(), "a".into());
            let mut s = spread(SPREAD_KEY, "ap", WhenUnsatisfiable::DoNotSchedule);
            s.node_affinity_policy = policy;
            p.topology_spread.push(s);
        }
        plan(&Input {
            pods: ps,
            node_pools: vec![pool.clone()],
            ..Default::default()
        })
    };
    assert!(run(None).unschedulable.is_empty());
    let ignore = run(Some(NodeInclusionPolicy::Ignore));
    assert_eq!(ignore.unschedulable.len(), 2);
}

#[test]
fn schedule_anyway_over_node_pool_domains() {
    // A soft spread over capacity-spread reaches both pools' values when that costs
    // nothing extra (same types, same prices).
    let mut a = general("a");
    a.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["1"]));
    let mut b = general("b");
    b.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["2"]));
    let mut ps = pods(4, "sa", 6000, 12 * GI);
    for p in &mut ps {
        p.topology_spread
            .push(spread(SPREAD_KEY, "sa", WhenUnsatisfiable::ScheduleAnyway));
    }
    let plan = plan(&Input {
        pods: ps,
        node_pools: vec![a, b],
        ..Default::default()
    });
    let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        *per_pool.entry(c.nodepool.clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_pool,
        BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]),
        "{:?}",
        plan.preferences
    );
}

/// A preferred zone is tried first, but the zones a hard spread balances over stay those
/// the pod's required affinity allows: kube-scheduler's `nodeAffinityPolicy` reads
/// required affinity only. Narrowing the domains to the preferred zone piled every pod
/// of the spread into it.
#[test]
fn a_preferred_zone_does_not_narrow_a_hard_spread() {
    let zones: Vec<String> = catalog().zones().into_iter().collect();
    assert!(zones.len() >= 3, "{zones:?}");
    let mut preferred = Requirements::new();
    preferred.add(labels::ZONE, req("", Operator::In, &[zones[1].as_str()]));
    let mut ps = pods(3, "web", 100, 128 * MI);
    for p in &mut ps {
        p.topology_spread.push(spread(
            labels::ZONE,
            "web",
            WhenUnsatisfiable::DoNotSchedule,
        ));
        p.preferred_node_affinity.push((10, preferred.clone()));
    }
    let plan = plan(&Input {
        pods: ps,
        node_pools: vec![general("p")],
        ..Default::default()
    });
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        assert_eq!(c.zones.len(), 1, "a spread pod's claim is pinned to a zone");
        *per_zone.entry(c.zones[0].as_str()).or_default() += c.pods.len();
    }
    assert_eq!(per_zone.len(), 3, "one pod per zone: {per_zone:?}");
    assert_eq!(per_zone.get(zones[1].as_str()), Some(&1), "{per_zone:?}");
}

/// Displaced pods go back to the domains their node leaves. Their nodes drain one at a
/// time, and with maxSkew 1 kube-scheduler then takes a node's pods only where the drain
/// left the fewest: where they came from. A plan that balanced all displaced pods at once
/// could cross them over (here: the first pod to the first zone and the first split)
/// and put their room where they cannot go. Where no NodePool can launch at home, they
/// are planned as any pod.
#[test]
fn displaced_pods_are_planned_back_into_the_domains_they_leave() {
    let zones: Vec<String> = catalog().zones().into_iter().take(3).collect();
    let zone_refs: Vec<&str> = zones.iter().map(String::as_str).collect();
    let pool = |allowed: &[&str]| {
        let mut p = general("p");
        p.requirements
            .add(labels::ZONE, req("", Operator::In, allowed));
        p.requirements
            .add(SPREAD_KEY, req("", Operator::In, &["1", "2", "3"]));
        p
    };
    // One node stays, in (zone 2, split 3); two leave, in (zone 0, split 2) and (zone 1,
    // split 1), one pod each.
    let stays = Node {
        name: "stays".into(),
        labels: BTreeMap::from([
            (labels::ZONE.to_string(), zones[2].clone()),
            (SPREAD_KEY.to_string(), "3".to_string()),
            (labels::HOSTNAME.to_string(), "stays".to_string()),
        ]),
        allocatable: Resources::pod(2000, 4 * GI).plus(&Resources {
            pods: 109,
            ..Default::default()
        }),
        pods: vec![BoundPod::from_pod(&joiner_agent::scheduler::Pod {
            namespace: "default".into(),
            labels: BTreeMap::from([("app".to_string(), "home".to_string())]),
            requests: Resources::pod(1000, GI),
            pod_anti_affinity: vec![],
            ..Default::default()
        })],
        ..Default::default()
    };
    let homes = [(zones[0].clone(), "2"), (zones[1].clone(), "1")];
    let run = |allowed: &[&str]| {
        let mut ps = pods(2, "home", 1000, GI);
        for (p, (zone, split)) in ps.iter_mut().zip(&homes) {
            for key in [labels::ZONE, SPREAD_KEY] {
                p.topology_spread
                    .push(spread(key, "home", WhenUnsatisfiable::DoNotSchedule));
            }
            p.set_home(&BTreeMap::from([
                (labels::ZONE.to_string(), zone.clone()),
                (SPREAD_KEY.to_string(), split.to_string()),
                (labels::HOSTNAME.to_string(), "leaving".to_string()),
            ]));
        }
        plan(&Input {
            pods: ps,
            nodes: vec![stays.clone()],
            node_pools: vec![pool(allowed)],
            ..Default::default()
        })
    };
    let at_home = run(&zone_refs);
    assert!(
        at_home.unschedulable.is_empty(),
        "{:?}",
        at_home.unschedulable
    );
    for c in &at_home.new_claims {
        let split = c
            .requirements
            .get(SPREAD_KEY)
            .and_then(|r| r.single_value());
        for &i in &c.pods {
            assert_eq!(
                (c.zones.clone(), split),
                (vec![homes[i].0.clone()], Some(homes[i].1)),
                "pod {i} is planned away from home"
            );
        }
    }
    // The pool cannot launch in the first pod's zone: it is planned elsewhere, not left out.
    let away = run(&zone_refs[1..]);
    assert!(away.unschedulable.is_empty(), "{:?}", away.unschedulable);
    assert_eq!(
        away.new_claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        2
    );
}

/// Pods of a storm leaving two domains of a two-key spread: each domain gets its pods' room
/// and one pod more (kube-scheduler may give one domain's room to the other's pods while
/// both are short), and the spare is in no claim's pod list.
#[test]
fn pods_leaving_several_domains_get_one_spare_pod_of_room_in_each() {
    let zones: Vec<String> = catalog().zones().into_iter().take(3).collect();
    let mut pool = general("p");
    pool.requirements
        .add(SPREAD_KEY, req("", Operator::In, &["1", "2", "3"]));
    let homes = [(zones[0].clone(), "2"), (zones[1].clone(), "1")];
    let displaced = |homes: &[(String, &str)]| {
        let mut ps = pods(5 * homes.len(), "storm", 250, 512 * MI);
        for (i, p) in ps.iter_mut().enumerate() {
            for key in [labels::ZONE, SPREAD_KEY] {
                p.topology_spread
                    .push(spread(key, "storm", WhenUnsatisfiable::DoNotSchedule));
            }
            let (zone, split) = &homes[i / 5];
            p.set_home(&BTreeMap::from([
                (labels::ZONE.to_string(), zone.clone()),
                (SPREAD_KEY.to_string(), split.to_string()),
            ]));
        }
        Input {
            pods: ps,
            node_pools: vec![pool.clone()],
            ..Default::default()
        }
    };
    let input = displaced(&homes);
    let spared = schedule_with_spare_room(catalog(), &input);
    checker::check(catalog(), &input, &spared).unwrap_or_else(|e| panic!("checker: {e}"));
    assert!(
        spared.unschedulable.is_empty(),
        "{:?}",
        spared.unschedulable
    );
    let mut planned: Vec<usize> = spared
        .new_claims
        .iter()
        .flat_map(|c| c.pods.clone())
        .collect();
    planned.sort();
    assert_eq!(
        planned,
        (0..10).collect::<Vec<_>>(),
        "every pod once, no spare"
    );
    for (zone, split) in &homes {
        let home: Vec<_> = spared
            .new_claims
            .iter()
            .filter(|c| {
                c.zones == vec![zone.clone()]
                    && c.requirements
                        .get(SPREAD_KEY)
                        .and_then(|r| r.single_value())
                        == Some(*split)
            })
            .collect();
        let room: i64 = home.iter().map(|c| c.requests.memory_bytes).sum();
        let pods: i64 = home
            .iter()
            .flat_map(|c| &c.pods)
            .map(|&i| input.pods[i].requests.memory_bytes)
            .sum();
        assert_eq!(pods, 5 * 512 * MI, "{zone}/{split}: its five pods");
        assert_eq!(
            room - pods,
            512 * MI,
            "{zone}/{split}: one spare pod's room"
        );
    }
    // One domain short: nothing spare, the plan is the scheduler's own.
    let one = displaced(&homes[..1]);
    assert_eq!(
        schedule_with_spare_room(catalog(), &one),
        schedule(catalog(), &one)
    );
}
