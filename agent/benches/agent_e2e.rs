//! End-to-end agent figures, printed (not asserted), with the machine's core count:
//! - the seed scale-out (4 → 100 replicas of 250m/512Mi) through kube-sim and moto with the
//!   kube-sim boot delay stated: time to all Running, nodes, $/h over the fractional lower
//!   bound (`joiner_workloads::lower_bound`);
//! - reaction: last pending pod of a batch observed → launch request sent (the agent's
//!   `joiner_reaction_seconds` histogram), against the batch idle window;
//! - 1,000 pods scaled out 0 -> 1,000 (Karpenter's perf-suite shape) beside the seed's 100,
//!   on about a hundred large/xlarge nodes: first NodeClaim, all bound, all Running, and the
//!   agent's CPU over the scale-out;
//! - the agent process's peak and P95 RSS and its CPU use while steady (no pending pods).
//!
//! The agent runs as a real `joiner-agent run` process with default batch windows
//! (1 s idle / 10 s max). `cargo bench -p joiner-agent --bench agent_e2e`.

use std::time::{Duration, Instant};

use joiner_agent::catalog::CapacityType;
use joiner_agent::cloud::Cloud;
use joiner_agent_world::{wait_for, Opts, World};
use kube::api::Api;
use kube::ResourceExt;

const BOOT_DELAY: Duration = Duration::from_secs(2);
/// Karpenter's e2e perf suite: 1,000 pods scaled out in under 2 minutes.
const PERF_PODS: usize = 1_000;
/// Clock ticks per second in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn histogram(metrics: &str, name: &str) -> (f64, f64) {
    let get = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_{suffix}")))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (get("sum"), get("count"))
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
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let w = World::start(Opts {
        boot_delay: BOOT_DELAY,
        ..Default::default()
    })
    .await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let mut child = w.agent_process(&[
        "--batch-idle",
        "1s",
        "--batch-max",
        "10s",
        "--log-level",
        "warn",
    ]);
    let pid = child.id();
    // `agent_process` draws its own free metrics port: it is read back from /proc below.

    w.deployment("seed", 4, "250m", "512Mi").await;
    wait_for("4 pods Running", Duration::from_secs(120), || async {
        (w.running("seed").await == 4).then_some(())
    })
    .await;
    let start = Instant::now();
    w.scale("seed", 100).await;
    wait_for("100 pods Running", Duration::from_secs(600), || async {
        (w.running("seed").await == 100).then_some(())
    })
    .await;
    let elapsed = start.elapsed();
    let claims = w.claims().await;
    let cloud = w.cloud().await;
    let nc: joiner_agent::api::NodeClass = Api::all(w.client.clone()).get("default").await.unwrap();
    let catalog = cloud.catalog(&nc).await.unwrap();
    let cost: f64 = claims
        .iter()
        .filter_map(|c| {
            let l = c.labels();
            let it = catalog.get(l.get("node.kubernetes.io/instance-type")?)?;
            let ct = CapacityType::parse(l.get("karpenter.sh/capacity-type")?)?;
            let zone = l.get("topology.kubernetes.io/zone")?;
            it.offerings
                .iter()
                .find(|o| o.capacity_type == ct && &o.zone == zone)
                .map(|o| o.price)
        })
        .sum();
    let pool = joiner_agent::scheduler::NodePoolInput::from_api(
        "default",
        &serde_json::from_value(World::general_pool_spec("default")).unwrap(),
        Default::default(),
    )
    .unwrap();
    let bound = joiner_workloads::lower_bound(&catalog, &pool, &joiner_workloads::seed_pods(100));
    println!(
        "agent_e2e seed 4->100 (kube-sim boot delay {:?}, batch 1s/10s): all Running in {:.1}s, {} nodes, ${cost:.4}/h = {:.2}x the lower bound ${bound:.4}/h  [nproc={cores}]",
        BOOT_DELAY,
        elapsed.as_secs_f64(),
        claims.len(),
        cost / bound
    );

    // 1,000 pods scaled out (Karpenter's perf-suite shape: one Deployment, 0 -> 1,000),
    // on top of the seed's 100. Their own pool admits only large and xlarge sizes, so they
    // need about a hundred nodes, the node count the perf suite's memory and CPU limits
    // are stated for (on the general pool they fit on four big ones). Sampled every 250 ms:
    // the first new NodeClaim, every pod bound, every pod Running; the agent's RSS at each
    // sample and its CPU over the phase.
    let mut perf_pool = World::general_pool_spec("default");
    perf_pool["template"]["spec"]["requirements"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["large", "xlarge"]}));
    w.node_pool("perf", perf_pool).await;
    let claims_before = w.claims().await.len();
    w.deployment_with(
        "perf",
        0,
        "250m",
        "512Mi",
        serde_json::json!({}),
        serde_json::json!({"nodeSelector": {"karpenter.sh/nodepool": "perf"}}),
    )
    .await;
    let cpu0 = cpu_ticks(pid).unwrap_or(0);
    let start = Instant::now();
    w.scale("perf", PERF_PODS as i32).await;
    let mut first_claim = None;
    let mut all_bound = None;
    let mut rss_samples = Vec::new();
    let all_running = loop {
        let pods = w.pods("perf").await;
        let bound = pods
            .iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .count();
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if first_claim.is_none() && w.claims().await.len() > claims_before {
            first_claim = Some(start.elapsed());
        }
        if all_bound.is_none() && bound == PERF_PODS {
            all_bound = Some(start.elapsed());
        }
        if let Some(kb) = proc_status(pid, "VmRSS:") {
            rss_samples.push(kb);
        }
        if running == PERF_PODS {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{PERF_PODS} pods not Running after 900 s: {bound} bound, {running} Running"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let scale_cpu =
        (cpu_ticks(pid).unwrap_or(0) - cpu0) as f64 / USER_HZ / all_running.as_secs_f64();
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    println!(
        "agent_e2e {PERF_PODS} pods scaled out 0->{PERF_PODS} (250m/512Mi on large/xlarge, beside the seed's 100; kube-sim boot delay {:?}, batch 1s/10s, sampled every 250 ms): first NodeClaim {:.1}s, all bound {:.1}s, all Running {:.1}s; {} new NodeClaims; agent CPU {:.3} core over the scale-out  [nproc={cores}]",
        BOOT_DELAY,
        secs(first_claim),
        secs(all_bound),
        all_running.as_secs_f64(),
        w.claims().await.len() - claims_before,
        scale_cpu
    );

    // The agent's metrics address is in its command line: read it back from /proc.
    let addr = {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let parts: Vec<&str> = cmdline.split('\0').collect();
        parts
            .iter()
            .position(|a| *a == "--metrics-addr")
            .and_then(|i| parts.get(i + 1))
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
    };
    // What the agent did in a window: disruption passes (seconds, count, how many skipped)
    // and scheduling rounds.
    let work = |m: &str| {
        let (pass_s, passes) = histogram(m, "joiner_disruption_pass_duration_seconds");
        let counter = |name: &str| {
            m.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            pass_s,
            passes,
            counter("joiner_scheduling_rounds_total"),
            counter("joiner_disruption_passes_skipped_total"),
        )
    };
    // CPU in two windows of 20 s: just after the scale-out (pods turning Running, nodes
    // initialising, consolidation timers running), and once quiet, 60 s later, with the
    // agent's own account of its disruption passes and scheduling rounds beside it.
    for (label, wait) in [("after the scale-out", 5u64), ("quiet, 60 s later", 60)] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let m0 = match addr {
            Some(a) => work(&w.metrics(a).await),
            None => (0.0, 0.0, 0.0, 0.0),
        };
        let t0 = cpu_ticks(pid).unwrap_or(0);
        let wall = Instant::now();
        for _ in 0..80 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if let Some(kb) = proc_status(pid, "VmRSS:") {
                rss_samples.push(kb);
            }
        }
        let t1 = cpu_ticks(pid).unwrap_or(0);
        let secs = wall.elapsed().as_secs_f64();
        let cores_used = (t1 - t0) as f64 / USER_HZ / secs;
        let m1 = match addr {
            Some(a) => work(&w.metrics(a).await),
            None => (0.0, 0.0, 0.0, 0.0),
        };
        let passes = m1.1 - m0.1;
        println!(
            "agent_e2e steady CPU {label}: {cores_used:.4} core over {secs:.0} s; in it {passes:.0} disruption passes ({:.0} skipped, the world unchanged) of {:.1} ms each ({:.4} core of wall time) and {:.0} scheduling rounds  [nproc={cores}]",
            m1.3 - m0.3,
            1000.0 * (m1.0 - m0.0) / passes.max(1.0),
            (m1.0 - m0.0) / secs,
            m1.2 - m0.2,
        );
    }
    let hwm = proc_status(pid, "VmHWM:").unwrap_or(0);
    let rss = proc_status(pid, "VmRSS:").unwrap_or(0);
    rss_samples.sort_unstable();
    let p95 = rss_samples
        .get((rss_samples.len() * 95 / 100).min(rss_samples.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    println!(
        "agent_e2e agent process with {} pods on {} nodes: peak RSS {:.1} MB, P95 RSS {:.1} MB over {} samples (scale-out and steady), RSS now {:.1} MB  [nproc={cores}]",
        w.pods("seed").await.len() + w.pods("perf").await.len(),
        w.nodes().await.len(),
        hwm as f64 / 1024.0,
        p95 as f64 / 1024.0,
        rss_samples.len(),
        rss as f64 / 1024.0,
    );

    // Reaction time from the agent's own histogram.
    if let Some(addr) = addr {
        let m = w.metrics(addr).await;
        let (sum, count) = histogram(&m, "joiner_reaction_seconds");
        if count > 0.0 {
            println!(
                "agent_e2e reaction (last pending pod observed -> CreateFleet sent): mean {:.3}s over {} launches, batch idle window 1.000s (goal <= 1.050s)  [nproc={cores}]",
                sum / count,
                count
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
