//! The process runner: a kubelet that runs containers as local processes.
//!
//! A scheduled pod with a container whose image is configured ([`RunnerConfig::images`])
//! runs that container as a process on this machine, with the command line, environment and
//! cluster credentials it would get on a node, so that the agent's own Deployment can run
//! against kube-sim in the sandbox and in tests. The pod's status follows the processes;
//! other pods keep the simulated kubelet (see `controllers::reconcile_kubelet`).
//! docs/kube-sim.md lists where this differs from a real kubelet.

pub mod env;
pub mod identity;
pub mod image;
pub mod logs;
mod pod;
pub mod probe;
pub mod rootfs;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use identity::TokenRegistry;
pub use image::{ImageConfig, ImageSource};
pub use logs::PodLogs;

use crate::store::{name_of, namespace_of, Store};
use env::Env;

/// Annotation on a ServiceAccount that makes EKS's pod-identity webhook inject IRSA.
pub const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
const AUDIENCE_ANNOTATION: &str = "eks.amazonaws.com/audience";

/// What the API server shares with the runner: container logs, and the tokens issued to
/// pods (accepted while the pod exists). Empty when nothing runs as a process.
#[derive(Default)]
pub struct Shared {
    pub logs: Arc<PodLogs>,
    pub tokens: Arc<TokenRegistry>,
}

/// How the runner reaches the cluster and AWS, and which images it runs.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub images: Vec<(String, ImageSource)>,
    pub api_addr: SocketAddr,
    pub ca_pem: String,
    pub aws_endpoint: Option<String>,
    pub aws_region: String,
    /// The EKS cluster kube-sim plays: IRSA tokens carry its OIDC issuer once the emulator
    /// knows it.
    pub cluster_name: String,
}

impl RunnerConfig {
    /// Whether any container of the pod runs as a process.
    pub fn claims(&self, pod: &Value) -> bool {
        !self.images.is_empty()
            && pod["spec"]["containers"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["image"]
                        .as_str()
                        .is_some_and(|i| image::lookup(&self.images, i).is_some())
                })
            })
    }
}

/// One pod's processes and the credentials issued for them.
struct Run {
    ns: String,
    name: String,
    stop: tokio::sync::watch::Sender<bool>,
    finished: Arc<AtomicBool>,
    /// Process group leaders, by container, for the last-resort SIGKILL at shutdown.
    pids: Arc<Mutex<HashMap<String, i32>>>,
    grace: Duration,
    ip: Ipv4Addr,
    tokens: Vec<String>,
    dir: PathBuf,
}

pub struct Runner {
    cfg: Arc<RunnerConfig>,
    shared: Arc<Shared>,
    store: Arc<Store>,
    dir: PathBuf,
    runs: Mutex<HashMap<String, Run>>,
    /// Signs every service-account token this kube-sim issues.
    key: identity::SigningKey,
    issuer: Issuer,
    /// IRSA pods waiting for the issuer, with the issuer check that was last started when
    /// each was first seen: the pod may start on the in-cluster issuer only once a check
    /// started after it has found no cluster.
    waiting: Mutex<HashMap<String, u64>>,
}

/// Which issuer IRSA tokens carry. With an AWS endpoint, that is the OIDC issuer of the EKS
/// cluster kube-sim plays (DescribeCluster's `identity.oidc.issuer`, what EKS puts in the
/// tokens it projects), whose keys kube-sim publishes to the local world; before the
/// emulator knows the cluster, the in-cluster issuer (whose keys it also publishes).
#[derive(Default)]
struct Issuer {
    state: Mutex<IssuerState>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct IssuerState {
    /// The issuer whose keys are published, and whether it is the cluster's.
    url: Option<String>,
    cluster: bool,
    /// Checks started and the last one completed (numbered from 1).
    started: u64,
    completed: u64,
}

impl Issuer {
    fn lock(&self) -> std::sync::MutexGuard<'_, IssuerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn is_deleting(p: &Value) -> bool {
    p["metadata"].get("deletionTimestamp").is_some()
}

fn is_terminal(p: &Value) -> bool {
    matches!(
        p["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    )
}

/// Sends a signal to a process group (the container's process and its children).
pub(crate) fn signal_group(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

impl Runner {
    pub fn new(cfg: RunnerConfig, store: Arc<Store>, shared: Arc<Shared>) -> Arc<Runner> {
        let dir = std::env::temp_dir().join(format!("kube-sim-pods-{}", uuid::Uuid::new_v4()));
        Arc::new(Runner {
            cfg: Arc::new(cfg),
            shared,
            store,
            dir,
            runs: Mutex::new(HashMap::new()),
            key: identity::SigningKey::generate(),
            issuer: Issuer::default(),
            waiting: Mutex::new(HashMap::new()),
        })
    }

    /// The issuer's signing key (its JWKS is what STS verifies IRSA tokens with).
    pub fn signing_key(&self) -> &identity::SigningKey {
        &self.key
    }

    /// The issuer for a pod's IRSA token, or None while it must wait for one (see
    /// [`Runner::waiting`]).
    fn irsa_issuer(&self, uid: &str) -> Option<String> {
        if self.cfg.aws_endpoint.is_none() {
            return Some(identity::IN_CLUSTER_ISSUER.to_string());
        }
        let st = self.issuer.lock();
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let seen = *waiting.entry(uid.to_string()).or_insert(st.started);
        match &st.url {
            Some(url) if st.cluster || st.completed > seen => {
                waiting.remove(uid);
                Some(url.clone())
            }
            _ => {
                self.issuer.wake.notify_one();
                None
            }
        }
    }

    /// One issuer check: DescribeCluster, then the keys published for what it found.
    async fn check_issuer(&self, eks: &aws_sdk_eks::Client) {
        let n = {
            let mut st = self.issuer.lock();
            st.started += 1;
            st.started
        };
        let cluster = &self.cfg.cluster_name;
        let found = match eks.describe_cluster().name(cluster).send().await {
            Ok(out) => out
                .cluster()
                .and_then(|c| c.identity())
                .and_then(|i| i.oidc())
                .and_then(|o| o.issuer())
                .map(str::to_string),
            Err(e) => {
                use aws_sdk_eks::error::ProvideErrorMetadata;
                if e.code() != Some("ResourceNotFoundException") {
                    tracing::warn!(
                        "runner: eks:DescribeCluster {cluster}: {}: {}",
                        e.code().unwrap_or("error"),
                        e.message().unwrap_or(&format!("{e}"))
                    );
                    return;
                }
                None
            }
        };
        let (url, cluster_issuer) = match found {
            Some(url) => (url, true),
            None => (identity::IN_CLUSTER_ISSUER.to_string(), false),
        };
        let known = self.issuer.lock().url.as_deref() == Some(url.as_str());
        if !known {
            let endpoint = self.cfg.aws_endpoint.as_deref().unwrap_or_default();
            match identity::publish_keys(endpoint, &url, &self.key.jwks()).await {
                Ok(()) => {
                    tracing::info!(issuer = %url, kid = %self.key.kid(), "runner: service-account issuer keys published")
                }
                // An emulator without the local world's additions: tokens are still issued,
                // and only an STS that verifies signatures would refuse them.
                Err(e) => {
                    tracing::warn!(issuer = %url, "runner: cannot publish the issuer's keys: {e}")
                }
            }
        }
        let mut st = self.issuer.lock();
        st.url = Some(url);
        st.cluster = cluster_issuer;
        st.completed = n;
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.cfg
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts processes for newly bound pods; stops those of deleted pods; forgets pods
    /// whose processes have ended and whose objects are gone.
    pub fn reconcile(&self) {
        let Some(pods_t) = self.store.find_type("", "v1", "pods") else {
            return;
        };
        let (pods, _) = self.store.list(&pods_t, None);
        let by_uid: HashMap<&str, &Arc<Value>> = pods
            .iter()
            .filter_map(|p| p["metadata"]["uid"].as_str().map(|u| (u, p)))
            .collect();
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|uid, _| by_uid.contains_key(uid.as_str()));
        let mut runs = self.lock();
        for (uid, run) in runs.iter() {
            if by_uid.get(uid.as_str()).is_none_or(|p| is_deleting(p)) {
                let _ = run.stop.send(true);
            }
        }
        let gone: Vec<String> = runs
            .iter()
            .filter(|(uid, run)| {
                !by_uid.contains_key(uid.as_str()) && run.finished.load(Ordering::SeqCst)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(run) = runs.remove(&uid) {
                self.release(&uid, run);
            }
        }
        for pod in &pods {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
            let bound = pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
            if !bound
                || is_deleting(pod)
                || is_terminal(pod)
                || runs.contains_key(uid)
                || !self.cfg.claims(pod)
            {
                continue;
            }
            let irsa = match self.irsa_role(pod) {
                Some((role, audience)) => match self.irsa_issuer(uid) {
                    Some(issuer) => Some(Irsa {
                        role,
                        audience,
                        issuer,
                    }),
                    None => continue,
                },
                None => None,
            };
            match self.start(pod, irsa) {
                Ok(run) => {
                    runs.insert(uid.to_string(), run);
                }
                Err(e) => tracing::warn!(
                    pod = %format!("{}/{}", namespace_of(pod), name_of(pod)),
                    "runner: cannot prepare the pod: {e:#}"
                ),
            }
        }
    }

    /// The role and audience EKS's pod-identity webhook would inject for the pod's
    /// ServiceAccount, if it is annotated with one.
    fn irsa_role(&self, pod: &Value) -> Option<(String, String)> {
        let ns = namespace_of(pod);
        let sa = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let t = self.store.find_type("", "v1", "serviceaccounts")?;
        let sa_obj = self.store.get(&t, Some(ns), sa).ok()?;
        let annotations = &sa_obj["metadata"]["annotations"];
        let role = annotations[ROLE_ARN_ANNOTATION].as_str()?.to_string();
        let audience = annotations[AUDIENCE_ANNOTATION]
            .as_str()
            .unwrap_or("sts.amazonaws.com")
            .to_string();
        Some((role, audience))
    }

    fn release(&self, uid: &str, run: Run) {
        for t in &run.tokens {
            self.shared.tokens.revoke(t);
        }
        self.shared.logs.remove_pod(&run.ns, &run.name, uid);
        identity::release_ip(run.ip);
        let _ = std::fs::remove_dir_all(&run.dir);
    }

    /// Issues the pod's credentials, writes its files, and starts its task.
    fn start(&self, pod: &Value, irsa: Option<Irsa>) -> anyhow::Result<Run> {
        let ns = namespace_of(pod).to_string();
        let name = name_of(pod).to_string();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let sa = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string();
        let dir = self
            .dir
            .join(format!("{ns}_{name}_{}", &uid[..uid.len().min(8)]));
        std::fs::create_dir_all(&dir)?;
        let ip = identity::allocate_ip();
        let mut tokens = Vec::new();
        let result = (|| -> anyhow::Result<Env> {
            let server = format!("https://{}", self.cfg.api_addr);
            let token = identity::service_account_jwt(
                &self.key,
                identity::IN_CLUSTER_ISSUER,
                identity::IN_CLUSTER_ISSUER,
                &ns,
                &sa,
                &name,
                &uid,
            );
            self.shared
                .tokens
                .insert(token.clone(), format!("system:serviceaccount:{ns}:{sa}"));
            tokens.push(token.clone());
            let sa_dir = dir.join("serviceaccount");
            identity::write_secret(&sa_dir.join("token"), &token)?;
            std::fs::write(sa_dir.join("ca.crt"), &self.cfg.ca_pem)?;
            std::fs::write(sa_dir.join("namespace"), &ns)?;
            let kubeconfig = dir.join("kubeconfig");
            identity::write_secret(
                &kubeconfig,
                &identity::pod_kubeconfig(&server, &self.cfg.ca_pem, &token, &ns),
            )?;
            let mut env = Env::default();
            let (host, port) = (self.cfg.api_addr.ip(), self.cfg.api_addr.port());
            env.set("KUBERNETES_SERVICE_HOST", host.to_string());
            env.set("KUBERNETES_SERVICE_PORT", port.to_string());
            env.set("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string());
            env.set("KUBERNETES_PORT", format!("tcp://{host}:{port}"));
            env.set("KUBECONFIG", kubeconfig.display().to_string());
            // IRSA: what EKS's pod-identity webhook adds for an annotated ServiceAccount.
            if let Some(Irsa {
                role,
                audience,
                issuer,
            }) = irsa
            {
                let web = identity::service_account_jwt(
                    &self.key, &issuer, &audience, &ns, &sa, &name, &uid,
                );
                let file = dir
                    .join("eks.amazonaws.com")
                    .join("serviceaccount")
                    .join("token");
                identity::write_secret(&file, &web)?;
                env.set("AWS_ROLE_ARN", role);
                env.set("AWS_WEB_IDENTITY_TOKEN_FILE", file.display().to_string());
                env.set("AWS_STS_REGIONAL_ENDPOINTS", "regional");
                env.set("AWS_REGION", self.cfg.aws_region.clone());
                env.set("AWS_DEFAULT_REGION", self.cfg.aws_region.clone());
                if let Some(endpoint) = &self.cfg.aws_endpoint {
                    env.set("AWS_ENDPOINT_URL", endpoint.clone());
                }
            }
            Ok(env)
        })();
        let injected = match result {
            Ok(env) => env,
            Err(e) => {
                for t in &tokens {
                    self.shared.tokens.revoke(t);
                }
                identity::release_ip(ip);
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let finished = Arc::new(AtomicBool::new(false));
        let pids = Arc::new(Mutex::new(HashMap::new()));
        let grace = Duration::from_secs(
            pod["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(30),
        );
        let ctx = Arc::new(pod::PodCtx {
            store: self.store.clone(),
            shared: self.shared.clone(),
            cfg: self.cfg.clone(),
            pod: pod.clone(),
            ip,
            dir: dir.clone(),
            injected,
            pids: pids.clone(),
            grace,
        });
        let done = finished.clone();
        tokio::spawn(async move {
            pod::run(ctx, stop_rx).await;
            done.store(true, Ordering::SeqCst);
        });
        Ok(Run {
            ns,
            name,
            stop,
            finished,
            pids,
            grace,
            ip,
            tokens,
            dir,
        })
    }

    /// kube-sim stops: every process gets SIGTERM, then SIGKILL once its pod's grace period
    /// (at most `cap`) has passed. Blocks; safe to call more than once.
    pub fn stop_all(&self, cap: Duration) {
        let mut runs = self.lock();
        if runs.is_empty() {
            return;
        }
        let mut wait = Duration::ZERO;
        for run in runs.values() {
            let _ = run.stop.send(true);
            wait = wait.max(run.grace.min(cap));
        }
        let deadline = Instant::now() + wait + Duration::from_millis(500);
        while Instant::now() < deadline && runs.values().any(|r| !r.finished.load(Ordering::SeqCst))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        for run in runs.values() {
            if !run.finished.load(Ordering::SeqCst) {
                for pid in run.pids.lock().unwrap_or_else(|p| p.into_inner()).values() {
                    signal_group(*pid, libc::SIGKILL);
                }
            }
        }
        for (uid, run) in runs.drain() {
            self.release(&uid, run);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The process IDs of a pod's running containers, by container name (for tests).
    pub fn pids(&self, ns: &str, name: &str) -> HashMap<String, i32> {
        self.lock()
            .values()
            .find(|r| r.ns == ns && r.name == name)
            .map(|r| r.pids.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }
}

/// What a pod's IRSA token is for and who issues it.
struct Irsa {
    role: String,
    audience: String,
    issuer: String,
}

/// How often the issuer is re-read while the emulator does not know the cluster, and after.
const ISSUER_POLL: Duration = Duration::from_secs(1);
const ISSUER_POLL_FOUND: Duration = Duration::from_secs(5);

/// Runs the runner beside the other controllers.
pub fn spawn(runner: Arc<Runner>, shutdown: tokio::sync::watch::Receiver<bool>) {
    if let Some(endpoint) = runner.cfg.aws_endpoint.clone() {
        let r = runner.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let eks = crate::fargate::eks_client(&endpoint, &r.cfg.aws_region).await;
            loop {
                r.check_issuer(&eks).await;
                let poll = if r.issuer.lock().cluster {
                    ISSUER_POLL_FOUND
                } else {
                    ISSUER_POLL
                };
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = r.issuer.wake.notified() => {}
                    _ = tokio::time::sleep(poll) => {}
                }
            }
        });
    }
    let store = runner.store.clone();
    crate::controllers::spawn_loop(
        store,
        "runner",
        Duration::from_secs(1),
        shutdown,
        move |_| runner.reconcile(),
    );
}
