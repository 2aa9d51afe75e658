//! What the running nodes cost, and what the workload could cost at best.
//!
//! Prices are the agent's own: on-demand from its embedded table, Spot from its stated model
//! (the emulator's Spot price history is a constant). The lower bound is
//! `joiner_workloads::lower_bound`: the pods' requests priced at the cheapest $/vCPU
//! or $/GiB among the types a NodePool allows, whichever binds, computed per NodePool for
//! the pods that run on it (the capacity split decides that share, not the agent), and
//! summed. It ignores DaemonSets and per-node overhead, so no real packing reaches it.

use std::collections::BTreeMap;

use joiner_agent::api::NodePoolSpec;
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_workloads::{lower_bound, node_pool, seed_pods};

use crate::cluster::{NodeView, Snapshot};

/// USD per hour of one node, or 0 when the catalogue does not know its type.
pub fn node_price(catalog: &Catalog, n: &NodeView) -> f64 {
    let Some(t) = catalog.get(&n.instance_type) else {
        return 0.0;
    };
    let ct = CapacityType::parse(&n.capacity_type).unwrap_or(CapacityType::OnDemand);
    t.offerings
        .iter()
        .find(|o| o.capacity_type == ct && o.zone == n.zone)
        .or_else(|| t.offerings.iter().find(|o| o.capacity_type == ct))
        .map(|o| o.price)
        .unwrap_or(0.0)
}

pub fn cluster_price(catalog: &Catalog, s: &Snapshot) -> f64 {
    // fold from +0.0: an empty f64 sum is -0.0, printed as "$-0.000".
    s.ec2_nodes()
        .map(|n| node_price(catalog, n))
        .fold(0.0, |a, b| a + b)
}

/// The fractional lower bound for the running workload pods, by the NodePool they run on.
/// Returns None when a pool's spec cannot be read (the figure would be made up).
pub fn workload_lower_bound(
    catalog: &Catalog,
    pools: &BTreeMap<String, serde_json::Value>,
    s: &Snapshot,
) -> Option<f64> {
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for p in s
        .pods
        .iter()
        .filter(|p| p.phase == "Running" && !p.deleting)
    {
        let node = s.node(p.node.as_deref()?)?;
        *per_pool.entry(node.node_pool.as_str()).or_default() += 1;
    }
    let mut total = 0.0;
    for (pool, count) in per_pool {
        let spec: NodePoolSpec = serde_json::from_value(pools.get(pool)?.clone()).ok()?;
        let reqs =
            joiner_agent::api::convert_requirements(&spec.template.spec.requirements).ok()?;
        let input = node_pool(pool, reqs);
        total += lower_bound(catalog, &input, &seed_pods(count));
    }
    Some(total)
}
