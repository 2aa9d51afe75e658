//! EBS attach limits in the plan, on the real catalogue fixture: a node holds no more EBS
//! volumes than the EBS CSI driver will let it attach (its CSINode's count, or for a node
//! not launched yet the count the driver reports for its type), and a pod with more volumes
//! than any allowed type attaches is reported unplaceable, not launched for.

use std::sync::OnceLock;

use joiner_agent::catalog::volume_limits::{
    ebs_attach_limit, NodeAttachments, EBS_ATTACH_RESOURCE,
};
use joiner_agent::catalog::{Catalog, CatalogOptions};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{schedule, Input, Node, Pod, Target};
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

/// A pool of one family, on demand.
fn pool_of(family: &str) -> joiner_agent::scheduler::NodePoolInput {
    let mut r = Requirements::new();
    r.add(
        labels::INSTANCE_FAMILY,
        Requirement::new(Operator::In, &[family]).unwrap(),
    );
    r.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["on-demand"]).unwrap(),
    );
    node_pool("volumes", r)
}

/// Small pods, each with `volumes` EBS volumes.
fn volume_pods(n: usize, volumes: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = Pod::new("db", &format!("db-{i}"), 10, 16 << 20);
            p.requests
                .extended
                .insert(EBS_ATTACH_RESOURCE.to_string(), volumes);
            p
        })
        .collect()
}

/// What a fresh node of the type attaches.
fn limit(t: &str) -> i64 {
    ebs_attach_limit(
        &catalog().get(t).expect("type in the fixture").record,
        NodeAttachments::default(),
    )
}

#[test]
fn a_new_node_gets_no_more_volume_pods_than_its_type_attaches() {
    // m5.large holds 29 pods; its EBS limit is lower, and CPU would fit 60 of these pods.
    let mut pool = pool_of("m5");
    pool.requirements.add(
        labels::INSTANCE_TYPE,
        Requirement::new(Operator::In, &["m5.large"]).unwrap(),
    );
    let input = Input {
        pods: volume_pods(60, 1),
        node_pools: vec![pool],
        ..Default::default()
    };
    let plan = schedule(catalog(), &input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let cap = limit("m5.large");
    assert!(cap < 29, "the volume limit binds before max pods ({cap})");
    for c in &plan.new_claims {
        assert!(
            c.pods.len() as i64 <= cap,
            "a claim of {} volume pods on m5.large (attaches {cap})",
            c.pods.len()
        );
        assert!(
            c.requests.extended.keys().all(|k| k != EBS_ATTACH_RESOURCE),
            "the attach limit never reaches the NodeClaim's requests: {:?}",
            c.requests
        );
    }
    assert_eq!(plan.new_claims.len() as i64, (60 + cap - 1) / cap);
}

#[test]
fn a_pod_with_more_volumes_than_any_type_attaches_is_unplaceable() {
    let input = Input {
        pods: volume_pods(1, 40),
        node_pools: vec![pool_of("m5")],
        ..Default::default()
    };
    let most = catalog()
        .types
        .iter()
        .filter(|t| t.labels.get(labels::INSTANCE_FAMILY).map(String::as_str) == Some("m5"))
        .map(|t| limit(&t.name))
        .max()
        .unwrap();
    assert!(most < 40, "no m5 attaches 40 ({most})");
    let plan = schedule(catalog(), &input);
    assert!(plan.new_claims.is_empty(), "nothing launched for it");
    assert_eq!(plan.unschedulable.len(), 1);
    let why = plan.unschedulable[0].reasons.join("; ");
    assert!(
        why.contains(EBS_ATTACH_RESOURCE),
        "the reason names the limit: {why}"
    );
}

#[test]
fn an_existing_node_takes_volume_pods_up_to_its_csinode_room() {
    let cat = catalog();
    let it = cat.get("m5.xlarge").unwrap();
    let mut labels_ = it.labels.clone();
    labels_.insert(labels::HOSTNAME.into(), "ip-10-0-0-1".into());
    labels_.insert(labels::ZONE.into(), "us-east-1a".into());
    labels_.insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
    let mut allocatable = it.allocatable.clone();
    // Its CSINode says 2, and nothing is attached yet.
    allocatable.extended.insert(EBS_ATTACH_RESOURCE.into(), 2);
    let node = Node {
        name: "ip-10-0-0-1".into(),
        labels: labels_,
        allocatable,
        ..Default::default()
    };
    let input = Input {
        pods: volume_pods(3, 1),
        nodes: vec![node],
        node_pools: vec![pool_of("m5")],
        ..Default::default()
    };
    let plan = schedule(cat, &input);
    let on_node = plan
        .placements
        .iter()
        .filter(|p| matches!(&p.target, Target::Node(n) if n == "ip-10-0-0-1"))
        .count();
    assert_eq!(on_node, 2, "{:?}", plan.placements);
    assert_eq!(plan.new_claims.len(), 1);
    assert_eq!(plan.new_claims[0].pods.len(), 1);
    // Without volumes all three fit the node.
    let mut plain = input.clone();
    plain.pods = (0..3)
        .map(|i| Pod::new("db", &format!("p-{i}"), 10, GI / 64))
        .collect();
    assert!(schedule(cat, &plain).new_claims.is_empty());
}
