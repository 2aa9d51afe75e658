//! The same input, one answer: a new user's first NodePool — only
//! `capacity-type In [spot, on-demand]`, `arch In [amd64]` and `instance-category In
//! [c, m, r]`, no generation floor, so previous-generation types such as `m1.small` are
//! candidates — a DaemonSet on every node, and a Deployment of 96 pods of 250m/512Mi,
//! against the emulator and kube-sim. Twice: with the tests' NodeClass (one x86_64 AMI by
//! ID, EKS kubelet defaults) and with the NodeClass of `docs/resources/node_class.md`'s
//! example, which a new user copies (`al2023@latest`, so x86_64 and arm64 images, and
//! `maxPods: 110`, which changes every type's allocatable).
//!
//! Three views must agree, because a plan made offline (the benchmarks, the README's
//! figures, `joiner_instance_types`) is only worth something if it is what the agent does:
//! - the catalogue the agent builds live (DescribeInstanceTypes, DescribeInstanceTypeOfferings
//!   for its subnets' zones, Spot price history, allocatable, max pods) is, type for type,
//!   the one the library builds from the committed fixture for the same zones, AMI
//!   architectures, kubelet settings and Spot price history (the world's, which is the
//!   benchmarks' price model with no entry where there is no Spot market);
//! - the library's plan for the same pods and DaemonSet (written here by hand, as a library
//!   user would, not converted by the agent's code) on that catalogue;
//! - what the agent launched: its NodeClaims, their instance and capacity types, and the
//!   pods each was made for (the claim's `pods` request less the DaemonSet's pod).
//!
//! Which pods the cluster's scheduler then binds where is its own choice (kube-sim's may put
//! a third pod on the small node and one fewer on a big one); what is checked there is that
//! every Node holds no more than the agent's model of its type allows.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_agent::api::{NodeClaim, NodeClass};
use joiner_agent::catalog::daemonsets::DaemonSet;
use joiner_agent::catalog::{
    CapacityType, Catalog, CatalogOptions, Ec2Dump, KubeletSettings, SpotPrices, SpotPricing,
};
use joiner_agent::cloud::Cloud;
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{schedule, Input, NodePoolInput};
use joiner_agent::taints::Toleration;
use joiner_agent_world::{wait_for, Opts, World, CLUSTER, NODE_ROLE, ZONES};
use k8s_openapi::api::apps::v1::DaemonSet as K8sDaemonSet;
use kube::api::{Api, PostParams};
use kube::ResourceExt;
use serde_json::json;

const PODS: usize = 96;
const MI: i64 = 1 << 20;

/// The issue's NodePool: nothing but capacity type, architecture and category.
fn first_pool_spec() -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
            ],
        }},
    })
}

/// `docs/resources/node_class.md`'s example as the object the provider writes.
async fn documented_node_class(w: &World) {
    let nc: NodeClass = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": joiner_agent_world::security_group_terms(),
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": NODE_ROLE,
            "kubelet": {"maxPods": 110},
        }
    }))
    .unwrap();
    Api::<NodeClass>::all(w.client.clone())
        .create(&PostParams::default(), &nc)
        .await
        .expect("NodeClass create");
}

/// The Spot price history the local world serves (`joiner_local.spot_prices`), read as the
/// agent reads it: Spot prices are an input of the catalogue like the instance types, and
/// the agent prices Spot only from them.
async fn spot_prices(w: &World) -> SpotPricing {
    let mut history = Vec::new();
    let mut pages = w
        .ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .max_results(1000)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.expect("ec2:DescribeSpotPriceHistory");
        history.extend(page.spot_price_history().iter().cloned());
    }
    SpotPricing::Observed(SpotPrices::from_ec2(&history))
}

/// The library's catalogue from the committed fixture (the emulator's answers), narrowed as
/// the agent narrows its own for a NodeClass: offerings in its subnets' zones, types one of
/// its AMIs' architectures runs, allocatable under its kubelet settings.
fn fixture_catalog(architectures: &[&str], kubelet: KubeletSettings, spot: SpotPricing) -> Catalog {
    let json = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ec2-instance-types.json"),
    )
    .expect("fixture");
    let mut dump: Ec2Dump = serde_json::from_str(&json).expect("fixture parses");
    dump.offerings.retain(|o| ZONES.contains(&o.zone.as_str()));
    dump.instance_types.retain(|r| {
        r.architectures
            .iter()
            .any(|a| architectures.contains(&a.as_str()))
    });
    let options = CatalogOptions {
        kubelet,
        spot,
        ..Default::default()
    };
    Catalog::from_dump(&dump, &options)
}

/// A node agent on every node, as a new cluster has (log shipper, CNI...): 100m / 128Mi,
/// tolerating every taint.
async fn node_agent(w: &World) {
    let ds: K8sDaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "node-agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {
                "metadata": {"labels": {"app": "node-agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                },
            },
        },
    }))
    .unwrap();
    Api::<K8sDaemonSet>::namespaced(w.client.clone(), "default")
        .create(&PostParams::default(), &ds)
        .await
        .expect("DaemonSet create");
}

/// The same DaemonSet as the library takes it.
fn node_agent_model() -> DaemonSet {
    DaemonSet {
        namespace: "default".into(),
        name: "node-agent".into(),
        requests: Resources::pod(100, 128 * MI),
        tolerations: vec![Toleration::exists("", None)],
        ..Default::default()
    }
}

/// One node of a fleet: type, capacity type, pods it is for, $/h.
type FleetNode = (String, CapacityType, usize, f64);

/// "type/capacity-type: pods" per node, sorted, and the total $/h.
fn describe(nodes: &[FleetNode]) -> (Vec<String>, f64) {
    let mut v: Vec<String> = nodes
        .iter()
        .map(|(t, ct, n, _)| format!("{t}/{}: {n} pods", ct.as_str()))
        .collect();
    v.sort();
    (v, nodes.iter().map(|n| n.3).sum())
}

/// "2 × m5a.large/spot: 6 pods, ..." for the printed figures.
fn summary(v: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in v {
        *counts.entry(s.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} × {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Clone, Copy)]
enum Class {
    /// The tests' NodeClass: moto's first x86_64 Amazon image by ID, kubelet defaults.
    Tests,
    /// The documented example: `al2023@latest`, `maxPods: 110`.
    Documented,
}

async fn scenario(class: Class) {
    let w = World::start(Opts::default()).await;
    let architectures: &[&str] = match class {
        Class::Tests => {
            w.node_class("default").await;
            &["x86_64"]
        }
        Class::Documented => {
            documented_node_class(&w).await;
            // The alias resolves an image for each architecture the agent launches.
            &["x86_64", "arm64"]
        }
    };
    w.node_pool("default", first_pool_spec()).await;
    node_agent(&w).await;
    // Karpenter's default batch windows (the agent's own), so that the 96 pods form one
    // round even on a loaded machine: the plan to compare with is one `schedule()` call.
    let agent = w.agent(&["--batch-idle", "1s", "--batch-max", "10s"]).await;
    w.deployment("inflate", PODS as i32, "250m", "512Mi").await;
    wait_for("96 pods Running", Duration::from_secs(240), || async {
        (w.running("inflate").await == PODS).then_some(())
    })
    .await;

    // The agent's live catalogue against the fixture's, type for type.
    let cloud = w.cloud().await;
    let nc: NodeClass = Api::all(w.client.clone()).get("default").await.unwrap();
    let live = cloud.catalog(&nc).await.expect("the agent's catalogue");
    let fixture = fixture_catalog(
        architectures,
        nc.spec.kubelet_settings(),
        spot_prices(&w).await,
    );
    let differing: Vec<String> = live
        .types
        .iter()
        .filter(|t| fixture.get(&t.name) != Some(*t))
        .map(|t| {
            format!(
                "{}: live {t:?} vs fixture {:?}",
                t.name,
                fixture.get(&t.name)
            )
        })
        .chain(
            fixture
                .types
                .iter()
                .filter(|t| live.get(&t.name).is_none())
                .map(|t| format!("{}: only in the fixture", t.name)),
        )
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} types differ between the agent's live catalogue and the fixture's, e.g. {:?}",
        differing.len(),
        live.len(),
        &differing[..differing.len().min(3)]
    );

    // What the agent launched: each claim's type, capacity type and the pods it was made
    // for, priced from the live catalogue.
    let claims: Vec<NodeClaim> = w.claims().await;
    let ds_pods = 1;
    let launched: Vec<FleetNode> = claims
        .iter()
        .map(|c| {
            let l = c.labels();
            let t = l
                .get("node.kubernetes.io/instance-type")
                .expect("a launched claim carries its type")
                .clone();
            let ct = CapacityType::parse(l.get("karpenter.sh/capacity-type").unwrap()).unwrap();
            let zone = l.get("topology.kubernetes.io/zone").unwrap();
            let price = live
                .get(&t)
                .and_then(|it| {
                    it.offerings
                        .iter()
                        .find(|o| o.capacity_type == ct && &o.zone == zone)
                })
                .map(|o| o.price)
                .unwrap_or_else(|| panic!("{t}/{} in {zone} is in the catalogue", ct.as_str()));
            let pods: usize = c.spec.resources.requests["pods"].parse().unwrap();
            (t, ct, pods - ds_pods, price)
        })
        .collect();

    // Where the cluster bound the pods: never more on a Node than the model of its type
    // (allocatable less the DaemonSet) holds.
    let claim_type: BTreeMap<String, String> = launched
        .iter()
        .zip(&claims)
        .map(|(l, c)| (c.name_any(), l.0.clone()))
        .collect();
    let nodes = w.nodes().await;
    // The Nodes' own figures: the kubelet reports the pods and CPU the agent's model of
    // the type says (max pods under the NodeClass's kubelet settings, EKS's CPU
    // reservation). Memory is left out: the model keeps Karpenter's 7.5 % VM overhead as a
    // margin, which no kubelet reports as such.
    for n in nodes.iter() {
        let Some(claim) = n.labels().get("joiner.dev/nodeclaim") else {
            continue;
        };
        let it = live.get(&claim_type[claim]).unwrap();
        let alloc = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("a registered Node reports allocatable");
        assert_eq!(
            alloc["pods"].0,
            it.allocatable.pods.to_string(),
            "pods of Node {} ({})",
            n.name_any(),
            it.name
        );
        assert_eq!(
            joiner_agent::resources::parse_cpu_milli(&alloc["cpu"].0).unwrap(),
            it.allocatable.cpu_milli,
            "CPU of Node {} ({})",
            n.name_any(),
            it.name
        );
    }
    let claim_of_node: BTreeMap<String, String> = nodes
        .iter()
        .filter_map(|n| {
            Some((
                n.name_any(),
                n.labels().get("joiner.dev/nodeclaim")?.to_string(),
            ))
        })
        .collect();
    let mut bound: BTreeMap<String, usize> = BTreeMap::new();
    for p in w.pods("inflate").await {
        let node = p
            .spec
            .and_then(|s| s.node_name)
            .expect("a Running pod is bound");
        let claim = claim_of_node
            .get(&node)
            .unwrap_or_else(|| panic!("pod on node {node}, which no claim made"));
        *bound.entry(claim.clone()).or_default() += 1;
    }
    for (claim, n) in &bound {
        let it = live.get(&claim_type[claim]).unwrap();
        let mut free = it.allocatable.clone();
        free.sub(&node_agent_model().requests);
        let mut used = Resources::default();
        for _ in 0..*n {
            used.add(&Resources::pod(250, 512 * MI));
        }
        assert!(
            used.fits_in(&free),
            "{n} pods bound to {claim} ({}), whose model holds fewer: {free:?}",
            it.name
        );
    }

    // The library on the agent's catalogue, and on the fixture's.
    let pool = NodePoolInput::from_api(
        "default",
        &serde_json::from_value(first_pool_spec()).unwrap(),
        Default::default(),
    )
    .unwrap();
    let pods = joiner_workloads::seed_pods(PODS);
    let plan_on = |catalog: &Catalog| -> Vec<FleetNode> {
        let plan = schedule(
            catalog,
            &Input {
                pods: pods.clone(),
                node_pools: vec![pool.clone()],
                daemonsets: vec![node_agent_model()],
                ..Default::default()
            },
        );
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        plan.new_claims
            .iter()
            .map(|c| {
                let first = &c.instance_types[0];
                (
                    first.instance_type.clone(),
                    first.capacity_type,
                    c.pods.len(),
                    first.price,
                )
            })
            .collect()
    };
    let (agent_nodes, agent_cost) = describe(&launched);
    let (live_plan, live_cost) = describe(&plan_on(&live));
    let (fixture_plan, fixture_cost) = describe(&plan_on(&fixture));
    let mut bound_counts: Vec<usize> = bound.values().copied().collect();
    bound_counts.sort();
    let name = match class {
        Class::Tests => "tests' NodeClass",
        Class::Documented => "documented NodeClass",
    };
    println!(
        "[{name}] agent: {} claims, ${agent_cost:.4}/h [{}]; pods bound per node {bound_counts:?}",
        agent_nodes.len(),
        summary(&agent_nodes)
    );
    println!(
        "[{name}] library on the agent's catalogue: {} claims, ${live_cost:.4}/h [{}]",
        live_plan.len(),
        summary(&live_plan)
    );
    println!(
        "[{name}] library on the fixture catalogue: {} claims, ${fixture_cost:.4}/h [{}]",
        fixture_plan.len(),
        summary(&fixture_plan)
    );
    assert_eq!(
        agent_nodes, live_plan,
        "the agent's fleet vs the library's plan"
    );
    assert_eq!(
        live_plan, fixture_plan,
        "the library's plan on the agent's catalogue vs on the fixture"
    );
    agent.stop().await.expect("graceful stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_nodepool_96_pods_agent_launches_the_librarys_plan() {
    scenario(Class::Tests).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_node_class_96_pods_agent_launches_the_librarys_plan() {
    scenario(Class::Documented).await
}
