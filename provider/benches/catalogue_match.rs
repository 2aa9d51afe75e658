//! Plan-time catalogue match per NodePool: how long `joiner_node_pool`'s plan spends
//! matching a pool's requirements against the embedded catalogue (goal: well under 10 ms).
//!
//! `cargo bench -p terraform-provider-joiner --bench catalogue_match`
//!
//! Prints the one-off catalogue parse (once per provider process), then the per-pool match
//! for pools of increasing selectivity, as the median of many runs, with `nproc`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use joiner_provider::model::node_pool::{NodePoolModel, RequirementModel};
use joiner_provider::resources::node_pool::admission::{admitted, catalog};

fn req(key: &str, op: &str, values: &[&str]) -> RequirementModel {
    RequirementModel {
        key: key.into(),
        operator: op.into(),
        values: values.iter().map(|s| s.to_string()).collect(),
        min_values: None,
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let t = Instant::now();
    let c = catalog();
    println!(
        "catalogue parse (once per provider process): {:.1} ms for {} types (nproc={nproc})",
        t.elapsed().as_secs_f64() * 1e3,
        c.len()
    );
    let mut min2 = req(
        "karpenter.k8s.aws/instance-category",
        "In",
        &["c", "m", "r"],
    );
    min2.min_values = Some(2);
    let pools: Vec<(&str, NodePoolModel)> = vec![
        ("no requirement", NodePoolModel::default()),
        (
            "spot+on-demand, c/m/r (minValues 2)",
            NodePoolModel {
                requirements: vec![
                    req("karpenter.sh/capacity-type", "In", &["spot", "on-demand"]),
                    min2,
                ]
                .into(),
                ..Default::default()
            },
        ),
        (
            "on-demand, amd64, gen > 5, 2 zones, label",
            NodePoolModel {
                requirements: vec![
                    req("karpenter.sh/capacity-type", "In", &["on-demand"]),
                    req("kubernetes.io/arch", "In", &["amd64"]),
                    req("karpenter.k8s.aws/instance-generation", "Gt", &["5"]),
                    req(
                        "topology.kubernetes.io/zone",
                        "In",
                        &["us-east-1a", "us-east-1b"],
                    ),
                ]
                .into(),
                labels: BTreeMap::from([("team".to_string(), "a".to_string())]).into(),
                ..Default::default()
            },
        ),
    ];
    for (what, pool) in &pools {
        let runs = 200;
        let mut times = Vec::with_capacity(runs);
        let mut count = 0;
        for _ in 0..runs {
            let t = Instant::now();
            let a = admitted(c, pool).expect("admits types");
            times.push(t.elapsed());
            count = a.count;
        }
        let m = median(times);
        println!(
            "catalogue match, {what}: {:.3} ms per NodePool (median of {runs}), {count} types admitted, {:.0} pools/s (nproc={nproc})",
            m.as_secs_f64() * 1e3,
            1.0 / m.as_secs_f64()
        );
    }
}
