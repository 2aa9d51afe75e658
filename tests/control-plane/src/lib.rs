//! A real Kubernetes control plane on loopback, for the tests that must not trust kube-sim's
//! word: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, plus KWOK playing
//! the kubelet for Nodes that carry its annotation (the way Karpenter's scale tests run
//! without machines).
//!
//! The binaries are the pinned builds `scripts/install-tools.sh` links into `.tools/bin`
//! (tools/go/). Everything listens on 127.0.0.1 only, on free ports; certificates, the token
//! file and the service-account key are generated per instance into a temporary directory.
//!
//! ```no_run
//! let cp = joiner_control_plane::ControlPlane::start(Default::default()).unwrap();
//! println!("{}", cp.kubeconfig_path().display()); // admin token, for kubectl and kube-rs
//! ```
//!
//! Every component is started under a small shell watchdog that holds a pipe from this
//! process: when the test process ends, however it ends, the pipe closes and the component
//! is terminated. That is what makes [`ControlPlane::shared`] (one instance per test
//! process, never dropped) safe.

mod certs;
mod process;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use joiner_test_support::{free_port, tools_dir};

use crate::process::{Component, Reaper};

/// The annotation KWOK selects the Nodes it manages by (its own default selector value).
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Where the control plane's binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    pub kwok: PathBuf,
}

impl Binaries {
    /// The binaries in `$JOINER_K8S_BIN_DIR`, or else `.tools/bin`; an error names the
    /// first one missing and how to install it.
    pub fn find() -> anyhow::Result<Binaries> {
        let dir = std::env::var_os("JOINER_K8S_BIN_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| tools_dir().join("bin"));
        Binaries::find_in(&dir)
    }

    /// The binaries in `dir`.
    pub fn find_in(dir: &Path) -> anyhow::Result<Binaries> {
        let get = |name: &str| -> anyhow::Result<PathBuf> {
            let p = dir.join(name);
            // A dangling link (cache wiped) counts as missing, like an absent file.
            if p.metadata().map(|m| m.is_file()).unwrap_or(false) {
                Ok(p)
            } else {
                bail!(
                    "{} not found: the real control plane was asked for but is not built. \
                     Build it with `scripts/install-tools.sh --go-cluster` (etcd, the \
                     Kubernetes control plane and KWOK from tools/go; about 10 min cold on \
                     2 cores), or set JOINER_K8S_BIN_DIR to a directory holding them",
                    p.display()
                )
            }
        };
        Ok(Binaries {
            etcd: get("etcd")?,
            apiserver: get("kube-apiserver")?,
            controller_manager: get("kube-controller-manager")?,
            scheduler: get("kube-scheduler")?,
            kwok: get("kwok")?,
        })
    }
}

/// Which runs on the real control plane a test process was asked for, by
/// `JOINER_REAL_CLUSTER`:
///
/// - unset or `0`: none. Test bodies shared with kube-sim ([`Selection::Off`]) run on
///   kube-sim only, whatever is installed, so a run means the same on every machine.
/// - `1`: kube-sim and the real control plane.
/// - `only`: the real control plane only (scripts/test runs the kube-sim half earlier).
///
/// Tests that run only on the real control plane (`*_on_the_real_control_plane`, this
/// crate's own) are `#[ignore]`d instead: `cargo test -- --ignored` is how they are asked
/// for. Asked for and not built, a test fails, naming how to build the binaries
/// ([`Binaries::find`]): it never passes by skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    Off,
    Also,
    Only,
}

/// The [`Selection`] of this process's environment; any other value is an error, so a typo
/// does not silently mean "off".
pub fn selection() -> anyhow::Result<Selection> {
    selection_of(std::env::var("JOINER_REAL_CLUSTER").ok().as_deref())
}

/// [`selection`] for a given value of `JOINER_REAL_CLUSTER`.
pub fn selection_of(value: Option<&str>) -> anyhow::Result<Selection> {
    match value.unwrap_or("") {
        "" | "0" => Ok(Selection::Off),
        "1" => Ok(Selection::Also),
        "only" => Ok(Selection::Only),
        other => bail!("JOINER_REAL_CLUSTER={other:?}: expected 0, 1 or only"),
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Whether to run kube-controller-manager (garbage collection, ReplicaSets, node
    /// lifecycle, service accounts...).
    pub controller_manager: bool,
    pub scheduler: bool,
    /// Whether to run KWOK for Nodes annotated `kwok.x-k8s.io/node: fake`.
    pub kwok: bool,
    /// A TokenReview webhook (`authentication.k8s.io/v1`) for bearer tokens the other
    /// authenticators do not know, as EKS's API server has for its `k8s-aws-v1.` tokens:
    /// the local world's is `<emulator>/joiner-local/eks/<region>/<cluster>/authenticate`.
    pub token_webhook: Option<String>,
    /// Client-side rate limit of kube-controller-manager and kube-scheduler (queries per
    /// second; the burst is twice it). Their defaults (20 and 50) make the ReplicaSet
    /// controller and the binding loop, not the controller under test, what a scale-out of
    /// thousands of pods waits for; benchmarks raise it.
    pub client_qps: Option<u32>,
    /// kube-controller-manager's `--node-monitor-grace-period`, in seconds (its default is
    /// 50). KWOK heartbeats each Node by a status patch every 20–45 s; with a thousand
    /// Nodes on two cores those fall behind, the node lifecycle controller marks the Nodes
    /// Unknown and their pods NotReady, and KWOK never makes the pods Ready again (its
    /// pod stage has already run). Benchmarks at that size lengthen it.
    pub node_monitor_grace_secs: Option<u32>,
    /// KWOK stage files to run instead of the default stage of the same file name (or
    /// beside the defaults): a suite written for other stages brings its own, as
    /// Karpenter's regression suite brings a pod-delete stage that honours a delay.
    pub kwok_stages: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controller_manager: true,
            scheduler: true,
            kwok: true,
            token_webhook: None,
            client_qps: None,
            node_monitor_grace_secs: None,
            kwok_stages: Vec::new(),
        }
    }
}

/// A running control plane. Dropping it stops every component (last started first).
pub struct ControlPlane {
    // Declared before `dir` so the processes stop before their files go.
    components: Vec<Component>,
    url: String,
    token: String,
    ca_pem: String,
    kubeconfig: PathBuf,
    binaries: Binaries,
    /// kube-apiserver's flags, kept so [`ControlPlane::restart_apiserver`] starts it again
    /// exactly as before (same port, certificates and etcd).
    apiserver_args: Vec<String>,
    _reaper: Reaper,
    dir: tempfile::TempDir,
}

impl ControlPlane {
    /// One control plane for the whole test process, started on first use. Tests share it
    /// (each in its own namespace); its components end with the process.
    pub fn shared() -> anyhow::Result<&'static ControlPlane> {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                // Started from a thread of its own so no test's runtime owns anything in it.
                std::thread::spawn(|| ControlPlane::start(Options::default()))
                    .join()
                    .map_err(|_| "control plane start panicked".to_string())
                    .and_then(|r| r.map_err(|e| format!("{e:#}")))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    pub fn start(opts: Options) -> anyhow::Result<ControlPlane> {
        let binaries = Binaries::find()?;
        let started = Instant::now();
        // etcd fsyncs every write: keep its data in memory where the machine has /dev/shm.
        let dir = match Path::new("/dev/shm").is_dir() {
            true => tempfile::Builder::new()
                .prefix("joiner-cp-")
                .tempdir_in("/dev/shm"),
            false => tempfile::Builder::new().prefix("joiner-cp-").tempdir(),
        }
        .context("create the control plane's directory")?;
        let d = dir.path();
        let pki = certs::generate(d)?;
        let token = certs::random_token();
        std::fs::write(
            d.join("tokens.csv"),
            format!("{token},admin,admin-uid,\"system:masters\"\n"),
        )?;

        let etcd_port = free_port();
        let peer_port = free_port();
        let api_port = free_port();
        let url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = d.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&url, &pki.ca_cert.display().to_string(), &token),
        )?;

        let reaper = Reaper::spawn(dir.path())?;
        let mut cp = ControlPlane {
            components: Vec::new(),
            url,
            token,
            ca_pem: std::fs::read_to_string(&pki.ca_cert)?,
            kubeconfig: kubeconfig.clone(),
            binaries: binaries.clone(),
            apiserver_args: Vec::new(),
            _reaper: reaper,
            dir,
        };
        let d = cp.dir.path().to_path_buf();
        let s = |p: &Path| p.display().to_string();

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        cp.components.push(Component::spawn(
            "etcd",
            &binaries.etcd,
            &[
                "--name=cp".into(),
                format!("--data-dir={}", s(&d.join("etcd"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=cp={peer_url}"),
                "--logger=zap".into(),
                "--log-level=warn".into(),
            ],
            &d,
        )?);
        cp.wait_tcp(etcd_port, Duration::from_secs(30))?;

        let mut webhook_args = Vec::new();
        if let Some(url) = &opts.token_webhook {
            let config = d.join("token-webhook.kubeconfig");
            std::fs::write(&config, webhook_kubeconfig_yaml(url))?;
            webhook_args = vec![
                format!("--authentication-token-webhook-config-file={}", s(&config)),
                "--authentication-token-webhook-version=v1".into(),
            ];
        }
        cp.apiserver_args = [
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", s(&d.join("apiserver-certs"))),
            format!("--tls-cert-file={}", s(&pki.server_cert)),
            format!("--tls-private-key-file={}", s(&pki.server_key)),
            format!("--client-ca-file={}", s(&pki.ca_cert)),
            format!("--token-auth-file={}", s(&d.join("tokens.csv"))),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", s(&pki.sa_pub)),
            format!("--service-account-signing-key-file={}", s(&pki.sa_key)),
            // No watch cache: watches and lists go straight to etcd. With the cache, a
            // watch resumed at a resourceVersion it had not caught up with ended in
            // "a watch stream was requested by the client but the required storage
            // feature RequestWatchProgress is disabled" (Debian's etcd 3.4.23 cannot
            // answer progress requests), and KWOK's informers, retrying with a growing
            // back-off, went blind for tens of seconds: evicted pods stayed Terminating
            // and new ones Pending.
            "--watch-cache=false".into(),
            // A setting, not a network: no Service IP is ever dialled here.
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints
            // reject; nothing in a test dials it.
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            "--v=0".into(),
        ]
        .into_iter()
        .chain(webhook_args)
        .collect::<Vec<_>>();
        cp.components.push(Component::spawn(
            "kube-apiserver",
            &binaries.apiserver,
            &cp.apiserver_args,
            &d,
        )?);
        cp.wait_ready(Duration::from_secs(120))
            .context("kube-apiserver did not become ready")?;

        if opts.controller_manager {
            cp.components.push(Component::spawn(
                "kube-controller-manager",
                &binaries.controller_manager,
                &[
                    format!("--kubeconfig={}", s(&kubeconfig)),
                    "--leader-elect=false".into(),
                    "--secure-port=0".into(),
                    format!("--service-account-private-key-file={}", s(&pki.sa_key)),
                    format!("--root-ca-file={}", s(&pki.ca_cert)),
                    format!("--cluster-signing-cert-file={}", s(&pki.ca_cert)),
                    format!("--cluster-signing-key-file={}", s(&pki.ca_key)),
                    "--use-service-account-credentials=false".into(),
                    "--profiling=false".into(),
                ]
                .into_iter()
                .chain(qps_args(opts.client_qps))
                .chain(
                    opts.node_monitor_grace_secs
                        .map(|g| format!("--node-monitor-grace-period={g}s")),
                )
                .collect::<Vec<_>>(),
                &d,
            )?);
        }
        if opts.scheduler {
            // The client's rate limit is a field of the scheduler's configuration file only.
            let args = match opts.client_qps {
                None => vec![
                    format!("--kubeconfig={}", s(&kubeconfig)),
                    "--leader-elect=false".into(),
                    "--profiling=false".into(),
                ],
                Some(q) => {
                    let config = d.join("kube-scheduler.yaml");
                    std::fs::write(&config, scheduler_config_yaml(&kubeconfig, q))?;
                    vec![format!("--config={}", s(&config))]
                }
            };
            cp.components.push(Component::spawn(
                "kube-scheduler",
                &binaries.scheduler,
                &args
                    .into_iter()
                    .chain(["--secure-port=0".to_string()])
                    .collect::<Vec<_>>(),
                &d,
            )?);
        }
        if opts.kwok {
            let (k, v) = KWOK_NODE_ANNOTATION;
            let mut args = kwok_stage_configs(&binaries.kwok, &opts.kwok_stages)?;
            args.extend([
                format!("--kubeconfig={}", s(&kubeconfig)),
                "--manage-all-nodes=false".into(),
                format!("--manage-nodes-with-annotation-selector={k}={v}"),
                // Pod IPs KWOK hands out: a setting, never dialled.
                "--cidr=10.244.0.0/16".into(),
                "--node-ip=10.0.0.1".into(),
                format!("--server-address=127.0.0.1:{}", free_port()),
            ]);
            cp.components
                .push(Component::spawn("kwok", &binaries.kwok, &args, &d)?);
        }
        if opts.controller_manager {
            // Pods need their namespace's `default` ServiceAccount (admission refuses them
            // without it); the controller-manager creates it shortly after start.
            cp.wait_for(
                Duration::from_secs(60),
                "the default ServiceAccount",
                |cp| {
                    cp.kubectl(&["get", "serviceaccount", "default", "-n", "default"])
                        .is_ok()
                },
            )?;
        }
        eprintln!(
            "real control plane: up at {} in {:.1}s (logs in {})",
            cp.url,
            started.elapsed().as_secs_f64(),
            cp.dir.path().display()
        );
        Ok(cp)
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The admin bearer token (group `system:masters`).
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// A component's log so far (stdout and stderr), for a failing test's message.
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{component}.log")))
            .unwrap_or_default()
    }

    /// A component's process id (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`, `kwok`), for benchmarks that read its CPU and memory in /proc.
    pub fn pid(&self, component: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.path().join(format!("{component}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Runs kubectl against this control plane; its stdout, or an error with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .context("run kubectl (is it on PATH?)")?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Applies CustomResourceDefinitions (each a JSON object; `apiVersion` and `kind` are
    /// filled in) with server-side apply and waits until each is Established. kube-apiserver
    /// refuses a CRD whose schema it cannot compile or whose CEL rules exceed its cost
    /// budget, so success here is also the proof that the CRDs install.
    pub fn install_crds(&self, crds: &[serde_json::Value]) -> anyhow::Result<()> {
        for crd in crds {
            let name = crd["metadata"]["name"]
                .as_str()
                .context("a CRD without metadata.name")?;
            let mut crd = crd.clone();
            crd["apiVersion"] = "apiextensions.k8s.io/v1".into();
            crd["kind"] = "CustomResourceDefinition".into();
            let file = self.dir.path().join(format!("crd-{name}.json"));
            std::fs::write(&file, crd.to_string()).context("write a CRD for kubectl")?;
            let path = file.to_string_lossy();
            self.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &path])
                .with_context(|| format!("the API server refuses CRD {name}"))?;
        }
        for crd in crds {
            let name = crd["metadata"]["name"].as_str().unwrap_or_default();
            let which = format!("crd/{name}");
            self.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &which,
            ])?;
        }
        Ok(())
    }

    /// Stops kube-apiserver (SIGTERM, as a rolling restart does) and starts it again with
    /// the same flags; returns once it is ready. etcd keeps running, so the clients' watches
    /// can resume from their resourceVersion instead of listing again.
    pub fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        let i = self
            .components
            .iter()
            .position(|c| c.name() == "kube-apiserver")
            .context("no kube-apiserver component")?;
        self.components.remove(i).stop();
        let c = Component::spawn(
            "kube-apiserver",
            &self.binaries.apiserver,
            &self.apiserver_args,
            self.dir.path(),
        )?;
        // Same place in the list: components stop last started first.
        self.components.insert(i, c);
        self.wait_ready(Duration::from_secs(120))
            .context("kube-apiserver did not become ready after its restart")
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for c in &mut self.components {
            if let Some(status) = c.exited() {
                bail!(
                    "{} exited ({status}); its log ends:\n{}",
                    c.name(),
                    tail(&c.log(), 30)
                );
            }
        }
        Ok(())
    }

    fn wait_tcp(&mut self, port: u16, limit: Duration) -> anyhow::Result<()> {
        self.wait_for(limit, &format!("127.0.0.1:{port}"), |_| {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
    }

    fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.wait_for(limit, "/readyz", |cp| {
            cp.kubectl(&["get", "--raw", "/readyz"]).is_ok()
        })?;
        // The bootstrap controller creates `default` right after /readyz turns green.
        self.wait_for(limit, "namespace default", |cp| {
            cp.kubectl(&["get", "namespace", "default"]).is_ok()
        })
    }

    fn wait_for(
        &mut self,
        limit: Duration,
        what: &str,
        mut ok: impl FnMut(&ControlPlane) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_alive()?;
            if ok(self) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("timed out after {limit:?} waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(c) = self.components.pop() {
            c.stop();
        }
    }
}

/// `--kube-api-qps`/`--kube-api-burst` for kube-controller-manager's client, when asked for.
fn qps_args(qps: Option<u32>) -> Vec<String> {
    qps.map(|q| {
        vec![
            format!("--kube-api-qps={q}"),
            format!("--kube-api-burst={}", q * 2),
        ]
    })
    .unwrap_or_default()
}

/// `--config=` for each lifecycle stage file install-tools.sh put next to the real kwok
/// binary (`<cache>/kwok-<key>/stages/`: node initialise and heartbeat, pod ready, complete
/// and delete), each replaced by the file of `overrides` of the same name, and the other
/// `overrides` beside them.
fn kwok_stage_configs(kwok: &Path, overrides: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    let real =
        std::fs::canonicalize(kwok).with_context(|| format!("resolve {}", kwok.display()))?;
    let stages = real.parent().map(|p| p.join("stages")).unwrap_or_default();
    let mut v: Vec<String> = std::fs::read_dir(&stages)
        .with_context(|| {
            format!(
                "KWOK stages in {} (run scripts/install-tools.sh)",
                stages.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !overrides.iter().any(|o| o.file_name() == p.file_name()))
        .chain(overrides.iter().cloned())
        .map(|p| format!("--config={}", p.display()))
        .collect();
    v.sort();
    if v.is_empty() {
        bail!("no KWOK stage files in {}", stages.display());
    }
    Ok(v)
}

/// The last `lines` lines of a log, without the flag dump components print at start.
fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().filter(|l| !l.contains("] FLAG: --")).collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn kubeconfig_yaml(url: &str, ca_file: &str, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: joiner-control-plane
  cluster:
    server: {url}
    certificate-authority: {ca_file}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: joiner-control-plane
  context:
    cluster: joiner-control-plane
    user: admin
current-context: joiner-control-plane
"
    )
}

/// kube-scheduler's configuration with its client's rate limit raised (no leader
/// election, no profiling, as the flags say without it).
fn scheduler_config_yaml(kubeconfig: &Path, qps: u32) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {}
  qps: {qps}
  burst: {}
leaderElection:
  leaderElect: false
enableProfiling: false
",
        kubeconfig.display(),
        qps * 2
    )
}

/// The kubeconfig kube-apiserver reads its token webhook from: the webhook is the
/// "cluster" (plain http on loopback: the local world's emulator serves no TLS), the API
/// server the "user" (no client credentials).
fn webhook_kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: token-webhook
  cluster:
    server: {url}
users:
- name: kube-apiserver
  user: {{}}
contexts:
- name: token-webhook
  context:
    cluster: token-webhook
    user: kube-apiserver
current-context: token-webhook
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_names_server_ca_and_token() {
        let y = kubeconfig_yaml("https://127.0.0.1:6443", "/x/ca.crt", "t0k");
        assert!(y.contains("server: https://127.0.0.1:6443\n"));
        assert!(y.contains("certificate-authority: /x/ca.crt\n"));
        assert!(y.contains("token: t0k\n"));
        assert!(y.contains("current-context: joiner-control-plane\n"));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }

    #[test]
    fn the_real_control_plane_is_used_only_when_asked() {
        assert_eq!(selection_of(None).unwrap(), Selection::Off);
        assert_eq!(selection_of(Some("0")).unwrap(), Selection::Off);
        assert_eq!(selection_of(Some("1")).unwrap(), Selection::Also);
        assert_eq!(selection_of(Some("only")).unwrap(), Selection::Only);
        assert!(selection_of(Some("yes")).is_err());
    }

    #[test]
    fn missing_binaries_say_how_to_build_them() {
        let dir = tempfile::tempdir().unwrap();
        let e = format!("{:#}", Binaries::find_in(dir.path()).unwrap_err());
        assert!(e.contains("scripts/install-tools.sh --go-cluster"), "{e}");
    }
}
