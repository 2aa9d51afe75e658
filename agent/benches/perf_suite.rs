//! Karpenter's e2e performance suite (`test/suites/performance` of sigs.k8s.io/karpenter,
//! the version pinned in tools/go/karpenter), run for Karpenter's KWOK controller and for
//! joiner's agent with its KWOK cloud, one after the other on the same machine in the same
//! run, each on a fresh real control plane + KWOK (`joiner_agent_world::kwok`). Figures are printed, never
//! asserted; Karpenter's own limits stand beside them.
//!
//! Scenarios (the suite's pod shapes: small 900m/3100Mi, large 3500m/28Gi, pause images,
//! labels `app` and `testing/cluster`):
//! - `basic`: 500 small + 500 large → all 1,000 Running (scale-out), then both scaled to
//!   350 → the end state of consolidation (no Node added, removed, disrupted or deleting
//!   for `JOINER_PERF_QUIET` s; the time is to the last Node change);
//! - `hostname-spread-xl`: 1,000 small with a hostname spread (maxSkew 1) + 1,000 large;
//! - `drift`: 300 small with a hostname spread + 300 large, then an annotation added to the
//!   NodePool's template → every Node replaced and all 600 Running again;
//! - `self-anti-affinity`: 500 small with a required hostname anti-affinity.
//!
//! For each: the time, the controller's P95 and peak RSS and its average CPU over the phase
//! (from /proc, every 500 ms), the Nodes and their $/h at the end (the KWOK catalogue's
//! on-demand prices), and the pods evicted through the Eviction API during the phase (a watch
//! sees each pod's `DisruptionTarget` condition), with the machine's load.
//!
//! Knobs: `SCENARIOS=basic,hostname-spread-xl,drift,self-anti-affinity`,
//! `CONTROLLERS=karpenter,joiner`, `JOINER_PERF_SCALE=1.0` (replicas multiplied: 0.1 for a
//! quick look), `JOINER_PERF_QUIET=120` (s), `JOINER_PERF_DRIFT_SETTLE=30` (s),
//! `JOINER_PERF_CLIENT_QPS=200`. `scripts/bench-perf-suite` runs it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use joiner_agent_world::kwok::*;

/// Karpenter's limits for a phase: design.md §5's figures and the assertions of the pinned
/// v1.13.0 suite (whose memory is the Go heap in use, not RSS, and whose CPU is the peak of
/// 20 s pprof samples).
struct Limit {
    time: Duration,
    design: &'static str,
    v1_13: &'static str,
}

struct Row {
    scenario: &'static str,
    kind: Kind,
    time: Option<Duration>,
    usage: Usage,
    nodes: usize,
    cost: f64,
    pods: usize,
    evicted: usize,
    other_disruptions: usize,
    load: String,
    limit: &'static Limit,
}

const SCALE_OUT: Limit = Limit {
    time: Duration::from_secs(120),
    design: "< 2 min, < 260 MB, < 0.5 cores",
    v1_13: "< 2 min, heap < 120 MB, CPU < 15 s per 20 s",
};
const CONSOLIDATION: Limit = Limit {
    time: Duration::from_secs(20 * 60),
    design: "< 20 min, < 0.25 cores",
    v1_13: "< 20 min, heap < 120 MB, CPU < 8 s per 20 s",
};
const XL: Limit = Limit {
    time: Duration::from_secs(35 * 60),
    design: "< 35 min, < 1,330 MB, < 1.4 cores",
    v1_13: "< 35 min, heap < 700 MB, CPU < 20 s per 20 s",
};
const DRIFT: Limit = Limit {
    time: Duration::from_secs(50 * 60),
    design: "< 50 min, < 470 MB",
    v1_13: "< 50 min, heap < 250 MB, CPU < 24 s per 20 s",
};
const ANTI: Limit = Limit {
    time: Duration::from_secs(5 * 60),
    design: "< 5 min, < 620 MB",
    v1_13: "< 5 min, heap < 300 MB, CPU < 22 s per 20 s",
};

/// One controller on a fresh control plane.
struct Run {
    kind: Kind,
    cp: joiner_control_plane::ControlPlane,
    client: kube::Client,
    obs: Observer,
    ctrl: Controller,
    sampler: Sampler,
}

impl Run {
    async fn start(kind: Kind, karpenter: Option<&KarpenterBuild>, out: &Path) -> Run {
        std::fs::create_dir_all(out).unwrap();
        let (cp, client) = control_plane().await;
        install_crds(&cp, kind, karpenter.map(|b| b.crds.as_path()));
        let (pool, class) = pool_and_class(kind, None);
        apply(&cp, &[&class, &pool]);
        let obs = Observer::start(&client);
        let mut ctrl = match kind {
            Kind::Joiner => Controller::joiner(&cp, out, &[]),
            Kind::Karpenter => Controller::karpenter(&cp, karpenter.unwrap(), out),
        };
        let ctrl = tokio::task::spawn_blocking(move || {
            ctrl.wait_ready(Duration::from_secs(120));
            ctrl
        })
        .await
        .unwrap();
        let sampler = Sampler::start(ctrl.pid());
        obs.wait(Duration::from_secs(60), |s| s.pods_synced && s.nodes_synced)
            .await
            .expect("watches synced");
        Run {
            kind,
            cp,
            client,
            obs,
            ctrl,
            sampler,
        }
    }

    fn deploy(&self, w: &[Workload]) {
        let m: Vec<serde_json::Value> = w.iter().map(|w| w.manifest()).collect();
        apply(&self.cp, &m.iter().collect::<Vec<_>>());
    }

    fn row(
        &self,
        scenario: &'static str,
        limit: &'static Limit,
        from: Instant,
        to: Instant,
        time: Option<Duration>,
    ) -> Row {
        let (nodes, cost, pods, (evicted, other)) = self.obs.with(|s| {
            (
                s.live_nodes(),
                s.cost(),
                s.healthy(),
                s.disruptions_since(from),
            )
        });
        Row {
            scenario,
            kind: self.kind,
            time,
            usage: self.sampler.usage(from, to),
            nodes,
            cost,
            pods,
            evicted,
            other_disruptions: other,
            load: load(),
            limit,
        }
    }

    /// Waits for `n` healthy pods; the row of that scale-out.
    async fn scale_out(
        &self,
        scenario: &'static str,
        limit: &'static Limit,
        n: usize,
        t0: Instant,
    ) -> Row {
        let wait = limit.time.max(Duration::from_secs(15 * 60));
        let took = self.obs.wait(wait, |s| s.healthy() >= n).await;
        let time = took.map(|_| t0.elapsed());
        eprintln!(
            "perf-suite: {scenario} {}: {} pods Running {}",
            self.kind.name(),
            n,
            time.map(|t| format!("in {:.1}s", t.as_secs_f64()))
                .unwrap_or_else(|| format!(
                    "NOT within {}s (its log: {})",
                    wait.as_secs(),
                    self.ctrl.log.display()
                ))
        );
        self.row(scenario, limit, t0, Instant::now(), time)
    }
}

fn scaled(n: i32, scale: f64) -> i32 {
    ((n as f64 * scale).round() as i32).max(1)
}

async fn basic(r: &Run, scale: f64, quiet: Duration) -> Vec<Row> {
    let small = Workload::new("small-resource-app", scaled(500, scale), "900m", "3100Mi");
    let large = Workload::new("large-resource-app", scaled(500, scale), "3500m", "28Gi");
    let total = (small.replicas + large.replicas) as usize;
    let t0 = Instant::now();
    r.deploy(&[small.clone(), large.clone()]);
    let out = r.scale_out("scale-out", &SCALE_OUT, total, t0).await;
    if out.time.is_none() {
        return vec![out];
    }
    // Consolidation: both to 350.
    let (s2, l2) = (scaled(350, scale), scaled(350, scale));
    let t1 = Instant::now();
    scale_deployment(&r.client, small.name, s2).await;
    scale_deployment(&r.client, large.name, l2).await;
    let target = (s2 + l2) as usize;
    let limit = CONSOLIDATION.time;
    let down = r
        .obs
        .wait(limit, |s| s.pods() == target && s.healthy() == target)
        .await;
    let settled = match down {
        Some(_) => r.obs.wait_settled(quiet, limit).await,
        None => None,
    };
    let time = settled.map(|last| last.saturating_duration_since(t1));
    let end = settled
        .unwrap_or_else(Instant::now)
        .max(t1 + Duration::from_secs(1));
    eprintln!(
        "perf-suite: consolidation {}: {}",
        r.kind.name(),
        time.map(|t| format!(
            "last Node change {:.1}s after the scale-down",
            t.as_secs_f64()
        ))
        .unwrap_or_else(|| "did not settle".into())
    );
    vec![out, r.row("consolidation", &CONSOLIDATION, t1, end, time)]
}

async fn hostname_spread_xl(r: &Run, scale: f64) -> Vec<Row> {
    let mut small = Workload::new("small-resource-app", scaled(1000, scale), "900m", "3100Mi");
    small.hostname_spread = true;
    let large = Workload::new("large-resource-app", scaled(1000, scale), "3500m", "28Gi");
    let total = (small.replicas + large.replicas) as usize;
    let t0 = Instant::now();
    r.deploy(&[small, large]);
    vec![r.scale_out("hostname-spread-xl", &XL, total, t0).await]
}

async fn drift(r: &Run, scale: f64, settle: Duration) -> Vec<Row> {
    let mut small = Workload::new("hostname-spread-app", scaled(300, scale), "900m", "3100Mi");
    small.hostname_spread = true;
    let large = Workload::new("standard-app", scaled(300, scale), "3500m", "28Gi");
    let total = (small.replicas + large.replicas) as usize;
    let t0 = Instant::now();
    r.deploy(&[small, large]);
    let out = r.scale_out("drift: scale-out", &SCALE_OUT, total, t0).await;
    if out.time.is_none() {
        return vec![];
    }
    tokio::time::sleep(settle).await;
    let old = r.obs.node_names();
    let resource = match r.kind {
        Kind::Karpenter => "nodepools.karpenter.sh",
        Kind::Joiner => "nodepools.joiner.dev",
    };
    let t1 = Instant::now();
    let patch = format!(
        r#"{{"spec":{{"template":{{"metadata":{{"annotations":{{"test-drift-trigger":"drift-{}"}}}}}}}}}}"#,
        jiff::Timestamp::now().as_second()
    );
    r.cp.kubectl(&[
        "patch", resource, "default", "--type", "merge", "-p", &patch,
    ])
    .expect("patch the NodePool's template");
    let done = r
        .obs
        .wait(DRIFT.time, |s| {
            !s.nodes.keys().any(|n| old.contains(n)) && s.healthy() == total && s.churning() == 0
        })
        .await;
    let time = done.map(|_| t1.elapsed());
    eprintln!(
        "perf-suite: drift {}: {}",
        r.kind.name(),
        time.map(|t| format!(
            "{} old Nodes replaced in {:.1}s",
            old.len(),
            t.as_secs_f64()
        ))
        .unwrap_or_else(|| "not every Node was replaced".into())
    );
    vec![r.row("drift", &DRIFT, t1, Instant::now(), time)]
}

async fn self_anti_affinity(r: &Run, scale: f64) -> Vec<Row> {
    let mut small = Workload::new("small-resource-app", scaled(500, scale), "900m", "3100Mi");
    small.anti_affinity = true;
    let total = small.replicas as usize;
    let t0 = Instant::now();
    r.deploy(&[small]);
    vec![r.scale_out("self-anti-affinity", &ANTI, total, t0).await]
}

fn fmt_time(t: Option<Duration>) -> String {
    match t {
        Some(t) if t.as_secs() >= 120 => format!("{:.1} min", t.as_secs_f64() / 60.0),
        Some(t) => format!("{:.1} s", t.as_secs_f64()),
        None => "timed out".into(),
    }
}

fn row_line(r: &Row) -> String {
    let _ = r.pods;
    let other = if r.other_disruptions > 0 {
        format!(" (+{} otherwise)", r.other_disruptions)
    } else {
        String::new()
    };
    format!(
        "| {} | {} | {} | {:.0} MB | {:.0} MB | {:.2} cores | {} | ${:.2} | {}{} | {} | {} / {} |",
        r.scenario,
        r.kind.name(),
        fmt_time(r.time),
        r.usage.p95_rss_mb,
        r.usage.peak_rss_mb,
        r.usage.avg_cores,
        r.nodes,
        r.cost,
        r.evicted,
        other,
        r.load,
        r.limit.design,
        r.limit.v1_13,
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let scenarios: Vec<String> = std::env::var("SCENARIOS")
        .unwrap_or_else(|_| "basic,hostname-spread-xl,drift,self-anti-affinity".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let controllers: Vec<Kind> = std::env::var("CONTROLLERS")
        .unwrap_or_else(|_| "karpenter,joiner".into())
        .split(',')
        .map(|c| match c.trim() {
            "karpenter" => Kind::Karpenter,
            "joiner" => Kind::Joiner,
            other => panic!("CONTROLLERS: unknown controller {other:?} (karpenter, joiner)"),
        })
        .collect();
    let scale: f64 = env_or("JOINER_PERF_SCALE", 1.0);
    let quiet = Duration::from_secs(env_or("JOINER_PERF_QUIET", 120));
    let settle = Duration::from_secs(env_or("JOINER_PERF_DRIFT_SETTLE", 30));
    let karpenter = if controllers.contains(&Kind::Karpenter) {
        let b = KarpenterBuild::find().unwrap_or_else(|e| panic!("{e}"));
        match check_catalog(&b.instance_types) {
            Ok(n) => eprintln!(
                "perf-suite: joiner's KWOK catalogue = Karpenter's {} ({n} types: names, resources, zones; prices to 1e-12)",
                b.instance_types.display()
            ),
            Err(e) => panic!("joiner's KWOK catalogue differs from Karpenter's:\n{e}"),
        }
        Some(b)
    } else {
        None
    };
    let stamp = jiff::Timestamp::now().as_second();
    let out_root: PathBuf = std::env::var_os("JOINER_PERF_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            joiner_test_support::workspace_root().join(format!("target/perf-suite/{stamp}"))
        });
    eprintln!(
        "perf-suite: scenarios {scenarios:?}, controllers {:?}, scale {scale}, nproc {}, logs in {}",
        controllers.iter().map(|k| k.name()).collect::<Vec<_>>(),
        nproc(),
        out_root.display()
    );

    let mut rows: Vec<Row> = Vec::new();
    for (i, sc) in scenarios.iter().enumerate() {
        // Alternate who goes first, so neither always meets the machine in the same state.
        let mut order = controllers.clone();
        if i % 2 == 1 {
            order.reverse();
        }
        for kind in order {
            let out = out_root.join(format!("{sc}-{}", kind.name()));
            eprintln!("perf-suite: {sc}: {} (load {})", kind.name(), load());
            let r = Run::start(kind, karpenter.as_ref(), &out).await;
            let got = match sc.as_str() {
                "basic" => basic(&r, scale, quiet).await,
                "hostname-spread-xl" => hostname_spread_xl(&r, scale).await,
                "drift" => drift(&r, scale, settle).await,
                "self-anti-affinity" => self_anti_affinity(&r, scale).await,
                other => panic!(
                    "SCENARIOS: unknown scenario {other:?} (basic, hostname-spread-xl, drift, self-anti-affinity)"
                ),
            };
            // Each row also goes to stderr as soon as it is measured: a run cut short
            // still leaves its figures.
            for r in &got {
                eprintln!("perf-suite: row {}", row_line(r));
            }
            rows.extend(got);
            drop(r);
        }
    }

    println!(
        "\nKarpenter's performance suite (v1.13.0 scenarios) on a real control plane + KWOK, \
         nproc={}, scale {scale}, {}",
        nproc(),
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC")
    );
    println!(
        "| scenario | controller | time | P95 RSS | peak RSS | avg CPU | nodes | $/h | pods evicted | load | Karpenter's limits (design.md §5 / v1.13.0 source) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{}", row_line(r));
    }
}
