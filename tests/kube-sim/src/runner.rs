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
        })
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
            match self.start(pod) {
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

    fn release(&self, uid: &str, run: Run) {
        for t in &run.tokens {
            self.shared.tokens.revoke(t);
        }
        self.shared.logs.remove_pod(&run.ns, &run.name, uid);
        identity::release_ip(run.ip);
        let _ = std::fs::remove_dir_all(&run.dir);
    }

    /// Issues the pod's credentials, writes its files, and starts its task.
    fn start(&self, pod: &Value) -> anyhow::Result<Run> {
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
                "https://kubernetes.default.svc.cluster.local",
                "https://kubernetes.default.svc.cluster.local",
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
            let sa_obj = self
                .store
                .find_type("", "v1", "serviceaccounts")
                .and_then(|t| self.store.get(&t, Some(&ns), &sa).ok());
            let role = sa_obj
                .as_ref()
                .and_then(|s| s["metadata"]["annotations"][ROLE_ARN_ANNOTATION].as_str())
                .map(str::to_string);
            if let Some(role) = role {
                let audience = sa_obj
                    .as_ref()
                    .and_then(|s| s["metadata"]["annotations"][AUDIENCE_ANNOTATION].as_str())
                    .unwrap_or("sts.amazonaws.com")
                    .to_string();
                let web = identity::service_account_jwt(
                    "https://kubernetes.default.svc.cluster.local",
                    &audience,
                    &ns,
                    &sa,
                    &name,
                    &uid,
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

/// Runs the runner beside the other controllers.
pub fn spawn(runner: Arc<Runner>, shutdown: tokio::sync::watch::Receiver<bool>) {
    let store = runner.store.clone();
    crate::controllers::spawn_loop(
        store,
        "runner",
        Duration::from_secs(1),
        shutdown,
        move |_| runner.reconcile(),
    );
}
