//! Starting and stopping kube-sim: TLS listener, HTTP service, controllers, AWS bridge.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;

use crate::api::{handle, AppState};
use crate::aws::BridgeOptions;
use crate::controllers::{self, ControllerSet};
use crate::fargate;
use crate::runner::{self, ImageSource, Runner, RunnerConfig};
use crate::store::Store;
use crate::{kubeconfig, tls};

/// How to run a kube-sim.
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// Where to write the kubeconfig; a private temporary file when None (library use).
    pub kubeconfig: Option<PathBuf>,
    pub cluster_name: String,
    /// The AWS emulator's endpoint: enables the kubelet bridge.
    pub aws_endpoint: Option<String>,
    pub aws_region: String,
    pub boot_delay: Duration,
    /// How long a Node of a stopped or terminated instance stays NotReady before deletion.
    pub node_grace: Duration,
    pub aws_poll: Duration,
    pub controllers: ControllerSet,
    /// Events kept per collection for watch resume; older resumes get 410 Gone.
    pub watch_history: usize,
    pub bookmark_interval: Duration,
    /// Images whose containers run as local processes (the process runner): image name
    /// without tag, or a prefix of it, and where the program comes from.
    pub images: Vec<(String, ImageSource)>,
    /// How often the Fargate profiles are re-read from the emulator.
    pub fargate_poll: Duration,
    /// Play EKS's CoreDNS: the self-managed Deployment once the emulator knows the cluster,
    /// placed as its `coredns` add-on says (see [`crate::addons`]). Needs `aws_endpoint`.
    pub eks_addons: bool,
    /// A TokenReview webhook (`http://`) for EKS bearer tokens (`k8s-aws-v1.`), as EKS's
    /// API server has: the local world's is
    /// `<emulator>/joiner-local/eks/<region>/<cluster>/authenticate`.
    pub eks_token_webhook: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig: None,
            cluster_name: "kube-sim".into(),
            aws_endpoint: None,
            aws_region: std::env::var("AWS_REGION")
                .ok()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "us-east-1".into()),
            boot_delay: Duration::from_secs(2),
            node_grace: Duration::from_secs(3),
            aws_poll: Duration::from_millis(500),
            controllers: ControllerSet::default(),
            watch_history: 50_000,
            bookmark_interval: Duration::from_secs(5),
            images: Vec::new(),
            fargate_poll: Duration::from_secs(2),
            eks_addons: false,
            eks_token_webhook: None,
        }
    }
}

/// A running server on the caller's tokio runtime.
pub struct Server {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub token: String,
    pub viewer_token: String,
    pub kubeconfig_path: PathBuf,
    pub store: Arc<Store>,
    /// The process runner, when images are configured.
    pub runner: Option<Arc<Runner>>,
    /// The cluster's Fargate profiles, when an AWS endpoint is configured.
    pub fargate: Option<Arc<fargate::Profiles>>,
    /// The EKS token webhook client, when one is configured.
    pub eks_webhook: Option<Arc<crate::eks_auth::TokenWebhook>>,
    /// The requests RBAC refused.
    pub refusals: Arc<crate::authz::Refusals>,
    shutdown: tokio::sync::watch::Sender<bool>,
    owns_kubeconfig: bool,
}

fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    hex::encode(bytes)
}

/// Binds, writes the kubeconfig, and starts serving and the controllers. Returns once the
/// listener is bound, so the address is usable immediately.
pub async fn serve(opts: Options) -> anyhow::Result<Server> {
    let listener = std::net::TcpListener::bind(opts.listen)
        .with_context(|| format!("bind {}", opts.listen))?;
    listener.set_nonblocking(true)?;
    serve_on(listener, opts).await
}

async fn serve_on(listener: std::net::TcpListener, opts: Options) -> anyhow::Result<Server> {
    let addr = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let material = tls::generate(&[addr.ip().to_string()])?;
    let token = random_token();
    let viewer_token = random_token();
    let url = format!("https://{addr}");
    let (kubeconfig_path, owns) = match &opts.kubeconfig {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir()
                .join(format!("kube-sim-{}", uuid::Uuid::new_v4()))
                .join("kubeconfig"),
            true,
        ),
    };
    kubeconfig::write_private(
        &kubeconfig_path,
        &kubeconfig::render(
            &opts.cluster_name,
            &url,
            &material.ca_pem,
            &token,
            &viewer_token,
        ),
    )
    .with_context(|| format!("write kubeconfig {}", kubeconfig_path.display()))?;

    let store = Store::new(opts.watch_history);
    crate::authz::bootstrap::install(&store);
    let refusals = Arc::new(crate::authz::Refusals::default());
    let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let runner_shared = Arc::new(runner::Shared::default());
    let eks_webhook = opts
        .eks_token_webhook
        .clone()
        .map(|url| Arc::new(crate::eks_auth::TokenWebhook::new(url)));
    let version = Arc::new(crate::cluster_version::ClusterVersion::default());
    if let Some(endpoint) = &opts.aws_endpoint {
        crate::cluster_version::follow(
            version.clone(),
            (
                endpoint.clone(),
                opts.aws_region.clone(),
                opts.cluster_name.clone(),
            ),
            opts.fargate_poll.min(Duration::from_millis(500)),
            shutdown_rx.clone(),
        )
        .await;
    }
    let state = Arc::new(AppState {
        store: store.clone(),
        token: token.clone(),
        viewer_token: viewer_token.clone(),
        bookmark_interval: opts.bookmark_interval,
        shutdown: shutdown_rx.clone(),
        server_address: addr.to_string(),
        runner: runner_shared.clone(),
        eks_webhook: eks_webhook.clone(),
        issued: Default::default(),
        refusals: refusals.clone(),
        version,
    });
    let app = axum::Router::new()
        .fallback(
            |State(st): State<Arc<AppState>>,
             method: Method,
             uri: Uri,
             headers: HeaderMap,
             body: axum::body::Bytes| async move {
                handle(st, method, uri, headers, body).await
            },
        )
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(state);

    let acceptor = tokio_rustls::TlsAcceptor::from(material.server_config);
    let mut stop = shutdown_rx.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                _ = stop.changed() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => { tracing::warn!("accept: {e}"); continue; }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let app = app.clone();
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!("TLS handshake: {e}");
                        return;
                    }
                };
                let svc = TowerToHyperService::new(app);
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                tokio::select! {
                    _ = stop.changed() => {}
                    r = conn => if let Err(e) = r { tracing::debug!("connection: {e}"); }
                }
            });
        }
    });

    let runner = (!opts.images.is_empty() && opts.controllers.kubelet).then(|| {
        Runner::new(
            RunnerConfig {
                images: opts.images.clone(),
                api_addr: addr,
                ca_pem: material.ca_pem.clone(),
                aws_endpoint: opts.aws_endpoint.clone(),
                aws_region: opts.aws_region.clone(),
                cluster_name: opts.cluster_name.clone(),
            },
            store.clone(),
            runner_shared,
        )
    });
    let claims: controllers::Claimed = match &runner {
        Some(r) => {
            let r = r.clone();
            Arc::new(move |pod: &serde_json::Value| r.config().claims(pod))
        }
        None => Arc::new(|_: &serde_json::Value| false),
    };
    controllers::start(&store, &opts.controllers, &shutdown_rx, claims);
    if let Some(r) = &runner {
        runner::spawn(r.clone(), shutdown_rx.clone());
    }
    let fargate_profiles = opts.aws_endpoint.as_ref().map(|endpoint| {
        let profiles = Arc::new(fargate::Profiles::default());
        let p = profiles.clone();
        store.add_mutator(Arc::new(
            move |rt: &crate::resources::ResourceType, obj: &mut serde_json::Value| {
                fargate::admit(&p, rt, obj)
            },
        ));
        fargate::spawn(
            store.clone(),
            profiles.clone(),
            fargate::FargateOptions {
                endpoint: endpoint.clone(),
                cluster: opts.cluster_name.clone(),
                region: opts.aws_region.clone(),
                poll: opts.fargate_poll,
            },
            shutdown_rx.clone(),
        );
        profiles
    });
    if let (true, Some(endpoint)) = (opts.eks_addons, &opts.aws_endpoint) {
        crate::addons::spawn(
            store.clone(),
            endpoint.clone(),
            opts.cluster_name.clone(),
            opts.aws_region.clone(),
            opts.fargate_poll.min(Duration::from_millis(500)),
            shutdown_rx.clone(),
        );
    }
    if let Some(endpoint) = &opts.aws_endpoint {
        crate::aws::spawn(
            store.clone(),
            BridgeOptions {
                endpoint: endpoint.clone(),
                cluster: opts.cluster_name.clone(),
                region: opts.aws_region.clone(),
                boot_delay: opts.boot_delay,
                node_grace: opts.node_grace,
                poll: opts.aws_poll,
            },
            shutdown_rx,
        );
    }
    Ok(Server {
        addr,
        ca_pem: material.ca_pem,
        token,
        viewer_token,
        kubeconfig_path,
        store,
        runner,
        fargate: fargate_profiles,
        eks_webhook,
        refusals,
        shutdown,
        owns_kubeconfig: owns,
    })
}

impl Server {
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Stops accepting, ends watches and connections, and stops the controllers. Processes
    /// of the runner get SIGTERM, then SIGKILL after their grace period (at most 30 s): this
    /// blocks until they are gone.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        if let Some(r) = &self.runner {
            r.stop_all(Duration::from_secs(30));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
        if self.owns_kubeconfig {
            if let Some(dir) = self.kubeconfig_path.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// A kube-sim on its own runtime, for tests: usable from sync and async tests alike, and
/// never starved by the test's own runtime. Stopped on drop.
pub struct KubeSim {
    server: Option<Server>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl KubeSim {
    pub fn start(opts: Options) -> anyhow::Result<KubeSim> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube-sim")
            .enable_all()
            .build()
            .context("start kube-sim runtime")?;
        let listener = std::net::TcpListener::bind(opts.listen)
            .with_context(|| format!("bind {}", opts.listen))?;
        listener.set_nonblocking(true)?;
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let _ = tx.send(serve_on(listener, opts).await);
        });
        let server = rx.recv().context("kube-sim start-up task ended")??;
        Ok(KubeSim {
            server: Some(server),
            runtime: Some(runtime),
        })
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("server runs until drop")
    }

    pub fn addr(&self) -> SocketAddr {
        self.server().addr
    }

    pub fn url(&self) -> String {
        self.server().url()
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.server().kubeconfig_path
    }

    pub fn token(&self) -> &str {
        &self.server().token
    }

    pub fn ca_pem(&self) -> &str {
        &self.server().ca_pem
    }

    /// The process runner, when images are configured (sim-only hook for tests).
    pub fn runner(&self) -> Option<&Arc<Runner>> {
        self.server().runner.as_ref()
    }

    /// The Fargate profiles kube-sim has read, when an AWS endpoint is configured.
    pub fn fargate_profiles(&self) -> Option<&Arc<fargate::Profiles>> {
        self.server().fargate.as_ref()
    }

    /// The decisions of the EKS token webhook so far (who was authenticated, with which
    /// groups, or the webhook's reason for a 401); empty without a webhook.
    pub fn eks_authentications(&self) -> Vec<crate::eks_auth::Authentication> {
        self.server()
            .eks_webhook
            .as_ref()
            .map(|w| w.authentications())
            .unwrap_or_default()
    }

    /// The requests RBAC refused so far, oldest first (who, and the 403's message).
    pub fn refusals(&self) -> Vec<crate::authz::Refusal> {
        self.server().refusals.all()
    }

    /// Direct access to the object store, for tests that need sim-only hooks.
    pub fn store(&self) -> &Arc<Store> {
        &self.server().store
    }

    /// A kube::Client for the admin user (context `<cluster>`).
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client_for(self.kubeconfig_path(), None).await
    }

    /// A kube::Client for the read-only viewer user: writes get 403 Forbidden.
    pub async fn viewer_client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig_path())?;
        let ctx = kc.current_context.clone().unwrap_or_default();
        client_for(self.kubeconfig_path(), Some(format!("{ctx}-viewer"))).await
    }
}

/// Builds a kube::Client from a kubeconfig file (and optional context).
pub async fn client_for(path: &Path, context: Option<String>) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("read kubeconfig {}", path.display()))?;
    let opts = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .context("load kubeconfig")?;
    kube::Client::try_from(config).context("build kube client")
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        drop(self.server.take());
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
