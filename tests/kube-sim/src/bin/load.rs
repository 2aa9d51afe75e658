//! Load benchmark for kube-sim (a release bench binary, not a timed test):
//! 200 nodes and 2,000 pods created through kube-rs while 3 watchers follow the pods.
//! Prints p50/p99 latency of create and list, the watch fan-out rate (events/s delivered
//! to all watchers together), and the server's peak RSS, with the core count.
//!
//!   cargo build --release -p kube-sim && /path/to/target/release/kube-sim-load [--controllers]
//!
//! The server runs as a separate `kube-sim` process (next to this binary) so that its RSS
//! is its own. Without `--controllers` the simulated controllers are off and the figures
//! are the API server's; with it, the scheduler and kubelet bind and start every pod too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const NODES: usize = 200;
const PODS: usize = 2000;
const WATCHERS: usize = 3;
const CONCURRENCY: usize = 16;
const LISTS: usize = 30;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let with_controllers = std::env::args().any(|a| a == "--controllers");
    let exe = std::env::current_exe()?.with_file_name("kube-sim");
    anyhow::ensure!(
        exe.exists(),
        "{} not found: build the kube-sim binary in the same profile",
        exe.display()
    );
    let dir = std::env::temp_dir().join(format!("kube-sim-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if !with_controllers {
        cmd.arg("--disable=deployments,daemonsets,scheduler,kubelet,gc,disruption");
    }
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )?;
    let startup = started.elapsed();
    let pid = child.id();

    let client = kube_sim::server::client_for(&kubeconfig, None).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..NODES {
        let n: Node = serde_json::from_value(
            json!({"metadata": {"name": format!("node-{i:03}"), "labels": {"topology.kubernetes.io/zone": format!("z{}", i % 3)}}}),
        )?;
        nodes.create(&PostParams::default(), &n).await?;
        let status = json!({"status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}, "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(
                &format!("node-{i:03}"),
                &Default::default(),
                &kube::api::Patch::Merge(status),
            )
            .await?;
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let delivered = Arc::new(AtomicU64::new(0));
    let last_event = Arc::new(std::sync::Mutex::new(Instant::now()));
    let rv = pods
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let stream = pods
            .watch(&WatchParams::default().timeout(290), &rv)
            .await?;
        let delivered = delivered.clone();
        let last_event = last_event.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            while let Ok(Some(ev)) = stream.try_next().await {
                if matches!(
                    ev,
                    WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)
                ) {
                    delivered.fetch_add(1, Ordering::Relaxed);
                    *last_event.lock().unwrap() = Instant::now();
                }
            }
        }));
    }

    let t0 = Instant::now();
    let create_lat: Vec<Duration> = futures::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("pod-{i:04}"), "labels": {"app": format!("a{}", i % 10)}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}))
                .unwrap();
                let s = Instant::now();
                pods.create(&PostParams::default(), &p).await.expect("create pod");
                s.elapsed()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let create_wall = t0.elapsed();

    // Let the watchers drain (and, with controllers, the pods bind and run).
    let settle = if with_controllers {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(3)
    };
    let deadline = Instant::now() + settle;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let quiet = last_event.lock().unwrap().elapsed() > Duration::from_millis(1500);
        if quiet || Instant::now() > deadline {
            break;
        }
    }
    let fanout_window = *last_event.lock().unwrap() - t0;
    let events = delivered.load(Ordering::Relaxed);

    let mut list_lat = Vec::new();
    for _ in 0..LISTS {
        let s = Instant::now();
        let l = pods.list(&ListParams::default()).await?;
        list_lat.push(s.elapsed());
        assert_eq!(l.items.len(), PODS);
    }
    let mut page_lat = Vec::new();
    for _ in 0..LISTS {
        let s = Instant::now();
        pods.list(&ListParams::default().limit(500).labels("app=a3"))
            .await?;
        page_lat.push(s.elapsed());
    }
    let running = if with_controllers {
        pods.list(&ListParams::default().fields("status.phase=Running"))
            .await?
            .items
            .len()
    } else {
        0
    };
    let rss = rss_kib(pid, "VmRSS:");
    let hwm = rss_kib(pid, "VmHWM:");
    for w in watchers {
        w.abort();
    }
    let mut c = create_lat.clone();
    c.sort();
    list_lat.sort();
    page_lat.sort();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("kube-sim load: {NODES} nodes, {PODS} pods, {WATCHERS} watchers, {CONCURRENCY} concurrent creates, controllers {}, nproc={cores}",
        if with_controllers { "on" } else { "off" });
    println!(
        "  startup (spawn to address printed): {:.1} ms",
        startup.as_secs_f64() * 1e3
    );
    println!(
        "  create: p50 {:.2} ms, p99 {:.2} ms, {:.0} pods/s",
        percentile(&c, 0.5).as_secs_f64() * 1e3,
        percentile(&c, 0.99).as_secs_f64() * 1e3,
        PODS as f64 / create_wall.as_secs_f64()
    );
    println!(
        "  list all {PODS} pods: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&list_lat, 0.5).as_secs_f64() * 1e3,
        percentile(&list_lat, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "  list by label (200 of {PODS}, limit 500): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&page_lat, 0.5).as_secs_f64() * 1e3,
        percentile(&page_lat, 0.99).as_secs_f64() * 1e3
    );
    println!("  watch fan-out: {events} events delivered to {WATCHERS} watchers in {:.2} s = {:.0} events/s", fanout_window.as_secs_f64(), events as f64 / fanout_window.as_secs_f64().max(1e-9));
    if with_controllers {
        println!("  pods Running after settle: {running}/{PODS}");
    }
    println!(
        "  server RSS: {:.1} MiB now, {:.1} MiB peak",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    terminate(pid);
    let status = child.wait()?;
    println!("  server exit on SIGTERM: {status}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// SIGTERM through the `kill` utility, to keep this binary free of libc bindings.
fn terminate(pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}
