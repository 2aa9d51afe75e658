//! The plan preview of a NodePool change against the agent's own disruption pass, on
//! generated worlds: a pool before and after a change (requirements, labels, taints,
//! annotations, node class, limits, budgets), its live nodes and the pods on them.
//!
//! What the plan says must be what the agent then does:
//! - the nodes the preview calls drifted are the ones the agent's drift check flags for a
//!   claim stamped from the old template, and no other node is replaced for drift;
//! - the pods it calls unschedulable are those the provisioner, given the new pool and no
//!   node, cannot place;
//! - the pace it announces is what one disruption pass starts: with no stranded pod, as
//!   many drifted nodes as it says (never more in any case).

use std::collections::{BTreeMap, BTreeSet};

use joiner_agent::api::node_class::NodeClassSpec;
use joiner_agent::api::node_pool::{Budget, NodePoolSpec};
use joiner_agent::api::{NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};
use joiner_agent::catalog::Catalog;
use joiner_agent::disruption::decide::{decide, Candidate, Config, PoolPolicy, World};
use joiner_agent::disruption::drift::{
    completed_labels, drift_reason, nodeclass_hash, nodepool_hash, stamp, DriftInput,
};
use joiner_agent::disruption::Reason;
use joiner_agent::labels;
use joiner_agent::scheduler::{self, convert, BoundPod, Input, NodePoolInput};
use joiner_provider::resources::node_pool::preview::verdict;
use joiner_workloads::karpenter_catalog;
use proptest::prelude::*;
use serde_json::{json, Value as Json};

/// Monday 2026-11-23 00:00 UTC; the world is looked at some hours later.
const MONDAY: i64 = 1_795_392_000;
const TEAM: &str = "example.com/team";
const TYPES: usize = 6;

fn catalog() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| karpenter_catalog(TYPES))
}

fn req(key: &str, op: &str, values: Vec<String>) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator: op.into(),
        values,
        min_values: None,
    }
}

fn some_of(values: &[&'static str]) -> impl Strategy<Value = Vec<String>> {
    let all: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    let n = all.len();
    proptest::sample::subsequence(all, 1..=n)
}

fn requirement() -> impl Strategy<Value = NodeSelectorRequirementWithMinValues> {
    prop_oneof![
        some_of(&["spot", "on-demand"]).prop_map(|v| req(labels::CAPACITY_TYPE, "In", v)),
        some_of(&["fake-it-0", "fake-it-1", "fake-it-2", "fake-it-3"]).prop_map(|v| req(
            labels::INSTANCE_TYPE,
            "In",
            v
        )),
        some_of(&["fake-it-0", "fake-it-4"]).prop_map(|v| req(labels::INSTANCE_TYPE, "NotIn", v)),
        (0u32..4).prop_map(|n| req(labels::INSTANCE_CPU, "Gt", vec![n.to_string()])),
        some_of(&["a", "b"]).prop_map(|v| req(TEAM, "In", v)),
        Just(req(TEAM, "Exists", vec![])),
        Just(req(TEAM, "DoesNotExist", vec![])),
    ]
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect: effect.into(),
    }
}

fn taints() -> impl Strategy<Value = Vec<Taint>> {
    proptest::sample::subsequence(
        vec![
            taint("gpu", "true", "NoSchedule"),
            taint("dedicated", "batch", "NoExecute"),
            taint("spare", "", "PreferNoSchedule"),
        ],
        0..=2,
    )
}

fn budget() -> impl Strategy<Value = Budget> {
    (
        prop_oneof![
            Just("0"),
            Just("1"),
            Just("3"),
            Just("10%"),
            Just("50%"),
            Just("100%")
        ],
        any::<bool>(),
        prop_oneof![
            Just(vec![]),
            Just(vec!["Drifted".to_string()]),
            Just(vec!["Empty".to_string()])
        ],
    )
        .prop_map(|(nodes, scheduled, reasons)| Budget {
            nodes: nodes.into(),
            schedule: scheduled.then(|| "0 9 * * *".into()),
            duration: scheduled.then(|| "4h".into()),
            reasons,
        })
}

fn one_of(values: &[&'static str]) -> impl Strategy<Value = Option<String>> {
    proptest::option::of(proptest::sample::select(values.to_vec()).prop_map(String::from))
}

fn spec() -> impl Strategy<Value = NodePoolSpec> {
    (
        proptest::collection::vec(requirement(), 0..3),
        one_of(&["a", "b"]),
        one_of(&["alice", "bob"]),
        taints(),
        taints(),
        prop_oneof![Just("default"), Just("other")],
        one_of(&["1000", "2000"]),
        proptest::collection::vec(budget(), 0..3),
    )
        .prop_map(
            |(requirements, team, owner, taints, startup, class, cpu, budgets)| {
                let mut s = NodePoolSpec::default();
                s.template.spec.requirements = requirements;
                s.template.metadata.labels =
                    team.map(|t| (TEAM.to_string(), t)).into_iter().collect();
                s.template.metadata.annotations = owner
                    .map(|o| ("example.com/owner".to_string(), o))
                    .into_iter()
                    .collect();
                s.template.spec.taints = taints;
                s.template.spec.startup_taints = startup;
                s.template.spec.node_class_ref = NodeClassReference {
                    group: joiner_agent::api::GROUP.into(),
                    kind: "NodeClass".into(),
                    name: class.into(),
                };
                s.limits = cpu.map(|c| ("cpu".to_string(), c)).into_iter().collect();
                if !budgets.is_empty() {
                    s.disruption.budgets = budgets;
                }
                s
            },
        )
}

/// A pool and a change to it: each field of the new spec is the old one's unless picked.
fn change() -> impl Strategy<Value = (NodePoolSpec, NodePoolSpec)> {
    (spec(), spec(), proptest::collection::vec(0u8..4, 8)).prop_map(|(old, other, pick)| {
        let mut new = old.clone();
        let take = |i: usize| pick[i] == 0;
        let (t, o) = (&mut new.template, &other.template);
        if take(0) {
            t.spec.requirements = o.spec.requirements.clone();
        }
        if take(1) {
            t.metadata.labels = o.metadata.labels.clone();
        }
        if take(2) {
            t.metadata.annotations = o.metadata.annotations.clone();
        }
        if take(3) {
            t.spec.taints = o.spec.taints.clone();
        }
        if take(4) {
            t.spec.startup_taints = o.spec.startup_taints.clone();
        }
        if take(5) {
            t.spec.node_class_ref = o.spec.node_class_ref.clone();
        }
        if take(6) {
            new.limits = other.limits.clone();
        }
        if take(7) {
            new.disruption.budgets = other.disruption.budgets.clone();
        }
        (old, new)
    })
}

#[derive(Debug, Clone)]
struct LivePod {
    tolerates: Vec<&'static str>,
    selector: Option<(&'static str, String)>,
    daemon: bool,
}

#[derive(Debug, Clone)]
struct LiveNode {
    itype: usize,
    spot: bool,
    team: Option<String>,
    /// Whether the node carries its instance-type label (the catalogue completes the rest).
    typed: bool,
    pods: Vec<LivePod>,
}

fn live_pod() -> impl Strategy<Value = LivePod> {
    (
        proptest::sample::subsequence(vec!["gpu", "dedicated"], 0..=2),
        prop_oneof![
            2 => Just(None),
            1 => one_of(&["a", "b"]).prop_map(|t| t.map(|t| (TEAM, t))),
            1 => Just(Some((labels::CAPACITY_TYPE, "spot".to_string()))),
            1 => (0..TYPES).prop_map(|i| Some((labels::INSTANCE_TYPE, format!("fake-it-{i}")))),
        ],
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(tolerates, selector, daemon)| LivePod {
            tolerates,
            selector,
            daemon,
        })
}

fn live_node() -> impl Strategy<Value = LiveNode> {
    (
        0..TYPES,
        any::<bool>(),
        one_of(&["a", "b"]),
        proptest::bool::weighted(0.8),
        proptest::collection::vec(live_pod(), 0..3),
    )
        .prop_map(|(itype, spot, team, typed, pods)| LiveNode {
            itype,
            spot,
            team,
            typed,
            pods,
        })
}

fn node_labels(i: usize, n: &LiveNode) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (
            labels::CAPACITY_TYPE.to_string(),
            if n.spot { "spot" } else { "on-demand" }.to_string(),
        ),
        (labels::ZONE.to_string(), "test-zone-a".to_string()),
        (labels::HOSTNAME.to_string(), format!("node-{i}")),
        (
            labels::KARPENTER_NODEPOOL.to_string(),
            "general".to_string(),
        ),
    ]);
    if n.typed {
        l.insert(labels::INSTANCE_TYPE.into(), format!("fake-it-{}", n.itype));
    }
    if let Some(t) = &n.team {
        l.insert(TEAM.into(), t.clone());
    }
    l
}

fn pod_json(node: usize, j: usize, p: &LivePod) -> Json {
    let tolerations: Vec<Json> = p
        .tolerates
        .iter()
        .map(|k| json!({"key": k, "operator": "Exists"}))
        .collect();
    let requests = json!({"cpu": "100m", "memory": "128Mi"});
    let mut pod = json!({
        "metadata": {"name": format!("pod-{node}-{j}"), "namespace": "default"},
        "spec": {
            "nodeName": format!("node-{node}"),
            "containers": [{"name": "c", "resources": {"requests": requests}}],
            "tolerations": tolerations,
        },
    });
    if let Some((k, v)) = &p.selector {
        pod["spec"]["nodeSelector"] = json!({ *k: v });
    }
    if p.daemon {
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u",
            "controller": true,
        }]);
    }
    pod
}

/// The agent's disruption pass over the same world: every node a claim stamped from `old`.
fn agent_pass(
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[LiveNode],
    pods: &[Json],
    now: i64,
) -> (BTreeSet<String>, Vec<String>) {
    let cat = catalog();
    let class = NodeClassSpec::default();
    let stamped = stamp(old, &class);
    let old_taints = joiner_agent::api::convert_taints(&old.template.spec.taints).unwrap();
    let requirements = joiner_agent::api::parse_requirements(&new.template.spec.requirements);
    let mut candidates = Vec::new();
    let mut drifted = BTreeSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let own = node_labels(i, n);
        let itype = format!("fake-it-{}", n.itype);
        let full = completed_labels(cat, own.get(labels::INSTANCE_TYPE).map_or("", |s| s), &own);
        let drift = drift_reason(&DriftInput {
            claim_annotations: &stamped,
            node_labels: &full,
            image_id: None,
            pool: new,
            requirements: &requirements,
            class: Some(&class),
            pool_hash: &nodepool_hash(new),
            class_hash: Some(&nodeclass_hash(&class)),
            resolved_amis: &[],
        });
        if drift.is_some() {
            drifted.insert(name.clone());
        }
        let on_node: Vec<k8s_openapi::api::core::v1::Pod> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == name.as_str())
            .map(|p| serde_json::from_value(p.clone()).unwrap())
            .collect();
        let all: Vec<scheduler::Pod> = on_node.iter().map(|p| convert::pod(p).unwrap()).collect();
        let movable: Vec<scheduler::MovablePod> = on_node
            .iter()
            .filter(|p| convert::reschedulable(p))
            .map(|p| scheduler::MovablePod::from_pod(&convert::pod(p).unwrap()))
            .collect();
        let it = cat.get(&itype).unwrap();
        let mut sched_labels = full.clone();
        sched_labels.insert(labels::INSTANCE_TYPE.into(), itype.clone());
        candidates.push(Candidate {
            node: scheduler::Node {
                name: name.clone(),
                labels: sched_labels,
                taints: old_taints.clone(),
                allocatable: it.allocatable.clone(),
                pods: all.iter().map(BoundPod::from_pod).collect(),
                unschedulable: false,
            },
            pods: movable,
            nodeclaim: format!("claim-{i}"),
            nodepool: "general".into(),
            instance_type: itype,
            zone: "test-zone-a".into(),
            price: 0.1,
            created: now - 86_400,
            last_pod_change: now - 3_600,
            initialized: true,
            drift,
            ..Default::default()
        });
    }
    let world = World {
        candidates,
        pools: PoolPolicy::from_api("general", new).into_iter().collect(),
        sched: Input {
            node_pools: vec![NodePoolInput::from_api("general", new, Default::default()).unwrap()],
            ..Default::default()
        },
        now,
        ..Default::default()
    };
    let out = decide(cat, &world, &Config::default());
    let replaced = out
        .decisions
        .iter()
        .filter(|d| d.reason == Reason::Drifted)
        .flat_map(|d| d.nodes.iter().map(|n| n.node.clone()))
        .collect();
    (drifted, replaced)
}

/// The pods of drifted nodes the provisioner cannot place on fresh nodes of `new`.
fn unplaceable(new: &NodePoolSpec, drifted: &BTreeSet<String>, pods: &[Json]) -> BTreeSet<String> {
    let movable: Vec<scheduler::Pod> = pods
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| drifted.contains(n))
        })
        .map(|p| serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(p.clone()).unwrap())
        .filter(convert::reschedulable)
        .map(|p| convert::pod(&p).unwrap())
        .collect();
    let input = Input {
        pods: movable.clone(),
        node_pools: vec![NodePoolInput::from_api("general", new, Default::default()).unwrap()],
        ..Default::default()
    };
    let plan = scheduler::schedule(catalog(), &input);
    plan.unschedulable
        .iter()
        .map(|u| movable[u.pod].key())
        .collect()
}

/// One world: the preview's verdict held to the agent's pass.
fn check(
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    nodes: &[LiveNode],
    now: i64,
) -> Result<(), TestCaseError> {
    let node_json: Vec<Json> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"metadata": {"name": format!("node-{i}"), "labels": node_labels(i, n)}})
        })
        .collect();
    let pod_json: Vec<Json> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            n.pods
                .iter()
                .enumerate()
                .map(move |(j, p)| pod_json(i, j, p))
        })
        .collect();

    let plan = verdict(catalog(), old, new, &node_json, &pod_json, now);
    let (drifted, replaced) = agent_pass(old, new, nodes, &pod_json, now);

    let said: BTreeSet<String> = plan.drifted.iter().map(|(n, _, _)| n.clone()).collect();
    prop_assert_eq!(&said, &drifted, "drifted nodes: plan {:?}", plan.drifted);
    prop_assert!(
        replaced.iter().all(|n| drifted.contains(n)),
        "replaced for drift without drifting: {:?}",
        replaced
    );

    let stranded: BTreeSet<String> = plan.stranded.iter().map(|(p, _)| p.clone()).collect();
    prop_assert_eq!(
        &stranded,
        &unplaceable(new, &drifted, &pod_json),
        "stranded: plan {:?}",
        plan.stranded
    );

    let pace = plan.at_once.min(drifted.len());
    prop_assert!(
        replaced.len() <= pace,
        "replaced {:?}, the plan said {} at a time ({})",
        replaced,
        plan.at_once,
        plan.budget
    );
    if stranded.is_empty() {
        prop_assert_eq!(
            replaced.len(),
            pace,
            "the plan said {} at a time ({})",
            plan.at_once,
            plan.budget
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_plan_says_what_the_agent_does(
        (old, new) in change(),
        nodes in proptest::collection::vec(live_node(), 1..6),
        hour in 0i64..24,
    ) {
        check(&old, &new, &nodes, MONDAY + hour * 3600)?;
    }
}
