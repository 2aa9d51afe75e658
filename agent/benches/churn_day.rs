//! Consolidation churn over one simulated day: evictions per day and
//! dollars paid, for joiner's policies and for a model of Karpenter's, through the same
//! pure core the agent runs (`scheduler::schedule` for provisioning and for the pods a
//! decision moves, `disruption::decide` for consolidation).
//!
//! The day (stated model, deterministic):
//! - catalogue: the emulator's (`fixtures/ec2-instance-types.json`), one NodePool of c/m/r,
//!   generation > 4, amd64, Spot and on-demand (Spot priced by the agent's fixed per-family
//!   model), three zones;
//! - workload: four Deployments whose replicas follow a diurnal curve (trough at 03:00,
//!   peak at 15:00) with a ±8 % wobble every 10 minutes, as an HPA would move them:
//!   `web` 250m/512Mi 20→160, `api` 500m/1Gi 8→64, `worker` 1/2Gi 4→32 (peak 6 h later),
//!   `batch` 2/4Gi, 12 replicas for the first 20 minutes of every second hour;
//! - every minute: scale the Deployments (a scale-down removes the newest pod of the node
//!   holding most of that Deployment, as the ReplicaSet controller does), place pending
//!   pods (existing room first, else new nodes, which start at once), then one disruption
//!   pass; a decision's nodes go at once, their pods are evicted (counted) and placed again
//!   (replacements first), their destinations' `consolidateAfter` restarts;
//! - cost: every node's price for every minute it exists.
//!
//! The "Karpenter model" column is a model of Karpenter's documented consolidation rules
//! (WhenEmptyOrUnderutilized, `consolidateAfter: 0s`, 10 % budget, any saving is enough, no
//! eviction cap, Spot-to-Spot off), run through joiner's simulation: it is not Karpenter's
//! code, and its figures are not Karpenter's measurements.
//!
//! Run: `cargo bench -p joiner-agent --bench churn_day` (`JOINER_CHURN_STEP=120` for
//! two-minute steps).

use std::collections::BTreeMap;
use std::time::Instant;

use joiner_agent::api::node_pool::Budget;
use joiner_agent::catalog::{CapacityType, Catalog, CatalogOptions};
use joiner_agent::disruption::decide::{decide, Candidate, Config, Policy, PoolPolicy, World};
use joiner_agent::disruption::{Budgets, Reason};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirement, Requirements};
use joiner_agent::scheduler::{
    self, schedule, BoundPod, Input, MovablePod, NodePoolInput, Pod, Target,
};
use joiner_workloads::node_pool;

const MI: i64 = 1 << 20;
const DAY: i64 = 86_400;
/// Monday 2026-11-23 00:00 UTC.
const START: i64 = 1_795_392_000;

fn pool() -> NodePoolInput {
    let mut r = Requirements::new();
    r.add(
        labels::INSTANCE_CATEGORY,
        Requirement::new(Operator::In, &["c", "m", "r"]).unwrap(),
    );
    r.add(
        labels::INSTANCE_GENERATION,
        Requirement::new(Operator::Gt, &["4"]).unwrap(),
    );
    r.add(
        labels::ARCH,
        Requirement::new(Operator::In, &["amd64"]).unwrap(),
    );
    r.add(
        labels::CAPACITY_TYPE,
        Requirement::new(Operator::In, &["on-demand"]).unwrap(),
    );
    node_pool("default", r)
}

/// A Deployment of the day.
struct App {
    name: &'static str,
    cpu: i64,
    mem_mi: i64,
    low: f64,
    high: f64,
    /// Hour of the peak.
    peak: f64,
}

const APPS: &[App] = &[
    App {
        name: "web",
        cpu: 250,
        mem_mi: 512,
        low: 20.0,
        high: 160.0,
        peak: 15.0,
    },
    App {
        name: "api",
        cpu: 500,
        mem_mi: 1024,
        low: 8.0,
        high: 64.0,
        peak: 15.0,
    },
    App {
        name: "worker",
        cpu: 1000,
        mem_mi: 2048,
        low: 4.0,
        high: 32.0,
        peak: 21.0,
    },
];

/// A deterministic wobble in [-1, 1] for app `i` in 10-minute slot `slot`.
fn wobble(i: usize, slot: i64) -> f64 {
    let mut z = (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % 2001) as f64 / 1000.0 - 1.0
}

/// Replicas of every Deployment at `t` (seconds into the day).
fn replicas(t: i64) -> Vec<(&'static App, usize)> {
    let h = t as f64 / 3600.0;
    let mut out = Vec::new();
    for (i, a) in APPS.iter().enumerate() {
        let phase = (h - a.peak) / 24.0 * std::f64::consts::TAU;
        let level = (1.0 + phase.cos()) / 2.0;
        let base = a.low + (a.high - a.low) * level;
        let n = base * (1.0 + 0.08 * wobble(i, t / 600));
        out.push((a, n.round().max(0.0) as usize));
    }
    out
}

const BATCH: App = App {
    name: "batch",
    cpu: 2000,
    mem_mi: 4096,
    low: 0.0,
    high: 12.0,
    peak: 0.0,
};

/// The batch Deployment: 12 replicas for the first 20 minutes of every second hour.
fn batch(t: i64) -> usize {
    let h = t / 3600;
    if h % 2 == 0 && t % 3600 < 1200 {
        12
    } else {
        0
    }
}

struct SimNode {
    name: String,
    instance_type: String,
    zone: String,
    capacity_type: CapacityType,
    price: f64,
    labels: BTreeMap<String, String>,
    created: i64,
    last_pod_change: i64,
    /// (creation sequence, pod)
    pods: Vec<(u64, Pod)>,
}

#[derive(Default)]
struct Tally {
    evictions: u64,
    launches: u64,
    dollars: f64,
    node_seconds: f64,
    peak_nodes: usize,
    decisions: u64,
}

struct Cluster<'a> {
    catalog: &'a Catalog,
    pool: NodePoolInput,
    nodes: Vec<SimNode>,
    pending: Vec<(u64, Pod)>,
    seq: u64,
    evicted_at: Vec<(i64, u32)>,
    tally: Tally,
}

impl<'a> Cluster<'a> {
    fn view(&self) -> Vec<scheduler::Node> {
        self.nodes
            .iter()
            .map(|n| scheduler::Node {
                name: n.name.clone(),
                labels: n.labels.clone(),
                taints: vec![],
                allocatable: self
                    .catalog
                    .get(&n.instance_type)
                    .unwrap()
                    .allocatable
                    .clone(),
                pods: n.pods.iter().map(|(_, p)| BoundPod::from_pod(p)).collect(),
                unschedulable: false,
            })
            .collect()
    }

    /// Provisioning, and kube-scheduler following its plan: pending pods onto existing
    /// room, else onto new nodes, which start at once.
    fn place(&mut self, now: i64) {
        if self.pending.is_empty() {
            return;
        }
        let input = Input {
            pods: self.pending.iter().map(|(_, p)| p.clone()).collect(),
            nodes: self.view(),
            node_pools: vec![self.pool.clone()],
            ..Default::default()
        };
        let plan = schedule(self.catalog, &input);
        let pending = std::mem::take(&mut self.pending);
        let mut placed = vec![false; pending.len()];
        for p in &plan.placements {
            if let Target::Node(name) = &p.target {
                let n = self.nodes.iter_mut().find(|n| &n.name == name).unwrap();
                n.pods.push(pending[p.pod].clone());
                n.last_pod_change = now;
                placed[p.pod] = true;
            }
        }
        for c in &plan.new_claims {
            let cand = &c.instance_types[0];
            let zone = cand.zones.first().cloned().unwrap_or_default();
            let it = self.catalog.get(&cand.instance_type).unwrap();
            self.seq += 1;
            let name = format!("node-{}", self.seq);
            let mut l = it.labels.clone();
            l.insert(labels::ZONE.into(), zone.clone());
            l.insert(
                labels::CAPACITY_TYPE.into(),
                cand.capacity_type.as_str().into(),
            );
            l.insert(labels::HOSTNAME.into(), name.clone());
            l.insert(labels::KARPENTER_NODEPOOL.into(), "default".into());
            l.insert(labels::JOINER_NODEPOOL.into(), "default".into());
            self.tally.launches += 1;
            self.nodes.push(SimNode {
                name,
                instance_type: cand.instance_type.clone(),
                zone,
                capacity_type: cand.capacity_type,
                price: cand.price,
                labels: l,
                created: now,
                last_pod_change: now,
                pods: c.pods.iter().map(|&i| pending[i].clone()).collect(),
            });
            for &i in &c.pods {
                placed[i] = true;
            }
        }
        for (i, p) in pending.into_iter().enumerate() {
            if !placed[i] {
                self.pending.push(p);
            }
        }
    }

    /// Scales the Deployments to their replicas at `now`.
    fn scale(&mut self, now: i64) {
        let t = now - START;
        let mut want = replicas(t);
        want.push((&BATCH, batch(t)));
        for (app, n) in want {
            let mut have = self
                .pending
                .iter()
                .filter(|(_, p)| p.labels["app"] == app.name)
                .count()
                + self
                    .nodes
                    .iter()
                    .map(|x| {
                        x.pods
                            .iter()
                            .filter(|(_, p)| p.labels["app"] == app.name)
                            .count()
                    })
                    .sum::<usize>();
            while have < n {
                self.seq += 1;
                let mut p = Pod::new(
                    "default",
                    &format!("{}-{}", app.name, self.seq),
                    app.cpu,
                    app.mem_mi * MI,
                );
                p.labels.insert("app".into(), app.name.into());
                self.pending.push((self.seq, p));
                have += 1;
            }
            while have > n {
                // The ReplicaSet controller: a pending pod first, else the newest pod on the
                // node holding most of the Deployment.
                if let Some(i) = self
                    .pending
                    .iter()
                    .rposition(|(_, p)| p.labels["app"] == app.name)
                {
                    self.pending.remove(i);
                } else {
                    let count = |x: &SimNode| {
                        x.pods
                            .iter()
                            .filter(|(_, p)| p.labels["app"] == app.name)
                            .count()
                    };
                    let ni = (0..self.nodes.len())
                        .filter(|&i| count(&self.nodes[i]) > 0)
                        .max_by_key(|&i| (count(&self.nodes[i]), std::cmp::Reverse(i)))
                        .unwrap();
                    let node = &mut self.nodes[ni];
                    let pi = (0..node.pods.len())
                        .filter(|&k| node.pods[k].1.labels["app"] == app.name)
                        .max_by_key(|&k| node.pods[k].0)
                        .unwrap();
                    node.pods.remove(pi);
                    node.last_pod_change = now;
                }
                have -= 1;
            }
        }
    }

    /// One disruption pass, carried out: chosen nodes go, their pods are evicted and placed.
    fn disrupt(&mut self, policy: &PoolPolicy, config: &Config, now: i64) {
        let mut pp = policy.clone();
        self.evicted_at.retain(|(t, _)| now - t < 3600);
        pp.evictions_last_hour = self.evicted_at.iter().map(|(_, n)| n).sum();
        let world = World {
            candidates: self
                .nodes
                .iter()
                .zip(self.view())
                .map(|(n, v)| Candidate {
                    node: v,
                    pods: n
                        .pods
                        .iter()
                        .map(|(_, p)| MovablePod::from_pod(p))
                        .collect(),
                    nodeclaim: n.name.clone(),
                    nodepool: "default".into(),
                    instance_type: n.instance_type.clone(),
                    zone: n.zone.clone(),
                    capacity_type: Some(n.capacity_type),
                    price: n.price,
                    created: n.created,
                    last_pod_change: n.last_pod_change,
                    initialized: true,
                    ..Default::default()
                })
                .collect(),
            pools: vec![pp],
            sched: Input {
                node_pools: vec![self.pool.clone()],
                ..Default::default()
            },
            now,
            ..Default::default()
        };
        let out = decide(self.catalog, &world, config);
        for d in out.decisions {
            self.tally.decisions += 1;
            let mut moved = 0u32;
            for c in &d.nodes {
                if let Some(i) = self.nodes.iter().position(|n| n.name == c.node) {
                    let n = self.nodes.remove(i);
                    moved += n.pods.len() as u32;
                    self.pending.extend(n.pods);
                }
            }
            if d.reason == Reason::Underutilized {
                self.evicted_at.push((now, moved));
            }
            self.tally.evictions += u64::from(moved);
        }
        // The agent never creates capacity in disruption: provisioning places the evicted
        // pods in one batch (the replacements the decisions simulated come out of it).
        self.place(now);
    }
}

struct Run {
    name: &'static str,
    policy: PoolPolicy,
    config: Config,
}

fn runs() -> Vec<Run> {
    let base = PoolPolicy {
        name: "default".into(),
        policy: Policy::WhenEmptyOrUnderutilized,
        consolidate_after: Some(0),
        budgets: Budgets::from_api(&[Budget {
            nodes: "10%".into(),
            ..Default::default()
        }])
        .unwrap(),
        ..Default::default()
    };
    let with = |f: &dyn Fn(&mut PoolPolicy)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    vec![
        Run {
            name: "WhenEmpty (never moves a pod; baseline)",
            policy: with(&|p| p.policy = Policy::WhenEmpty),
            config: Config::default(),
        },
        Run {
            name: "Karpenter model (any saving, no cap)",
            policy: base.clone(),
            config: Config {
                min_saving_fraction: 0.0,
                ..Config::default()
            },
        },
        Run {
            name: "joiner WhenEmptyOrUnderutilized",
            policy: base.clone(),
            config: Config::default(),
        },
        Run {
            name: "joiner, cap 30 evictions/h",
            policy: with(&|p| p.evictions_per_hour = Some(30)),
            config: Config::default(),
        },
        Run {
            name: "joiner Balanced",
            policy: with(&|p| p.policy = Policy::Balanced),
            config: Config::default(),
        },
        Run {
            name: "joiner Balanced, cap 30/h",
            policy: with(&|p| {
                p.policy = Policy::Balanced;
                p.evictions_per_hour = Some(30);
            }),
            config: Config::default(),
        },
    ]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let step: i64 = std::env::var("JOINER_CHURN_STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let json = include_str!("../fixtures/ec2-instance-types.json");
    let catalog = Catalog::from_dump_json(json, &CatalogOptions::default()).expect("fixture");
    println!(
        "consolidation churn over one simulated day ({step} s steps; model in benches/churn_day.rs), nproc={cores}"
    );
    println!(
        "The Karpenter row is a model of Karpenter's documented consolidation rules run through \
         joiner's simulation, not Karpenter's code."
    );
    println!(
        "{:<42} {:>10} {:>9} {:>9} {:>8} {:>9} {:>10} {:>12} {:>7}",
        "policy",
        "evictions",
        "launches",
        "decisions",
        "peak",
        "node-h",
        "$/day",
        "saved $/day",
        "evict/$"
    );
    let mut baseline = None;
    for run in runs() {
        let started = Instant::now();
        let mut c = Cluster {
            catalog: &catalog,
            pool: pool(),
            nodes: vec![],
            pending: vec![],
            seq: 0,
            evicted_at: vec![],
            tally: Tally::default(),
        };
        let mut now = START;
        while now < START + DAY {
            c.scale(now);
            c.place(now);
            c.disrupt(&run.policy, &run.config, now);
            let price: f64 = c.nodes.iter().map(|n| n.price).sum();
            c.tally.dollars += price * step as f64 / 3600.0;
            c.tally.node_seconds += (c.nodes.len() as i64 * step) as f64;
            c.tally.peak_nodes = c.tally.peak_nodes.max(c.nodes.len());
            now += step;
        }
        let t = &c.tally;
        let saved = baseline.map(|b: f64| b - t.dollars).unwrap_or(0.0);
        if baseline.is_none() {
            baseline = Some(t.dollars);
        }
        let per_dollar = if saved > 0.0 {
            format!("{:.0}", t.evictions as f64 / saved)
        } else {
            "-".into()
        };
        println!(
            "{:<42} {:>10} {:>9} {:>9} {:>8} {:>9.0} {:>10.2} {:>12.2} {:>7}   ({:.1} s)",
            run.name,
            t.evictions,
            t.launches,
            t.decisions,
            t.peak_nodes,
            t.node_seconds / 3600.0,
            t.dollars,
            saved,
            per_dollar,
            started.elapsed().as_secs_f64()
        );
    }
}
