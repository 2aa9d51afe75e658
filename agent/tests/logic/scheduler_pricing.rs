//! Pricing through the scheduler, on the real catalogue fixture: capacity
//! reservations used first and never over-planned, the candidate price bound, the minValues
//! policy, and NodeOverlays changing what is chosen.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use joiner_agent::api::node_overlay::NodeOverlaySpec;
use joiner_agent::catalog::overlay::{self, Overlay};
use joiner_agent::catalog::reservations::{self, ReservationKind, ReservationRecord};
use joiner_agent::catalog::{CapacityType, Catalog, CatalogOptions};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{
    schedule, Input, MinValuesPolicy, NewNodeClaim, NodePoolInput, Pod, PriceRatio,
};
use joiner_workloads::node_pool;

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

fn reqs(items: &[(&str, Operator, &[&str])]) -> Requirements {
    let mut r = Requirements::new();
    for (k, op, v) in items {
        r.add(k, Requirement::new(*op, v).unwrap());
    }
    r
}

fn general() -> NodePoolInput {
    let mut p = node_pool(
        "general",
        reqs(&[
            (labels::INSTANCE_CATEGORY, Operator::In, &["c", "m", "r"]),
            (labels::INSTANCE_GENERATION, Operator::Gt, &["4"]),
            (labels::ARCH, Operator::In, &["amd64"]),
        ]),
    );
    p.node_class = "default".into();
    p
}

fn pods(n: usize, prefix: &str, cpu: i64, mem: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod::new("default", &format!("{prefix}-{i}"), cpu, mem))
        .collect()
}

fn odcr(id: &str, itype: &str, zone: &str, available: u32) -> ReservationRecord {
    ReservationRecord {
        id: id.into(),
        instance_type: itype.into(),
        zone: zone.into(),
        available,
        total: available,
        kind: ReservationKind::Default,
        interruptible: false,
        state: "active".into(),
        end_date: None,
        owner_id: "123456789012".into(),
        match_criteria: "targeted".into(),
    }
}

fn with_reservations(records: &[ReservationRecord], class: &str) -> Catalog {
    reservations::add(catalog(), records, class, 1_000_000)
}

fn reserved(c: &NewNodeClaim) -> Option<String> {
    (c.capacity_types == [CapacityType::Reserved]).then(|| {
        c.requirements
            .get(labels::CAPACITY_RESERVATION_ID)
            .and_then(|r| r.single_value())
            .expect("a reserved claim names its reservation")
            .to_string()
    })
}

#[test]
fn reservations_fill_first_and_never_beyond_their_room() {
    // 6 pods of 3.5 vCPU: one per m5.xlarge (4 vCPU). Two places in a reservation of
    // m5.xlarge in us-east-1a: two claims go there, the rest to the market.
    let cat = with_reservations(
        &[odcr("cr-0a1b2c3d4e5f60718", "m5.xlarge", "us-east-1a", 2)],
        "default",
    );
    let input = Input {
        pods: pods(6, "big", 3500, 4 * GI),
        node_pools: vec![general()],
        ..Default::default()
    };
    let plan = schedule(&cat, &input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let ids: Vec<Option<String>> = plan.new_claims.iter().map(reserved).collect();
    let in_reservation = ids.iter().filter(|i| i.is_some()).count();
    assert_eq!(in_reservation, 2, "{ids:?}");
    for c in plan.new_claims.iter().filter(|c| reserved(c).is_some()) {
        assert_eq!(c.instance_types.len(), 1);
        assert_eq!(c.instance_types[0].instance_type, "m5.xlarge");
        assert_eq!(c.zones, ["us-east-1a"]);
        assert!(c.instance_types[0].price < 0.0001, "priced near zero");
        for (k, v) in [
            (labels::CAPACITY_TYPE, "reserved"),
            (labels::CAPACITY_RESERVATION_TYPE, "default"),
            (labels::CAPACITY_RESERVATION_INTERRUPTIBLE, "false"),
        ] {
            assert_eq!(
                c.requirements.get(k).and_then(|r| r.single_value()),
                Some(v),
                "{k}"
            );
        }
    }
    for c in plan.new_claims.iter().filter(|c| reserved(c).is_none()) {
        assert!(!c.capacity_types.contains(&CapacityType::Reserved));
    }
    // The same pods with the reservation taken by claims in flight (the provisioner
    // subtracts them): nothing more goes there.
    let full = reservations::subtract(
        &cat,
        &BTreeMap::from([("cr-0a1b2c3d4e5f60718".to_string(), 2u32)]),
    );
    let plan = schedule(&full, &input);
    assert!(plan.new_claims.iter().all(|c| reserved(c).is_none()));
}

#[test]
fn a_reservation_serves_only_its_class_and_what_the_pool_and_pod_allow() {
    let cat = with_reservations(
        &[odcr("cr-0a1b2c3d4e5f60718", "m5.xlarge", "us-east-1a", 4)],
        "gpu",
    );
    let input = Input {
        pods: pods(2, "p", 3500, 4 * GI),
        node_pools: vec![general()],
        ..Default::default()
    };
    // The pool's class is `default`: another class's reservation is not its to use.
    let plan = schedule(&cat, &input);
    assert!(plan.new_claims.iter().all(|c| reserved(c).is_none()));

    let cat = with_reservations(
        &[odcr("cr-0a1b2c3d4e5f60718", "m5.xlarge", "us-east-1a", 4)],
        "default",
    );
    // A pool that excludes reserved capacity.
    let mut market = general();
    market.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["spot", "on-demand"]).unwrap(),
    );
    let plan = schedule(
        &cat,
        &Input {
            node_pools: vec![market],
            ..input.clone()
        },
    );
    assert!(plan.new_claims.iter().all(|c| reserved(c).is_none()));
    // A pool that only takes reservations: what does not fit one is unschedulable.
    let mut only = general();
    only.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["reserved"]).unwrap(),
    );
    let mut ps = pods(5, "p", 3500, 4 * GI);
    ps.push(Pod::new("default", "huge", 30_000, 8 * GI));
    let plan = schedule(
        &cat,
        &Input {
            pods: ps,
            node_pools: vec![only],
            ..Default::default()
        },
    );
    assert_eq!(plan.new_claims.len(), 4, "{:?}", plan.new_claims);
    assert!(plan.new_claims.iter().all(|c| reserved(c).is_some()));
    assert_eq!(
        plan.unschedulable.len(),
        2,
        "the 5th pod and the huge one: {:?}",
        plan.unschedulable
    );
    assert!(
        plan.unschedulable[0].reasons[0].contains("capacity reservation"),
        "{:?}",
        plan.unschedulable
    );
    // A pod that asks for a capacity block gets none from a default reservation.
    let mut p = Pod::new("default", "block-only", 1000, GI);
    p.node_selector.insert(
        labels::CAPACITY_RESERVATION_TYPE.into(),
        "capacity-block".into(),
    );
    let plan = schedule(
        &cat,
        &Input {
            pods: vec![p],
            node_pools: vec![general()],
            ..Default::default()
        },
    );
    assert!(
        plan.new_claims.is_empty() && plan.unschedulable.len() == 1,
        "{plan:?}"
    );
}

#[test]
fn gpu_reservations_are_not_spent_on_cpu_pods_an_ordinary_type_fits() {
    let cat = with_reservations(
        &[odcr("cr-0a1b2c3d4e5f60719", "g5.xlarge", "us-east-1a", 4)],
        "default",
    );
    let mut pool = general();
    pool.requirements = reqs(&[(labels::ARCH, Operator::In, &["amd64"])]);
    let input = Input {
        pods: pods(2, "cpu", 1000, GI),
        node_pools: vec![pool],
        ..Default::default()
    };
    let plan = schedule(&cat, &input);
    assert!(
        plan.new_claims.iter().all(|c| reserved(c).is_none()),
        "{:?}",
        plan.new_claims
    );
}

#[test]
fn the_price_bound_cuts_dear_candidates_but_not_min_values() {
    let input = Input {
        pods: pods(1, "small", 250, GI / 2),
        node_pools: vec![general()],
        ..Default::default()
    };
    for ratio in [2.0, 1.25] {
        let mut pool = general();
        pool.candidate_price_ratio = PriceRatio(ratio);
        let plan = schedule(
            catalog(),
            &Input {
                node_pools: vec![pool],
                ..input.clone()
            },
        );
        let c = &plan.new_claims[0];
        assert!(c.instance_types.len() > 1);
        // Within each capacity type: an on-demand fallback is not cut for costing more
        // than Spot.
        for ct in [CapacityType::Spot, CapacityType::OnDemand] {
            let of: Vec<_> = c
                .instance_types
                .iter()
                .filter(|t| t.capacity_type == ct)
                .collect();
            let Some(cheapest) = of.iter().map(|t| t.price).min_by(f64::total_cmp) else {
                continue;
            };
            for t in of {
                assert!(
                    t.price <= cheapest * ratio * (1.0 + 1e-9),
                    "{} at {} > {ratio}x {cheapest}",
                    t.instance_type,
                    t.price
                );
            }
        }
    }
    // Unbounded (a huge ratio), the same claim lists types many times the cheapest.
    let mut pool = general();
    pool.candidate_price_ratio = PriceRatio(1000.0);
    let plan = schedule(
        catalog(),
        &Input {
            node_pools: vec![pool],
            ..input.clone()
        },
    );
    let c = &plan.new_claims[0];
    assert!(c.instance_types.last().unwrap().price > 2.0 * c.instance_types[0].price);
    // minValues is honoured past the bound: 4 families even at 1x.
    let mut pool = general();
    pool.candidate_price_ratio = PriceRatio(1.0);
    pool.requirements.add(
        labels::INSTANCE_FAMILY,
        Requirement::new(Operator::Exists, &[] as &[&str])
            .unwrap()
            .with_min_values(Some(4)),
    );
    let plan = schedule(
        catalog(),
        &Input {
            node_pools: vec![pool],
            ..input
        },
    );
    let families: std::collections::BTreeSet<&str> = plan.new_claims[0]
        .instance_types
        .iter()
        .map(|t| catalog().get(&t.instance_type).unwrap().labels[labels::INSTANCE_FAMILY].as_str())
        .collect();
    assert!(families.len() >= 4, "{families:?}");
}

#[test]
fn min_values_policy_strict_holds_back_best_effort_launches_and_says_so() {
    // Three families asked for, two of which exist (no `x9` type): a shortfall every
    // launch of this pool meets.
    let mut pool = general();
    pool.requirements.add(
        labels::INSTANCE_FAMILY,
        Requirement::new(Operator::In, &["m5", "m6i", "x9"])
            .unwrap()
            .with_min_values(Some(3)),
    );
    let input = Input {
        pods: pods(1, "p", 500, GI),
        node_pools: vec![pool.clone()],
        ..Default::default()
    };
    let strict = schedule(catalog(), &input);
    assert!(strict.new_claims.is_empty(), "{:?}", strict.new_claims);
    assert!(
        strict.unschedulable[0].reasons[0].contains("minValues 3"),
        "{:?}",
        strict.unschedulable
    );
    pool.min_values_policy = MinValuesPolicy::BestEffort;
    let plan = schedule(
        catalog(),
        &Input {
            node_pools: vec![pool],
            ..input
        },
    );
    assert_eq!(plan.new_claims.len(), 1, "{:?}", plan.unschedulable);
    let c = &plan.new_claims[0];
    assert_eq!(c.min_values_relaxed, Some(true));
    assert_eq!(
        c.requirements
            .get(labels::INSTANCE_FAMILY)
            .unwrap()
            .min_values,
        Some(2),
        "the minimum the launch meets"
    );
}

#[test]
fn a_savings_plan_overlay_changes_what_is_launched() {
    // On-demand only; m5 gets a 60 % discount, which makes it the cheapest general type.
    let mut pool = general();
    pool.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["on-demand"]).unwrap(),
    );
    let input = Input {
        pods: pods(1, "p", 1500, 2 * GI),
        node_pools: vec![pool],
        ..Default::default()
    };
    let before = schedule(catalog(), &input);
    let first = &before.new_claims[0].instance_types[0];
    assert!(!first.instance_type.starts_with("m5."), "{first:?}");
    let spec: NodeOverlaySpec = serde_json::from_value(serde_json::json!({
        "priceAdjustment": "-60%",
        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
    }))
    .unwrap();
    let priced = overlay::apply(catalog(), &[Overlay::from_spec("savings-plan", &spec)]);
    let after = schedule(&priced, &input);
    let first = &after.new_claims[0].instance_types[0];
    assert!(first.instance_type.starts_with("m5."), "{first:?}");
    let list = catalog()
        .get(&first.instance_type)
        .unwrap()
        .on_demand_price()
        .unwrap();
    assert!(
        (first.price - list * 0.4).abs() < 1e-9,
        "{} vs {}",
        first.price,
        list
    );
}
