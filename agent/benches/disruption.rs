//! A disruption pass over a large cluster, simulation included: time and peak memory.
//!
//! Cluster model (stated): N nodes of the synthetic catalogue's 4/8/16-vCPU types
//! (`fake-it-3/7/15`, on-demand and Spot), each holding pods of the seed shape
//! (250m / 512Mi) at 10-90 % CPU, 5 % of them empty, 2 % drifted, every node old and
//! quiet; one NodePool allowing both capacity types with a 10 % budget. The pass runs the
//! same `decide()` the agent runs (expired, drifted, empty, multi-node then single-node
//! consolidation, each move simulated with the scheduler).
//!
//! `JOINER_BENCH_NODES=1000,200` chooses sizes. Peak memory is the process's VmHWM.

use std::collections::BTreeMap;
use std::time::Instant;

use joiner_agent::api::node_pool::Budget;
use joiner_agent::catalog::{CapacityType, Catalog};
use joiner_agent::disruption::decide::{decide, Candidate, Config, Policy, PoolPolicy, World};
use joiner_agent::disruption::quiet;
use joiner_agent::disruption::Budgets;
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{self, BoundPod, Input, MovablePod, Pod};
use joiner_workloads::{karpenter_catalog, node_pool, Rng, BENCH_ZONES};

const MI: i64 = 1 << 20;

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn world(cat: &Catalog, n: usize, now: i64) -> World {
    let mut rng = Rng::new(42);
    let mut candidates = Vec::with_capacity(n);
    for i in 0..n {
        let size = rng.pick(&[3usize, 7, 15]);
        let it = cat.get(&format!("fake-it-{size}")).unwrap();
        let ct = if rng.next_u64().is_multiple_of(3) {
            CapacityType::OnDemand
        } else {
            CapacityType::Spot
        };
        let zone = BENCH_ZONES[i % 3];
        let name = format!("node-{i:05}");
        let mut l: BTreeMap<String, String> = it.labels.clone();
        l.insert(labels::ZONE.into(), zone.into());
        l.insert(labels::CAPACITY_TYPE.into(), ct.as_str().into());
        l.insert(labels::HOSTNAME.into(), name.clone());
        l.insert(labels::JOINER_NODEPOOL.into(), "default".into());
        let price = it
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == ct)
            .map(|o| o.price)
            .unwrap_or(1.0);
        let fill = if rng.next_u64().is_multiple_of(20) {
            0
        } else {
            10 + rng.next_u64() % 81
        };
        let cpu = it.allocatable.cpu_milli * fill as i64 / 100;
        let pods: Vec<Pod> = (0..cpu / 250)
            .map(|k| {
                let mut p = Pod::new("default", &format!("{name}-p{k}"), 250, 512 * MI);
                p.labels.insert("app".into(), format!("svc-{}", k % 7));
                p
            })
            .collect();
        candidates.push(Candidate {
            node: scheduler::Node {
                name: name.clone(),
                labels: l,
                taints: vec![],
                allocatable: it.allocatable.clone(),
                pods: pods.iter().map(BoundPod::from_pod).collect(),
                unschedulable: false,
            },
            pods: pods.iter().map(MovablePod::from_pod).collect(),
            nodeclaim: format!("claim-{i}"),
            nodepool: "default".into(),
            instance_type: it.name.clone(),
            zone: zone.into(),
            capacity_type: Some(ct),
            price,
            created: now - 86_400,
            last_pod_change: now - 3_600,
            initialized: true,
            drift: rng
                .next_u64()
                .is_multiple_of(50)
                .then(|| "the NodePool's template changed".into()),
            ..Default::default()
        });
    }
    let mut reqs = Requirements::new();
    reqs.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["spot", "on-demand"]).unwrap(),
    );
    World {
        candidates,
        pools: vec![PoolPolicy {
            name: "default".into(),
            policy: Policy::WhenEmptyOrUnderutilized,
            consolidate_after: Some(30),
            budgets: Budgets::from_api(&[Budget {
                nodes: "10%".into(),
                ..Default::default()
            }])
            .unwrap(),
            ..Default::default()
        }],
        sched: Input {
            node_pools: vec![node_pool("default", reqs)],
            ..Default::default()
        },
        now,
        ..Default::default()
    }
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let sizes: Vec<usize> = std::env::var("JOINER_BENCH_NODES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1000]);
    let cat = karpenter_catalog(400);
    let now = 1_795_392_000;
    println!("disruption pass (nproc {cores}); cluster model in benches/disruption.rs");
    for n in sizes {
        let w = world(&cat, n, now);
        let pods: usize = w.candidates.iter().map(|c| c.pods.len()).sum();
        let before = peak_rss_mb();
        let t = Instant::now();
        let out = decide(&cat, &w, &Config::default());
        let secs = t.elapsed().as_secs_f64();
        let nodes: usize = out.decisions.iter().map(|d| d.nodes.len()).sum();
        let saving: f64 = out.decisions.iter().map(|d| d.saving).sum();
        println!(
            "  {n:>5} nodes, {pods:>6} pods: pass {:.3} s ({:.0} nodes/s), {} decisions over {} nodes, \
             {} blocked, saving ${saving:.2}/h; peak RSS {:.1} MB (before pass {:.1} MB)",
            secs,
            n as f64 / secs,
            out.decisions.len(),
            nodes,
            out.blocked.len(),
            peak_rss_mb(),
            before
        );
        // What the loop pays instead of the pass when nothing changed: the fingerprint
        // of the world and catalogue (the world's build is the agent's, not timed here).
        let t = Instant::now();
        let fp = quiet::fingerprint(&w, &cat);
        let check = t.elapsed().as_secs_f64();
        println!(
            "  {n:>5} nodes: skip check (fingerprint {fp:016x}) {:.1} ms, {:.1}% of the pass",
            check * 1e3,
            100.0 * check / secs
        );
    }
}
