//! The crash-and-restart loop: `joiner-agent run` as two real processes (a leader and a
//! standby on the Lease), the leader killed with SIGKILL at random points of a scale-out (in
//! waves, one after each kill), a Spot storm (warnings sent straight to the interruption
//! queue) and a consolidation, a fresh standby started after each kill, many times over.
//! About half the standbys carry the agent's test hook that stops a launch right after
//! CreateFleet answered, and such a leader is killed once its instance exists: a crash in
//! the narrow window random delays rarely hit (see [`Replicas`]). The delays and choices
//! come from a seeded generator, so a failing run is replayed with its seed (timing on a
//! loaded machine still varies; the seed fixes where the kills aim).
//!
//! `JOINER_KILL_SEED` (default 23), `JOINER_KILL_RUNS` (runs per scenario, default 2 so CI
//! stays cheap) and `JOINER_KILL_KILLS` (kills per run, default 3) choose the loop; each
//! scenario prints one `kill loop` figures line that docs/reliability.md quotes.
//!
//! After the kills the world must settle, and then these invariants hold, each checked
//! precisely rather than sampled:
//! 1. no claim ever had two instances: every instance moto ever launched for the cluster
//!    (terminated ones included: moto keeps them) is counted per `joiner.dev/nodeclaim`;
//! 2. no orphan: once settled (an instance whose launch no claim recorded may live until
//!    the GC grace has passed, then the garbage collector must have taken it), every live
//!    instance belongs to a live NodeClaim whose `providerID` names it, and every live
//!    claim has its instance;
//! 3. every NodeClaim resolved: each live claim is Initialized, none is left deleting;
//! 4. no pod lost: a pod is lost when the Node it is bound to is removed while the pod is
//!    still there, not terminating (it was not drained: its process died with the
//!    machine). One watch on pods and one on Nodes record every write; both servers number
//!    writes from one global counter, so each Node deletion is compared with the state
//!    every pod had just before it, not with a sample;
//! 5. every pod Running: the Deployment's replicas all Running and none Pending.

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use futures::StreamExt;
use joiner_agent_world::{sdk_config, wait_for, World, QUEUE};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::NodeClaim;

/// The invariants each run checks (the module's list).
const INVARIANTS: usize = 5;

/// splitmix64: a few lines, enough to spread kill delays reproducibly from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Heads or tails.
    fn coin(&mut self) -> bool {
        self.next() & 1 == 0
    }

    /// A delay in `[0, max)`, in whole milliseconds.
    fn delay(&mut self, max: Duration) -> Duration {
        Duration::from_millis(self.next() % max.as_millis().max(1) as u64)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a whole number")),
        _ => default,
    }
}

struct Loop {
    seed: u64,
    runs: u64,
    kills: u64,
}

fn settings() -> Loop {
    Loop {
        seed: env_u64("JOINER_KILL_SEED", 23),
        runs: env_u64("JOINER_KILL_RUNS", 2),
        kills: env_u64("JOINER_KILL_KILLS", 3),
    }
}

/// The agent processes of one run, by identity. Dropping it kills what is left.
///
/// Random delays rarely land in the few milliseconds between CreateFleet's answer and the
/// NodeClaim's status update, the window where a crash could leave an instance no claim
/// records. So about one standby in two is started with the agent's test hook
/// `--test-hang-after-launch`: once leader, its launches stop right after CreateFleet
/// answered, and it is killed as soon as an instance of its appears; its successor must
/// adopt those instances. Hooked replicas never finish a run: [`Replicas::retire_hooked`]
/// kills every one left before the world is left to settle.
struct Replicas<'a> {
    w: &'a World,
    extra: Vec<String>,
    live: BTreeMap<String, Child>,
    hooked: std::collections::BTreeSet<String>,
    started: usize,
    kills: usize,
    /// Kills of a hooked leader after its launch: each one a crash inside the window.
    in_window: usize,
}

impl<'a> Replicas<'a> {
    fn new(w: &'a World, extra: &[&str]) -> Replicas<'a> {
        let mut r = Replicas {
            w,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            live: BTreeMap::new(),
            hooked: Default::default(),
            started: 0,
            kills: 0,
            in_window: 0,
        };
        r.spawn(false);
        r.spawn(false);
        r
    }

    fn spawn(&mut self, hooked: bool) {
        self.started += 1;
        let id = format!("agent-{}", self.started);
        let mut args: Vec<&str> = vec!["--identity", &id];
        args.extend(self.extra.iter().map(String::as_str));
        if hooked {
            args.extend(["--test-hang-after-launch", "true"]);
            self.hooked.insert(id.clone());
        }
        let child = self.w.agent_process(&args);
        self.live.insert(id, child);
    }

    /// The Lease holder, when it is one of the live processes (a killed holder keeps the
    /// Lease until it expires; then a standby takes it).
    async fn live_leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.w.client.clone(), "joiner");
        let holder = leases
            .get_opt("joiner-agent")
            .await
            .ok()??
            .spec?
            .holder_identity?;
        self.live.contains_key(&holder).then_some(holder)
    }

    fn kill(&mut self, id: &str) {
        let mut child = self.live.remove(id).expect("a live replica");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap the killed replica");
        self.hooked.remove(id);
        self.kills += 1;
    }

    /// Waits for a live leader and kills it with SIGKILL: a plain leader after a random
    /// delay, a hooked one once an instance of its launch exists (or the delay ran out with
    /// nothing to launch). Starts a fresh standby, hooked when `hook_next`.
    async fn kill_leader(&mut self, rng: &mut Rng, max_delay: Duration, hook_next: bool) {
        let leader = wait_for(
            "a live leader on the Lease",
            Duration::from_secs(60),
            || self.live_leader(),
        )
        .await;
        if self.hooked.contains(&leader) {
            let before = all_instances(self.w).await.len();
            let until = Instant::now() + max_delay * 2;
            while Instant::now() < until {
                if all_instances(self.w).await.len() > before {
                    self.in_window += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else {
            tokio::time::sleep(rng.delay(max_delay)).await;
        }
        self.kill(&leader);
        self.spawn(hook_next);
    }

    /// The seeded kills of one run: `kills` leaders, about one standby in two hooked.
    async fn kill_loop(&mut self, rng: &mut Rng, kills: u64) {
        for _ in 0..kills {
            let hook = rng.coin();
            self.kill_leader(rng, MAX_DELAY, hook).await;
        }
        self.retire_hooked(rng).await;
    }

    /// Kills every hooked replica left (the leader the same way as in the loop), each
    /// replaced by a plain one, so the world can settle.
    async fn retire_hooked(&mut self, rng: &mut Rng) {
        while let Some(id) = self.hooked.iter().next().cloned() {
            let leader = wait_for(
                "a live leader on the Lease",
                Duration::from_secs(60),
                || self.live_leader(),
            )
            .await;
            if leader == id {
                self.kill_leader(rng, MAX_DELAY, false).await;
            } else {
                self.kill(&id);
                self.spawn(false);
            }
        }
    }
}

impl Drop for Replicas<'_> {
    fn drop(&mut self) {
        for c in self.live.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One pod's state after one write: where it is bound, and whether it is still there and
/// not terminating (what a machine's loss would take down).
#[derive(Debug, Clone)]
struct PodState {
    rv: u64,
    node: Option<String>,
    alive: bool,
}

#[derive(Default)]
struct Ledger {
    pods: BTreeMap<String, Vec<PodState>>,
    /// Nodes deleted, with the resourceVersion of the deletion.
    nodes_gone: Vec<(String, u64)>,
    relists: usize,
}

/// Every write to the pods of `app` and every Node deletion, from two watches.
struct PodLedger {
    state: Arc<Mutex<Ledger>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn rv_of<K: kube::Resource>(o: &K) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

fn pod_state(p: &Pod) -> PodState {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    PodState {
        rv: rv_of(p),
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        alive: p.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded") | Some("Failed")),
    }
}

impl PodLedger {
    /// Starts both watches; returns once both have listed.
    async fn start(client: kube::Client, app: &str) -> PodLedger {
        let state = Arc::new(Mutex::new(Ledger::default()));
        let (ptx, prx) = tokio::sync::oneshot::channel();
        let (ntx, nrx) = tokio::sync::oneshot::channel();
        let s = state.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let cfg = watcher::Config::default().labels(&format!("app={app}"));
        let pod_task = tokio::spawn(async move {
            let mut events = watcher(pods, cfg).default_backoff().boxed();
            let mut ready = Some(ptx);
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => st.relists += 1,
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let ps = pod_state(&p);
                        st.pods.entry(p.name_any()).or_default().push(ps);
                    }
                    watcher::Event::Delete(p) => {
                        let ps = PodState {
                            rv: rv_of(&p),
                            node: None,
                            alive: false,
                        };
                        st.pods.entry(p.name_any()).or_default().push(ps);
                    }
                }
            }
        });
        let s = state.clone();
        let nodes: Api<Node> = Api::all(client);
        let node_task = tokio::spawn(async move {
            let mut events = watcher(nodes, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut ready = Some(ntx);
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => st.relists += 1,
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Delete(n) => {
                        let rv = rv_of(&n);
                        st.nodes_gone.push((n.name_any(), rv));
                    }
                    _ => {}
                }
            }
        });
        for rx in [prx, nrx] {
            tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .expect("the pod and Node watches list within 30 s")
                .expect("the watch task runs");
        }
        PodLedger {
            state,
            tasks: vec![pod_task, node_task],
        }
    }

    /// The pods a Node deletion took down: (pod, node). Panics if a watch had to list
    /// again (its events in between could be lost).
    fn lost(&self) -> Vec<(String, String)> {
        let st = self.state.lock().unwrap();
        assert_eq!(
            st.relists, 2,
            "a pod or Node watch had to list again: the ledger may have gaps"
        );
        let mut lost = Vec::new();
        for (node, gone) in &st.nodes_gone {
            for (pod, history) in &st.pods {
                let before = history.iter().rev().find(|s| s.rv < *gone);
                if before.is_some_and(|s| s.alive && s.node.as_deref() == Some(node.as_str())) {
                    lost.push((pod.clone(), node.clone()));
                }
            }
        }
        lost
    }

    fn nodes_removed(&self) -> usize {
        self.state.lock().unwrap().nodes_gone.len()
    }
}

impl Drop for PodLedger {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Every instance moto has launched for the cluster, terminated ones included: (id, state,
/// claim tag).
async fn all_instances(w: &World) -> Vec<(String, String, Option<String>)> {
    let mut out = Vec::new();
    let mut pages = w.ec2.describe_instances().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.expect("EC2 DescribeInstances");
        for i in page.reservations().iter().flat_map(|r| r.instances()) {
            let tag = |k: &str| {
                i.tags()
                    .iter()
                    .find(|t| t.key() == Some(k))
                    .and_then(|t| t.value())
                    .map(str::to_string)
            };
            out.push((
                i.instance_id().unwrap_or_default().to_string(),
                i.state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str().to_string())
                    .unwrap_or_default(),
                tag("joiner.dev/nodeclaim"),
            ));
        }
    }
    out
}

fn live_state(s: &str) -> bool {
    matches!(s, "pending" | "running" | "stopping" | "stopped")
}

fn initialized(c: &NodeClaim) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|k| k.type_ == "Initialized" && k.status == "True")
    })
}

/// Invariants 2, 3 and 5 as they stand now: the violations, empty when they hold.
async fn settled_violations(w: &World, app: &str, replicas: usize) -> Vec<String> {
    let mut v = Vec::new();
    let instances = all_instances(w).await;
    let claims = w.claims().await;
    let by_name: BTreeMap<String, &NodeClaim> = claims.iter().map(|c| (c.name_any(), c)).collect();
    let mut live_by_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, state, tag) in &instances {
        if !live_state(state) {
            continue;
        }
        match tag {
            None => v.push(format!("orphan: live instance {id} has no claim tag")),
            Some(c) if !by_name.contains_key(c) => v.push(format!(
                "orphan: live instance {id} of claim {c}, which is gone"
            )),
            Some(c) => live_by_claim.entry(c.clone()).or_default().push(id.clone()),
        }
    }
    for (name, c) in &by_name {
        if c.metadata.deletion_timestamp.is_some() {
            v.push(format!("unresolved: claim {name} still deleting"));
            continue;
        }
        if !initialized(c) {
            v.push(format!("unresolved: claim {name} not Initialized"));
        }
        let ids = live_by_claim.get(name).cloned().unwrap_or_default();
        let provider = c
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|p| p.rsplit('/').next())
            .map(str::to_string);
        match ids.as_slice() {
            [one] if provider.as_deref() == Some(one.as_str()) => {}
            _ => v.push(format!(
                "claim {name}: live instances {ids:?}, providerID names {provider:?}"
            )),
        }
    }
    let pods = w.pods(app).await;
    let running = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .count();
    if running != replicas || pods.len() != replicas {
        v.push(format!(
            "pods: {running} of {replicas} Running, {} in all",
            pods.len()
        ));
    }
    v
}

/// Invariant 1 over the whole run: no claim ever had two instances.
async fn duplicates(w: &World) -> (usize, Vec<String>) {
    let mut per_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let instances = all_instances(w).await;
    for (id, _, tag) in &instances {
        if let Some(c) = tag {
            per_claim.entry(c.clone()).or_default().push(id.clone());
        }
    }
    let dups = per_claim
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(c, ids)| format!("claim {c} had instances {ids:?}"))
        .collect();
    (instances.len(), dups)
}

/// What one run did, for the figures line.
#[derive(Default)]
struct Tally {
    runs: usize,
    kills: usize,
    in_window: usize,
    instances: usize,
    nodes_removed: usize,
    held: usize,
}

/// After the kills: waits (up to `limit`) for invariants 2, 3 and 5 to hold, then checks
/// 1 and 4; adds the run to `tally`.
async fn check(w: &World, ledger: &PodLedger, app: &str, replicas: usize, tally: &mut Tally) {
    let began = Instant::now();
    let deadline = began + Duration::from_secs(180);
    let mut told = began;
    loop {
        let v = settled_violations(w, app, replicas).await;
        if v.is_empty() {
            eprintln!(
                "kill loop: settled {:.1} s after the last kill",
                began.elapsed().as_secs_f64()
            );
            break;
        }
        if told.elapsed() >= Duration::from_secs(15) {
            eprintln!(
                "kill loop: not settled after {:.0} s: {v:?}",
                began.elapsed().as_secs_f64()
            );
            told = Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "[{}] the world did not settle after the kills: {v:#?}",
            w.target_name()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (launched, dups) = duplicates(w).await;
    assert!(dups.is_empty(), "duplicate instances: {dups:#?}");
    let lost = ledger.lost();
    assert!(
        lost.is_empty(),
        "pods lost (their Node removed before they were drained): {lost:?}"
    );
    tally.instances += launched;
    tally.nodes_removed += ledger.nodes_removed();
    tally.held += INVARIANTS;
}

fn figures(scenario: &str, l: &Loop, t: &Tally, began: Instant) {
    println!(
        "kill loop [{scenario}]: seed {}, {} run(s), {} SIGKILL(s) ({} of a leader between CreateFleet and the claim's status update), {} invariant checks, {} held; {} instances launched, {} Nodes removed, {:.0} s",
        l.seed,
        t.runs,
        t.kills,
        t.in_window,
        t.runs * INVARIANTS,
        t.held,
        t.instances,
        t.nodes_removed,
        began.elapsed().as_secs_f64()
    );
}

/// A pool of 2-vCPU nodes, so a workload needs several claims launched at once.
fn small_pool(capacity: &[&str], disruption: serde_json::Value) -> serde_json::Value {
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity},
            ],
        }},
        "disruption": disruption,
    })
}

/// The longest a leader works before it is killed: the Lease passes in about 3 s, a new
/// leader then lists and acts within a few seconds, so kills land while work is in flight.
const MAX_DELAY: Duration = Duration::from_secs(5);

/// The scenarios, in a module of their own so that `scripts/test` can run this binary beside
/// the rest of the main pass (`--skip kill_loop::` there): the loop spends most of its time
/// waiting on the Lease and on the world, and leaves a core idle.
mod kill_loop {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn scale_out_survives_leader_kills() {
        let l = settings();
        let began = Instant::now();
        let mut rng = Rng(l.seed ^ 0x5ca1e);
        let mut t = Tally::default();
        for _ in 0..l.runs {
            let w = World::start(Default::default()).await;
            w.node_class("default").await;
            w.node_pool(
                "small",
                small_pool(
                    &["on-demand"],
                    json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
                ),
            )
            .await;
            let mut agents = Replicas::new(&w, &[]);
            let ledger = PodLedger::start(w.client.clone(), "web").await;
            // The scale-out comes in waves: after each kill the Deployment grows by 3 to 5
            // pods, so every new leader (a hooked one included) has claims to launch.
            let mut replicas = 6;
            w.deployment("web", replicas, "500m", "512Mi").await;
            for _ in 0..l.kills {
                let hook = rng.coin();
                agents.kill_leader(&mut rng, MAX_DELAY, hook).await;
                replicas += 3 + (rng.next() % 3) as i32;
                w.scale("web", replicas).await;
            }
            agents.retire_hooked(&mut rng).await;
            check(&w, &ledger, "web", replicas as usize, &mut t).await;
            t.runs += 1;
            t.kills += agents.kills;
            t.in_window += agents.in_window;
        }
        figures("scale-out", &l, &t, began);
    }

    /// The interruption queue the agent's policy names, with a short visibility timeout so a
    /// message a killed leader had received comes back quickly.
    async fn queue(w: &World) -> (aws_sdk_sqs::Client, String) {
        let sqs = aws_sdk_sqs::Client::new(&sdk_config(&w.moto.endpoint()).await);
        let url = sqs
            .create_queue()
            .queue_name(QUEUE)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "600")
            .attributes(QueueAttributeName::VisibilityTimeout, "10")
            .send()
            .await
            .expect("SQS CreateQueue")
            .queue_url
            .expect("a queue URL");
        (sqs, url)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn spot_storm_survives_leader_kills() {
        spot_storm(false).await
    }

    /// The same storm with the agent's EC2 and SQS calls through the fault proxy, which from the
    /// warnings on throttles and loses answers (the emulator acts, the agent hears HTTP 500) on
    /// the calls the storm makes: CreateFleet, TerminateInstances, CreateTags, ReceiveMessage,
    /// DeleteMessage(Batch), ChangeMessageVisibility. The kills go on as well. (IAM is not
    /// enforced behind the proxy: it rewrites signed CreateFleet bodies.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn spot_storm_through_throttling_and_lost_answers() {
        spot_storm(true).await
    }

    async fn spot_storm(faults: bool) {
        let l = settings();
        let began = Instant::now();
        let mut rng = Rng(l.seed ^ 0x570e ^ u64::from(faults));
        let mut t = Tally::default();
        let mut faulted = 0;
        for run in 0..l.runs {
            let w = World::start(joiner_agent_world::Opts {
                proxy: faults,
                ..Default::default()
            })
            .await;
            let (sqs, url) = queue(&w).await;
            w.node_class("default").await;
            w.node_pool(
                "spot",
                small_pool(
                    &["spot"],
                    json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
                ),
            )
            .await;
            let replicas = 12;
            w.deployment("web", replicas, "500m", "512Mi").await;
            let mut agents = Replicas::new(&w, &["--queue-url", &url]);
            wait_for(
                "every web pod Running before the storm",
                Duration::from_secs(120),
                || async { (w.running("web").await == replicas as usize).then_some(()) },
            )
            .await;
            let ledger = PodLedger::start(w.client.clone(), "web").await;
            let nodes = w.nodes().await;
            // A third of the nodes get a warning at once.
            let victims: Vec<String> = nodes
                .iter()
                .take(nodes.len().div_ceil(3))
                .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
                .filter_map(|p| p.rsplit('/').next().map(str::to_string))
                .collect();
            if let Some(p) = &w.proxy {
                for action in ["CreateFleet", "TerminateInstances", "CreateTags"] {
                    p.throttle(action, 2);
                    p.half_succeed(action, 1);
                }
                for action in ["ReceiveMessage", "DeleteMessage", "DeleteMessageBatch"] {
                    p.throttle(action, 2);
                    p.half_succeed(action, 2);
                }
                p.half_succeed("ChangeMessageVisibility", 1);
            }
            let account = joiner_agent::interruption::messages::queue_account(&url)
                .expect("the queue URL names its account");
            for (i, id) in victims.iter().enumerate() {
                let body = json!({"version": "0", "id": format!("storm-{run}-{i}"),
                "source": "aws.ec2", "account": account,
                "detail-type": "EC2 Spot Instance Interruption Warning",
                "detail": {"instance-id": id, "instance-action": "terminate"}});
                sqs.send_message()
                    .queue_url(&url)
                    .message_body(body.to_string())
                    .send()
                    .await
                    .expect("SQS SendMessage");
            }
            agents.kill_loop(&mut rng, l.kills).await;
            // Every warned instance ends terminated (the agent replaced and removed it).
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let all = all_instances(&w).await;
                let left: Vec<&String> = victims
                    .iter()
                    .filter(|v| all.iter().any(|(id, s, _)| id == *v && live_state(s)))
                    .collect();
                if left.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "warned instances still live after the kills: {left:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            check(&w, &ledger, "web", replicas as usize, &mut t).await;
            t.runs += 1;
            t.kills += agents.kills;
            t.in_window += agents.in_window;
            if let Some(p) = &w.proxy {
                faulted += p.requests().iter().filter(|r| r.fault.is_some()).count();
            }
        }
        if faults {
            figures(
                &format!("spot storm, {faulted} faulted AWS calls"),
                &l,
                &t,
                began,
            );
        } else {
            figures("spot storm", &l, &t, began);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn consolidation_survives_leader_kills() {
        let l = settings();
        let began = Instant::now();
        let mut rng = Rng(l.seed ^ 0xc0501);
        let mut t = Tally::default();
        for _ in 0..l.runs {
            let w = World::start(Default::default()).await;
            w.node_class("default").await;
            w.node_pool(
            "small",
            small_pool(
                &["on-demand"],
                json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "2s",
                       "budgets": [{"nodes": "100%"}]}),
            ),
        )
        .await;
            w.deployment("web", 12, "500m", "512Mi").await;
            let mut agents = Replicas::new(&w, &[]);
            wait_for(
                "every web pod Running before the scale-in",
                Duration::from_secs(120),
                || async { (w.running("web").await == 12).then_some(()) },
            )
            .await;
            let ledger = PodLedger::start(w.client.clone(), "web").await;
            let peak = w.nodes().await.len();
            // Two pods of 500m fit on one 2-vCPU node: consolidation ends at one.
            w.scale("web", 2).await;
            agents.kill_loop(&mut rng, l.kills).await;
            // An end state, waited for generously: each consolidation step waits
            // for its provisioning round and replacement, and a loaded 2-core CI machine once
            // needed more than 180 s.
            let deadline = Instant::now() + Duration::from_secs(360);
            loop {
                let n = w.nodes().await.len();
                if n == 1 {
                    break;
                }
                if Instant::now() >= deadline {
                    let claims: Vec<String> = w
                        .claims()
                        .await
                        .iter()
                        .map(|c| format!("{} {:?}", c.name_any(), c.metadata.annotations))
                        .collect();
                    panic!("consolidation after the kills: {n} nodes (from {peak}), expected 1; claims: {claims:?}");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            check(&w, &ledger, "web", 2, &mut t).await;
            t.runs += 1;
            t.kills += agents.kills;
            t.in_window += agents.in_window;
        }
        figures("consolidation", &l, &t, began);
    }
}
