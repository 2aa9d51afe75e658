//! What every controller is handed: the clients, the cloud, the cluster state and the
//! state the loops share across rounds ([`Context`]), and the served API's kinds. A module
//! of its own below the controllers, so that each imports it as a sibling and none reaches
//! back up into the composition root that starts them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::Client;

use super::events;
use super::fargate_view::FargateView;
use super::operator::config::Config;
use super::operator::metrics::Metrics;
use super::queue;
use super::served_api::ServedApi;
use super::state::ClusterState;
use crate::api::served::Served;
use crate::api::{NodeClaim, NodeClass, NodeOverlay, NodePool};
use crate::cloud::Cloud;

/// What every controller gets.
pub struct Context {
    pub client: Client,
    /// A client without kube's 429 retry, for the Eviction API: a PDB refusal is an
    /// answer the drain loop backs off on itself, not a transient error to retry blindly.
    pub eviction_client: Client,
    pub cloud: Arc<dyn Cloud>,
    pub state: Arc<ClusterState>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
    /// The API reconciled (`--api`): where the agent's kinds are read and written, and the
    /// finalizer and annotation names it writes on them.
    pub served: Served,
    pub events: Arc<events::Recorder>,
    /// NodeClaim names to reconcile (launch, registration, initialization, termination).
    pub claims: Arc<queue::Queue>,
    /// When the batch that created a claim saw its last pending pod, per claim: provisioning
    /// writes it as it creates the claim, the launch reads it for the pending → launched
    /// reaction metric.
    pub batch_seen: Mutex<HashMap<String, Instant>>,
    /// The cluster's Fargate profiles as last read, and pods already told they are
    /// Fargate's: kept across rounds by the [`super::scheduling_input`], which provisioning and
    /// disruption both build.
    pub fargate: FargateView,
    /// Written by interruption as it disrupts a claim; read by provisioning and termination
    /// (see [`InterruptionSent`]).
    pub interruption_sent: Mutex<HashMap<String, InterruptionSent>>,
    /// The terminating claims waiting for their volumes to detach (termination's), so that
    /// each wait is logged and counted once, when it ends.
    pub detach_waits: Mutex<HashSet<String>>,
}

/// When an interruption's message became visible in the queue, per disrupted NodeClaim:
/// provisioning and termination measure message → replacement created and message →
/// cordon from it.
pub struct InterruptionSent {
    pub at: std::time::SystemTime,
    pub replacement_seen: bool,
}

impl Context {
    /// The context every loop shares, its watches started (not yet synced).
    pub(super) fn start(
        config: Config,
        client: Client,
        eviction_client: Client,
        cloud: Arc<dyn Cloud>,
        metrics: Arc<Metrics>,
        identity: &str,
    ) -> Arc<Context> {
        let served = config.served();
        let state = ClusterState::start(client.clone(), metrics.clone(), served);
        Arc::new(Context {
            served,
            events: Arc::new(events::Recorder::new(client.clone(), identity, served)),
            client,
            eviction_client,
            cloud,
            state,
            metrics,
            config: Arc::new(config),
            claims: queue::Queue::new(),
            batch_seen: Mutex::new(HashMap::new()),
            fargate: Default::default(),
            interruption_sent: Mutex::new(HashMap::new()),
            detach_waits: Mutex::new(HashSet::new()),
        })
    }

    pub fn node_pool_api(&self) -> ServedApi<NodePool> {
        ServedApi::new(self.client.clone(), self.served.node_pools())
    }

    pub fn node_claim_api(&self) -> ServedApi<NodeClaim> {
        ServedApi::new(self.client.clone(), self.served.node_claims())
    }

    pub fn node_class_api(&self) -> ServedApi<NodeClass> {
        ServedApi::new(self.client.clone(), self.served.node_classes())
    }

    pub fn node_overlay_api(&self) -> ServedApi<NodeOverlay> {
        ServedApi::new(self.client.clone(), self.served.node_overlays())
    }

    /// The agent's finalizer on NodeClaims, their Nodes and NodeClasses.
    pub fn finalizer(&self) -> &'static str {
        self.served.termination_finalizer()
    }
}
