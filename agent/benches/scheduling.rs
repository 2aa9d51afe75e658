//! Benchmark 1: Karpenter's scheduling benchmark shape (see `joiner_workloads`).
//!
//! Run: `cargo bench -p joiner-agent --bench scheduling` (release build). Prints, for each
//! pod count, the best of a few runs: pods/s, nodes planned, milliseconds, µs per pod and
//! the process's peak RSS (VmHWM), with the machine's core count; then the same over the
//! catalogue with holes in its Spot market (types not sold as Spot, zones without a Spot
//! price), as a real region has them.
//! Set `JOINER_BENCH_SIZES=100,1000` to choose pod counts.

use std::time::Instant;

use joiner_agent::catalog::Catalog;
use joiner_agent::scheduler::{schedule, Input};
use joiner_workloads::{
    karpenter_catalog, karpenter_catalog_with_spot_holes, karpenter_pods, node_pool,
};

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map(|kib| kib / 1024.0)
        .unwrap_or(f64::NAN)
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
        .unwrap_or_else(|| vec![100, 500, 1000, 2000, 5000, 10000, 20000]);
    println!(
        "scheduling benchmark (Karpenter shape: 400 types, 5 pod groups, seed 42), nproc={cores}"
    );
    run(&karpenter_catalog(400), &sizes);
    println!("the same with holes in the Spot market (1 type in 7 not sold as Spot, 1 in 5 without Spot in one zone)");
    run(&karpenter_catalog_with_spot_holes(400), &sizes);
    println!("Karpenter v1.14 (published): ~1,000 pods/s; 5,000 pods -> 1,000 nodes in 3.45 s");
}

fn run(catalog: &Catalog, sizes: &[usize]) {
    println!(
        "{:>7} {:>7} {:>10} {:>10} {:>9} {:>12}",
        "pods", "nodes", "ms", "pods/s", "us/pod", "peakRSS MiB"
    );
    for &n in sizes {
        let input = Input {
            pods: karpenter_pods(n, 42),
            node_pools: vec![node_pool("default", Default::default())],
            ..Default::default()
        };
        let runs = if n <= 5000 { 5 } else { 3 };
        let mut best = f64::INFINITY;
        let mut nodes = 0;
        let mut unschedulable = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let plan = schedule(catalog, &input);
            let secs = start.elapsed().as_secs_f64();
            nodes = plan.new_claims.len();
            unschedulable = plan.unschedulable.len();
            best = best.min(secs);
        }
        println!(
            "{:>7} {:>7} {:>10.1} {:>10.0} {:>9.1} {:>12.1}{}",
            n,
            nodes,
            best * 1e3,
            n as f64 / best,
            best * 1e6 / n as f64,
            peak_rss_mib(),
            if unschedulable > 0 {
                format!("  ({unschedulable} unschedulable)")
            } else {
                String::new()
            }
        );
    }
}
