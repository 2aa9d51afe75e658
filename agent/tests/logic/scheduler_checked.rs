//! Properties over generated worlds, verified by the independent checker (`checker/`):
//! several NodePools splitting a custom label's values (the capacity-spread pattern),
//! Spot/on-demand pools, a tainted pool, limits, existing nodes and bound pods in other
//! namespaces, and pods mixing hard and soft spreads (with node inclusion policies and
//! matchLabelKeys), required and preferred (anti-)affinity with namespace selectors.
//! Every hard constraint must hold in every plan, preferences must never cost more than
//! the budget allows, and plans are deterministic.

use joiner_agent_world::checker;

use std::collections::BTreeMap;

use joiner_agent::catalog::Catalog;
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    schedule, BoundPod, Input, LabelSelector, Node, NodeInclusionPolicy, NodePoolInput, Pod,
    PodAffinityTerm, PreferenceMode, TopologySpreadConstraint, WhenUnsatisfiable,
};
use joiner_agent::taints::{Effect, Taint, Toleration};
use joiner_workloads::{karpenter_catalog, BENCH_ZONES};
use proptest::prelude::*;

const MI: i64 = 1 << 20;
const SPLIT: &str = "capacity-spread";

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: i64,
    mem: i64,
    app: u8,
    ns: u8,
    /// 0 none, 1 zone, 2 capacity-spread, 3 capacity type
    spread_key: u8,
    spread_hard: bool,
    policy: u8,
    soft_host: bool,
    anti: bool,
    anti_ns_selector: bool,
    pref_affinity: bool,
    pref_node_zone: Option<u8>,
    tolerate: bool,
    zone: Option<u8>,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        (
            prop::sample::select(vec![100i64, 250, 500, 1000, 2000]),
            prop::sample::select(vec![128i64, 512, 1024, 4096]),
            0u8..3,
            0u8..2,
            0u8..4,
            any::<bool>(),
            0u8..3,
        ),
        (
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.15),
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop::option::weighted(0.2, 0u8..3),
            prop::bool::weighted(0.3),
            prop::option::weighted(0.1, 0u8..3),
        ),
    )
        .prop_map(
            |(
                (cpu, mem, app, ns, spread_key, spread_hard, policy),
                (soft_host, anti, anti_ns_selector, pref_affinity, pref_node_zone, tolerate, zone),
            )| PodSpec {
                cpu,
                mem,
                app,
                ns,
                spread_key,
                spread_hard,
                policy,
                soft_host,
                anti,
                anti_ns_selector,
                pref_affinity,
                pref_node_zone,
                tolerate,
                zone,
            },
        )
}

#[derive(Debug, Clone)]
struct World {
    pods: Vec<PodSpec>,
    spot_values: u8,
    od_values: u8,
    cpu_limit: Option<i64>,
    tainted: bool,
    existing: Vec<(u8, i64, bool)>,
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(pod_spec(), 1..50),
        1u8..4,
        1u8..3,
        prop::option::weighted(0.3, 4_000i64..30_000),
        any::<bool>(),
        prop::collection::vec((0u8..3, 1000i64..4000, any::<bool>()), 0..3),
    )
        .prop_map(
            |(pods, spot_values, od_values, cpu_limit, tainted, existing)| World {
                pods,
                spot_values,
                od_values,
                cpu_limit,
                tainted,
                existing,
            },
        )
}

fn catalog() -> &'static Catalog {
    static C: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    C.get_or_init(|| karpenter_catalog(16))
}

fn values(from: u8, n: u8) -> Vec<String> {
    (from..from + n).map(|v| v.to_string()).collect()
}

fn build_pod(i: usize, s: &PodSpec) -> Pod {
    let app = format!("app{}", s.app);
    let ns = ["default", "web"][s.ns as usize];
    let mut p = Pod::new(ns, &format!("p{i}"), s.cpu, s.mem * MI);
    p.labels.insert("app".into(), app.clone());
    p.labels.insert("rev".into(), format!("r{}", s.app % 2));
    let sel = Some(LabelSelector::labels([("app", app.as_str())]));
    let key = match s.spread_key {
        1 => Some(labels::ZONE),
        2 => Some(SPLIT),
        3 => Some(labels::CAPACITY_TYPE),
        _ => None,
    };
    if let Some(key) = key {
        p.topology_spread.push(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: if s.spread_hard {
                WhenUnsatisfiable::DoNotSchedule
            } else {
                WhenUnsatisfiable::ScheduleAnyway
            },
            label_selector: sel.clone(),
            match_label_keys: if s.policy == 2 {
                vec!["rev".into()]
            } else {
                vec![]
            },
            node_taints_policy: (s.policy == 1).then_some(NodeInclusionPolicy::Honor),
            ..Default::default()
        });
    }
    if s.soft_host {
        p.topology_spread.push(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::HOSTNAME.into(),
            when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
            label_selector: sel.clone(),
            ..Default::default()
        });
    }
    if s.anti {
        p.pod_anti_affinity.push(PodAffinityTerm {
            label_selector: sel.clone(),
            namespace_selector: s
                .anti_ns_selector
                .then(|| LabelSelector::labels([("tier", "front")])),
            topology_key: labels::HOSTNAME.into(),
            ..Default::default()
        });
    }
    if s.pref_affinity {
        p.preferred_pod_affinity.push((
            50,
            PodAffinityTerm {
                label_selector: sel.clone(),
                topology_key: labels::ZONE.into(),
                ..Default::default()
            },
        ));
        p.preferred_pod_anti_affinity.push((
            30,
            PodAffinityTerm {
                label_selector: sel,
                topology_key: labels::HOSTNAME.into(),
                ..Default::default()
            },
        ));
    }
    if let Some(z) = s.pref_node_zone {
        let mut r = Requirements::new();
        r.add(
            labels::ZONE,
            Requirement::new(Operator::In, &[BENCH_ZONES[z as usize]]).unwrap(),
        );
        p.preferred_node_affinity.push((10, r));
    }
    if let Some(z) = s.zone {
        p.node_selector
            .insert(labels::ZONE.into(), BENCH_ZONES[z as usize].into());
    }
    if s.tolerate {
        p.tolerations.push(Toleration::equal(
            "dedicated",
            "batch",
            Some(Effect::NoSchedule),
        ));
    }
    p
}

fn input(w: &World) -> Input {
    let mut spot = NodePoolInput {
        name: "spot".into(),
        node_class: "default".into(),
        ..Default::default()
    };
    spot.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["spot"]).unwrap(),
    );
    spot.requirements.add(
        SPLIT,
        Requirement::new(Operator::In, &values(1, w.spot_values)).unwrap(),
    );
    if let Some(l) = w.cpu_limit {
        spot.limits.insert("cpu".into(), l);
        spot.usage = Resources::new(500, 0);
    }
    let mut od = NodePoolInput {
        name: "on-demand".into(),
        node_class: "default".into(),
        ..Default::default()
    };
    od.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["on-demand"]).unwrap(),
    );
    od.requirements.add(
        SPLIT,
        Requirement::new(Operator::In, &values(1 + w.spot_values, w.od_values)).unwrap(),
    );
    let mut pools = vec![spot, od];
    if w.tainted {
        let mut batch = NodePoolInput {
            name: "batch".into(),
            weight: 5,
            node_class: "default".into(),
            taints: vec![Taint::new("dedicated", "batch", Effect::NoSchedule)],
            ..Default::default()
        };
        batch
            .requirements
            .add(SPLIT, Requirement::new(Operator::In, &["9"]).unwrap());
        pools.push(batch);
    }
    let nodes = w
        .existing
        .iter()
        .enumerate()
        .map(|(i, (z, cpu, with_pod))| Node {
            name: format!("node-{i}"),
            labels: BTreeMap::from([
                (
                    labels::ZONE.to_string(),
                    BENCH_ZONES[*z as usize].to_string(),
                ),
                (labels::HOSTNAME.to_string(), format!("node-{i}")),
                (labels::CAPACITY_TYPE.to_string(), "on-demand".to_string()),
                (SPLIT.to_string(), (1 + w.spot_values).to_string()),
            ]),
            allocatable: Resources {
                cpu_milli: *cpu,
                memory_bytes: 8 << 30,
                pods: 20,
                ..Default::default()
            },
            pods: if *with_pod {
                vec![BoundPod::from_pod(&joiner_agent::scheduler::Pod {
                    namespace: "front".into(),
                    labels: BTreeMap::from([("app".to_string(), "app0".to_string())]),
                    requests: Resources::pod(100, 128 * MI),
                    ..Default::default()
                })]
            } else {
                vec![]
            },
            ..Default::default()
        })
        .collect();
    Input {
        pods: w
            .pods
            .iter()
            .enumerate()
            .map(|(i, s)| build_pod(i, s))
            .collect(),
        nodes,
        node_pools: pools,
        namespace_labels: BTreeMap::from([(
            "front".to_string(),
            BTreeMap::from([("tier".to_string(), "front".to_string())]),
        )]),
        ..Default::default()
    }
}

fn cost(plan: &joiner_agent::scheduler::Plan) -> f64 {
    plan.new_claims
        .iter()
        .map(|c| c.instance_types[0].price)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn plans_pass_the_independent_checker(w in world()) {
        let input = input(&w);
        let plan = schedule(catalog(), &input);
        if let Err(e) = checker::check(catalog(), &input, &plan) {
            prop_assert!(false, "{e}\n{plan:#?}");
        }
        // Preferences never cost more than the budget over the same round without them.
        let r = &plan.preferences;
        if r.mode != PreferenceMode::Honoured || r.cost_without > 0.0 {
            prop_assert!(r.cost_chosen <= r.cost_without * 1.10 + 1e-9, "{r:?}");
        }
        prop_assert!((cost(&plan) - r.cost_chosen).abs() < 1e-9 || r == &Default::default());
        prop_assert_eq!(&plan, &schedule(catalog(), &input));
    }
}

/// The generated worlds exercise what they claim to: claims in both pools, pods on
/// existing nodes, relaxed preferences, and the checker rejects a broken plan.
#[test]
fn generated_worlds_are_not_trivial_and_the_checker_bites() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut spot, mut od, mut placed, mut relaxed) = (0, 0, 0, 0);
    let mut broken_caught = 0;
    for _ in 0..24 {
        let w = world().new_tree(&mut runner).unwrap().current();
        let input = input(&w);
        let mut plan = schedule(catalog(), &input);
        spot += plan
            .new_claims
            .iter()
            .filter(|c| c.nodepool == "spot")
            .count();
        od += plan
            .new_claims
            .iter()
            .filter(|c| c.nodepool == "on-demand")
            .count();
        placed += plan.placements.len();
        relaxed += plan.preferences.relaxed.len();
        // Break the plan: put every pod of the first claim on its cheapest candidate's
        // smallest sibling, i.e. claim far more than fits.
        if let Some(c) = plan.new_claims.first_mut() {
            if let Some(&extra) = plan.unschedulable.first().map(|u| &u.pod) {
                c.pods.push(extra);
                plan.unschedulable.remove(0);
            } else {
                let big: Vec<usize> = (0..input.pods.len()).collect();
                c.pods = big;
            }
            if checker::check(catalog(), &input, &plan).is_err() {
                broken_caught += 1;
            }
        }
    }
    assert!(spot > 10 && od > 5, "spot {spot}, on-demand {od}");
    assert!(placed > 0, "no pod on existing nodes");
    assert!(relaxed > 0, "no preference was ever relaxed");
    assert!(
        broken_caught > 10,
        "checker caught {broken_caught} broken plans"
    );
}
