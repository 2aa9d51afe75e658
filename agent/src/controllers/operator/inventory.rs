//! The cluster-wide gauges an operator's dashboard starts from: the agent's nodes and what
//! they cost by nodepool, capacity type and zone, the pods on them, how long the oldest
//! pending pod has waited, and the work queue's depth. Read from the watches on a short
//! tick rather than from the loops that change them, so a gauge stays true when nothing
//! happens (a pod held back by a limit waits on with no round to report it).
//!
//! Only the leader runs it: each gauge counts the whole cluster, and two replicas
//! exporting it would double every sum.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::catalog::{CapacityType, Catalog};
use crate::controllers::context::Context;
use crate::controllers::operator::metrics::l;
use crate::controllers::state::PodClass;
use crate::labels;

/// Often enough for a 15 s scrape to see every change, cheap enough for 5,000 pods.
const TICK: Duration = Duration::from_secs(2);

type Key = (String, String, String);

pub async fn run(ctx: Arc<Context>) {
    let mut last = Instant::now();
    let mut shown: Vec<Key> = Vec::new();
    let mut catalogs: HashMap<String, Catalog> = HashMap::new();
    loop {
        let elapsed = last.elapsed().as_secs_f64();
        last = Instant::now();
        shown = tick(&ctx, elapsed, &shown, &mut catalogs).await;
        tokio::time::sleep(TICK).await;
    }
}

/// One reading; returns the node label sets it set, so the next one zeroes those that went.
async fn tick(
    ctx: &Context,
    elapsed: f64,
    shown: &[Key],
    catalogs: &mut HashMap<String, Catalog>,
) -> Vec<Key> {
    let m = &ctx.metrics;
    pending_pods(ctx, elapsed);
    m.claim_queue_depth.set(ctx.claims.len() as i64);

    // Per pool, zero until something happens: an alert on a rise needs the zero first.
    for pool in ctx.state.node_pools.list() {
        let name = pool.name_any();
        drop(
            m.nodepool_at_limit
                .get_or_create(&l(&[("nodepool", &name)])),
        );
        drop(
            m.nodeclaims_registration_timeouts
                .get_or_create(&l(&[("nodepool", &name)])),
        );
    }

    let (nodes, pods) = launched_nodes(ctx, catalogs).await;
    for key in shown {
        if !nodes.contains_key(key) {
            let labels = key_labels(key);
            m.nodes.get_or_create(&labels).set(0);
            m.nodes_price.get_or_create(&labels).set(0.0);
        }
    }
    for (key, (count, price)) in &nodes {
        let labels = key_labels(key);
        m.nodes.get_or_create(&labels).set(*count);
        m.nodes_price.get_or_create(&labels).set(*price);
    }
    for (pool, n) in pods {
        m.pods_bound
            .get_or_create(&l(&[("nodepool", &pool)]))
            .set(n);
    }
    // The catalogue's Spot prices move: read it again now and then, not on every tick.
    if jiff::Timestamp::now().as_second() % 60 < TICK.as_secs() as i64 {
        catalogs.clear();
    }
    let mut keys: Vec<Key> = shown.to_vec();
    keys.extend(nodes.into_keys());
    keys.sort();
    keys.dedup();
    keys
}

/// Pending pods: how many, for how long.
fn pending_pods(ctx: &Context, elapsed: f64) {
    let m = &ctx.metrics;
    let now = jiff::Timestamp::now();
    let mut pending = 0usize;
    let mut oldest = 0.0f64;
    for p in ctx.state.pods.list() {
        if p.class != PodClass::Provisionable {
            continue;
        }
        pending += 1;
        if let Some(t) = p.created {
            oldest = oldest.max((now.as_second() - t).max(0) as f64);
        }
    }
    m.pods_pending_oldest.set(oldest);
    m.pods_pending_seconds.inc_by(pending as f64 * elapsed);
}

/// Launched claims and their pods: per (nodepool, capacity type, zone) the node count and
/// their price per hour, and per nodepool (every one, zero included) the pods bound.
async fn launched_nodes(
    ctx: &Context,
    catalogs: &mut HashMap<String, Catalog>,
) -> (BTreeMap<Key, (i64, f64)>, BTreeMap<String, i64>) {
    let pods_by_node = ctx.state.pods_by_node();
    let mut nodes: BTreeMap<Key, (i64, f64)> = BTreeMap::new();
    let mut pods: BTreeMap<String, i64> = BTreeMap::new();
    for claim in ctx.state.node_claims.list() {
        let launched = claim
            .status
            .as_ref()
            .is_some_and(|s| s.provider_id.is_some());
        if !launched {
            continue;
        }
        let get = |k: &str| claim.labels().get(k).cloned().unwrap_or_default();
        let pool = get(labels::JOINER_NODEPOOL);
        let capacity_type = get(labels::CAPACITY_TYPE);
        let zone = get(labels::ZONE);
        let itype = get(labels::INSTANCE_TYPE);
        let class = &claim.spec.node_class_ref.name;
        let price = node_price(ctx, catalogs, class, &itype, &zone, &capacity_type).await;
        let e = nodes
            .entry((pool.clone(), capacity_type, zone))
            .or_default();
        e.0 += 1;
        e.1 += price;
        let on_node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| pods_by_node.get(n))
            .map(|ps| ps.len())
            .unwrap_or(0);
        *pods.entry(pool).or_default() += on_node as i64;
    }
    for pool in ctx.state.node_pools.list() {
        pods.entry(pool.name_any()).or_default();
    }
    (nodes, pods)
}

/// A node's price per hour from its NodeClass's catalogue (built once and kept in
/// `catalogs`). A catalogue the cloud could not build now is asked for again next tick;
/// the node is priced at on-demand meanwhile.
async fn node_price(
    ctx: &Context,
    catalogs: &mut HashMap<String, Catalog>,
    class: &str,
    itype: &str,
    zone: &str,
    capacity_type: &str,
) -> f64 {
    if !catalogs.contains_key(class) {
        if let Some(c) = ctx.state.node_classes.get(class) {
            if let Ok(cat) = ctx.cloud.catalog(&c).await {
                catalogs.insert(class.to_string(), cat);
            }
        }
    }
    match catalogs.get(class) {
        Some(cat) => cat.price_of(itype, zone, CapacityType::parse(capacity_type)),
        None => crate::catalog::prices::on_demand(&ctx.config.region, itype).unwrap_or(0.0),
    }
}

fn key_labels((pool, capacity_type, zone): &Key) -> Vec<(String, String)> {
    l(&[
        ("nodepool", pool),
        ("capacity_type", capacity_type),
        ("zone", zone),
    ])
}
