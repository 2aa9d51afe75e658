//! The scheduling benchmark's shape (Karpenter's: 400 types, seed 42) through the
//! pricing paths, beside the plain run in the same process: NodeOverlays repricing half
//! the types, capacity reservations (the ledger, holds and reserved claims), and a tight
//! candidate price bound. The target: within 10 % of the plain figure.
//!
//! Run: `cargo bench -p joiner-agent --bench scheduling_pricing` (release build). Prints the
//! best of five runs per variant: pods/s, nodes, of which reserved, milliseconds, with the
//! machine's core count. `JOINER_BENCH_SIZES=1000,5000` chooses pod counts (default 5000).

use std::time::Instant;

use joiner_agent::api::node_overlay::NodeOverlaySpec;
use joiner_agent::catalog::overlay::{self, Overlay};
use joiner_agent::catalog::reservations::{self, ReservationKind, ReservationRecord};
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::scheduler::{schedule, Input, NodePoolInput, PriceRatio};
use joiner_workloads::{karpenter_catalog, karpenter_pods, node_pool, BENCH_ZONES};

/// 20 reservations of 25 places, on every 20th type, spread over the zones.
fn reserved(base: &Catalog) -> Catalog {
    let records: Vec<ReservationRecord> = base
        .types
        .iter()
        .step_by(20)
        .enumerate()
        .map(|(i, t)| ReservationRecord {
            id: format!("cr-{i:017x}"),
            instance_type: t.name.clone(),
            zone: BENCH_ZONES[i % BENCH_ZONES.len()].to_string(),
            available: 25,
            total: 25,
            kind: ReservationKind::Default,
            interruptible: false,
            state: "active".into(),
            end_date: None,
            owner_id: "123456789012".into(),
            match_criteria: "targeted".into(),
        })
        .collect();
    reservations::add(base, &records, "default", 0)
}

/// A 30 % discount on half the types (those with an even vCPU count), on-demand and Spot.
fn overlaid(base: &Catalog) -> Catalog {
    let names: Vec<String> = base
        .types
        .iter()
        .filter(|t| t.record.vcpus % 2 == 0)
        .map(|t| t.name.clone())
        .collect();
    let spec: NodeOverlaySpec = serde_json::from_value(serde_json::json!({
        "priceAdjustment": "-30%",
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": names}],
    }))
    .expect("overlay spec");
    overlay::apply(base, &[Overlay::from_spec("bench", &spec)])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let sizes: Vec<usize> = std::env::var("JOINER_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![5000]);
    let plain = karpenter_catalog(400);
    let started = Instant::now();
    let priced = overlaid(&plain);
    let with_reservations = reserved(&plain);
    println!(
        "scheduling benchmark, pricing paths (Karpenter shape: 400 types, seed 42), nproc={cores}; \
         overlay + reservations built in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "{:>7} {:<28} {:>7} {:>9} {:>10} {:>10} {:>8}",
        "pods", "variant", "nodes", "reserved", "ms", "pods/s", "vs plain"
    );
    let pool = |ratio: f64| -> NodePoolInput {
        let mut p = node_pool("default", Default::default());
        p.node_class = "default".into();
        p.candidate_price_ratio = PriceRatio(ratio);
        p
    };
    for n in sizes {
        let variants: [(&str, &Catalog, f64); 4] = [
            ("plain (bound 2x)", &plain, 2.0),
            ("overlay -30% on half", &priced, 2.0),
            ("20 reservations x 25", &with_reservations, 2.0),
            ("bound 1.1x", &plain, 1.1),
        ];
        let mut base_rate = None;
        for (name, catalog, ratio) in variants {
            let input = Input {
                pods: karpenter_pods(n, 42),
                node_pools: vec![pool(ratio)],
                ..Default::default()
            };
            let mut best = f64::INFINITY;
            let (mut nodes, mut in_reservations) = (0, 0);
            for _ in 0..5 {
                let start = Instant::now();
                let plan = schedule(catalog, &input);
                best = best.min(start.elapsed().as_secs_f64());
                nodes = plan.new_claims.len();
                in_reservations = plan
                    .new_claims
                    .iter()
                    .filter(|c| c.capacity_types == [CapacityType::Reserved])
                    .count();
            }
            let rate = n as f64 / best;
            let base = *base_rate.get_or_insert(rate);
            println!(
                "{:>7} {:<28} {:>7} {:>9} {:>10.1} {:>10.0} {:>7.1}%",
                n,
                name,
                nodes,
                in_reservations,
                best * 1e3,
                rate,
                100.0 * rate / base
            );
        }
    }
}
