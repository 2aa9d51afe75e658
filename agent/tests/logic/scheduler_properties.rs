//! Property tests over random pods, NodePools and existing nodes: placements satisfy the
//! pods' constraints and fit allocatable minus DaemonSet overhead, DoNotSchedule spreads
//! stay within maxSkew, limits hold, and the plan is deterministic.

use std::collections::BTreeMap;

use joiner_agent::catalog::daemonsets::DaemonSet;
use joiner_agent::catalog::Catalog;
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    schedule, Input, LabelSelector, Node, NodePoolInput, Plan, Pod, PodAffinityTerm, Target,
    TopologySpreadConstraint, WhenUnsatisfiable,
};
use joiner_agent::taints::{Effect, Taint, Toleration};
use joiner_workloads::{karpenter_catalog, BENCH_ZONES};
use proptest::prelude::*;

const MI: i64 = 1 << 20;

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: i64,
    mem: i64,
    app: u8,
    zone: Option<u8>,
    ct: Option<bool>,
    zone_spread: bool,
    host_spread: bool,
    anti: bool,
    tolerate: bool,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        prop::sample::select(vec![100i64, 250, 500, 1000, 1500, 3000]),
        prop::sample::select(vec![128i64, 512, 1024, 2048, 4096]),
        0u8..3,
        prop::option::weighted(0.2, 0u8..3),
        prop::option::weighted(0.2, any::<bool>()),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(cpu, mem, app, zone, ct, zone_spread, host_spread, anti, tolerate)| PodSpec {
                cpu,
                mem,
                app,
                zone,
                ct,
                zone_spread,
                host_spread,
                anti,
                tolerate,
            },
        )
}

fn build_pod(i: usize, s: &PodSpec) -> Pod {
    let app = format!("app{}", s.app);
    let mut p = Pod::new("default", &format!("p{i}"), s.cpu, s.mem * MI);
    p.labels.insert("app".into(), app.clone());
    if let Some(z) = s.zone {
        p.node_selector
            .insert(labels::ZONE.into(), BENCH_ZONES[z as usize].into());
    }
    if let Some(spot) = s.ct {
        p.node_selector.insert(
            labels::CAPACITY_TYPE.into(),
            if spot { "spot" } else { "on-demand" }.into(),
        );
    }
    let sel = Some(LabelSelector::labels([("app", app.as_str())]));
    if s.zone_spread {
        p.topology_spread.push(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: sel.clone(),
            min_domains: None,
            ..Default::default()
        });
    }
    if s.host_spread {
        p.topology_spread.push(TopologySpreadConstraint {
            max_skew: 2,
            topology_key: labels::HOSTNAME.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: sel.clone(),
            min_domains: None,
            ..Default::default()
        });
    }
    if s.anti {
        p.pod_anti_affinity.push(PodAffinityTerm {
            label_selector: sel,
            namespaces: vec![],
            topology_key: labels::HOSTNAME.into(),
            ..Default::default()
        });
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

#[derive(Debug, Clone)]
struct World {
    pods: Vec<PodSpec>,
    cpu_limit: Option<i64>,
    tainted_pool: bool,
    max_vcpu: u32,
    existing: Vec<(u8, i64)>,
    daemonset_cpu: i64,
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(pod_spec(), 1..60),
        prop::option::of(4_000i64..40_000),
        any::<bool>(),
        4u32..24,
        prop::collection::vec((0u8..3, 500i64..4000), 0..4),
        prop::sample::select(vec![0i64, 100, 300]),
    )
        .prop_map(
            |(pods, cpu_limit, tainted_pool, max_vcpu, existing, daemonset_cpu)| World {
                pods,
                cpu_limit,
                tainted_pool,
                max_vcpu,
                existing,
                daemonset_cpu,
            },
        )
}

fn catalog() -> &'static Catalog {
    static C: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    C.get_or_init(|| karpenter_catalog(24))
}

fn input(w: &World) -> Input {
    let mut pools = Vec::new();
    let mut main = NodePoolInput {
        name: "main".into(),
        weight: 1,
        node_class: "default".into(),
        ..Default::default()
    };
    main.requirements.add(
        labels::INSTANCE_CPU,
        Requirement::new(Operator::Lt, &[(w.max_vcpu + 1).to_string()]).unwrap(),
    );
    if let Some(l) = w.cpu_limit {
        main.limits.insert("cpu".into(), l);
        main.usage = Resources::new(1000, 0);
    }
    pools.push(main);
    if w.tainted_pool {
        pools.push(NodePoolInput {
            name: "batch".into(),
            weight: 10,
            node_class: "default".into(),
            taints: vec![Taint::new("dedicated", "batch", Effect::NoSchedule)],
            labels: BTreeMap::from([("pool".to_string(), "batch".to_string())]),
            requirements: Requirements::from_labels(&BTreeMap::from([(
                "pool".to_string(),
                "batch".to_string(),
            )])),
            ..Default::default()
        });
    }
    let nodes = w
        .existing
        .iter()
        .enumerate()
        .map(|(i, (z, cpu))| Node {
            name: format!("node-{i}"),
            labels: BTreeMap::from([
                (
                    labels::ZONE.to_string(),
                    BENCH_ZONES[*z as usize].to_string(),
                ),
                (labels::HOSTNAME.to_string(), format!("node-{i}")),
                (labels::CAPACITY_TYPE.to_string(), "on-demand".to_string()),
            ]),
            allocatable: Resources {
                cpu_milli: *cpu,
                memory_bytes: 8 << 30,
                pods: 20,
                ..Default::default()
            },
            ..Default::default()
        })
        .collect();
    let daemonsets = if w.daemonset_cpu > 0 {
        vec![DaemonSet {
            namespace: "kube-system".into(),
            name: "ds".into(),
            requests: Resources::pod(w.daemonset_cpu, 64 * MI),
            ..Default::default()
        }]
    } else {
        vec![]
    };
    Input {
        pods: w
            .pods
            .iter()
            .enumerate()
            .map(|(i, s)| build_pod(i, s))
            .collect(),
        nodes,
        node_pools: pools,
        daemonsets,
        ..Default::default()
    }
}

/// Where each pod ended: (zone, hostname, capacity type) when known.
fn locate(plan: &Plan, input: &Input) -> BTreeMap<usize, (Option<String>, String, Option<String>)> {
    let mut at = BTreeMap::new();
    for p in &plan.placements {
        let Target::Node(n) = &p.target else {
            panic!("no in-flight claims in this test")
        };
        let node = input.nodes.iter().find(|x| &x.name == n).unwrap();
        at.insert(
            p.pod,
            (
                node.labels.get(labels::ZONE).cloned(),
                n.clone(),
                node.labels.get(labels::CAPACITY_TYPE).cloned(),
            ),
        );
    }
    for (ci, c) in plan.new_claims.iter().enumerate() {
        let zone = (c.zones.len() == 1).then(|| c.zones[0].clone());
        let ct = (c.capacity_types.len() == 1).then(|| c.capacity_types[0].as_str().to_string());
        for &p in &c.pods {
            at.insert(p, (zone.clone(), format!("claim-{ci}"), ct.clone()));
        }
    }
    at
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn plans_respect_every_constraint(w in world()) {
        let input = input(&w);
        let plan = schedule(catalog(), &input);

        // Every pod is accounted for exactly once.
        let mut seen = vec![0; input.pods.len()];
        plan.placements.iter().for_each(|p| seen[p.pod] += 1);
        plan.new_claims.iter().for_each(|c| c.pods.iter().for_each(|&p| seen[p] += 1));
        plan.unschedulable.iter().for_each(|u| seen[u.pod] += 1);
        prop_assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        for u in &plan.unschedulable {
            prop_assert!(!u.reasons.is_empty());
        }

        // Existing nodes: requests fit allocatable.
        for n in &input.nodes {
            let used: i64 = plan.placements.iter().filter(|p| p.target == Target::Node(n.name.clone())).map(|p| input.pods[p.pod].requests.cpu_milli).sum();
            prop_assert!(used <= n.allocatable.cpu_milli);
        }

        let pools: BTreeMap<&str, &NodePoolInput> = input.node_pools.iter().map(|p| (p.name.as_str(), p)).collect();
        for c in &plan.new_claims {
            prop_assert!(!c.instance_types.is_empty() && c.instance_types.len() <= 60);
            let pool = pools[c.nodepool.as_str()];
            let mut need = Resources::default();
            for &p in &c.pods {
                need.add(&input.pods[p].requests);
            }
            for cand in &c.instance_types {
                let it = catalog().get(&cand.instance_type).unwrap();
                // Fits allocatable minus the DaemonSet overhead.
                let mut room = it.allocatable.clone();
                room.sub(&c.daemonset_overhead);
                prop_assert!(need.fits_in(&room), "{} does not hold {need}", cand.instance_type);
                prop_assert!(it.labels_match(&pool.requirements));
                prop_assert!(cand.zones.iter().all(|z| c.zones.contains(z)));
            }
            for &p in &c.pods {
                let pod = &input.pods[p];
                // Taints of the pool are tolerated.
                prop_assert!(joiner_agent::taints::first_untolerated(&pool.taints, &pod.tolerations).is_none());
                // nodeSelector: zone and capacity type pinned to allowed values.
                if let Some(z) = pod.node_selector.get(labels::ZONE) {
                    prop_assert_eq!(&c.zones, &vec![z.clone()]);
                }
                if let Some(ct) = pod.node_selector.get(labels::CAPACITY_TYPE) {
                    prop_assert_eq!(c.capacity_types.len(), 1);
                    prop_assert_eq!(c.capacity_types[0].as_str(), ct.as_str());
                }
            }
        }

        // Spread and anti-affinity, counted over final locations.
        let at = locate(&plan, &input);
        for app in 0..3u8 {
            let name = format!("app{app}");
            let members: Vec<usize> = (0..input.pods.len()).filter(|&i| input.pods[i].labels["app"] == name).collect();
            let placed: Vec<usize> = members.iter().copied().filter(|i| at.contains_key(i)).collect();
            let spread_zone = placed.iter().any(|&i| w.pods[i].zone_spread);
            if spread_zone {
                let mut per_zone: BTreeMap<String, i64> = BENCH_ZONES.iter().map(|z| (z.to_string(), 0)).collect();
                for &i in &placed {
                    let z = at[&i].0.clone();
                    prop_assert!(z.is_some() || !w.pods[i].zone_spread, "spread pods land in a known zone");
                    if let Some(z) = z { *per_zone.get_mut(&z).unwrap() += 1; }
                }
                // Each constrained pod, when placed, saw skew <= 1; with later pods that do
                // not constrain themselves the final skew can grow, so check the constrained ones.
                let constrained: Vec<usize> = placed.iter().copied().filter(|&i| w.pods[i].zone_spread).collect();
                if constrained.len() == placed.len() && members.iter().all(|&i| w.pods[i].zone.is_none()) {
                    let max = per_zone.values().max().unwrap();
                    let min = per_zone.values().min().unwrap();
                    prop_assert!(max - min <= 1, "zone skew {per_zone:?}");
                }
            }
            let mut per_host: BTreeMap<String, i64> = BTreeMap::new();
            for &i in &placed {
                *per_host.entry(at[&i].1.clone()).or_default() += 1;
            }
            for &i in &placed {
                let host = &at[&i].1;
                if w.pods[i].anti {
                    prop_assert_eq!(per_host[host], 1, "anti-affinity pod shares {} with its app", host);
                }
                if w.pods[i].host_spread && placed.iter().all(|&j| w.pods[j].host_spread) {
                    prop_assert!(per_host[host] <= 2, "hostname maxSkew 2 exceeded on {}", host);
                }
            }
        }

        // Limits: the largest candidate of every claim, plus usage, stays within the limit.
        if let Some(limit) = w.cpu_limit {
            let mut total = 1000;
            for c in plan.new_claims.iter().filter(|c| c.nodepool == "main") {
                total += c.instance_types.iter().map(|t| catalog().get(&t.instance_type).unwrap().capacity.cpu_milli).max().unwrap();
            }
            prop_assert!(total <= limit, "cpu {total} > limit {limit}");
        }

        // Deterministic.
        prop_assert_eq!(&plan, &schedule(catalog(), &input));
    }
}

/// The generated worlds do exercise the scheduler: new claims, placements on existing
/// nodes, and mostly schedulable pods (so the properties above are not vacuous).
#[test]
fn generated_worlds_are_not_trivial() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut pods, mut claims, mut placed, mut unschedulable, mut limited) = (0, 0, 0, 0, 0);
    for _ in 0..32 {
        let w = world().new_tree(&mut runner).unwrap().current();
        let input = input(&w);
        let plan = schedule(catalog(), &input);
        pods += input.pods.len();
        claims += plan.new_claims.len();
        placed += plan.placements.len();
        unschedulable += plan.unschedulable.len();
        limited += plan
            .unschedulable
            .iter()
            .filter(|u| u.reasons.iter().any(|r| r.contains("limit cpu=")))
            .count();
    }
    assert!(
        claims > 50 && placed > 10,
        "claims {claims}, placements {placed}"
    );
    assert!(
        (unschedulable - limited) * 10 < pods,
        "{unschedulable} of {pods} unschedulable, {limited} of them by limits"
    );
    assert!(limited > 0, "some worlds hit their limits");
}
