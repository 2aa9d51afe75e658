//! Fargate, as EKS presents it to Kubernetes: the cluster's Fargate profiles (read from the
//! AWS emulator's EKS API) decide at admission which new pods run on Fargate; such a pod gets
//! `schedulerName: fargate-scheduler` and then a Node of its own, which goes with the pod.
//!
//! This is what lets the agent and CoreDNS run with no EC2 node at all, as in the groupless
//! clusters joiner builds, and lets tests check that the agent leaves Fargate pods alone.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{json, Value};

use crate::controllers::set_condition;
use crate::resources::ResourceType;
use crate::store::{name_of, namespace_of, now_rfc3339, DeleteOptions, Store, Write};

pub const FARGATE_SCHEDULER: &str = "fargate-scheduler";
pub const COMPUTE_TYPE_LABEL: &str = "eks.amazonaws.com/compute-type";
/// The annotation (and the optional pod label choosing among profiles) EKS uses.
pub const PROFILE_KEY: &str = "eks.amazonaws.com/fargate-profile";
/// Which pod a Fargate node was made for (kube-sim's own bookkeeping).
pub const POD_UID_ANNOTATION: &str = "kube-sim.joiner.dev/fargate-pod-uid";

/// One `selectors` entry of a Fargate profile: a namespace and labels, `*` and `?` allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub selectors: Vec<Selector>,
    /// When the emulator created the profile (Unix milliseconds, as EKS's `createdAt`
    /// carries them), if it says.
    pub created_ms: Option<i64>,
}

/// The cluster's active Fargate profiles, as last read from the emulator.
#[derive(Default)]
pub struct Profiles {
    inner: RwLock<Vec<Profile>>,
    loaded: std::sync::atomic::AtomicBool,
    /// When each pod that no profile took was admitted (Unix ms, by "namespace/name"): a
    /// pod's `creationTimestamp` has whole seconds, too coarse to tell a pod created just
    /// before a profile from one created just after it in the same second.
    admitted_ms: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

impl Profiles {
    pub fn set(&self, mut profiles: Vec<Profile>) {
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = profiles;
        self.loaded.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn names(&self) -> Vec<String> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Whether the emulator has been read at least once.
    pub fn loaded(&self) -> bool {
        self.loaded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The profile a new pod lands on: the one its `eks.amazonaws.com/fargate-profile` label
    /// names if that matches, else the first matching profile by name.
    pub fn matching(&self, namespace: &str, labels: &Value) -> Option<String> {
        let profiles = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let matches = |p: &Profile| {
            p.selectors
                .iter()
                .any(|s| selector_matches(s, namespace, labels))
        };
        if let Some(wanted) = labels[PROFILE_KEY].as_str() {
            if let Some(p) = profiles.iter().find(|p| p.name == wanted && matches(p)) {
                return Some(p.name.clone());
            }
        }
        profiles.iter().find(|p| matches(p)).map(|p| p.name.clone())
    }

    /// The profile a pod admitted at `admitted_ms` would have got at admission had kube-sim
    /// known every profile then: one that matches and is older than the pod.
    pub fn matching_since(
        &self,
        namespace: &str,
        labels: &Value,
        admitted_ms: i64,
    ) -> Option<String> {
        let name = self.matching(namespace, labels)?;
        let profiles = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let p = profiles.iter().find(|p| p.name == name)?;
        (p.created_ms? <= admitted_ms).then_some(name)
    }

    fn record_admission(&self, pod: &Value) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        self.admitted_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pod_key(pod), now);
    }

    /// When the pod was admitted: kube-sim's own instant if it admitted it, else the start
    /// of its `creationTimestamp` second.
    fn admitted_at(&self, pod: &Value) -> Option<i64> {
        if let Some(ms) = self
            .admitted_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pod_key(pod))
        {
            return Some(*ms);
        }
        pod["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond())
    }

    /// Forgets the admissions of pods no longer pending.
    fn forget_except(&self, pending: &HashSet<String>) {
        self.admitted_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| pending.contains(k));
    }
}

fn pod_key(pod: &Value) -> String {
    format!("{}/{}", namespace_of(pod), name_of(pod))
}

/// Glob matching with `*` (any run) and `?` (one character), as Fargate selectors allow.
pub fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

pub fn selector_matches(sel: &Selector, namespace: &str, labels: &Value) -> bool {
    glob(&sel.namespace, namespace)
        && sel
            .labels
            .iter()
            .all(|(k, v)| labels[k].as_str().is_some_and(|actual| glob(v, actual)))
}

/// A pod annotated `eks.amazonaws.com/compute-type: ec2` (EKS's self-managed CoreDNS is)
/// asks to stay off Fargate whatever the profiles select.
fn wants_ec2(pod: &Value) -> bool {
    pod["metadata"]["annotations"][COMPUTE_TYPE_LABEL] == "ec2"
}

/// The admission step EKS's Fargate webhook performs on a new pod.
pub fn admit(profiles: &Profiles, rt: &ResourceType, pod: &mut Value) {
    if rt.key() != "/pods" {
        return;
    }
    let scheduler = pod["spec"]["schedulerName"]
        .as_str()
        .unwrap_or("default-scheduler");
    let bound = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    if scheduler != "default-scheduler" || bound || wants_ec2(pod) {
        return;
    }
    let ns = namespace_of(pod).to_string();
    if let Some(profile) = profiles.matching(&ns, &pod["metadata"]["labels"]) {
        pod["spec"]["schedulerName"] = json!(FARGATE_SCHEDULER);
        if !pod["metadata"]["annotations"].is_object() {
            pod["metadata"]["annotations"] = json!({});
        }
        pod["metadata"]["annotations"][PROFILE_KEY] = json!(profile);
    } else {
        profiles.record_admission(pod);
    }
}

fn is_fargate_node(n: &Value) -> bool {
    n["metadata"]["labels"][COMPUTE_TYPE_LABEL] == "fargate"
        && n["metadata"]["annotations"][POD_UID_ANNOTATION].is_string()
}

/// The smallest Fargate size that holds the pod's requests (vCPU, GiB): Fargate rounds a
/// pod up to one of its fixed configurations.
fn fargate_size(pod: &Value) -> (f64, f64) {
    let req = crate::controllers::pod_requests(pod);
    let cpu = req.get("cpu").copied().unwrap_or(0.0);
    let mem_gib = req.get("memory").copied().unwrap_or(0.0) / (1u64 << 30) as f64 + 0.25;
    let vcpu = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
        .into_iter()
        .find(|v| *v >= cpu)
        .unwrap_or(16.0);
    let min_mem = match vcpu {
        v if v <= 0.25 => 0.5,
        v if v <= 0.5 => 1.0,
        v => v * 2.0,
    };
    (vcpu, mem_gib.max(min_mem).ceil().max(min_mem))
}

/// A Node for one Fargate pod, shaped like the ones EKS registers.
fn node_for(pod: &Value, region: &str, profile: &str) -> Value {
    use rand::Rng;
    let mut r = rand::rng();
    let (a, b) = (r.random_range(0..=255u8), r.random_range(1..=254u8));
    let ip = format!("10.0.{a}.{b}");
    let host = if region == "us-east-1" {
        format!("fargate-ip-10-0-{a}-{b}.ec2.internal")
    } else {
        format!("fargate-ip-10-0-{a}-{b}.{region}.compute.internal")
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let zone_letter = ["a", "b", "c"][uid.bytes().map(|b| b as usize).sum::<usize>() % 3];
    let zone = format!("{region}{zone_letter}");
    let (vcpu, gib) = fargate_size(pod);
    let cpu = format!("{}m", (vcpu * 1000.0) as i64);
    let mem = format!("{}Mi", (gib * 1024.0) as i64);
    let now = now_rfc3339();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": host,
            "labels": {
                COMPUTE_TYPE_LABEL: "fargate",
                "kubernetes.io/hostname": host,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/region": region,
                "topology.kubernetes.io/zone": zone,
                "failure-domain.beta.kubernetes.io/region": region,
                "failure-domain.beta.kubernetes.io/zone": zone,
            },
            "annotations": {
                POD_UID_ANNOTATION: uid,
                PROFILE_KEY: profile,
            },
        },
        "spec": {
            "providerID": format!("aws:///{zone}/{}/{host}", &uuid::Uuid::new_v4().simple().to_string()[..20]),
            "taints": [{"key": COMPUTE_TYPE_LABEL, "value": "fargate", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": cpu, "memory": mem, "pods": "1", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": cpu, "memory": mem, "pods": "1", "ephemeral-storage": "20Gi"},
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": host}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.33.0-eks-fargate", "operatingSystem": "linux",
                "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.0"},
        },
    })
}

/// Admits again the unbound pods created after a profile that matches them but before
/// kube-sim read that profile. EKS's webhook knows a profile from the moment it is ACTIVE,
/// and the provider waits for ACTIVE before creating what runs there (the agent's
/// Deployment); kube-sim learns of profiles up to one poll late, so without this the agent's
/// pods, created right after its profile, would stay on the default scheduler with no node
/// to go to. A pod created before the profile stays where it is, as on EKS: the
/// comparison uses the instant kube-sim admitted the pod, to the millisecond.
fn readmit_late(store: &Store, profiles: &Profiles, pods_t: &ResourceType, pods: &[Arc<Value>]) {
    let mut pending = HashSet::new();
    for pod in pods {
        let unadmitted = pod["spec"]["schedulerName"]
            .as_str()
            .is_none_or(|s| s == "default-scheduler")
            && pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
            && pod["metadata"].get("deletionTimestamp").is_none()
            && !wants_ec2(pod);
        if !unadmitted {
            continue;
        }
        pending.insert(pod_key(pod));
        let Some(admitted) = profiles.admitted_at(pod) else {
            continue;
        };
        let Some(profile) =
            profiles.matching_since(namespace_of(pod), &pod["metadata"]["labels"], admitted)
        else {
            continue;
        };
        let uid = pod["metadata"]["uid"].clone();
        let _ = store.modify(
            pods_t,
            Some(namespace_of(pod)),
            name_of(pod),
            Write::Internal,
            |cur| {
                let mut p = cur.clone();
                if cur["metadata"]["uid"] != uid
                    || !cur["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
                {
                    return Ok(p);
                }
                p["spec"]["schedulerName"] = json!(FARGATE_SCHEDULER);
                if !p["metadata"]["annotations"].is_object() {
                    p["metadata"]["annotations"] = json!({});
                }
                p["metadata"]["annotations"][PROFILE_KEY] = json!(profile);
                Ok(p)
            },
        );
        tracing::info!(
            pod = name_of(pod),
            profile = %profile,
            "fargate: admitted a pod created after its profile but before kube-sim read it"
        );
    }
    profiles.forget_except(&pending);
}

/// Gives each pending Fargate pod a Node of its own and binds it there; removes the Nodes
/// whose pod is gone.
pub fn reconcile(store: &Store, region: &str, profiles: &Profiles) {
    let (Some(pods_t), Some(nodes_t)) = (
        store.find_type("", "v1", "pods"),
        store.find_type("", "v1", "nodes"),
    ) else {
        return;
    };
    let (pods, _) = store.list(&pods_t, None);
    readmit_late(store, profiles, &pods_t, &pods);
    let (pods, _) = store.list(&pods_t, None);
    let (nodes, _) = store.list(&nodes_t, None);
    let live: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str())
        .collect();
    for n in nodes.iter().filter(|n| is_fargate_node(n)) {
        let uid = n["metadata"]["annotations"][POD_UID_ANNOTATION]
            .as_str()
            .unwrap_or("");
        if !live.contains(uid) {
            let _ = store.delete(&nodes_t, None, name_of(n), &DeleteOptions::default());
        }
    }
    for pod in &pods {
        let pending = pod["spec"]["schedulerName"] == FARGATE_SCHEDULER
            && pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
            && pod["metadata"].get("deletionTimestamp").is_none();
        if !pending {
            continue;
        }
        let profile = pod["metadata"]["annotations"][PROFILE_KEY]
            .as_str()
            .unwrap_or("");
        let node = match store.create(&nodes_t, None, node_for(pod, region, profile)) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(pod = name_of(pod), "fargate: create node: {}", e.message);
                continue;
            }
        };
        let node_name = name_of(&node).to_string();
        let bound = store.modify(
            &pods_t,
            Some(namespace_of(pod)),
            name_of(pod),
            Write::Internal,
            |cur| {
                let mut p = cur.clone();
                if cur["metadata"]["uid"] != pod["metadata"]["uid"]
                    || !cur["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
                {
                    return Ok(p);
                }
                p["spec"]["nodeName"] = json!(node_name);
                set_condition(&mut p, "PodScheduled", "True", "", "");
                Ok(p)
            },
        );
        if bound.is_err() {
            let _ = store.delete(&nodes_t, None, &node_name, &DeleteOptions::default());
        }
    }
}

/// An EKS client for the emulator (dummy credentials unless the environment has some).
pub async fn eks_client(endpoint: &str, region: &str) -> aws_sdk_eks::Client {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let env = |k: &str, d: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| d.to_string())
    };
    let creds = aws_credential_types::Credentials::new(
        env("AWS_ACCESS_KEY_ID", "testing"),
        env("AWS_SECRET_ACCESS_KEY", "testing"),
        std::env::var("AWS_SESSION_TOKEN").ok(),
        None,
        "kube-sim",
    );
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(region.to_string()))
        .credentials_provider(creds)
        .load()
        .await;
    aws_sdk_eks::Client::new(&conf)
}

/// Whether the emulator knows the cluster (the sandbox starts kube-sim before Terraform
/// creates it).
pub async fn cluster_exists(client: &aws_sdk_eks::Client, cluster: &str) -> anyhow::Result<bool> {
    use aws_sdk_eks::error::ProvideErrorMetadata;
    match client.describe_cluster().name(cluster).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(false),
        Err(e) => anyhow::bail!(
            "eks:DescribeCluster {cluster}: {}: {}",
            e.code().unwrap_or("error"),
            e.message().unwrap_or(&format!("{e}"))
        ),
    }
}

/// Reads the cluster's ACTIVE Fargate profiles. A cluster the emulator does not know has none.
pub async fn read_profiles(
    client: &aws_sdk_eks::Client,
    cluster: &str,
) -> anyhow::Result<Vec<Profile>> {
    use aws_sdk_eks::error::ProvideErrorMetadata;
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let out = match client
            .list_fargate_profiles()
            .cluster_name(cluster)
            .set_next_token(token.take())
            .send()
            .await
        {
            Ok(o) => o,
            // moto answers an unknown cluster with a bare 404 the SDK cannot classify.
            Err(e)
                if e.code() == Some("ResourceNotFoundException")
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
            {
                return Ok(vec![])
            }
            // moto 5 answers an unknown cluster with an HTML 500 here, where EKS says
            // ResourceNotFoundException: ask DescribeCluster, which both answer properly.
            Err(_) if !cluster_exists(client, cluster).await? => return Ok(vec![]),
            Err(e) => anyhow::bail!(
                "eks:ListFargateProfiles {cluster}: {}: {}",
                e.code().unwrap_or("error"),
                e.message().unwrap_or(&format!("{e}"))
            ),
        };
        names.extend(out.fargate_profile_names().iter().cloned());
        match out.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => break,
        }
    }
    let mut profiles = Vec::new();
    for name in names {
        let out = match client
            .describe_fargate_profile()
            .cluster_name(cluster)
            .fargate_profile_name(&name)
            .send()
            .await
        {
            Ok(o) => o,
            Err(e)
                if e.code() == Some("ResourceNotFoundException")
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
            {
                continue
            }
            Err(e) => anyhow::bail!(
                "eks:DescribeFargateProfile {name}: {}: {}",
                e.code().unwrap_or("error"),
                e.message().unwrap_or(&format!("{e}"))
            ),
        };
        let Some(p) = out.fargate_profile() else {
            continue;
        };
        let active = p
            .status()
            .is_none_or(|s| *s == aws_sdk_eks::types::FargateProfileStatus::Active);
        if !active {
            continue;
        }
        let selectors = p
            .selectors()
            .iter()
            .map(|s| Selector {
                namespace: s.namespace().unwrap_or("").to_string(),
                labels: s
                    .labels()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default(),
            })
            .collect();
        profiles.push(Profile {
            name: p.fargate_profile_name().unwrap_or(&name).to_string(),
            selectors,
            created_ms: p
                .created_at()
                .map(|t| t.secs() * 1000 + i64::from(t.subsec_nanos() / 1_000_000)),
        });
    }
    Ok(profiles)
}

#[derive(Debug, Clone)]
pub struct FargateOptions {
    pub endpoint: String,
    pub cluster: String,
    pub region: String,
    pub poll: Duration,
}

/// Re-reads the profiles every `poll`, and runs the Fargate scheduler beside the others.
pub fn spawn(
    store: Arc<Store>,
    profiles: Arc<Profiles>,
    opts: FargateOptions,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut stop = shutdown.clone();
    let poller_opts = opts.clone();
    let poller_profiles = profiles.clone();
    tokio::spawn(async move {
        let client = eks_client(&poller_opts.endpoint, &poller_opts.region).await;
        let mut interval = tokio::time::interval(poller_opts.poll);
        let mut last_error = String::new();
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = interval.tick() => {}
            }
            match read_profiles(&client, &poller_opts.cluster).await {
                Ok(ps) => {
                    last_error.clear();
                    poller_profiles.set(ps);
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if msg != last_error {
                        tracing::warn!("fargate profiles: {msg}");
                        last_error = msg;
                    }
                }
            }
        }
    });
    let region = opts.region.clone();
    crate::controllers::spawn_loop(
        store,
        "fargate",
        Duration::from_secs(1),
        shutdown,
        move |s| reconcile(s, &region, &profiles),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_supports_star_and_question_mark() {
        assert!(glob("kube-system", "kube-system"));
        assert!(glob("kube-*", "kube-system"));
        assert!(glob("*", ""));
        assert!(glob("team-?", "team-a"));
        assert!(!glob("team-?", "team-ab"));
        assert!(glob("*-prod-*", "web-prod-eu"));
        assert!(!glob("joiner", "joiner-x"));
    }

    #[test]
    fn selectors_need_the_namespace_and_every_label() {
        let profiles = Profiles::default();
        profiles.set(vec![
            Profile {
                name: "system".into(),
                selectors: vec![Selector {
                    namespace: "kube-system".into(),
                    labels: BTreeMap::from([("k8s-app".into(), "kube-dns".into())]),
                }],
                created_ms: None,
            },
            Profile {
                name: "agent".into(),
                selectors: vec![Selector {
                    namespace: "joiner".into(),
                    labels: BTreeMap::new(),
                }],
                created_ms: Some(100_500),
            },
        ]);
        assert_eq!(
            profiles.matching("joiner", &json!({})),
            Some("agent".into())
        );
        assert_eq!(
            profiles.matching("kube-system", &json!({"k8s-app": "kube-dns"})),
            Some("system".into())
        );
        assert_eq!(profiles.matching("kube-system", &json!({})), None);
        assert_eq!(profiles.matching("default", &json!({"a": "b"})), None);
        // Late admission: only pods no older than the profile, to the millisecond (a pod
        // admitted in the profile's second but before it stays put), and only with a known age.
        assert_eq!(profiles.matching_since("joiner", &json!({}), 100_499), None);
        assert_eq!(
            profiles.matching_since("joiner", &json!({}), 100_500),
            Some("agent".into())
        );
        assert_eq!(
            profiles.matching_since("kube-system", &json!({"k8s-app": "kube-dns"}), 1 << 40),
            None
        );
    }

    #[test]
    fn a_pod_kube_sim_admitted_is_dated_to_the_millisecond() {
        let profiles = Profiles::default();
        let pod = json!({"metadata": {"namespace": "default", "name": "dns-1",
            "creationTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(profiles.admitted_at(&pod), Some(1_767_225_600_000));
        profiles.record_admission(&pod);
        let ms = profiles.admitted_at(&pod).expect("recorded");
        assert!(ms > 1_767_225_600_000, "kube-sim's own instant: {ms}");
        profiles.forget_except(&HashSet::new());
        assert_eq!(profiles.admitted_at(&pod), Some(1_767_225_600_000));
    }

    #[test]
    fn sizes_round_up_to_fargate_configurations() {
        let pod = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}});
        assert_eq!(fargate_size(&pod), (0.25, 1.0));
        let pod = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1500m", "memory": "3Gi"}}}]}});
        assert_eq!(fargate_size(&pod), (2.0, 4.0));
    }
}
