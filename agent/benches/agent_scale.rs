//! The agent alone at cluster scale: `joiner-agent run --cloud kwok` against kube-sim with
//! its simulated controllers off (the API server only, so that the agent, not the API
//! server, is what is measured), `JOINER_BENCH_NODES` nodes (default 10,000) of 16 vCPUs each
//! holding `JOINER_BENCH_PODS_PER_NODE` pods of 1500m/1Gi (default 10: 100,000 pods).
//! Printed, never asserted:
//!
//! 1. **the scale-out**: every pod created pending; the agent plans them in its rounds and
//!    launches their Nodes through the KWOK cloud; time to all bound, the rounds (count,
//!    the largest: pods and milliseconds), the agent's RSS and CPU;
//! 2. **the disruption pass over every node**, once the cluster is still: the full passes'
//!    wall times (the agent's `disruption pass` debug line; passes over an unchanged
//!    cluster are skipped and not counted), after one pod is deleted so that the cluster
//!    has changed since the last full pass;
//! 3. **one round of `JOINER_BENCH_ROUND_PODS` pending pods** (default 10,000) in the full
//!    cluster: its pods and milliseconds;
//! 4. **a Spot storm**: `JOINER_BENCH_STORM` Spot interruption warnings (default 1,000),
//!    one per node, sent at once to the agent's interruption queue (SQS on the AWS
//!    emulator): time to every warned node gone and every evicted pod bound again, the
//!    replacements launched, the agent's RSS and CPU;
//!
//! and the agent's RSS settled with every object held, per object.
//!
//! Nothing plays the kubelets, kube-scheduler and the ReplicaSet controller but this bench,
//! in their simplest form: a Node the agent creates is marked Ready, pending pods are bound
//! first-fit to Ready Nodes with room (every pod asks the same) or marked Unschedulable as
//! kube-scheduler marks them, which is what the agent provisions for, and during the storm
//! each evicted pod is created again under a new name, pending.
//!
//! `cargo bench --workspace --bench agent_scale`; `JOINER_BENCH_NODES=1000` for a short run.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use joiner_agent::catalog::kwok;
use joiner_agent_world::kwok::{
    env_or, http_get, load, log_lines, nproc, pool_and_class, Controller, Kind, Sampler,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Semaphore};

const NS: &str = "scale";
const POD_CPU_MILLI: i64 = 1500;
/// Requests in flight from the bench's kubelet and scheduler stand-ins.
const IN_FLIGHT: usize = 64;

fn main() {
    let out = joiner_test_support::workspace_root().join(format!(
        "target/agent-scale/{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&out).unwrap();
    // kube-sim on a runtime of its own (and dropped outside the bench's runtime).
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        controllers: kube_sim::ControllerSet::none(),
        kubeconfig: Some(out.join("kubeconfig")),
        // A watcher that falls behind resumes from its last event rather than relisting:
        // a scale-out of 100,000 pods writes about 300,000 pod events.
        watch_history: 500_000,
        ..Default::default()
    })
    .expect("kube-sim");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&sim, &out));
    drop(rt);
    drop(sim);
}

/// What the bench's stand-ins tell the scheduler stand-in.
enum Seen {
    NodeReady(String, i64),
    NodeGone(String),
    PodPending(String),
    PodGone(String),
}

/// The nodes the storm warned that are not gone yet.
type Warned = Arc<std::sync::Mutex<HashSet<String>>>;

/// Counts the run waits on.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Pods bound now (a bound pod deleted no longer counts).
    bound: usize,
    ready_nodes: usize,
    /// Nodes of the storm's list deleted.
    warned_gone: usize,
}

fn cpu_milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<f64>().map(|c| (c * 1000.0) as i64).unwrap_or(0),
    }
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// KWOK's part: every Node the agent's KWOK cloud creates becomes Ready.
fn play_kubelets(client: Client, tx: mpsc::UnboundedSender<Seen>) {
    let nodes: Api<Node> = Api::all(client);
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(nodes.clone(), watcher::Config::default()));
        let mut marked = HashSet::new();
        while let Some(ev) = events.next().await {
            let objs = match ev {
                Ok(watcher::Event::Apply(n)) | Ok(watcher::Event::InitApply(n)) => vec![n],
                Ok(watcher::Event::Delete(n)) => {
                    let _ = tx.send(Seen::NodeGone(n.name_any()));
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("agent-scale: Node watch: {e}");
                    continue;
                }
            };
            for n in objs {
                let name = n.name_any();
                if n.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if is_ready(&n) {
                    let cpu = n
                        .status
                        .as_ref()
                        .and_then(|s| s.allocatable.as_ref())
                        .and_then(|a| a.get("cpu"))
                        .map(|q| cpu_milli(&q.0))
                        .unwrap_or(0);
                    let _ = tx.send(Seen::NodeReady(name, cpu));
                } else if marked.insert(name.clone()) {
                    let nodes = nodes.clone();
                    let permit = gate.clone().acquire_owned().await.unwrap();
                    tokio::spawn(async move {
                        let now = jiff::Timestamp::now().to_string();
                        let status = json!({"status": {"conditions": [{"type": "Ready",
                            "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
                        if let Err(e) = nodes
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                            .await
                        {
                            eprintln!("agent-scale: Node {name} Ready: {e}");
                        }
                        drop(permit);
                    });
                }
            }
        }
    });
}

/// Pods of the namespace that wait for a node, as this bench's scheduler sees them; while
/// `recreate` is on, a bound pod deleted is created again, pending, as its ReplicaSet would.
fn watch_pods(client: Client, tx: mpsc::UnboundedSender<Seen>, recreate: Arc<AtomicBool>) {
    let pods: Api<Pod> = Api::namespaced(client, NS);
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods.clone(), watcher::Config::default()));
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                    if !bound && p.metadata.deletion_timestamp.is_none() {
                        let _ = tx.send(Seen::PodPending(p.name_any()));
                    }
                }
                Ok(watcher::Event::Delete(p)) => {
                    let _ = tx.send(Seen::PodGone(p.name_any()));
                    let was_bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
                    if was_bound && recreate.load(Ordering::Relaxed) {
                        let pods = pods.clone();
                        tokio::spawn(async move {
                            let name = format!("{}-r", p.name_any());
                            let _ = pods
                                .create(&PostParams::default(), &pod(&name, "storm"))
                                .await;
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("agent-scale: Pod watch: {e}"),
            }
        }
    });
}

/// kube-scheduler's part, for pods that all ask the same: bind each pending pod to the first
/// Ready Node with room, or mark it Unschedulable (once) until a Node with room is Ready.
/// Then the kubelet's: the bound pod is Running.
fn play_scheduler(
    client: Client,
    mut rx: mpsc::UnboundedReceiver<Seen>,
    progress: watch::Sender<Progress>,
    warned: Warned,
) {
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    tokio::spawn(async move {
        // Nodes with room for one more pod, and every Ready node's free CPU.
        let mut open: BTreeSet<String> = BTreeSet::new();
        let mut free: HashMap<String, i64> = HashMap::new();
        let mut waiting: VecDeque<String> = VecDeque::new();
        let mut known: HashSet<String> = HashSet::new();
        let mut marked: HashSet<String> = HashSet::new();
        let mut bound: HashSet<String> = HashSet::new();
        while let Some(seen) = rx.recv().await {
            let mut arrived = None;
            match seen {
                Seen::NodeReady(name, cpu) => {
                    if free.contains_key(&name) {
                        continue;
                    }
                    free.insert(name.clone(), cpu);
                    if cpu >= POD_CPU_MILLI {
                        open.insert(name);
                    }
                    progress.send_modify(|p| p.ready_nodes += 1);
                }
                Seen::NodeGone(name) => {
                    if free.remove(&name).is_some() {
                        open.remove(&name);
                        let warned = warned.lock().unwrap().remove(&name);
                        progress.send_modify(|p| {
                            p.ready_nodes -= 1;
                            p.warned_gone += usize::from(warned);
                        });
                    }
                }
                Seen::PodPending(name) => {
                    if known.insert(name.clone()) {
                        waiting.push_back(name.clone());
                        arrived = Some(name);
                    }
                }
                Seen::PodGone(name) => {
                    known.remove(&name);
                    marked.remove(&name);
                    if bound.remove(&name) {
                        progress.send_modify(|p| p.bound -= 1);
                    }
                }
            }
            while let (Some(node), Some(pod)) = (open.first().cloned(), waiting.front().cloned()) {
                waiting.pop_front();
                if !known.contains(&pod) {
                    continue;
                }
                let room = free.get_mut(&node).expect("an open node is Ready");
                *room -= POD_CPU_MILLI;
                if *room < POD_CPU_MILLI {
                    open.remove(&node);
                }
                bound.insert(pod.clone());
                progress.send_modify(|p| p.bound += 1);
                let (pods, permit) = (pods.clone(), gate.clone().acquire_owned().await.unwrap());
                tokio::spawn(async move {
                    bind(&pods, &pod, &node).await;
                    drop(permit);
                });
            }
            // Pods are bound in arrival order: with no room left, the one that just arrived
            // waits, and is marked once.
            let unplaced = arrived.filter(|_| open.is_empty());
            if let Some(pod) = unplaced.filter(|p| marked.insert(p.clone())) {
                let (pods, permit) = (pods.clone(), gate.clone().acquire_owned().await.unwrap());
                tokio::spawn(async move {
                    let status = json!({"status": {"conditions": [{"type": "PodScheduled",
                        "status": "False", "reason": "Unschedulable",
                        "message": "0/0 nodes are available"}]}});
                    if let Err(e) = pods
                        .patch_status(&pod, &PatchParams::default(), &Patch::Merge(status))
                        .await
                    {
                        eprintln!("agent-scale: Pod {pod} Unschedulable: {e}");
                    }
                    drop(permit);
                });
            }
        }
    });
}

async fn bind(pods: &Api<Pod>, pod: &str, node: &str) {
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    if let Err(e) = pods
        .create_subresource::<Value, Value>("binding", pod, &PostParams::default(), &binding)
        .await
    {
        eprintln!("agent-scale: bind {pod} to {node}: {e}");
        return;
    }
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {"phase": "Running", "startTime": now, "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
    if let Err(e) = pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        eprintln!("agent-scale: Pod {pod} Running: {e}");
    }
}

/// `count` pods of 1500m/1Gi named `prefix-N`, owned by a ReplicaSet (which kube-sim does
/// not run: its controllers are off) so that they are a workload's pods, as in a real
/// cluster.
async fn create_pods(client: &Client, prefix: &str, count: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    futures::stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let pods = pods.clone();
            async move {
                let name = format!("{prefix}-{i}");
                if let Err(e) = pods
                    .create(&PostParams::default(), &pod(&name, prefix))
                    .await
                {
                    eprintln!("agent-scale: create {name}: {e}");
                }
            }
        })
        .await;
}

/// A pod of 1500m/1Gi of the workload `app`, owned by its ReplicaSet.
fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-rs"), "uid": format!("{app}-rs-uid"),
                "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
    }))
    .unwrap()
}

/// A field of one of the agent's JSON log lines (top level, or under `fields`).
fn field<'a>(line: &'a Value, key: &str) -> &'a Value {
    match line.get("fields").and_then(|f| f.get(key)) {
        Some(v) => v,
        None => &line[key],
    }
}

fn num(line: &Value, key: &str) -> u64 {
    field(line, key).as_u64().unwrap_or(0)
}

async fn wait_progress(
    rx: &mut watch::Receiver<Progress>,
    what: &str,
    limit: Duration,
    done: impl Fn(&Progress) -> bool,
) -> Option<Instant> {
    let reached = matches!(
        tokio::time::timeout(limit, rx.wait_for(|p| done(p))).await,
        Ok(Ok(_))
    );
    if !reached {
        eprintln!("agent-scale: NOT in {limit:?}: {what} ({:?})", *rx.borrow());
    }
    reached.then(Instant::now)
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

async fn run(sim: &kube_sim::KubeSim, out: &std::path::Path) {
    let nodes: usize = env_or("JOINER_BENCH_NODES", 10_000);
    let per_node: usize = env_or("JOINER_BENCH_PODS_PER_NODE", 10);
    let round_pods: usize = env_or("JOINER_BENCH_ROUND_PODS", 10_000);
    let storm: usize = env_or("JOINER_BENCH_STORM", 1_000);
    let quiet = Duration::from_secs(env_or("JOINER_SCALE_QUIET", 45));
    let limit = Duration::from_secs(env_or("JOINER_SCALE_LIMIT", 3600));
    let pods = nodes * per_node;
    eprintln!(
        "agent-scale: {nodes} nodes × {per_node} pods = {pods} pods, then a round of {round_pods}; nproc {}, load {}, logs in {}",
        nproc(),
        load(),
        out.display()
    );
    let client = sim.client().await.expect("kube-sim client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in joiner_agent::api::schema::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD");
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    // 16-vCPU `c` types: 15.9 allocatable vCPUs hold 10 pods of 1500m.
    let (pool, class) = pool_and_class(
        Kind::Joiner,
        Some(json!([
            {"key": kwok::INSTANCE_CPU, "operator": "In", "values": ["16"]},
            {"key": kwok::INSTANCE_FAMILY, "operator": "In", "values": ["c"]},
        ])),
    );
    let class: joiner_agent::api::NodeClass = serde_json::from_value(class).unwrap();
    let pool: joiner_agent::api::NodePool = serde_json::from_value(pool).unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("NodeClass");
    Api::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("NodePool");

    let (tx, rx) = mpsc::unbounded_channel();
    let (progress_tx, mut progress) = watch::channel(Progress::default());
    let recreate = Arc::new(AtomicBool::new(false));
    play_kubelets(client.clone(), tx.clone());
    watch_pods(client.clone(), tx, recreate.clone());
    let warned = Warned::default();
    play_scheduler(client.clone(), rx, progress_tx, warned.clone());

    let queue = Queue::start().await;
    let mut ctrl = Controller::joiner_at(
        sim.kubeconfig_path(),
        out,
        &[
            "--log-level",
            "info,joiner_agent::controllers::disruption=debug",
            "--queue-url",
            &queue.url,
            "--aws-endpoint",
            &queue.moto.endpoint(),
        ],
    );
    let pid = ctrl.pid();
    let sampler = Sampler::start(pid);
    let mut ctrl = tokio::task::spawn_blocking(move || {
        ctrl.wait_ready(Duration::from_secs(300));
        ctrl
    })
    .await
    .unwrap();
    let idle_rss = rss_mb(pid);

    // 1. The scale-out.
    let t0 = Instant::now();
    create_pods(&client, "scale", pods).await;
    let created = t0.elapsed();
    let all_bound =
        wait_progress(&mut progress, "every pod bound", limit, |p| p.bound >= pods).await;
    let t1 = Instant::now();
    let scale_out = sampler.usage(t0, t1);
    let rounds = log_lines(&ctrl.log, "scheduling round");
    let largest = rounds.iter().max_by_key(|r| num(r, "pending"));
    let claims = log_lines(&ctrl.log, "created NodeClaim").len();
    let nodes_now = progress.borrow().ready_nodes;
    println!(
        "\nthe agent alone at scale (kube-sim, API only): {nodes} nodes × {per_node} pods, nproc={}, {}",
        nproc(),
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC")
    );
    println!("agent RSS at start, before any pod: {idle_rss:.0} MB");
    println!(
        "scale-out: {pods} pods created in {:.1} s, all bound {} after the first; {} rounds, {claims} NodeClaims, {nodes_now} Ready nodes",
        created.as_secs_f64(),
        all_bound
            .map(|t| format!("{:.1} s", t.duration_since(t0).as_secs_f64()))
            .unwrap_or_else(|| "NOT".into()),
        rounds.len()
    );
    if let Some(r) = largest {
        println!(
            "  largest round: {} pending pods planned in {} ms → {} new NodeClaims",
            num(r, "pending"),
            num(r, "took_ms"),
            num(r, "new_claims")
        );
    }
    println!(
        "  agent P95 RSS {:.0} MB, peak {:.0} MB; {:.1} CPU-s, {:.2} cores (load {})",
        scale_out.p95_rss_mb,
        scale_out.peak_rss_mb,
        scale_out.cpu_seconds,
        scale_out.avg_cores,
        load()
    );

    // 2. Still: the disruption passes over every node. Passes wait for pods to stop
    // pending and for consolidateAfter (30 s); a pod deleted half-way makes the cluster
    // change since the pass before, so that a second full pass runs.
    tokio::time::sleep(quiet).await;
    let victim = format!("scale-{}", pods / 2);
    let _ = Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&victim, &DeleteParams::default())
        .await;
    tokio::time::sleep(quiet).await;
    let t2 = Instant::now();
    let still = sampler.usage(t1 + quiet, t2);
    let passes = log_lines(&ctrl.log, "disruption pass");
    let full: Vec<&Value> = passes.iter().filter(|p| num(p, "candidates") > 0).collect();
    let slowest = full.iter().map(|p| num(p, "took_ms")).max().unwrap_or(0);
    let metrics = http_get(&ctrl.metrics, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let skipped = metrics
        .lines()
        .find(|l| l.starts_with("joiner_disruption_passes_skipped_total"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("?")
        .to_string();
    println!(
        "disruption: {} full passes over up to {} candidate nodes, slowest {slowest} ms (each: {}); {skipped} passes skipped (cluster unchanged)",
        full.len(),
        full.iter().map(|p| num(p, "candidates")).max().unwrap_or(0),
        full.iter()
            .map(|p| format!("{} ms", num(p, "took_ms")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let held = pods + 2 * nodes;
    println!(
        "still, every object held: agent P95 RSS {:.0} MB ({:.1} kB per pod, node and NodeClaim held: {held}), {:.3} cores",
        still.p95_rss_mb,
        (still.p95_rss_mb - idle_rss).max(0.0) * 1024.0 / held as f64,
        still.avg_cores
    );

    // 3. One round of pending pods in the full cluster.
    let before = rounds_after(&ctrl.log, 0).len();
    let t3 = Instant::now();
    create_pods(&client, "round", round_pods).await;
    // Less the pod deleted above.
    let _ = wait_progress(&mut progress, "the round's pods bound", limit, |p| {
        p.bound + 1 >= pods + round_pods
    })
    .await;
    let t4 = Instant::now();
    let round = sampler.usage(t3, t4);
    let later = rounds_after(&ctrl.log, before);
    println!(
        "a round in the full cluster: {round_pods} pods created; rounds since: {} (pods, ms: {}); all bound in {:.1} s; agent peak RSS {:.0} MB",
        later.len(),
        later
            .iter()
            .map(|r| format!("{}/{}", num(r, "pending"), num(r, "took_ms")))
            .collect::<Vec<_>>()
            .join(", "),
        t4.duration_since(t3).as_secs_f64(),
        round.peak_rss_mb
    );

    // 4. A Spot storm.
    if storm > 0 {
        let storm = Storm {
            count: storm,
            queue: &queue,
            warned: &warned,
            recreate: &recreate,
        };
        spot_storm(&client, storm, &ctrl, &sampler, &mut progress, limit).await;
    }
    println!(
        "kube-sim and this bench's stand-ins (one process): RSS {:.0} MB",
        rss_mb(std::process::id())
    );
    if let Ok(Some(st)) = ctrl.child.try_wait() {
        println!(
            "!!! the agent exited during the run ({st}); its log: {}",
            ctrl.log.display()
        );
    }
}

/// The agent's interruption queue: SQS on the AWS emulator, the agent reaching it with the
/// emulator's credentials.
struct Queue {
    moto: joiner_test_support::MotoServer,
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl Queue {
    async fn start() -> Queue {
        let moto = joiner_test_support::MotoServer::start();
        // The agent inherits them (it runs no EC2 here: its cloud is KWOK).
        for (k, v) in moto.env() {
            std::env::set_var(k, v);
        }
        let cfg = joiner_agent_world::sdk_config(&moto.endpoint()).await;
        let sqs = aws_sdk_sqs::Client::new(&cfg);
        let url = sqs
            .create_queue()
            .queue_name("agent-scale-interruptions")
            .send()
            .await
            .expect("CreateQueue")
            .queue_url
            .expect("queue URL");
        Queue { moto, sqs, url }
    }

    /// EventBridge's Spot interruption warning for one instance, as the queue receives it.
    fn warning(instance_id: &str) -> String {
        json!({"version": "0", "id": format!("storm-{instance_id}"), "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "time": jiff::Timestamp::now().to_string(), "region": "us-east-1", "account": "123456789012",
            "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}")],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}})
        .to_string()
    }

    /// Sends one warning per instance, ten to a batch, eight batches at a time.
    async fn send_warnings(&self, instances: &[String]) {
        futures::stream::iter(instances.chunks(10))
            .for_each_concurrent(8, |chunk| async move {
                let mut batch = self.sqs.send_message_batch().queue_url(&self.url);
                for (i, id) in chunk.iter().enumerate() {
                    batch = batch.entries(
                        aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .message_body(Queue::warning(id))
                            .build()
                            .expect("batch entry"),
                    );
                }
                match batch.send().await {
                    Ok(r) if !r.failed().is_empty() => eprintln!(
                        "agent-scale: SendMessageBatch: {} of {} refused: {:?}",
                        r.failed().len(),
                        chunk.len(),
                        r.failed()
                    ),
                    Ok(_) => {}
                    Err(e) => eprintln!("agent-scale: SendMessageBatch: {e}"),
                }
            })
            .await;
    }
}

/// What the storm warns and what it tells the stand-ins.
struct Storm<'a> {
    count: usize,
    queue: &'a Queue,
    warned: &'a Warned,
    recreate: &'a AtomicBool,
}

/// Warns `count` nodes at once (the first by name), with every evicted pod created again;
/// prints how long until the agent handled every warning, the warned nodes are gone and
/// every pod is bound again.
async fn spot_storm(
    client: &Client,
    storm: Storm<'_>,
    ctrl: &Controller,
    sampler: &Sampler,
    progress: &mut watch::Receiver<Progress>,
    limit: Duration,
) {
    let Storm {
        count,
        queue,
        warned,
        recreate,
    } = storm;
    let mut nodes: Vec<(String, String)> = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list Nodes")
        .items
        .into_iter()
        // Not nodes already going (consolidation): they may be gone before the list is.
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let pid = n.spec.as_ref()?.provider_id.clone()?;
            // The KWOK cloud's provider IDs end in the instance's ID, as EC2's do.
            let id = pid.rsplit('/').next()?.to_string();
            Some((n.name_any(), id))
        })
        .collect();
    nodes.sort();
    nodes.truncate(count);
    let count = nodes.len();
    warned
        .lock()
        .unwrap()
        .extend(nodes.iter().map(|(n, _)| n.clone()));
    let before = *progress.borrow();
    let claims_before = log_lines(&ctrl.log, "created NodeClaim").len();
    recreate.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let wall0 = jiff::Timestamp::now();
    let ids: Vec<String> = nodes.into_iter().map(|(_, id)| id).collect();
    queue.send_warnings(&ids).await;
    let sent = t0.elapsed();
    // A warning is acted on within seconds; ten minutes means one was lost.
    let limit = limit.min(Duration::from_secs(600));
    let gone = wait_progress(progress, "the warned nodes gone", limit, |p| {
        p.warned_gone >= before.warned_gone + count
    })
    .await;
    let rebound = wait_progress(progress, "every evicted pod bound again", limit, |p| {
        p.bound >= before.bound && p.warned_gone >= before.warned_gone + count
    })
    .await;
    let t1 = Instant::now();
    // When the agent had acted on the last warning (its log's clock is the wall clock).
    let handled = log_lines(&ctrl.log, "interruption handled");
    let last_handled = handled
        .iter()
        .filter_map(|l| l["timestamp"].as_str()?.parse::<jiff::Timestamp>().ok())
        .max()
        .map(|t| format!("{:.1} s", wall0.duration_until(t).as_secs_f64()))
        .unwrap_or_else(|| "NOT".into());
    recreate.store(false, Ordering::Relaxed);
    let usage = sampler.usage(t0, t1);
    let replacements = log_lines(&ctrl.log, "created NodeClaim").len() - claims_before;
    let since = |t: Option<Instant>| {
        t.map(|t| format!("{:.1} s", t.duration_since(t0).as_secs_f64()))
            .unwrap_or_else(|| "NOT".into())
    };
    println!(
        "a Spot storm: {count} warnings sent in {:.1} s; {} handled, the last after {last_handled}; every warned node gone after {} ({} of {count} gone), every evicted pod bound again after {}; {replacements} NodeClaims created; agent peak RSS {:.0} MB, {:.1} CPU-s, {:.2} cores",
        sent.as_secs_f64(),
        handled.len(),
        since(gone),
        progress.borrow().warned_gone - before.warned_gone,
        since(rebound),
        usage.peak_rss_mb,
        usage.cpu_seconds,
        usage.avg_cores
    );
}

/// The agent's `scheduling round` lines after the first `skip`.
fn rounds_after(log: &std::path::Path, skip: usize) -> Vec<Value> {
    log_lines(log, "scheduling round")
        .into_iter()
        .skip(skip)
        .collect()
}
