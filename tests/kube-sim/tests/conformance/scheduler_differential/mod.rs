//! kube-sim's scheduler against the real kube-scheduler: the same scenarios, written as data
//! ([`scenarios`]), run on a kube-sim and on a real control plane of the test's own, and every
//! pod's outcome compared. A scenario creates its objects (namespaces, storage classes,
//! volumes, claims, CSINodes), then its Nodes (annotated for KWOK, which keeps them Ready on
//! the real control plane; kube-sim takes the Ready condition from the status written here),
//! waits for them to be Ready and untainted, then creates its pods one at a time, each
//! awaited through a watch until it is bound, its WaitForFirstConsumer claim names the node
//! chosen for it, or it carries `PodScheduled=False/Unschedulable`. Then everything it made
//! is deleted and awaited gone, so that the next scenario's verdicts count its nodes alone.
//!
//! Outcomes differ when a pod lands on another node (outside the scenario's declared set of
//! equally scored nodes, where kube-scheduler picks at random), or when the reasons of an
//! `Unschedulable` message (before `preemption:`) differ.

mod scenarios;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use kube_sim::{Options, TargetCluster};
use serde_json::{json, Value};

pub use scenarios::Scenario;

/// How long one object may take to reach the state a scenario waits for.
const WAIT: Duration = Duration::from_secs(60);
/// Where every scenario's pods and claims live.
const NS: &str = "default";

/// Where a pod went: a node's name, or its `Unschedulable` message.
#[derive(Debug, Clone)]
enum Outcome {
    Placed(String),
    Unschedulable(String),
}

impl Outcome {
    fn show(&self) -> String {
        match self {
            Outcome::Placed(n) => format!("-> {n}"),
            Outcome::Unschedulable(m) => format!("unschedulable: {m:?}"),
        }
    }
}

/// What is compared of a verdict: the reasons, before preemption's answer.
fn reasons(message: &str) -> &str {
    message.split("preemption:").next().unwrap_or("")
}

/// The API resource of a manifest's kind (the kinds scenarios create).
fn resource(kind: &str) -> (ApiResource, bool) {
    let (group, plural, namespaced) = match kind {
        "Namespace" => ("", "namespaces", false),
        "ServiceAccount" => ("", "serviceaccounts", true),
        "Node" => ("", "nodes", false),
        "Pod" => ("", "pods", true),
        "PersistentVolume" => ("", "persistentvolumes", false),
        "PersistentVolumeClaim" => ("", "persistentvolumeclaims", true),
        "StorageClass" => ("storage.k8s.io", "storageclasses", false),
        "CSINode" => ("storage.k8s.io", "csinodes", false),
        "VolumeAttachment" => ("storage.k8s.io", "volumeattachments", false),
        other => panic!("scenarios create no {other}"),
    };
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    (ApiResource::from_gvk_with_plural(&gvk, plural), namespaced)
}

fn api_for(client: &Client, obj: &Value) -> Api<DynamicObject> {
    let (ar, namespaced) = resource(obj["kind"].as_str().unwrap_or(""));
    if namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NS);
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

async fn create(client: &Client, target: &str, obj: &Value) {
    let api = api_for(client, obj);
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).expect("a manifest");
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(_) => {}
        // The controller-manager may have made a namespace's default ServiceAccount first.
        Err(kube::Error::Api(e)) if e.code == 409 && obj["kind"] == "ServiceAccount" => {}
        Err(e) => panic!(
            "[{target}] create {} {}: {e}",
            obj["kind"], obj["metadata"]["name"]
        ),
    }
}

/// Deletes the object and waits for it to be gone.
async fn delete(client: &Client, target: &str, obj: &Value) {
    let api = api_for(client, obj);
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let uid = match api.get_opt(name).await {
        Ok(Some(o)) => o.metadata.uid.unwrap_or_default(),
        Ok(None) => return,
        Err(e) => panic!("[{target}] get {} {name}: {e}", obj["kind"]),
    };
    if obj["metadata"]["finalizers"].is_array() {
        // Finalizers the scenario set stand for a controller that is not there.
        let clear = json!({"metadata": {"finalizers": []}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&clear))
            .await
            .unwrap_or_else(|e| {
                panic!("[{target}] clear {} {name}'s finalizers: {e}", obj["kind"])
            });
    }
    match api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => panic!("[{target}] delete {} {name}: {e}", obj["kind"]),
    }
    if obj["kind"] == "Namespace" {
        return;
    }
    tokio::time::timeout(
        WAIT,
        await_condition(api, name, conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "[{target}] {} {name} still there after {WAIT:?}",
            obj["kind"]
        )
    })
    .unwrap_or_else(|e| panic!("[{target}] watch {} {name}: {e}", obj["kind"]));
}

/// Creates a Node, writes its status as a kubelet registering would, and waits until it is
/// Ready, reports the allocatable written, and no longer carries the `not-ready` taint new
/// Nodes get on the real API server.
async fn add_node(client: &Client, target: &str, node: &Value) {
    create(client, target, node).await;
    let name = node["metadata"]["name"].as_str().unwrap_or("");
    let api: Api<Node> = Api::all(client.clone());
    let status = json!({"status": node["status"]});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("[{target}] patch Node {name} status: {e}"));
    let want_cpu = node["status"]["allocatable"]["cpu"].clone();
    let ready = move |n: Option<&Node>| {
        let Some(n) = n.and_then(|n| serde_json::to_value(n).ok()) else {
            return false;
        };
        let ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        let tainted = n["spec"]["taints"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["key"] == "node.kubernetes.io/not-ready")
        });
        ready && !tainted && n["status"]["allocatable"]["cpu"] == want_cpu
    };
    tokio::time::timeout(WAIT, await_condition(api, name, ready))
        .await
        .unwrap_or_else(|_| panic!("[{target}] Node {name} not Ready after {WAIT:?}"))
        .unwrap_or_else(|e| panic!("[{target}] watch Node {name}: {e}"));
}

/// Waits for a claim created with a `volumeName` to be bound to it.
async fn claim_bound(client: &Client, target: &str, name: &str) {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let bound = |c: Option<&PersistentVolumeClaim>| {
        c.and_then(|c| c.status.as_ref()?.phase.as_deref()) == Some("Bound")
    };
    tokio::time::timeout(WAIT, await_condition(api, name, bound))
        .await
        .unwrap_or_else(|_| panic!("[{target}] claim {name} not Bound after {WAIT:?}"))
        .unwrap_or_else(|e| panic!("[{target}] watch claim {name}: {e}"));
}

/// A pod's outcome once it has one: its node, or its verdict's reasons. A verdict counted
/// over another number of nodes than the scenario's `nodes` was reached before the
/// scheduler saw them all; its retry, on the Node's event, decides.
fn decided(pod: &Pod, nodes: usize) -> Option<Outcome> {
    if let Some(n) = pod
        .spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
    {
        return Some(Outcome::Placed(n));
    }
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    if c.status != "False" || c.reason.as_deref() != Some("Unschedulable") {
        return None;
    }
    let message = c.message.as_deref().unwrap_or_default();
    if nodes > 0 && !message.starts_with(&format!("0/{nodes} nodes are available")) {
        return None;
    }
    Some(Outcome::Unschedulable(
        c.message.clone().unwrap_or_default(),
    ))
}

/// Creates the pod and waits for its outcome; a pod whose WaitForFirstConsumer claim
/// `claim` is annotated with the node chosen for it is placed there (kube-scheduler binds
/// it only once a provisioner has bound the claim, and the real control plane has none).
async fn schedule(
    client: &Client,
    target: &str,
    pod: &Value,
    claim: Option<&str>,
    nodes: usize,
) -> Outcome {
    create(client, target, pod).await;
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or(NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let by_pod = async {
        let p = await_condition(pods, &name, |p: Option<&Pod>| {
            p.and_then(|p| decided(p, nodes)).is_some()
        })
        .await
        .unwrap_or_else(|e| panic!("[{target}] watch pod {name}: {e}"));
        p.as_ref()
            .and_then(|p| decided(p, nodes))
            .expect("a decided pod")
    };
    let by_claim = async {
        let Some(claim) = claim else {
            return std::future::pending().await;
        };
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
        let selected = |c: &PersistentVolumeClaim| {
            c.metadata
                .annotations
                .as_ref()?
                .get("volume.kubernetes.io/selected-node")
                .cloned()
        };
        let c = await_condition(claims, claim, |c: Option<&PersistentVolumeClaim>| {
            c.and_then(selected).is_some()
        })
        .await
        .unwrap_or_else(|e| panic!("[{target}] watch claim {claim}: {e}"));
        Outcome::Placed(c.as_ref().and_then(selected).expect("a selected node"))
    };
    let decided = async {
        tokio::select! {
            o = by_pod => o,
            o = by_claim => o,
        }
    };
    tokio::time::timeout(WAIT, decided)
        .await
        .unwrap_or_else(|_| panic!("[{target}] pod {name} undecided after {WAIT:?}"))
}

/// Runs one scenario on one target: its outcomes, in pod order. Cleans up after itself.
async fn run(t: &TargetCluster, s: &Scenario) -> Vec<Outcome> {
    let target = t.name();
    let client = t.client().await.expect("a client");
    for o in &s.objects {
        create(&client, target, o).await;
    }
    for o in &s.objects {
        if o["kind"] == "PersistentVolumeClaim" && o["spec"]["volumeName"].is_string() {
            claim_bound(
                &client,
                target,
                o["metadata"]["name"].as_str().unwrap_or(""),
            )
            .await;
        }
    }
    for n in &s.nodes {
        add_node(&client, target, n).await;
    }
    // The scheduler's informers see what this test's watch saw: a moment for them to (the
    // CSINodes and claims, whose arrival no verdict shows; a verdict over too few nodes is
    // not taken, see `decided`).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut out = Vec::new();
    for p in &s.pods {
        let claim = scenarios::waiting_claim(p, &s.objects);
        out.push(schedule(&client, target, p, claim.as_deref(), s.nodes.len()).await);
    }
    for p in &s.pods {
        delete(&client, target, p).await;
    }
    for o in s.objects.iter().rev() {
        delete(&client, target, o).await;
    }
    for n in &s.nodes {
        delete(&client, target, n).await;
    }
    out
}

/// Whether two outcomes agree: the same verdict, or nodes the scenario scores alike.
fn agree(s: &Scenario, sim: &Outcome, real: &Outcome) -> bool {
    match (sim, real) {
        (Outcome::Placed(a), Outcome::Placed(b)) => {
            a == b || s.ties.iter().any(|set| set.contains(a) && set.contains(b))
        }
        (Outcome::Unschedulable(a), Outcome::Unschedulable(b)) => reasons(a) == reasons(b),
        _ => false,
    }
}

/// What runs only on the real control plane (kube-apiserver, kube-scheduler, KWOK): `#[ignore]`d
/// in the main pass, selected by this module's path after `scripts/test` has built it.
mod real_control_plane {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    async fn kube_sims_scheduler_decides_as_kube_scheduler_does() {
        let started = Instant::now();
        let sim = TargetCluster::sim_with(Options::default()).expect("a kube-sim");
        let real = TargetCluster::own_control_plane()
            .await
            .expect("the real control plane");
        let all = scenarios::all();
        let mut rows = Vec::new();
        let mut differ = 0;
        for s in &all {
            let (a, b) = tokio::join!(run(&sim, s), run(&real, s));
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let same = agree(s, x, y);
                differ += usize::from(!same);
                let pod = s.pods[i]["metadata"]["name"].as_str().unwrap_or("");
                rows.push(format!(
                    "{} {:<28} {:<30} kube-sim {}\n{:>61} kube-scheduler {}",
                    if same { "  " } else { "!!" },
                    s.name,
                    pod,
                    x.show(),
                    "",
                    y.show()
                ));
            }
        }
        eprintln!(
            "{} scenarios, {} pods, {differ} differ, in {:.0}s:\n{}",
            all.len(),
            rows.len(),
            started.elapsed().as_secs_f64(),
            rows.join("\n")
        );
        assert!(all.len() >= 30, "at least 30 scenarios");
        assert_eq!(differ, 0, "outcomes differ (marked !! above)");
    }
}
