//! Interruption handling end to end: kube-sim with its EC2 → Node bridge, the AWS emulator,
//! the agent running in-process (`controllers::run` with `--queue-url`), and the real
//! EventBridge → SQS path (rules on the default bus with the provider's patterns, PutEvents).
//!
//! The Spot storm also runs on the real control plane (kube-scheduler binding the pods,
//! KWOK playing the kubelets, the real Eviction API and PDB): `#[ignore]`d, asked for with
//! `cargo test -- --ignored`, and failing then if the control plane is not built.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use futures::StreamExt;
use joiner_agent_world::{sdk_config, wait_for, Opts, Target, World};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;

use joiner_agent::api::NodeClaim;
use joiner_agent::interruption::messages::Kind;

struct Queue {
    url: String,
    sqs: aws_sdk_sqs::Client,
    events: aws_sdk_eventbridge::Client,
}

/// A queue fed by one EventBridge rule per kind, as `joiner_interruption_rules` makes them.
async fn queue(w: &World) -> Queue {
    // The in-process agent builds its SQS client from the standard credential chain, as in a
    // pod (IRSA there); the emulator takes any static key. Both tests set the same values.
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let cfg = sdk_config(&w.moto.endpoint()).await;
    let sqs = aws_sdk_sqs::Client::new(&cfg);
    let events = aws_sdk_eventbridge::Client::new(&cfg);
    let url = sqs
        .create_queue()
        .queue_name("agent-test-interruptions")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    // The provider's own patterns: its rules are built from `Kind::event_pattern`.
    let rules = Kind::ALL.map(|k| (k.as_str(), k.event_pattern()));
    for (name, pattern) in rules {
        events
            .put_rule()
            .name(format!("agent-test-{name}"))
            .event_pattern(pattern.to_string())
            .send()
            .await
            .unwrap();
        events
            .put_targets()
            .rule(format!("agent-test-{name}"))
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("q")
                    .arn(&arn)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    Queue { url, sqs, events }
}

impl Queue {
    async fn put(&self, source: &str, detail_type: &str, detail: serde_json::Value) {
        let out = self
            .events
            .put_events()
            .entries(
                aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                    .source(source)
                    .detail_type(detail_type)
                    .detail(detail.to_string())
                    .build(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_entry_count(), 0);
    }

    async fn spot(&self, instance: &str) {
        self.put(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": instance, "instance-action": "terminate"}),
        )
        .await
    }

    async fn send_raw(&self, body: &str) {
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }

    /// Visible plus in-flight messages.
    async fn depth(&self) -> u64 {
        let a = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap_or_default();
        a.values().filter_map(|v| v.parse::<u64>().ok()).sum()
    }
}

fn instance_of(n: &Node) -> String {
    n.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .unwrap_or_default()
        .to_string()
}

fn cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// Scrapes the agent's `/metrics` and returns the value of a sample (labels as written).
fn metric(addr: std::net::SocketAddr, name_and_labels: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Records when NodeClaims appear and when Nodes get cordoned.
#[derive(Default)]
struct Timeline {
    claims_added: HashMap<String, Instant>,
    /// When a NodeClaim turned Initialized (its Node Ready, startup taints gone, resources
    /// registered: the agent's readiness for a claim).
    claims_ready: HashMap<String, Instant>,
    /// The resourceVersions of a claim's first sight and of a Node's first cordoned sight.
    /// Both servers (kube-sim, etcd) number every write from one global counter, so these
    /// order a create and a cordon exactly, where two watches' arrival times may not.
    claims_added_rv: HashMap<String, u64>,
    claims_ready_rv: HashMap<String, u64>,
    cordoned_rv: HashMap<String, u64>,
    /// When a Node object was deleted (drained, instance gone).
    nodes_gone: HashMap<String, Instant>,
    /// Per Node: when its claim first named the NodeClaims its pods go to
    /// (`joiner.dev/replaced-by`, written by the provisioner's round).
    replacement_named: HashMap<String, Instant>,
}

fn watch_timeline(client: kube::Client) -> Arc<Mutex<Timeline>> {
    let t = Arc::new(Mutex::new(Timeline::default()));
    let t1 = t.clone();
    let c1 = client.clone();
    tokio::spawn(async move {
        let api: Api<NodeClaim> = Api::all(c1);
        let mut s = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(Ok(ev)) = s.next().await {
            if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) = ev {
                let mut t = t1.lock().unwrap();
                t.claims_added
                    .entry(c.name_any())
                    .or_insert_with(Instant::now);
                if let Some(rv) = c.resource_version().and_then(|v| v.parse().ok()) {
                    t.claims_added_rv.entry(c.name_any()).or_insert(rv);
                }
                let named = c
                    .annotations()
                    .get("joiner.dev/replaced-by")
                    .is_some_and(|v| !v.is_empty());
                if let Some(node) = c.status.as_ref().and_then(|s| s.node_name.clone()) {
                    if named {
                        t.replacement_named.entry(node).or_insert_with(Instant::now);
                    }
                }
                let ready = c.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|k| k.type_ == "Initialized" && k.status == "True")
                });
                if ready {
                    t.claims_ready
                        .entry(c.name_any())
                        .or_insert_with(Instant::now);
                    if let Some(rv) = c.resource_version().and_then(|v| v.parse().ok()) {
                        t.claims_ready_rv.entry(c.name_any()).or_insert(rv);
                    }
                }
            }
        }
    });
    let t2 = t.clone();
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut s = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(Ok(ev)) = s.next().await {
            match ev {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) if cordoned(&n) => {
                    let mut t = t2.lock().unwrap();
                    if let Some(rv) = n.resource_version().and_then(|v| v.parse().ok()) {
                        t.cordoned_rv.entry(n.name_any()).or_insert(rv);
                    }
                }
                watcher::Event::Delete(n) => {
                    t2.lock()
                        .unwrap()
                        .nodes_gone
                        .entry(n.name_any())
                        .or_insert_with(Instant::now);
                }
                _ => {}
            }
        }
    });
    t
}

/// How many pods of an app are serving (Running, not terminating: what a PDB counts as
/// healthy), followed through every event of one pod watch, so a dip between two list
/// samples cannot go unseen.
struct ServingWatch {
    state: Arc<Mutex<Serving>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Serving {
    pods: BTreeMap<String, bool>,
    listed: bool,
    fewest: Option<usize>,
    relists: usize,
    /// Pods kube-scheduler found no node for (`PodScheduled=False`, `Unschedulable`: what
    /// the agent calls pending), since when; cleared when bound or deleted.
    unschedulable_since: HashMap<String, Instant>,
    /// Every pod that was ever unschedulable while watched.
    went_pending: BTreeSet<String>,
    /// Pod-seconds spent unschedulable, of pods no longer so.
    pending_secs: f64,
}

/// Whether kube-scheduler marked the pod unschedulable and it is still unbound.
fn unschedulable(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !bound
        && p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
}

impl Serving {
    fn pending_update(&mut self, name: &str, now_pending: bool) {
        if now_pending {
            self.went_pending.insert(name.to_string());
            self.unschedulable_since
                .entry(name.to_string())
                .or_insert_with(Instant::now);
        } else if let Some(t) = self.unschedulable_since.remove(name) {
            self.pending_secs += t.elapsed().as_secs_f64();
        }
    }
}

impl Serving {
    fn count(&self) -> usize {
        self.pods.values().filter(|s| **s).count()
    }
}

fn serving(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl ServingWatch {
    /// Starts watching the pods labelled `app=<app>` in `default`; returns once listed.
    async fn start(client: kube::Client, app: &str) -> ServingWatch {
        let state = Arc::new(Mutex::new(Serving::default()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let s = state.clone();
        let cfg = watcher::Config::default().labels(&format!("app={app}"));
        let task = tokio::spawn(async move {
            let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
            let mut events = watcher(api, cfg).default_backoff().boxed();
            let mut tx = Some(tx);
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => st.relists += 1,
                    watcher::Event::InitApply(p) => {
                        st.pods.insert(p.name_any(), serving(&p));
                    }
                    watcher::Event::InitDone => {
                        st.listed = true;
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Apply(p) => {
                        st.pods.insert(p.name_any(), serving(&p));
                        st.pending_update(&p.name_any(), unschedulable(&p));
                    }
                    watcher::Event::Delete(p) => {
                        st.pods.remove(&p.name_any());
                        st.pending_update(&p.name_any(), false);
                    }
                }
                if st.listed {
                    let n = st.count();
                    st.fewest = Some(st.fewest.map_or(n, |f| f.min(n)));
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("the pod watch lists within 30 s")
            .expect("the pod watch runs");
        ServingWatch { state, task }
    }

    /// The fewest serving at any point so far, and serving now; panics if the watch had to
    /// list again (events in between could be lost).
    fn fewest_and_now(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap();
        assert_eq!(st.relists, 1, "the pod watch had to list again");
        (st.fewest.unwrap_or(0), st.count())
    }

    /// The pods that went pending (unschedulable) while watched, and the pending
    /// pod-seconds so far (those still pending counted up to now).
    fn pending(&self) -> (BTreeSet<String>, f64) {
        let st = self.state.lock().unwrap();
        assert_eq!(st.relists, 1, "the pod watch had to list again");
        let ongoing: f64 = st
            .unschedulable_since
            .values()
            .map(|t| t.elapsed().as_secs_f64())
            .sum();
        (st.went_pending.clone(), st.pending_secs + ongoing)
    }
}

impl Drop for ServingWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn spot_pool(w: &World) -> serde_json::Value {
    let _ = w;
    json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            ],
        }},
        // Interruption ignores budgets; consolidation is kept out of this test's way.
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    })
}

async fn ready_nodes(w: &World, n: usize) -> Vec<Node> {
    wait_for("nodes", Duration::from_secs(90), || async {
        let nodes = w.nodes().await;
        (nodes.len() >= n).then_some(nodes)
    })
    .await
}

/// The notice the storm tests give: EC2 takes the warned instances back this long after
/// the warnings (120 s on AWS; compressed here, as in the sandbox).
const NOTICE: Duration = Duration::from_secs(30);
/// Instance launch to Node Ready in these tests.
const BOOT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spot_storm_replacement_first_no_pod_pending_pdb_held() {
    spot_storm(Target::Sim, NOTICE).await
}

/// The same storm with a 10 s notice: the figure to compare (on EKS, where a node boots in
/// about a minute, such a notice could not be met; here boot plus drain still fits).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a figure, not a check beyond the 30 s storm's: asked for by `cargo test -- --ignored`"]
async fn spot_storm_with_a_10s_notice() {
    spot_storm(Target::Sim, Duration::from_secs(10)).await
}

/// EC2 taking instances back when their notice ends, drained or not.
async fn take_back_after(w: &World, instances: Vec<String>, notice: Duration) {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&w.moto.endpoint()).await);
    tokio::spawn(async move {
        tokio::time::sleep(notice).await;
        // Instances the agent already terminated are refused by nobody: terminating twice
        // is allowed by EC2.
        if let Err(e) = ec2
            .terminate_instances()
            .set_instance_ids(Some(instances))
            .send()
            .await
        {
            panic!("ec2:TerminateInstances at the notice's end: {e:?}");
        }
    });
}

async fn spot_storm(target: Target, notice: Duration) {
    let w = World::start(Opts {
        boot_delay: BOOT,
        ..Opts::on(target)
    })
    .await;
    let begun = w.began;
    let on = w.target_name();
    let q = queue(&w).await;
    w.node_class("default").await;
    w.node_pool("spot", spot_pool(&w)).await;
    // `JOINER_STORM_REPLICAS` makes a bigger storm for figures (3 pods a node, 30 % of the
    // nodes warned); CI runs the default.
    let replicas: i32 = std::env::var("JOINER_STORM_REPLICAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(18);
    w.deployment("web", replicas, "500m", "512Mi").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let agent = w.agent(&["--queue-url", &q.url]).await;
    wait_for(
        "every web pod Running",
        Duration::from_secs(120),
        || async { (w.running("web").await == replicas as usize).then_some(()) },
    )
    .await;
    let before = w.nodes().await;
    assert!(
        before.len() >= 4,
        "a spread of small Spot nodes: {}",
        before.len()
    );

    let timeline = watch_timeline(w.client.clone());
    let serving = ServingWatch::start(w.client.clone(), "web").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 30 % of the Spot nodes get a warning, all at once.
    let victims: Vec<&Node> = before
        .iter()
        .take((before.len() * 3).div_ceil(10))
        .collect();
    let started = Instant::now();
    let mut sent_at = HashMap::new();
    for n in &victims {
        q.spot(&instance_of(n)).await;
        sent_at.insert(n.name_any(), Instant::now());
    }
    take_back_after(&w, victims.iter().map(|n| instance_of(n)).collect(), notice).await;
    let victim_names: BTreeSet<String> = victims.iter().map(|n| n.name_any()).collect();

    // The storm has passed when every pod is Running again and the victims are gone.
    wait_for("the storm to settle", Duration::from_secs(150), || async {
        let running = w.running("web").await;
        let names: BTreeSet<String> = w.nodes().await.iter().map(|n| n.name_any()).collect();
        (running == replicas as usize && victim_names.is_disjoint(&names)).then_some(())
    })
    .await;
    let settled = started.elapsed();
    // While it passed, the PDB held: never more than 2 web pods missing, through every
    // pod event (not samples).
    let (min_running, _) = serving.fewest_and_now();
    assert!(
        min_running + 2 >= replicas as usize,
        "PDB maxUnavailable 2 broken: {min_running} serving at one point"
    );

    // Each interrupted node kept serving until its replacements were Initialized; they
    // were created by the provisioner after the warning and before the cordon.
    let (mut to_ready, mut to_gone) = (Duration::ZERO, Duration::ZERO);
    let mut to_created: Vec<f64> = Vec::new();
    let mut replacements = 0;
    let events: Api<Event> = Api::namespaced(w.client.clone(), "default");
    let evs = events.list(&ListParams::default()).await.unwrap().items;
    {
        let t = timeline.lock().unwrap();
        for n in &victim_names {
            if let Some(g) = t.nodes_gone.get(n) {
                to_gone = to_gone.max(g.duration_since(started));
            }
            assert!(t.cordoned_rv.contains_key(n), "{n} never cordoned");
            let on_node = |reason: &str| {
                evs.iter()
                    .find(|e| {
                        e.involved_object.name.as_deref() == Some(n.as_str())
                            && e.reason.as_deref() == Some(reason)
                    })
                    .and_then(|e| e.message.clone())
                    .unwrap_or_else(|| panic!("no {reason} Event on node {n}"))
            };
            on_node("SpotInterrupted");
            let msg = on_node("Draining");
            // Every node is full (3 pods of 500m on 2 vCPU), so every victim's pods need a
            // replacement: a drain that names none, or that ran out of time, is a failure.
            let list = msg
                .strip_prefix("replacement NodeClaim(s) ")
                .and_then(|m| m.split(" Initialized;").next())
                .unwrap_or_else(|| {
                    panic!("the Draining Event on {n} names no Initialized replacement: {msg}")
                });
            for claim in list.split(", ") {
                assert!(t.claims_added.contains_key(claim), "{claim} never seen");
                let (created, ready, cordoned) = (
                    t.claims_added_rv[claim],
                    *t.claims_ready_rv
                        .get(claim)
                        .unwrap_or_else(|| panic!("{claim} never Initialized")),
                    t.cordoned_rv[n],
                );
                assert!(
                    created < cordoned && ready < cordoned,
                    "{claim} created (resourceVersion {created}) and Initialized ({ready}) before {n} was cordoned ({cordoned})"
                );
                replacements += 1;
                if let Some(r) = t.claims_ready.get(claim) {
                    to_ready = to_ready.max(r.duration_since(started));
                }
            }
            // Warning sent → the provisioner named the replacements on the victim's claim
            // (right after creating any it needed).
            if let (Some(c), Some(s)) = (t.replacement_named.get(n), sent_at.get(n)) {
                to_created.push(c.saturating_duration_since(*s).as_secs_f64());
            }
        }
    }
    assert!(
        replacements >= victims.len(),
        "{replacements} replacement(s) for {} interrupted nodes",
        victims.len()
    );
    // Every message was deleted.
    wait_for("queue drained", Duration::from_secs(30), || async {
        (q.depth().await == 0).then_some(())
    })
    .await;
    assert_eq!(
        metric(
            agent.metrics,
            "joiner_interruption_actions_total{action=\"replace\",kind=\"spot_interruption\"}"
        ),
        victims.len() as f64
    );
    // Replacement before drain: with a notice longer than boot plus drain, no pod ever
    // waited for capacity (seen through the pod watch, every event).
    let (went_pending, pending_secs) = serving.pending();
    to_created.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        to_created
            .get(((to_created.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "[{on}] storm: {} of {} Spot nodes interrupted, {replacements} replacement NodeClaim(s); after the warnings: last replacement Initialized {:.1} s, last old node drained and gone {:.1} s, all {replicas} pods Running on other nodes {:.1} s (notice: {} s, boot {} s); fewest Running {min_running}; pending pod-seconds {pending_secs:.2} ({} pod(s) went pending); warning sent → replacements named p50 {:.3} s, p99 {:.3} s",
        victims.len(),
        before.len(),
        to_ready.as_secs_f64(),
        to_gone.as_secs_f64(),
        settled.as_secs_f64(),
        notice.as_secs(),
        BOOT.as_secs(),
        went_pending.len(),
        pct(0.5),
        pct(0.99),
    );
    if notice >= NOTICE {
        assert!(
            went_pending.is_empty(),
            "pods went pending during the storm although the {} s notice allowed replacing first: {went_pending:?} ({pending_secs:.2} pod-seconds)",
            notice.as_secs()
        );
    }
    drop(agent);
    println!(
        "[{on}] spot storm scenario done in {:.1}s (world start included)",
        begun.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_event_kind_and_bad_messages() {
    each_event_kind(Target::Sim).await
}

async fn each_event_kind(target: Target) {
    let w = World::start(Opts::on(target)).await;
    let begun = w.began;
    let on = w.target_name();
    let q = queue(&w).await;
    w.node_class("default").await;
    w.node_pool("spot", spot_pool(&w)).await;
    w.deployment("web", 15, "500m", "512Mi").await;
    let agent = w.agent(&["--queue-url", &q.url]).await;
    wait_for(
        "every web pod Running",
        Duration::from_secs(120),
        || async { (w.running("web").await == 15).then_some(()) },
    )
    .await;
    let nodes = ready_nodes(&w, 5).await;
    let ids: Vec<String> = nodes.iter().map(instance_of).collect();
    let names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();

    // Bad and foreign messages first: dropped, counted, deleted; nothing cordoned.
    q.send_raw("{not json").await;
    q.send_raw(
        &json!({"id": "u1", "source": "aws.s3", "detail-type": "Object Created", "detail": {}})
            .to_string(),
    )
    .await;
    q.spot("i-00000000deadbeef").await;
    q.put(
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        json!({"instance-id": ids[4]}),
    )
    .await;
    wait_for("bad messages handled", Duration::from_secs(30), || async {
        (q.depth().await == 0
            && metric(
                agent.metrics,
                "joiner_interruption_messages_dropped_total{reason=\"not_ours\"}",
            ) >= 1.0)
            .then_some(())
    })
    .await;
    for r in ["malformed", "unknown_kind", "not_ours"] {
        assert_eq!(
            metric(
                agent.metrics,
                &format!("joiner_interruption_messages_dropped_total{{reason=\"{r}\"}}")
            ),
            1.0,
            "{r}"
        );
    }
    assert_eq!(
        metric(agent.metrics, "joiner_interruption_actions_total{action=\"event_only\",kind=\"rebalance_recommendation\"}"),
        1.0
    );
    assert!(
        w.nodes().await.iter().all(|n| !cordoned(n)),
        "nothing is cordoned"
    );

    // The four acting kinds, one node each; the Spot warning twice (same event ID).
    q.put(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        json!({"instance-id": ids[0], "state": "stopping"}),
    )
    .await;
    q.put(
        "aws.health",
        "AWS Health Event",
        json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
               "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
               "affectedEntities": [{"entityValue": ids[1]}]}),
    )
    .await;
    q.put(
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
        json!({"instance-id": ids[2], "instance-action": "terminate"}),
    )
    .await;
    let account = joiner_agent::interruption::messages::queue_account(&q.url)
        .expect("the queue URL names its account");
    let dup = json!({"version": "0", "id": "dup-event", "source": "aws.ec2", "account": account,
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": ids[3], "instance-action": "terminate"}})
    .to_string();
    q.send_raw(&dup).await;
    q.send_raw(&dup).await;
    let reasons = BTreeMap::from([
        (names[0].clone(), "InstanceStopping"),
        (names[1].clone(), "ScheduledChange"),
        (names[2].clone(), "CapacityReservationInterrupted"),
        (names[3].clone(), "SpotInterrupted"),
    ]);
    wait_for(
        "four nodes replaced and gone",
        Duration::from_secs(150),
        || async {
            let now: BTreeSet<String> = w.nodes().await.iter().map(|n| n.name_any()).collect();
            (reasons.keys().all(|n| !now.contains(n)) && w.running("web").await == 15).then_some(())
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(w.client.clone(), "default");
    let evs = events.list(&ListParams::default()).await.unwrap().items;
    for (node, reason) in &reasons {
        assert!(
            evs.iter()
                .any(|e| e.involved_object.name.as_deref() == Some(node.as_str())
                    && e.involved_object.kind.as_deref() == Some("Node")
                    && e.reason.as_deref() == Some(*reason)),
            "Event {reason} on Node {node}"
        );
        assert!(
            evs.iter()
                .any(|e| e.involved_object.kind.as_deref() == Some("NodeClaim")
                    && e.reason.as_deref() == Some(*reason)),
            "Event {reason} on a NodeClaim"
        );
    }
    // The rebalanced node was left alone (no opt-in).
    assert!(w.nodes().await.iter().any(|n| n.name_any() == names[4]));
    // The Spot warning sent twice acted once, and its second copy was dropped as a
    // duplicate. At least once, not exactly: on a loaded machine a copy whose handling
    // outlives SQS's visibility timeout is delivered again, and is a duplicate too.
    assert_eq!(
        metric(
            agent.metrics,
            "joiner_interruption_actions_total{action=\"replace\",kind=\"spot_interruption\"}"
        ),
        1.0
    );
    assert!(
        metric(
            agent.metrics,
            "joiner_interruption_messages_dropped_total{reason=\"duplicate\"}"
        ) >= 1.0
    );
    wait_for("queue drained", Duration::from_secs(30), || async {
        (q.depth().await == 0).then_some(())
    })
    .await;
    drop(agent);
    println!(
        "[{on}] each event kind scenario done in {:.1}s (world start included)",
        begun.elapsed().as_secs_f64()
    );
}

/// A NodePool that opted in replaces a node on a rebalance recommendation the way every
/// disruption goes (the provisioner launches, the node drains once the replacement is
/// Initialized), and the replacement's own recommendation inside the rate limit is only an
/// Event: no replacement loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebalance_opt_in_replaces_first_and_does_not_loop() {
    let w = World::start(Opts {
        boot_delay: BOOT,
        ..Opts::on(Target::Sim)
    })
    .await;
    let q = queue(&w).await;
    w.node_class("default").await;
    w.node_pool("spot", spot_pool(&w)).await;
    let pools: Api<joiner_agent::api::NodePool> = Api::all(w.client.clone());
    pools
        .patch(
            "spot",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                joiner_agent::interruption::actions::REBALANCE_ANNOTATION: "replace"}}})),
        )
        .await
        .unwrap();
    w.deployment("web", 6, "500m", "512Mi").await;
    let agent = w.agent(&["--queue-url", &q.url]).await;
    wait_for(
        "every web pod Running",
        Duration::from_secs(120),
        || async { (w.running("web").await == 6).then_some(()) },
    )
    .await;
    let serving = ServingWatch::start(w.client.clone(), "web").await;
    let first = ready_nodes(&w, 2).await.remove(0);
    let first_name = first.name_any();
    q.put(
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        json!({"instance-id": instance_of(&first)}),
    )
    .await;
    wait_for(
        "the recommended node replaced",
        Duration::from_secs(90),
        || async {
            let gone = !w.nodes().await.iter().any(|n| n.name_any() == first_name);
            (gone && w.running("web").await == 6).then_some(())
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(w.client.clone(), "default");
    let evs = events.list(&ListParams::default()).await.unwrap().items;
    let draining = evs
        .iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some(first_name.as_str())
                && e.reason.as_deref() == Some("Draining")
        })
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| panic!("no Draining Event on {first_name}"));
    let replacement = draining
        .strip_prefix("replacement NodeClaim(s) ")
        .and_then(|m| m.split(" Initialized;").next())
        .and_then(|m| m.split(", ").next())
        .unwrap_or_else(|| {
            panic!("the drain of {first_name} waited for no replacement: {draining}")
        })
        .to_string();
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    let node_name = claims
        .get(&replacement)
        .await
        .unwrap()
        .status
        .and_then(|s| s.node_name)
        .expect("the replacement has a Node");
    let node = w
        .nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == node_name)
        .expect("the replacement's Node");

    // The replacement gets a recommendation too: inside the pool's limit (1 per 5 min), an
    // Event only.
    q.put(
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        json!({"instance-id": instance_of(&node)}),
    )
    .await;
    let event_only =
        "joiner_interruption_actions_total{action=\"event_only\",kind=\"rebalance_recommendation\"}";
    wait_for(
        "the second recommendation handled",
        Duration::from_secs(30),
        || async {
            (metric(agent.metrics, event_only) >= 1.0 && q.depth().await == 0).then_some(())
        },
    )
    .await;
    assert_eq!(metric(agent.metrics, event_only), 1.0);
    assert_eq!(
        metric(
            agent.metrics,
            "joiner_interruption_actions_total{action=\"rebalance_replace\",kind=\"rebalance_recommendation\"}"
        ),
        1.0,
        "one replacement, not a loop"
    );
    let still = w
        .nodes()
        .await
        .into_iter()
        .find(|n| n.name_any() == node_name)
        .expect("the replacement stays");
    assert!(!cordoned(&still), "the replacement is not drained");
    let c = claims.get(&replacement).await.unwrap();
    assert!(
        c.metadata.deletion_timestamp.is_none(),
        "{replacement} not deleted"
    );
    let (went_pending, secs) = serving.pending();
    assert!(
        went_pending.is_empty(),
        "no pod waited for capacity: {went_pending:?} ({secs:.2} pod-seconds)"
    );
    drop(agent);
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn spot_storm_replacement_first_no_pod_pending_pdb_held() {
        spot_storm(Target::ControlPlane, NOTICE).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn each_event_kind_and_bad_messages() {
        each_event_kind(Target::ControlPlane).await
    }
}
