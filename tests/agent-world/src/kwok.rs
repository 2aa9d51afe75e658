//! The world both controllers are measured in by `perf_suite` and `kwok_scale`: a real
//! control plane on loopback (`joiner-control-plane`: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, KWOK playing every kubelet), a controller run
//! as a process of its own (joiner's `joiner-agent run --cloud kwok`, or Karpenter's KWOK
//! controller built by `scripts/install-tools.sh --go-karpenter`), and what is watched and
//! sampled while it works:
//! - [`Sampler`]: the controller's RSS and CPU time from `/proc`, every 500 ms;
//! - [`Observer`]: one watch on the workload's pods and one on Nodes, kept as small maps
//!   (healthy pods per app, pods evicted with the Eviction API, Nodes with their type and
//!   capacity type) with the time of every Node added or removed.
//!
//! Both controllers see the same instance types and prices (`catalog::kwok`, checked
//! against the JSON Karpenter embeds by [`check_catalog`]) and the same NodePool, written in
//! each one's API.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use joiner_control_plane::{ControlPlane, Options};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use joiner_agent::catalog::{kwok, CapacityType};

/// Namespace of the measured workload.
pub const NS: &str = "perf";
/// Karpenter's test label on every pod and node of a perf-suite run.
pub const DISCOVERY: (&str, &str) = ("testing/cluster", "unspecified");
/// Clock ticks per second in /proc/<pid>/stat.
const USER_HZ: f64 = 100.0;

pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The 1-minute load average, as `uptime` prints it.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// The controllers.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Karpenter,
    Joiner,
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Karpenter => "karpenter",
            Kind::Joiner => "joiner",
        }
    }
}

/// Karpenter's KWOK controller as `install-tools.sh --go-karpenter` left it: the binary
/// (`.tools/bin/karpenter-kwok`) and, next to its real path, its CRDs and instance types.
pub struct KarpenterBuild {
    pub bin: PathBuf,
    pub crds: PathBuf,
    pub instance_types: PathBuf,
}

impl KarpenterBuild {
    pub fn find() -> Result<KarpenterBuild, String> {
        let link = std::env::var_os("JOINER_KARPENTER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| joiner_test_support::tools_dir().join("bin/karpenter-kwok"));
        let bin = std::fs::canonicalize(&link).map_err(|e| {
            format!(
                "{}: {e}. Build Karpenter's KWOK controller with `scripts/install-tools.sh --go-karpenter`",
                link.display()
            )
        })?;
        let data = bin.parent().unwrap_or(Path::new(".")).join("karpenter");
        let b = KarpenterBuild {
            crds: data.join("crds"),
            instance_types: data.join("instance_types.json"),
            bin,
        };
        if !b.instance_types.is_file() || !b.crds.is_dir() {
            return Err(format!(
                "{} has no CRDs or instance types next to it: run `scripts/install-tools.sh --go-karpenter` again",
                b.bin.display()
            ));
        }
        Ok(b)
    }
}

/// A controller process, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Controller {
    pub kind: Kind,
    pub child: Child,
    pub log: PathBuf,
    pub metrics: String,
    health: u16,
}

impl Controller {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// joiner's agent with the KWOK cloud, no leader election (Karpenter's runs without
    /// it too), default batch windows (1 s idle, 10 s max: Karpenter's).
    pub fn joiner(cp: &ControlPlane, out: &Path, extra: &[&str]) -> Controller {
        Controller::joiner_at(cp.kubeconfig_path(), out, extra)
    }

    /// [`Controller::joiner`] against the cluster of any kubeconfig (kube-sim's, for the
    /// agent alone at scale).
    pub fn joiner_at(kubeconfig: &Path, out: &Path, extra: &[&str]) -> Controller {
        let metrics = joiner_test_support::free_port();
        let health = joiner_test_support::free_port();
        let log = out.join("joiner.log");
        let file = std::fs::File::create(&log).expect("agent log");
        let child = Command::new(joiner_test_support::agent_bin())
            .args([
                "run",
                "--cluster-name",
                "perf",
                "--cloud",
                "kwok",
                "--leader-elect",
                "false",
                "--log-format",
                "json",
            ])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics}"))
            .arg("--health-addr")
            .arg(format!("127.0.0.1:{health}"))
            .args(extra)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start joiner-agent");
        Controller {
            kind: Kind::Joiner,
            child,
            log,
            metrics: format!("127.0.0.1:{metrics}"),
            health,
        }
    }

    /// Karpenter's KWOK controller, as its chart runs it but out of cluster: the admin
    /// kubeconfig (joiner's agent gets the same), leader election off, info logs.
    pub fn karpenter(cp: &ControlPlane, build: &KarpenterBuild, out: &Path) -> Controller {
        Controller::karpenter_with(cp, build, out, &[])
    }

    /// [`Controller::karpenter`] with more environment (its settings: `FEATURE_GATES`...).
    pub fn karpenter_with(
        cp: &ControlPlane,
        build: &KarpenterBuild,
        out: &Path,
        env: &[(&str, &str)],
    ) -> Controller {
        let metrics = joiner_test_support::free_port();
        let health = joiner_test_support::free_port();
        let log = out.join("karpenter.log");
        let file = std::fs::File::create(&log).expect("karpenter log");
        let child = Command::new(&build.bin)
            .envs(env.iter().copied())
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start Karpenter's KWOK controller");
        Controller {
            kind: Kind::Karpenter,
            child,
            log,
            metrics: format!("127.0.0.1:{metrics}"),
            health,
        }
    }

    /// Waits for `/readyz` to answer 200 (both serve it on their health port).
    pub fn wait_ready(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "{} exited ({st}) before it was ready; its log: {}",
                    self.kind.name(),
                    self.log.display()
                );
            }
            if http_get(&format!("127.0.0.1:{}", self.health), "/readyz")
                .is_some_and(|(code, _)| code == 200)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after {limit:?}; its log: {}",
                self.kind.name(),
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET on loopback: status code and body.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

// ---------------------------------------------------------------------------------------
// /proc sampling.

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    rss_kb: u64,
    ticks: u64,
}

fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// A process's RSS and CPU time, sampled every 500 ms on a thread of its own.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
}

/// What a process used over a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub p95_rss_mb: f64,
    pub peak_rss_mb: f64,
    /// CPU seconds over wall seconds.
    pub avg_cores: f64,
    pub cpu_seconds: f64,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let (Some(rss_kb), Some(ticks)) = (rss_kb(pid), cpu_ticks(pid)) {
                    s.lock().unwrap().push(Sample {
                        at: Instant::now(),
                        rss_kb,
                        ticks,
                    });
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Sampler { samples, stop }
    }

    /// Usage between `from` and `to`.
    pub fn usage(&self, from: Instant, to: Instant) -> Usage {
        let all = self.samples.lock().unwrap();
        let w: Vec<Sample> = all
            .iter()
            .filter(|s| s.at >= from && s.at <= to)
            .copied()
            .collect();
        if w.len() < 2 {
            return Usage::default();
        }
        let mut rss: Vec<u64> = w.iter().map(|s| s.rss_kb).collect();
        rss.sort_unstable();
        let p95 = rss[((rss.len() as f64 * 0.95).ceil() as usize).clamp(1, rss.len()) - 1];
        let (a, b) = (w[0], w[w.len() - 1]);
        let cpu = (b.ticks - a.ticks) as f64 / USER_HZ;
        let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
        Usage {
            p95_rss_mb: p95 as f64 / 1024.0,
            peak_rss_mb: *rss.last().unwrap() as f64 / 1024.0,
            avg_cores: cpu / wall,
            cpu_seconds: cpu,
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The control plane and the objects both controllers are given.

/// Starts a control plane for one run, with the controller-manager's and scheduler's client
/// limits raised (`JOINER_PERF_CLIENT_QPS`, default 200) so that neither the ReplicaSet
/// controller nor the binding loop is what a scale-out waits for, and the node monitor's
/// grace period at 10 min (`JOINER_PERF_NODE_GRACE`): at a thousand Nodes on two cores
/// KWOK's heartbeats fall behind the default 50 s, and the pods of Nodes marked Unknown stay
/// NotReady for good (a stall of the hostname-spread XL run, for both controllers alike).
/// Real kubelets renew a Lease every 10 s instead.
pub async fn control_plane() -> (ControlPlane, Client) {
    let qps: u32 = env_or("JOINER_PERF_CLIENT_QPS", 200);
    let grace: u32 = env_or("JOINER_PERF_NODE_GRACE", 600);
    control_plane_with(Options {
        client_qps: Some(qps),
        node_monitor_grace_secs: Some(grace),
        ..Default::default()
    })
    .await
}

/// A control plane started with `opts`, and an admin client of it.
pub async fn control_plane_with(opts: Options) -> (ControlPlane, Client) {
    let cp = tokio::task::spawn_blocking(move || ControlPlane::start(opts))
        .await
        .unwrap()
        .expect("control plane (scripts/install-tools.sh --go-cluster builds it)");
    let kc = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(cfg).unwrap();
    (cp, client)
}

fn kubectl_stdin(cp: &ControlPlane, args: &[&str], input: &str) {
    use std::io::Write;
    let mut c = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CRDs a controller serves, applied and established: joiner's from the agent,
/// Karpenter's from `karpenter_crds` (the directory a Karpenter build or the regression
/// suite carries).
pub fn install_crds(cp: &ControlPlane, kind: Kind, karpenter_crds: Option<&Path>) {
    match kind {
        Kind::Joiner => {
            let out = Command::new(joiner_test_support::agent_bin())
                .arg("crds")
                .output()
                .expect("joiner-agent crds");
            kubectl_stdin(
                cp,
                &["apply", "--server-side", "-f", "-"],
                &String::from_utf8_lossy(&out.stdout),
            );
        }
        Kind::Karpenter => {
            let dir = karpenter_crds.expect("Karpenter's CRDs");
            cp.kubectl(&["apply", "--server-side", "-f", &dir.display().to_string()])
                .expect("Karpenter's CRDs");
        }
    }
    cp.kubectl(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "crd",
        "--all",
    ])
    .expect("CRDs established");
    kubectl_stdin(
        cp,
        &["apply", "-f", "-"],
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"),
    );
}

/// The NodePool of Karpenter's perf suite (its `default_nodepool.yaml` as its suite
/// modifies it: linux, on-demand, KWOK instance size below 32, no limits, consolidation
/// when empty or underutilized after 30 s, a 100 % budget, no expiry), in either API, with
/// its NodeClass. `requirements` replaces the size requirement when given (the scale run).
pub fn pool_and_class(kind: Kind, requirements: Option<Value>) -> (Value, Value) {
    let reqs = requirements.unwrap_or_else(
        || json!([{"key": kwok::INSTANCE_SIZE, "operator": "Lt", "values": ["32"]}]),
    );
    let mut all = vec![
        json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}),
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
    ];
    all.extend(reqs.as_array().cloned().unwrap_or_default());
    let disruption = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "30s",
        "budgets": [{"nodes": "100%"}],
    });
    let labels = json!({DISCOVERY.0: DISCOVERY.1});
    match kind {
        Kind::Karpenter => (
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default", "labels": labels},
                "spec": {
                    "disruption": disruption,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "expireAfter": "Never",
                            "requirements": all,
                            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                        },
                    },
                },
            }),
            json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}),
        ),
        Kind::Joiner => (
            json!({
                "apiVersion": "joiner.dev/v1", "kind": "NodePool",
                "metadata": {"name": "default", "labels": labels},
                "spec": {
                    "disruption": disruption,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "expireAfter": "Never",
                            "requirements": all,
                            "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                        },
                    },
                },
            }),
            // The KWOK cloud resolves none of the EC2 fields; they are only what joiner's
            // validation requires of any NodeClass, selecting nothing.
            json!({
                "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
                "metadata": {"name": "default"},
                "spec": {
                    "subnetSelectorTerms": [{"tags": {"joiner.dev/world": "kwok"}}],
                    "securityGroupSelectorTerms": [{"tags": {"joiner.dev/world": "kwok"}}],
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "role": "kwok-nodes",
                },
            }),
        ),
    }
}

/// Applies objects (YAML/JSON) with kubectl.
pub fn apply(cp: &ControlPlane, objects: &[&Value]) {
    for o in objects {
        kubectl_stdin(cp, &["apply", "-f", "-"], &o.to_string());
    }
}

/// One of Karpenter's perf-suite Deployments (`test.CreateDeploymentOptions`): labels `app`
/// and `testing/cluster`, one pause container with the requests, optionally a hostname
/// spread (maxSkew 1, DoNotSchedule) or a required hostname anti-affinity on its own pods.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: &'static str,
    pub replicas: i32,
    pub cpu: &'static str,
    pub memory: &'static str,
    pub hostname_spread: bool,
    pub anti_affinity: bool,
}

impl Workload {
    pub fn new(name: &'static str, replicas: i32, cpu: &'static str, memory: &'static str) -> Self {
        Workload {
            name,
            replicas,
            cpu,
            memory,
            hostname_spread: false,
            anti_affinity: false,
        }
    }

    pub fn manifest(&self) -> Value {
        let labels = json!({"app": self.name, DISCOVERY.0: DISCOVERY.1});
        let mut spec = json!({
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}}}],
        });
        if self.hostname_spread {
            spec["topologySpreadConstraints"] = json!([{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels},
            }]);
        }
        if self.anti_affinity {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}},
            ]}});
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": NS},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        })
    }
}

pub async fn scale_deployment(client: &Client, name: &str, replicas: i32) {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), NS);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scale Deployment");
}

// ---------------------------------------------------------------------------------------
// Watching the world.

#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub instance_type: String,
    pub capacity_type: String,
    pub deleting: bool,
    pub disrupted: bool,
}

#[derive(Debug, Default)]
pub struct ObsState {
    /// Pod uid -> (app, healthy).
    pods: HashMap<String, (String, bool)>,
    /// Pods kube-scheduler marked unschedulable (and not bound since).
    pub unschedulable: HashSet<String>,
    /// Pod uid -> (first DisruptionTarget reason seen, when).
    pub disruptions: HashMap<String, (String, Instant)>,
    pub nodes: HashMap<String, NodeInfo>,
    /// When a Node appeared or went, the newest last.
    pub node_changes: Vec<Instant>,
    pub pods_synced: bool,
    pub nodes_synced: bool,
}

impl ObsState {
    pub fn healthy(&self) -> usize {
        self.pods.values().filter(|(_, h)| *h).count()
    }

    pub fn healthy_of(&self, app: &str) -> usize {
        self.pods.values().filter(|(a, h)| *h && a == app).count()
    }

    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// Nodes not being deleted.
    pub fn live_nodes(&self) -> usize {
        self.nodes.values().filter(|n| !n.deleting).count()
    }

    /// Nodes disrupted or being deleted: work in progress.
    pub fn churning(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| n.deleting || n.disrupted)
            .count()
    }

    /// $/h of the live Nodes at the KWOK catalogue's prices.
    pub fn cost(&self) -> f64 {
        let cat = kwok::catalog();
        self.nodes
            .values()
            .filter(|n| !n.deleting)
            .filter_map(|n| {
                let it = cat.get(&n.instance_type)?;
                let ct = CapacityType::parse(&n.capacity_type)?;
                it.offerings
                    .iter()
                    .find(|o| o.capacity_type == ct)
                    .map(|o| o.price)
            })
            .sum()
    }

    /// Evictions (Eviction API) and other disruptions (taint manager, pod GC) since `from`.
    pub fn disruptions_since(&self, from: Instant) -> (usize, usize) {
        let mut evicted = 0;
        let mut other = 0;
        for (reason, at) in self.disruptions.values() {
            if *at >= from {
                if reason == "EvictionByEvictionAPI" {
                    evicted += 1;
                } else {
                    other += 1;
                }
            }
        }
        (evicted, other)
    }

    pub fn last_node_change(&self) -> Option<Instant> {
        self.node_changes.last().copied()
    }
}

fn unschedulable(p: &Pod) -> bool {
    p.status
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

fn pod_state(p: &Pod) -> (String, bool, Option<String>) {
    let app = p.labels().get("app").cloned().unwrap_or_default();
    let st = p.status.as_ref();
    let running = st.and_then(|s| s.phase.as_deref()) == Some("Running");
    let conds = st.and_then(|s| s.conditions.as_ref());
    let ready = conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let disruption = conds.and_then(|cs| {
        cs.iter()
            .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            .map(|c| c.reason.clone().unwrap_or_default())
    });
    let healthy = running && ready && p.metadata.deletion_timestamp.is_none();
    (app, healthy, disruption)
}

fn node_info(n: &Node) -> NodeInfo {
    let l = n.labels();
    NodeInfo {
        instance_type: l
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_default(),
        capacity_type: l
            .get("karpenter.sh/capacity-type")
            .cloned()
            .unwrap_or_default(),
        deleting: n.metadata.deletion_timestamp.is_some(),
        disrupted: n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/disrupted")),
    }
}

/// The watches on the workload's pods and on Nodes.
#[derive(Clone)]
pub struct Observer {
    pub state: Arc<Mutex<ObsState>>,
}

impl Observer {
    pub fn start(client: &Client) -> Observer {
        let state = Arc::new(Mutex::new(ObsState::default()));
        let s = state.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        tokio::spawn(async move {
            let mut w = std::pin::pin!(
                watcher(pods, watcher::Config::default().any_semantic()).default_backoff()
            );
            while let Some(ev) = w.next().await {
                let Ok(ev) = ev else {
                    continue;
                };
                let mut st = s.lock().unwrap();
                let upsert = |st: &mut ObsState, p: &Pod| {
                    let uid = p.uid().unwrap_or_default();
                    let (app, healthy, disruption) = pod_state(p);
                    if let Some(r) = disruption {
                        st.disruptions
                            .entry(uid.clone())
                            .or_insert((r, Instant::now()));
                    }
                    if unschedulable(p) {
                        st.unschedulable.insert(uid.clone());
                    } else {
                        st.unschedulable.remove(&uid);
                    }
                    st.pods.insert(uid, (app, healthy));
                };
                match ev {
                    watcher::Event::Init => {}
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => upsert(&mut st, &p),
                    watcher::Event::InitDone => st.pods_synced = true,
                    watcher::Event::Delete(p) => {
                        let uid = p.uid().unwrap_or_default();
                        st.pods.remove(&uid);
                        st.unschedulable.remove(&uid);
                    }
                }
            }
        });
        let s = state.clone();
        let nodes: Api<Node> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut w = std::pin::pin!(
                watcher(nodes, watcher::Config::default().any_semantic()).default_backoff()
            );
            while let Some(ev) = w.next().await {
                let Ok(ev) = ev else {
                    continue;
                };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => {}
                    watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                        if st.nodes.insert(n.name_any(), node_info(&n)).is_none() {
                            st.node_changes.push(Instant::now());
                        }
                    }
                    watcher::Event::InitDone => st.nodes_synced = true,
                    watcher::Event::Delete(n) => {
                        if st.nodes.remove(&n.name_any()).is_some() {
                            st.node_changes.push(Instant::now());
                        }
                    }
                }
            }
        });
        Observer { state }
    }

    pub fn with<T>(&self, f: impl FnOnce(&ObsState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    pub fn node_names(&self) -> HashSet<String> {
        self.with(|s| s.nodes.keys().cloned().collect())
    }

    /// Waits (polling the watched state every 200 ms: an end state, not a transient one)
    /// until `done`, or `limit`; the time it took, or None on timeout.
    pub async fn wait(
        &self,
        limit: Duration,
        mut done: impl FnMut(&ObsState) -> bool,
    ) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if self.with(&mut done) {
                return Some(start.elapsed());
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until no Node appeared or went and none is disrupted or deleting for `quiet`
    /// (or `limit` passed); returns when the last change was, or None on timeout.
    pub async fn wait_settled(&self, quiet: Duration, limit: Duration) -> Option<Instant> {
        let start = Instant::now();
        loop {
            let (last, churning) = self.with(|s| (s.last_node_change(), s.churning()));
            let since = last.map(|l| l.elapsed()).unwrap_or(start.elapsed());
            if churning == 0 && since >= quiet && start.elapsed() >= quiet {
                return Some(last.unwrap_or(start).max(start));
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The catalogue both sides choose from.

/// Compares joiner's KWOK catalogue with the instance types Karpenter's KWOK provider
/// embeds: the same names, architectures, operating systems, vCPUs, memory, pods, zones,
/// capacity types and prices (to 1e-12, relative). Returns the number of types compared, or
/// what differs.
pub fn check_catalog(karpenter_json: &Path) -> Result<usize, String> {
    use joiner_agent::resources::{parse_bytes, parse_cpu_milli};
    let text = std::fs::read_to_string(karpenter_json)
        .map_err(|e| format!("{}: {e}", karpenter_json.display()))?;
    let theirs: Vec<Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let ours = kwok::catalog();
    if theirs.len() != ours.len() {
        return Err(format!(
            "Karpenter has {} types, joiner {}",
            theirs.len(),
            ours.len()
        ));
    }
    let mut diffs = Vec::new();
    for t in &theirs {
        let name = t["name"].as_str().unwrap_or("");
        let Some(it) = ours.get(name) else {
            diffs.push(format!("{name}: not in joiner's catalogue"));
            continue;
        };
        let r = &t["resources"];
        let q = |k: &str| r[k].as_str().unwrap_or("0").to_string();
        let checks = [
            (
                "architecture",
                t["architecture"].as_str().unwrap_or("").to_string(),
                it.labels["kubernetes.io/arch"].clone(),
            ),
            (
                "os",
                t["operatingSystems"][0].as_str().unwrap_or("").to_string(),
                it.labels["kubernetes.io/os"].clone(),
            ),
            (
                "cpu",
                parse_cpu_milli(&q("cpu")).unwrap_or(-1).to_string(),
                it.capacity.cpu_milli.to_string(),
            ),
            (
                "memory",
                parse_bytes(&q("memory")).unwrap_or(-1).to_string(),
                it.capacity.memory_bytes.to_string(),
            ),
            ("pods", q("pods"), it.capacity.pods.to_string()),
            (
                "ephemeral-storage",
                parse_bytes(&q("ephemeral-storage"))
                    .unwrap_or(-1)
                    .to_string(),
                it.capacity.ephemeral_storage_bytes.to_string(),
            ),
        ];
        for (what, a, b) in checks {
            if a != b {
                diffs.push(format!("{name}: {what} {a} (Karpenter) vs {b} (joiner)"));
            }
        }
        let mut theirs_off: BTreeMap<(String, String), f64> = BTreeMap::new();
        for o in t["offerings"].as_array().into_iter().flatten() {
            let mut ct = String::new();
            let mut zone = String::new();
            for req in o["Requirements"].as_array().into_iter().flatten() {
                let v = req["values"][0].as_str().unwrap_or("").to_string();
                match req["key"].as_str() {
                    Some("karpenter.sh/capacity-type") => ct = v,
                    Some("topology.kubernetes.io/zone") => zone = v,
                    _ => {}
                }
            }
            theirs_off.insert((ct, zone), o["Price"].as_f64().unwrap_or(f64::NAN));
        }
        let ours_off: BTreeMap<(String, String), f64> = it
            .offerings
            .iter()
            .map(|o| {
                (
                    (o.capacity_type.as_str().to_string(), o.zone.clone()),
                    o.price,
                )
            })
            .collect();
        // Karpenter sums a type's price over a Go map of its resources, whose order is
        // random, so its prices differ from any fixed order in the last bit or two.
        let same = theirs_off.len() == ours_off.len()
            && theirs_off.iter().zip(&ours_off).all(|((ka, a), (kb, b))| {
                ka == kb && (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
            });
        if !same {
            diffs.push(format!(
                "{name}: offerings {theirs_off:?} (Karpenter) vs {ours_off:?} (joiner)"
            ));
        }
    }
    if diffs.is_empty() {
        Ok(theirs.len())
    } else {
        Err(diffs.join("\n"))
    }
}

/// CPU seconds each named process has used so far (its /proc/<pid>/stat).
pub fn cpu_seconds(pids: &[(String, u32)]) -> BTreeMap<String, f64> {
    pids.iter()
        .filter_map(|(n, p)| Some((n.clone(), cpu_ticks(*p)? as f64 / USER_HZ)))
        .collect()
}

/// The control plane's components and their pids.
pub fn component_pids(cp: &ControlPlane) -> Vec<(String, u32)> {
    [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ]
    .iter()
    .filter_map(|c| Some((c.to_string(), cp.pid(c)?)))
    .collect()
}

/// Lines of the agent's JSON log whose message is `msg`, as JSON.
pub fn log_lines(log: &Path, msg: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(msg))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"].as_str() == Some(msg) || v["message"].as_str() == Some(msg)
        })
        .collect()
}

/// `apiserver_request_total` LIST requests per resource, from the apiserver's /metrics.
pub fn list_counts(cp: &ControlPlane) -> BTreeMap<String, u64> {
    let text = cp
        .kubectl(&["get", "--raw", "/metrics"])
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for l in text.lines() {
        if !l.starts_with("apiserver_request_total{") || !l.contains("verb=\"LIST\"") {
            continue;
        }
        let Some(r) = l
            .split("resource=\"")
            .nth(1)
            .and_then(|x| x.split('"').next())
        else {
            continue;
        };
        let n: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(r.to_string()).or_insert(0) += n as u64;
    }
    out
}
