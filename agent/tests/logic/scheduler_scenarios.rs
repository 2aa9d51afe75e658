//! Scenario tests from the seed documents, on the real catalogue fixture (the emulator's
//! DescribeInstanceTypes dump, with embedded on-demand prices and modelled Spot prices).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use joiner_agent::catalog::daemonsets::DaemonSet;
use joiner_agent::catalog::{CapacityType, Catalog, CatalogOptions};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    schedule, BoundPod, Input, LabelSelector, Node, NodePoolInput, Pod, Target,
    TopologySpreadConstraint, UnavailableOfferings, WhenUnsatisfiable,
};
use joiner_agent::taints::{Effect, Taint, Toleration};
use joiner_workloads::node_pool;

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

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

fn req(key: &str, op: Operator, values: &[&str]) -> (String, Requirement) {
    (key.to_string(), Requirement::new(op, values).unwrap())
}

fn reqs(items: Vec<(String, Requirement)>) -> Requirements {
    let mut r = Requirements::new();
    for (k, v) in items {
        r.add(&k, v);
    }
    r
}

fn pods(n: usize, prefix: &str, cpu: i64, mem: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = Pod::new("default", &format!("{prefix}-{i}"), cpu, mem);
            p.labels.insert("app".into(), prefix.into());
            p
        })
        .collect()
}

fn spread(key: &str, app: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(LabelSelector::labels([("app", app)])),
        min_domains: None,
        ..Default::default()
    }
}

fn general_pool() -> NodePoolInput {
    node_pool(
        "default",
        reqs(vec![
            req(labels::INSTANCE_CATEGORY, Operator::In, &["c", "m", "r"]),
            req(labels::INSTANCE_GENERATION, Operator::Gt, &["4"]),
            req(labels::ARCH, Operator::In, &["amd64"]),
        ]),
    )
}

#[test]
fn multi_az_spread_over_three_zones() {
    let mut pool = general_pool();
    pool.requirements.add(
        labels::ZONE,
        Requirement::new(Operator::In, &["us-east-1a", "us-east-1b", "us-east-1c"]).unwrap(),
    );
    let mut ps = pods(30, "web", 500, GI);
    for p in &mut ps {
        p.topology_spread.push(spread(labels::ZONE, "web"));
    }
    let input = Input {
        pods: ps,
        node_pools: vec![pool],
        ..Default::default()
    };
    let plan = schedule(catalog(), &input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        assert_eq!(
            c.zones.len(),
            1,
            "each claim is pinned to one zone: {:?}",
            c.zones
        );
        *per_zone.entry(c.zones[0].clone()).or_default() += c.pods.len();
        for t in &c.instance_types {
            assert!(t.zones.contains(&c.zones[0]));
        }
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([
            ("us-east-1a".to_string(), 10),
            ("us-east-1b".to_string(), 10),
            ("us-east-1c".to_string(), 10)
        ])
    );
}

#[test]
fn diversification_over_c5_m5_r5_large() {
    let pool = node_pool(
        "spot",
        reqs(vec![
            req(
                labels::INSTANCE_TYPE,
                Operator::In,
                &["c5.large", "m5.large", "r5.large"],
            ),
            req(labels::CAPACITY_TYPE, Operator::In, &["spot"]),
        ]),
    );
    let input = Input {
        pods: pods(12, "api", 250, 256 * MI),
        node_pools: vec![pool],
        ..Default::default()
    };
    let plan = schedule(catalog(), &input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(!plan.new_claims.is_empty());
    for c in &plan.new_claims {
        let names: Vec<&str> = c
            .instance_types
            .iter()
            .map(|t| t.instance_type.as_str())
            .collect();
        let set: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(
            set,
            BTreeSet::from(["c5.large", "m5.large", "r5.large"]),
            "all three families stay candidates"
        );
        assert_eq!(names[0], "c5.large", "cheapest first");
        assert!(c
            .instance_types
            .windows(2)
            .all(|w| w[0].price <= w[1].price));
        assert_eq!(c.capacity_types, vec![CapacityType::Spot]);
        assert!(c
            .instance_types
            .iter()
            .all(|t| t.capacity_type == CapacityType::Spot));
        assert!(
            c.zones.len() >= 3,
            "Spot claims keep every zone: {:?}",
            c.zones
        );
    }
}

#[test]
fn spot_on_demand_split_by_capacity_type_spread() {
    let mut pool = general_pool();
    pool.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["spot", "on-demand"]).unwrap(),
    );
    let mut ps = pods(20, "split", 1000, 2 * GI);
    for p in &mut ps {
        p.topology_spread
            .push(spread(labels::CAPACITY_TYPE, "split"));
    }
    let plan = schedule(
        catalog(),
        &Input {
            pods: ps,
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut per_ct: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        assert_eq!(
            c.capacity_types.len(),
            1,
            "each claim has one capacity type"
        );
        let ct = c.capacity_types[0];
        assert!(c.instance_types.iter().all(|t| t.capacity_type == ct));
        *per_ct.entry(ct.as_str()).or_default() += c.pods.len();
    }
    assert_eq!(per_ct, BTreeMap::from([("on-demand", 10), ("spot", 10)]));
}

#[test]
fn grover_node_pool() {
    let excluded = ["t2", "t3", "t3a", "m4", "c4", "r4", "a1", "m5zn"];
    let pool = node_pool(
        "grover",
        reqs(vec![
            req(labels::INSTANCE_FAMILY, Operator::NotIn, &excluded),
            req(
                labels::INSTANCE_SIZE,
                Operator::In,
                &["large", "xlarge", "2xlarge", "4xlarge"],
            ),
            req(labels::INSTANCE_HYPERVISOR, Operator::In, &["nitro"]),
            req(labels::ARCH, Operator::In, &["amd64"]),
            req(labels::OS, Operator::In, &["linux"]),
            req(labels::CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]),
        ]),
    );
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(40, "shop", 1000, 2 * GI),
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(!plan.new_claims.is_empty());
    for c in &plan.new_claims {
        assert!(c.instance_types.len() <= 60);
        assert!(
            c.instance_types.len() >= 10,
            "plenty of Spot diversity: {}",
            c.instance_types.len()
        );
        let families: BTreeSet<String> = c
            .instance_types
            .iter()
            .map(|t| {
                catalog().get(&t.instance_type).unwrap().labels[labels::INSTANCE_FAMILY].clone()
            })
            .collect();
        assert!(families.len() >= 5, "several families: {families:?}");
        for t in &c.instance_types {
            let it = catalog().get(&t.instance_type).unwrap();
            assert!(
                !excluded.contains(&it.labels[labels::INSTANCE_FAMILY].as_str()),
                "{}",
                t.instance_type
            );
            assert!(["large", "xlarge", "2xlarge", "4xlarge"]
                .contains(&it.labels[labels::INSTANCE_SIZE].as_str()));
            assert_eq!(it.labels[labels::INSTANCE_HYPERVISOR], "nitro");
            assert_eq!(it.labels[labels::ARCH], "amd64");
        }
        assert_eq!(
            c.capacity_types,
            vec![CapacityType::Spot, CapacityType::OnDemand],
            "Spot preferred"
        );
        assert_eq!(c.instance_types[0].capacity_type, CapacityType::Spot);
    }
}

#[test]
fn reasons_per_node_pool() {
    let mut default = general_pool();
    default.weight = 10;
    let mut gpu = node_pool("gpu", Requirements::new());
    gpu.limits.insert("cpu".into(), 100_000);
    gpu.usage = Resources::new(100_000, 0);
    let mut big = Pod::new("default", "huge", 96_000, GI);
    big.node_selector
        .insert(labels::ARCH.into(), "arm64".into());
    let plan = schedule(
        catalog(),
        &Input {
            pods: vec![big],
            node_pools: vec![gpu, default],
            ..Default::default()
        },
    );
    assert_eq!(plan.unschedulable.len(), 1);
    let r = &plan.unschedulable[0].reasons;
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(
        r[0].starts_with("nodepool \"default\": ")
            && r[0].contains("kubernetes.io/arch In [amd64]"),
        "weight order, then the conflict: {r:?}"
    );
    assert_eq!(r[1], "nodepool \"gpu\": limit cpu=100 reached");

    let mut arm = node_pool(
        "arm",
        reqs(vec![req(labels::ARCH, Operator::In, &["arm64"])]),
    );
    arm.name = "default".into();
    let mut big = Pod::new("default", "huge", 96_000, GI);
    big.node_selector
        .insert(labels::ARCH.into(), "arm64".into());
    big.requests.cpu_milli = 400_000;
    let plan = schedule(
        catalog(),
        &Input {
            pods: vec![big],
            node_pools: vec![arm],
            ..Default::default()
        },
    );
    assert_eq!(
        plan.unschedulable[0].reasons,
        vec!["nodepool \"default\": no instance type offers cpu=400 memory=1Gi with kubernetes.io/arch In [arm64]"]
    );
}

#[test]
fn taints_tolerations_and_startup_taints() {
    let mut gpu = node_pool("tainted", Requirements::new());
    gpu.weight = 50;
    gpu.taints = vec![Taint::new("dedicated", "batch", Effect::NoSchedule)];
    let mut plain = general_pool();
    plain.startup_taints = vec![Taint::new(
        "node.cilium.io/agent-not-ready",
        "",
        Effect::NoExecute,
    )];
    let mut tolerating = Pod::new("default", "batch", 500, GI);
    tolerating.tolerations.push(Toleration::equal(
        "dedicated",
        "batch",
        Some(Effect::NoSchedule),
    ));
    let other = Pod::new("default", "web", 500, GI);
    let plan = schedule(
        catalog(),
        &Input {
            pods: vec![tolerating, other],
            node_pools: vec![gpu, plain],
            ..Default::default()
        },
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let pool_of = |pod: usize| {
        plan.new_claims
            .iter()
            .find(|c| c.pods.contains(&pod))
            .unwrap()
            .nodepool
            .clone()
    };
    assert_eq!(pool_of(0), "tainted");
    assert_eq!(pool_of(1), "default", "startup taints need no toleration");
}

#[test]
fn existing_nodes_first_then_new_claims() {
    let mut labels_ = BTreeMap::new();
    labels_.insert(labels::ZONE.to_string(), "us-east-1a".to_string());
    labels_.insert(labels::HOSTNAME.to_string(), "ip-10-0-0-1".to_string());
    let node = Node {
        name: "ip-10-0-0-1".into(),
        labels: labels_,
        taints: vec![],
        allocatable: Resources {
            cpu_milli: 1900,
            memory_bytes: 6 * GI,
            pods: 29,
            ..Default::default()
        },
        pods: vec![BoundPod::from_pod(&joiner_agent::scheduler::Pod {
            namespace: "default".into(),
            labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            requests: Resources::pod(1000, GI),
            pod_anti_affinity: vec![],
            ..Default::default()
        })],
        unschedulable: false,
    };
    let mut ps = pods(3, "web", 400, GI);
    for p in &mut ps {
        p.pod_anti_affinity
            .push(joiner_agent::scheduler::PodAffinityTerm {
                label_selector: Some(LabelSelector::labels([("app", "db")])),
                namespaces: vec![],
                topology_key: labels::HOSTNAME.into(),
                ..Default::default()
            });
    }
    let plan = schedule(
        catalog(),
        &Input {
            pods: ps,
            nodes: vec![node],
            node_pools: vec![general_pool()],
            ..Default::default()
        },
    );
    assert_eq!(plan.placements.len(), 2, "900m free fits two 400m pods");
    assert!(plan
        .placements
        .iter()
        .all(|p| p.target == Target::Node("ip-10-0-0-1".into())));
    assert_eq!(plan.new_claims.len(), 1);
    assert_eq!(plan.new_claims[0].pods.len(), 1);
}

#[test]
fn daemonset_overhead_is_reserved_per_type() {
    let pool = node_pool(
        "default",
        reqs(vec![req(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["m5.large", "m5.xlarge"],
        )]),
    );
    let ds = DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        requests: Resources::pod(500, 512 * MI),
        tolerations: vec![Toleration::exists("", None)],
        ..Default::default()
    };
    let mut arm_only = DaemonSet {
        namespace: "kube-system".into(),
        name: "arm-only".into(),
        requests: Resources::pod(1000, GI),
        ..Default::default()
    };
    arm_only
        .node_selector
        .insert(labels::ARCH.into(), "arm64".into());
    // m5.large allocatable is 1930m; with the 500m DaemonSet 1430m are left: one 1400m
    // pod fits, two do not, so each pod needs m5.large alone or shares an m5.xlarge.
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(1, "p", 1400, 512 * MI),
            node_pools: vec![pool],
            daemonsets: vec![ds, arm_only],
            ..Default::default()
        },
    );
    let c = &plan.new_claims[0];
    assert_eq!(
        c.daemonset_overhead.cpu_milli, 500,
        "only the DaemonSet that lands counts"
    );
    assert_eq!(c.requests.cpu_milli, 1900);
    assert_eq!(c.instance_types[0].instance_type, "m5.large");
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(1, "p", 1500, 512 * MI),
            node_pools: vec![node_pool(
                "default",
                reqs(vec![req(
                    labels::INSTANCE_TYPE,
                    Operator::In,
                    &["m5.large", "m5.xlarge"],
                )]),
            )],
            daemonsets: vec![DaemonSet {
                namespace: "kube-system".into(),
                name: "agent".into(),
                requests: Resources::pod(500, 512 * MI),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let names: Vec<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|t| t.instance_type.as_str())
        .collect();
    assert_eq!(
        names,
        ["m5.xlarge"],
        "1500m + 500m DaemonSet no longer fits m5.large"
    );
}

#[test]
fn unavailable_offerings_and_spot_price_cap() {
    let pool = node_pool(
        "default",
        reqs(vec![req(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["c5.large", "m5.large"],
        )]),
    );
    let mut unavailable = UnavailableOfferings::default();
    for z in catalog().zones() {
        unavailable.insert(CapacityType::Spot, "c5.large", &z);
    }
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(1, "p", 500, GI),
            node_pools: vec![pool],
            unavailable,
            ..Default::default()
        },
    );
    let c = &plan.new_claims[0];
    let c5 = c
        .instance_types
        .iter()
        .find(|t| t.instance_type == "c5.large")
        .unwrap();
    assert_eq!(
        c5.capacity_type,
        CapacityType::OnDemand,
        "its Spot offerings are unavailable"
    );
    let m5 = c
        .instance_types
        .iter()
        .find(|t| t.instance_type == "m5.large")
        .unwrap();
    assert_eq!(m5.capacity_type, CapacityType::Spot);
    assert_eq!(
        c.instance_types[0].instance_type, "m5.large",
        "Spot m5 is cheaper than on-demand c5"
    );
}

#[test]
fn deterministic() {
    let mut ps = joiner_workloads::karpenter_pods(300, 7);
    ps.extend(pods(50, "web", 250, 512 * MI));
    let input = Input {
        pods: ps,
        node_pools: vec![general_pool()],
        ..Default::default()
    };
    let a = schedule(catalog(), &input);
    let b = schedule(catalog(), &input);
    assert_eq!(a, b);
    assert!(a.unschedulable.is_empty(), "{:?}", a.unschedulable);
}

#[test]
fn node_claim_spec_from_plan() {
    let spec: joiner_agent::api::NodePoolSpec = serde_yaml::from_str(
        r#"
template:
  spec:
    nodeClassRef: {name: default}
    requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5, r5], minValues: 2}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
    taints: [{key: dedicated, value: web, effect: NoSchedule}]
"#,
    )
    .unwrap();
    let pool = NodePoolInput::from_api("web", &spec, Resources::default()).unwrap();
    let mut ps = pods(4, "web", 1000, 2 * GI);
    for p in &mut ps {
        p.tolerations.push(Toleration::exists("dedicated", None));
    }
    let plan = schedule(
        catalog(),
        &Input {
            pods: ps,
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let claim = &plan.new_claims[0];
    let families: BTreeSet<String> = claim
        .instance_types
        .iter()
        .map(|t| catalog().get(&t.instance_type).unwrap().labels[labels::INSTANCE_FAMILY].clone())
        .collect();
    assert!(
        families.len() >= 2,
        "minValues 2 keeps two families: {families:?}"
    );
    let out = joiner_agent::api::NodeClaimSpec::from_plan(claim, &spec);
    let it = out
        .requirements
        .iter()
        .find(|r| r.key == labels::INSTANCE_TYPE)
        .unwrap();
    assert_eq!(
        it.values[0], claim.instance_types[0].instance_type,
        "cheapest first"
    );
    let fam = out
        .requirements
        .iter()
        .find(|r| r.key == labels::INSTANCE_FAMILY)
        .unwrap();
    assert_eq!(fam.min_values, Some(2));
    assert_eq!(out.taints[0].key, "dedicated");
    assert_eq!(
        out.resources.requests["cpu"],
        joiner_agent::resources::fmt_cpu(claim.requests.cpu_milli)
    );
}

#[test]
fn preferences_are_relaxed_when_they_cannot_be_met() {
    // Like Karpenter, preferred node affinity terms are dropped (lowest weight first)
    // before ScheduleAnyway spreads.
    let pool = || {
        node_pool(
            "default",
            reqs(vec![req(
                labels::INSTANCE_TYPE,
                Operator::In,
                &["m5.large", "m5.xlarge"],
            )]),
        )
    };
    let mut p = Pod::new("default", "pref", 500, GI);
    p.preferred_node_affinity.push((
        50,
        reqs(vec![req(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["c5.large"],
        )]),
    ));
    p.preferred_node_affinity.push((
        90,
        reqs(vec![req(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["m5.xlarge"],
        )]),
    ));
    let names = |plan: &joiner_agent::scheduler::Plan| -> Vec<String> {
        plan.new_claims[0]
            .instance_types
            .iter()
            .map(|t| t.instance_type.clone())
            .collect()
    };
    // Preferences have a price: m5.xlarge costs twice m5.large, beyond the default 10 %
    // budget, so the pod gets every type and the plan says what was relaxed...
    let plan = schedule(
        catalog(),
        &Input {
            pods: vec![p.clone()],
            node_pools: vec![pool()],
            ..Default::default()
        },
    );
    assert_eq!(names(&plan), ["m5.large", "m5.xlarge"]);
    assert_eq!(plan.preferences.relaxed.len(), 1);
    assert!(plan.preferences.cost_honoured > plan.preferences.cost_chosen * 1.5);
    // ... and with a budget that covers it, the heavier preference holds and the
    // impossible one is dropped.
    let generous = |pods: Vec<Pod>| Input {
        pods,
        node_pools: vec![pool()],
        preference_budget: joiner_agent::scheduler::PreferenceBudget(10.0),
        ..Default::default()
    };
    let plan = schedule(catalog(), &generous(vec![p.clone()]));
    assert_eq!(
        names(&plan),
        ["m5.xlarge"],
        "the heavier preference holds, the impossible one is dropped"
    );

    p.topology_spread.push(TopologySpreadConstraint {
        when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
        ..spread("example.com/rack", "pref")
    });
    let plan = schedule(catalog(), &generous(vec![p]));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(
        names(&plan),
        ["m5.large", "m5.xlarge"],
        "an unsatisfiable soft spread is relaxed last"
    );
}

/// Seed 004's pool (large to 4xlarge, nitro, Spot and on-demand) and 100 pods of
/// 250m/512Mi: GPU, accelerator and bare-metal types fit those pods too, but no claim lists
/// them while an ordinary type fits, so CreateFleet can never fall back to a GPU node for
/// CPU pods. A pod that asks for a GPU still gets GPU types.
#[test]
fn exotic_types_only_for_pods_that_need_them() {
    let pool = node_pool(
        "seed-004",
        reqs(vec![
            req(labels::CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]),
            req(labels::ARCH, Operator::In, &["amd64"]),
            req(
                labels::INSTANCE_FAMILY,
                Operator::NotIn,
                &[
                    "t3", "t3a", "t4", "t2", "i3", "i4i", "i3en", "c6id", "m6id", "r6id", "d3",
                    "d3en",
                ],
            ),
            req(labels::INSTANCE_HYPERVISOR, Operator::In, &["nitro"]),
            req(
                labels::INSTANCE_SIZE,
                Operator::In,
                &["large", "xlarge", "2xlarge", "4xlarge"],
            ),
        ]),
    );
    let exotic = |name: &str| {
        catalog()
            .types
            .iter()
            .find(|t| t.name == name)
            .is_some_and(|t| t.is_exotic())
    };
    // The pool admits exotic types: the filter, not the requirements, keeps them out.
    let mut by_type_labels = Requirements::new();
    for (k, r) in pool.requirements.iter() {
        if k.as_str() != labels::CAPACITY_TYPE {
            by_type_labels.add(k, r.clone());
        }
    }
    let admitted_exotic: Vec<&str> = catalog()
        .types
        .iter()
        .filter(|t| t.is_exotic() && by_type_labels.matches_labels(&t.labels))
        .map(|t| t.name.as_str())
        .collect();
    assert!(
        admitted_exotic.len() > 10,
        "the pool admits GPU types: {admitted_exotic:?}"
    );
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(100, "shop", 250, 512 * MI),
            node_pools: vec![pool.clone()],
            ..Default::default()
        },
    );
    assert!(!plan.new_claims.is_empty());
    for c in &plan.new_claims {
        let listed: Vec<&str> = c
            .instance_types
            .iter()
            .map(|t| t.instance_type.as_str())
            .filter(|t| exotic(t))
            .collect();
        assert!(listed.is_empty(), "a claim for CPU pods lists {listed:?}");
    }

    let mut gpu = Pod::new("default", "train", 1000, 4 * GI);
    gpu.requests
        .extended
        .insert(joiner_agent::resources::NVIDIA_GPU.into(), 1);
    let plan = schedule(
        catalog(),
        &Input {
            pods: vec![gpu],
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert_eq!(plan.new_claims.len(), 1, "{:?}", plan.unschedulable);
    assert!(plan.new_claims[0]
        .instance_types
        .iter()
        .all(|t| exotic(&t.instance_type)));
}

/// A migrated GPU pool (`instance-gpu-name In [a10g]`) admits the A10G types only: the
/// label is modelled from the catalogue, not taken for a custom label that every type has.
#[test]
fn gpu_name_selects_only_those_gpus() {
    let r = reqs(vec![req(
        labels::INSTANCE_GPU_NAME,
        Operator::In,
        &["a10g"],
    )]);
    let admitted: Vec<&str> = catalog()
        .types
        .iter()
        .filter(|t| t.allowed_by(&r))
        .map(|t| t.name.as_str())
        .collect();
    assert!(!admitted.is_empty());
    assert!(
        admitted.iter().all(|t| t.starts_with("g5.")),
        "{admitted:?}"
    );
    let r = reqs(vec![req(
        labels::INSTANCE_GPU_MANUFACTURER,
        Operator::In,
        &["nvidia"],
    )]);
    assert!(catalog()
        .types
        .iter()
        .filter(|t| t.allowed_by(&r))
        .all(|t| t.record.gpu_count > 0));
}

/// `limits: {nodes: "3"}` (Karpenter v1.11) caps a pool's node count, existing nodes
/// included: pods that each need a node of their own get at most the remaining count, and
/// the rest are unschedulable naming the limit.
#[test]
fn a_node_count_limit_caps_the_pool() {
    let mut pool = general_pool();
    pool.limits.insert("nodes".into(), 3);
    // One node of the pool already exists.
    pool.usage = Resources::new(2000, 8 * GI);
    pool.usage.extended.insert("nodes".into(), 1);
    // 6 pods that cannot share a node (hostname anti-affinity through a spread of 1).
    let mut ps = pods(6, "solo", 500, GI);
    for p in &mut ps {
        p.topology_spread.push(spread(labels::HOSTNAME, "solo"));
    }
    let plan = schedule(
        catalog(),
        &Input {
            pods: ps,
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert_eq!(plan.new_claims.len(), 2, "3 nodes, 1 of which exists");
    assert_eq!(plan.unschedulable.len(), 4, "{:?}", plan.unschedulable);
    assert!(
        plan.unschedulable[0]
            .reasons
            .iter()
            .any(|r| r.contains("limit nodes=3 reached")),
        "{:?}",
        plan.unschedulable[0].reasons
    );
}

/// `Gte`/`Lte` (Karpenter v1.9): inclusive bounds, so generation 6 is in `Gte 6` and
/// 8 vCPU is in `Lte 8`.
#[test]
fn inclusive_bounds() {
    let pool = node_pool(
        "default",
        reqs(vec![
            req(labels::INSTANCE_CATEGORY, Operator::In, &["c", "m"]),
            req(labels::INSTANCE_GENERATION, Operator::Gte, &["6"]),
            req(labels::INSTANCE_CPU, Operator::Lte, &["8"]),
            req(labels::ARCH, Operator::In, &["amd64"]),
        ]),
    );
    let plan = schedule(
        catalog(),
        &Input {
            pods: pods(3, "p", 3000, 4 * GI),
            node_pools: vec![pool],
            ..Default::default()
        },
    );
    assert!(!plan.new_claims.is_empty(), "{:?}", plan.unschedulable);
    let mut gens = BTreeSet::new();
    let mut cpus = BTreeSet::new();
    for c in &plan.new_claims {
        for t in &c.instance_types {
            let it = catalog()
                .types
                .iter()
                .find(|x| x.name == t.instance_type)
                .unwrap();
            let g: i64 = it.labels[labels::INSTANCE_GENERATION].parse().unwrap();
            let cpu: i64 = it.labels[labels::INSTANCE_CPU].parse().unwrap();
            assert!(g >= 6 && cpu <= 8, "{}", t.instance_type);
            gens.insert(g);
            cpus.insert(cpu);
        }
    }
    assert!(gens.contains(&6), "generation 6 is admitted: {gens:?}");
    assert!(cpus.contains(&8), "8 vCPU is admitted: {cpus:?}");
}
