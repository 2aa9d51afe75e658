//! `joiner-agent run`: the controllers, thin loops around the pure scheduling core.
//!
//! Folders follow Karpenter's domains so each loop is found by name:
//! - [`state`]: the watches (reflectors) every loop reads from;
//! - [`provisioning`]: pending pods → batch → one `schedule()` → NodeClaims;
//! - [`lifecycle`]: a NodeClaim's launch, registration, initialization, registration TTL;
//! - [`termination`]: the finalizer: cordon, drain (Eviction API, PDBs), terminate, remove;
//!   a disrupted claim's drain first waits for its replacements ([`disrupted`]);
//! - [`interruption`]: the SQS consumer; disrupts the NodeClaims of interrupted instances;
//! - [`disruption`]: consolidation, expiry and drift within budgets; disrupts NodeClaims;
//! - [`capacity_reservation`]: nodes in capacity reservations: a block's end drains them,
//!   a lapsed reservation's become on-demand;
//! - [`repair`]: node repair: disrupts the NodeClaims of nodes unhealthy too long;
//! - [`garbage_collection`]: instances without claims, claims without instances;
//! - [`nodepool`]: NodePool validation reported on status and as Events;
//! - [`nodeclass`]: the NodeClass finalizer: its launch templates go before it does; and
//!   its status, what its selectors resolve to ([`nodeclass::status`]);
//! - [`adoption`]: Karpenter's running nodes become NodeClaims (a migration), never while
//!   Karpenter runs;
//! - [`nodeoverlay`]: NodeOverlays applied to the catalogue, their validation on status;
//! - [`operator`]: flags, leader election, metrics, health, logging.
//!
//! No controller imports another. What several of them share sits on a floor below them
//! all, beside [`state`] and [`operator`]: [`context`] (the [`Context`] every loop is
//! handed, and the agent's finalizer), [`disrupted`] (marking a claim disrupted) and
//! [`claim_termination`] (requesting a claim's termination), [`nodeclaims`] (the one
//! place NodeClaims are created, and their status writes), [`scheduling_input`] (the round
//! provisioning plans and disruption simulates), [`do_not_disrupt`], [`pool_status`],
//! [`fargate_view`], [`overlays`], [`conditions`], [`events`] and [`queue`]. This module alone, the
//! composition root, names every controller, and none imports it.
//!
//! Only the leader runs the loops in [`CONTROLLERS`]; watches, metrics and health run on
//! every replica. More loops join by adding a line to [`CONTROLLERS`]; they get the same
//! [`Context`].
//!
//! Capacity has one path: only [`provisioning`] creates NodeClaims. Interruption and
//! disruption mark a claim disrupted and request its termination; provisioning replaces
//! the pods of disrupted nodes in its next batch, and termination drains once the
//! replacements are Initialized.

pub mod adoption;
pub mod capacity_reservation;
pub mod disruption;
pub mod garbage_collection;
pub mod interruption;
pub mod lifecycle;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod provisioning;
pub mod repair;
pub mod termination;

pub mod claim_termination;
pub mod conditions;
pub mod context;
pub mod disrupted;
pub mod do_not_disrupt;
pub mod events;
pub mod fargate_view;
pub mod launch_failure;
pub mod nodeclaims;
pub mod operator;
pub mod overlays;
pub mod pool_status;
pub mod queue;
pub mod scheduling_input;
pub mod served_api;
pub mod state;

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use tokio::sync::watch;

use crate::cloud::Cloud;
use context::Context;
pub use operator::config::Config;
use operator::metrics::Metrics;

/// A loop the leader runs until it loses leadership or the agent stops.
pub type ControllerFn = fn(Arc<Context>) -> BoxFuture<'static, ()>;

/// The leader's loops. Add a line to run another one.
pub const CONTROLLERS: &[(&str, ControllerFn)] = &[
    ("provisioning", |c| Box::pin(provisioning::run(c))),
    ("nodeclaim", |c| Box::pin(lifecycle::run(c, finalize_claim))),
    ("node.termination", |c| {
        Box::pin(termination::run_node_finalizer(c))
    }),
    ("garbage-collection", |c| {
        Box::pin(garbage_collection::run(c))
    }),
    ("nodepool.validation", |c| Box::pin(nodepool::run(c))),
    ("metrics.inventory", |c| {
        Box::pin(operator::inventory::run(c))
    }),
    ("nodeclass.termination", |c| Box::pin(nodeclass::run(c))),
    ("nodeclass.status", |c| Box::pin(nodeclass::status::run(c))),
    ("interruption", |c| Box::pin(interruption::run(c))),
    ("disruption", |c| Box::pin(disruption::run(c))),
    ("adoption", |c| Box::pin(adoption::run(c))),
    ("nodeoverlay.validation", |c| Box::pin(nodeoverlay::run(c))),
    ("capacityreservation.expiration", |c| {
        Box::pin(capacity_reservation::run(c))
    }),
    ("node.health", |c| Box::pin(repair::run(c))),
];

/// The claim loop's step for a claim being deleted: termination's finalizer
/// ([`lifecycle::Finalize`]).
fn finalize_claim<'a>(
    ctx: &'a Context,
    claim: &'a crate::api::NodeClaim,
) -> BoxFuture<'a, Option<std::time::Duration>> {
    Box::pin(termination::finalize(ctx, claim))
}

/// The Kubernetes client configuration: `--kubeconfig`, else in-cluster (or the default
/// kubeconfig locations, as `kube::Config::infer` does).
pub async fn kube_config(config: &Config) -> anyhow::Result<kube::Config> {
    match config.kubeconfig.as_deref().filter(|p| !p.is_empty()) {
        Some(paths) => {
            let first = paths.split(':').next().unwrap_or(paths);
            let kc = Kubeconfig::read_from(first)
                .map_err(|e| anyhow::anyhow!("reading kubeconfig {first}: {e}"))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("kubeconfig {first}: {e}"))
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!("no Kubernetes configuration (in-cluster or kubeconfig): {e}")
        }),
    }
}

/// The EC2 cloud from `run`'s flags. Its Kubernetes version (for the public AMI parameters)
/// is read from the API server, so that no flag has to repeat it.
pub async fn ec2_cloud(config: &Config) -> anyhow::Result<Arc<dyn Cloud>> {
    use crate::cloud::aws::{load_config, AwsSettings};
    use crate::cloud::ec2::{Ec2Cloud, Ec2Options};
    let sdk = load_config(&AwsSettings {
        region: Some(config.region.clone()),
        endpoint_url: config.aws_endpoint.clone(),
        max_attempts: None,
        credentials: config.aws_credentials.clone(),
    })
    .await;
    let mut options = Ec2Options::new(&config.cluster_name);
    options.cluster_endpoint = config.cluster_endpoint.clone();
    options.cluster_ca = config.cluster_ca.clone();
    options.service_cidr = config.service_cidr.clone();
    options.public_parameter_root = config.public_parameter_root.clone();
    options.isolated_vpc = config.isolated_vpc;
    if let Ok(kcfg) = kube_config(config).await {
        if let Ok(client) = Client::try_from(kcfg) {
            if let Ok(info) = client.apiserver_version().await {
                let minor: String = info
                    .minor
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                options.kubernetes_version = Some(format!("{}.{}", info.major, minor));
            }
        }
    }
    Ok(Arc::new(Ec2Cloud::new(&sdk, options)))
}

/// The KWOK cloud (`--cloud kwok`): Nodes for KWOK to play ([`crate::cloud::kwok`]).
#[cfg(feature = "kwok")]
pub async fn kwok_cloud(config: &Config) -> anyhow::Result<Arc<dyn Cloud>> {
    let client = Client::try_from(kube_config(config).await?)
        .map_err(|e| anyhow::anyhow!("building the Kubernetes client: {e}"))?;
    Ok(Arc::new(crate::cloud::kwok::KwokCloud::new(
        client,
        &config.cluster_name,
    )))
}

/// Runs the agent until `shutdown` turns true. Returns an error when start-up fails or
/// this replica loses leadership (the process exits and its Deployment restarts it, as
/// client-go's leader election does).
pub async fn run(
    config: Config,
    cloud: Arc<dyn Cloud>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (client, eviction_client) = clients(&config).await?;
    let identity = config.identity();
    let metrics = Arc::new(Metrics::new());
    metrics.record_price_list(&config.region);
    let (ready_tx, ready_rx) = watch::channel(false);
    let (stop_http, http_stopped) = watch::channel(false);
    let (m_addr, h_addr) = operator::http::serve(
        config.metrics_addr,
        config.health_addr,
        metrics.clone(),
        ready_rx,
        http_stopped,
    )
    .await?;
    tracing::info!(
        cluster = %config.cluster_name,
        identity = %identity,
        metrics = %m_addr,
        health = %h_addr,
        version = env!("CARGO_PKG_VERSION"),
        "joiner-agent starting"
    );
    let ctx = Context::start(config, client, eviction_client, cloud, metrics, &identity);

    tokio::select! {
        _ = ctx.state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => { let _ = stop_http.send(true); return Ok(()); }
    }
    let _ = ready_tx.send(true);
    tracing::info!("caches synced");
    let _warm = crate::task::AbortOnDrop(tokio::spawn(provisioning::warm::run(ctx.clone())));
    let _trim = crate::task::AbortOnDrop(tokio::spawn(operator::memory::run()));

    let mut election = Election::start(&ctx.client, &ctx.config, &identity);
    let result = lead(&ctx, &mut election.leader, &mut shutdown).await;
    election.stop().await;
    let _ = stop_http.send(true);
    tracing::info!("joiner-agent stopped");
    result
}

/// The Kubernetes clients: one as configured, and one without kube's 429 retry for the
/// Eviction API ([`Context::eviction_client`]).
async fn clients(config: &Config) -> anyhow::Result<(Client, Client)> {
    let kcfg = kube_config(config).await?;
    let client = Client::try_from(kcfg.clone())
        .map_err(|e| anyhow::anyhow!("building the Kubernetes client: {e}"))?;
    let mut no_retry = kcfg;
    no_retry.default_retry = false;
    let eviction_client = Client::try_from(no_retry)
        .map_err(|e| anyhow::anyhow!("building the Kubernetes client: {e}"))?;
    Ok((client, eviction_client))
}

/// Who leads: the Lease's elector, or with `--leader-elect false` this replica from the start.
struct Election {
    /// True while this replica leads.
    leader: watch::Receiver<bool>,
    /// Without an elector, the sender nobody writes to: held so that `leader` stays open
    /// (a closed channel would read as leadership lost).
    _unelected: Option<watch::Sender<bool>>,
    stop: watch::Sender<bool>,
    elector: Option<tokio::task::JoinHandle<()>>,
}

impl Election {
    fn start(client: &Client, config: &Config, identity: &str) -> Election {
        let (leader_tx, leader) = watch::channel(!config.leader_elect);
        let (stop, stopped) = watch::channel(false);
        if !config.leader_elect {
            return Election {
                leader,
                _unelected: Some(leader_tx),
                stop,
                elector: None,
            };
        }
        let elector = operator::leader::Elector::new(
            client.clone(),
            &config.namespace,
            identity,
            config.lease_duration,
            config.lease_retry,
        );
        Election {
            leader,
            _unelected: None,
            stop,
            elector: Some(tokio::spawn(elector.run(leader_tx, stopped))),
        }
    }

    /// Stops the elector, giving it 5 s to release the Lease.
    async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(e) = self.elector {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), e).await;
        }
    }
}

/// Waits for leadership, then runs [`CONTROLLERS`] until `shutdown` turns true or this
/// replica loses the Lease (an error, see [`run`]).
async fn lead(
    ctx: &Arc<Context>,
    leader: &mut watch::Receiver<bool>,
    shutdown: &mut watch::Receiver<bool>,
) -> anyhow::Result<()> {
    tokio::select! {
        r = leader.wait_for(|l| *l) => {
            if r.is_err() { return Ok(()); }
        }
        _ = shutdown.wait_for(|s| *s) => return Ok(()),
    }
    ctx.metrics.leader.set(1);
    let mut tasks = tokio::task::JoinSet::new();
    for (name, f) in CONTROLLERS {
        let fut = f(ctx.clone());
        let name = *name;
        tasks.spawn(async move {
            fut.await;
            tracing::warn!(controller = name, "controller loop ended");
        });
    }
    let lost = tokio::select! {
        r = leader.wait_for(|l| !*l) => r.is_ok(),
        _ = shutdown.wait_for(|s| *s) => false,
    };
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    ctx.metrics.leader.set(0);
    if lost {
        anyhow::bail!(
            "lost leadership of Lease {}/{}",
            ctx.config.namespace,
            operator::leader::LEASE_NAME
        );
    }
    Ok(())
}
