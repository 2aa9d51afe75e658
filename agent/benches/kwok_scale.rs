//! joiner at cluster scale: the agent with its KWOK cloud on a real control plane + KWOK
//! (`joiner_agent_world::kwok`), `JOINER_BENCH_NODES` nodes of 16 vCPUs each holding
//! `JOINER_BENCH_PODS_PER_NODE` pods of 1500m/1Gi (default 100 nodes × 10 pods: a short
//! run). Printed, never asserted:
//!
//! 1. **one provisioning round of every pending pod**: the Deployment is created and
//!    kube-scheduler marks all its pods unschedulable before the agent starts, so the
//!    agent's first round plans them all at once (its `scheduling round` log: pods, ms);
//!    then the time to all Running and to every NodeClaim created;
//! 2. **consolidation**: the Deployment halved → the end state (no Node change for
//!    `JOINER_SCALE_QUIET` s), Nodes and $/h, pods evicted;
//! 3. **drain**: scaled to 0 → every Node gone;
//!
//! with, per phase, the agent's P95/peak RSS and CPU and the CPU seconds of every process
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK, the agent, this
//! bench's watches) so the bottleneck is named by measurement, and the apiserver's LIST
//! requests per resource after the agent's first sync and at the end (a relist shows as a
//! LIST beyond the ones every watch makes at its start).
//!
//! `cargo bench -p joiner-agent --bench kwok_scale`; `JOINER_BENCH_NODES=1000` and up for
//! the scale figures (docs/performance.md).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use joiner_agent::catalog::kwok;
use joiner_agent_world::kwok::*;
use serde_json::json;

fn fmt_cpu(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, wall: f64) -> String {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .map(|(k, a)| (k.clone(), a - before.get(k).copied().unwrap_or(0.0)))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = v.iter().map(|x| x.1).sum();
    let parts: Vec<String> = v
        .iter()
        .map(|(k, s)| format!("{k} {s:.1}s ({:.0}%)", 100.0 * s / total.max(1e-9)))
        .collect();
    format!(
        "{:.1} CPU-s over {:.1} s wall = {:.2} cores: {}",
        total,
        wall,
        total / wall.max(1e-9),
        parts.join(", ")
    )
}

/// A field of one of the agent's JSON log lines: tracing's JSON format puts the fields at
/// the top level (`--log-format json`), or under `fields` (its default nesting).
fn field<'a>(line: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    match line.get("fields").and_then(|f| f.get(key)) {
        Some(v) => v,
        None => &line[key],
    }
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
    let nodes: usize = env_or("JOINER_BENCH_NODES", 100);
    let per_node: usize = env_or("JOINER_BENCH_PODS_PER_NODE", 10);
    let quiet = Duration::from_secs(env_or("JOINER_SCALE_QUIET", 60));
    let pods = nodes * per_node;
    let limit = Duration::from_secs(env_or("JOINER_SCALE_LIMIT", 3600));
    let out = joiner_test_support::workspace_root().join(format!(
        "target/kwok-scale/{}",
        jiff::Timestamp::now().as_second()
    ));
    std::fs::create_dir_all(&out).unwrap();
    eprintln!(
        "kwok-scale: {nodes} nodes × {per_node} pods = {pods} pods, nproc {}, load {}, logs in {}",
        nproc(),
        load(),
        out.display()
    );
    let t_cp = Instant::now();
    let (cp, client) = control_plane().await;
    install_crds(&cp, Kind::Joiner, None);
    // 16-vCPU `c` types: 15.9 allocatable vCPUs hold 10 pods of 1500m.
    let (pool, class) = pool_and_class(
        Kind::Joiner,
        Some(json!([
            {"key": kwok::INSTANCE_CPU, "operator": "In", "values": ["16"]},
            {"key": kwok::INSTANCE_FAMILY, "operator": "In", "values": ["c"]},
        ])),
    );
    apply(&cp, &[&class, &pool]);
    let obs = Observer::start(&client);
    obs.wait(Duration::from_secs(60), |s| s.pods_synced && s.nodes_synced)
        .await
        .expect("watches synced");
    eprintln!(
        "kwok-scale: control plane up in {:.1}s",
        t_cp.elapsed().as_secs_f64()
    );

    // All pods pending before the agent starts.
    let app = Workload::new("scale", pods as i32, "1500m", "1Gi");
    apply(&cp, &[&app.manifest()]);
    let pending = obs
        .wait(limit, |s| s.pods() == pods && s.unschedulable.len() == pods)
        .await;
    eprintln!(
        "kwok-scale: {pods} pods created and marked unschedulable in {} (no agent yet; load {})",
        pending
            .map(|d| format!("{:.1}s", d.as_secs_f64()))
            .unwrap_or_else(|| "NOT in time".into()),
        load()
    );
    if pending.is_none() {
        return;
    }

    let mut procs = component_pids(&cp);
    procs.push(("bench (watches)".into(), std::process::id()));
    let lists_before_agent = list_counts(&cp);
    let t0 = Instant::now();
    {
        let mut ctrl = Controller::joiner(&cp, &out, &[]);
        procs.push(("joiner-agent".into(), ctrl.pid()));
        let cpu0 = cpu_seconds(&procs);
        let sampler = Sampler::start(ctrl.pid());
        let ctrl = tokio::task::spawn_blocking(move || {
            ctrl.wait_ready(Duration::from_secs(300));
            ctrl
        })
        .await
        .unwrap();
        let t_sync = t0.elapsed();
        let lists_synced = list_counts(&cp);

        // 1. Provisioning.
        let all = obs.wait(limit, |s| s.healthy() == pods).await;
        let t1 = Instant::now();
        let cpu1 = cpu_seconds(&procs);
        let u = sampler.usage(t0, t1);
        let rounds = log_lines(&ctrl.log, "scheduling round");
        let biggest = rounds
            .iter()
            .max_by_key(|r| field(r, "pending").as_u64().unwrap_or(0));
        let claims = log_lines(&ctrl.log, "created NodeClaim").len();
        let (n1, c1) = obs.with(|s| (s.live_nodes(), s.cost()));
        println!(
            "\njoiner at scale on a real control plane + KWOK: {nodes} nodes × {per_node} pods, nproc={}, {}",
            nproc(),
            jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC")
        );
        println!(
            "agent ready (caches synced) {:.1}s after start",
            t_sync.as_secs_f64()
        );
        if let Some(b) = biggest {
            println!(
                "largest provisioning round: {} pending pods planned in {} ms → {} new NodeClaims ({} rounds in all)",
                field(b, "pending"),
                field(b, "took_ms"),
                field(b, "new_claims"),
                rounds.len()
            );
        }
        println!(
            "scale-out: all {pods} pods Running {} after the agent started; {claims} NodeClaims, {n1} nodes, ${c1:.2}/h; agent P95 RSS {:.0} MB, peak {:.0} MB, {:.2} cores (load {})",
            all.map(|_| format!("{:.1}s", t1.duration_since(t0).as_secs_f64()))
                .unwrap_or_else(|| "NOT".into()),
            u.p95_rss_mb,
            u.peak_rss_mb,
            u.avg_cores,
            load()
        );
        println!(
            "  CPU by process: {}",
            fmt_cpu(&cpu0, &cpu1, t1.duration_since(t0).as_secs_f64())
        );

        // 2. Consolidation.
        let half = (pods / 2) as i32;
        let t2 = Instant::now();
        scale_deployment(&client, app.name, half).await;
        let _ = obs
            .wait(limit, |s| {
                s.pods() == half as usize && s.healthy() == half as usize
            })
            .await;
        let settled = obs.wait_settled(quiet, limit).await;
        let t3 = settled
            .unwrap_or_else(Instant::now)
            .max(t2 + Duration::from_secs(1));
        let cpu3 = cpu_seconds(&procs);
        let u = sampler.usage(t2, t3);
        let (n3, c3, (ev, other)) =
            obs.with(|s| (s.live_nodes(), s.cost(), s.disruptions_since(t2)));
        println!(
            "consolidation {pods} → {half} pods: {} to the last Node change; {n1} → {n3} nodes, ${c3:.2}/h; {ev} pods evicted{}; agent P95 RSS {:.0} MB, peak {:.0} MB, {:.2} cores (load {})",
            settled
                .map(|s| format!("{:.1}s", s.saturating_duration_since(t2).as_secs_f64()))
                .unwrap_or_else(|| "did not settle".into()),
            if other > 0 { format!(" (+{other} otherwise)") } else { String::new() },
            u.p95_rss_mb,
            u.peak_rss_mb,
            u.avg_cores,
            load()
        );
        println!(
            "  CPU by process: {}",
            fmt_cpu(&cpu1, &cpu3, t3.duration_since(t2).as_secs_f64())
        );

        // 3. Drain.
        let t4 = Instant::now();
        scale_deployment(&client, app.name, 0).await;
        let gone = obs.wait(limit, |s| s.nodes.is_empty()).await;
        let t5 = Instant::now();
        let cpu5 = cpu_seconds(&procs);
        let u = sampler.usage(t4, t5);
        println!(
            "drain to 0 pods: every Node gone {}; agent P95 RSS {:.0} MB, peak {:.0} MB, {:.2} cores (load {})",
            gone.map(|d| format!("in {:.1}s", d.as_secs_f64()))
                .unwrap_or_else(|| "NOT in time".into()),
            u.p95_rss_mb,
            u.peak_rss_mb,
            u.avg_cores,
            load()
        );
        println!(
            "  CPU by process: {}",
            fmt_cpu(&cpu3, &cpu5, t5.duration_since(t4).as_secs_f64())
        );
        let whole = sampler.usage(t0, t5);
        println!(
            "agent over the whole run: P95 RSS {:.0} MB, peak {:.0} MB, {:.1} CPU-s",
            whole.p95_rss_mb, whole.peak_rss_mb, whole.cpu_seconds
        );

        let lists_end = list_counts(&cp);
        let mut lines = Vec::new();
        for (r, n) in &lists_end {
            let before = lists_before_agent.get(r).copied().unwrap_or(0);
            let synced = lists_synced.get(r).copied().unwrap_or(0);
            if *n > before {
                lines.push(format!(
                    "{r}: {} at the agent's start, {} more by the end",
                    synced - before,
                    n - synced
                ));
            }
        }
        println!(
            "apiserver LISTs since the agent started (all clients): {}",
            lines.join("; ")
        );
        drop(ctrl);
    }
}
