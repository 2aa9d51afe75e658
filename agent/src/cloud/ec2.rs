//! [`Ec2Cloud`]: the [`Cloud`] trait on the EC2 API.
//!
//! The work is split by what it talks to EC2 about: [`super::discovery`] (subnets, security
//! groups), [`super::ami`] (images and the public AMI parameters), [`super::catalog`] (the
//! instance types, offerings and Spot prices, cached), [`super::launch_template`],
//! [`super::fleet`] (CreateFleet and the insufficient-capacity loop) and
//! [`super::instances`] (finding and terminating what was launched). This file holds the
//! shared state and wires the trait to them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;

use super::ice_cache::{Clock, IceCache, SystemClock, ICE_TTL};
use super::launch_template::TEMPLATE_TTL;
use super::records::{Cached, RawCatalog, ResolvedAmis, Subnet};
use super::user_data::ClusterInfo;
use super::{Cloud, CloudError, Instance, LaunchRequest, Launched, StateReason};
use crate::api::NodeClass;
use crate::catalog::{CapacityType, Catalog};
use crate::scheduler::UnavailableOfferings;

/// How the agent's EC2 cloud behaves. [`Ec2Options::new`] gives the production defaults.
#[derive(Clone)]
pub struct Ec2Options {
    pub cluster_name: String,
    /// `--cluster-endpoint`; when this, the CA, the service CIDR or the version is
    /// missing, the cluster is read once with `eks:DescribeCluster`.
    pub cluster_endpoint: Option<String>,
    /// `--cluster-ca`, base64-encoded PEM.
    pub cluster_ca: Option<String>,
    /// `--service-cidr`.
    pub service_cidr: Option<String>,
    /// Kubernetes `major.minor`, for the public AMI parameters.
    pub kubernetes_version: Option<String>,
    /// How long instance types, offerings and Spot prices are reused.
    pub catalog_ttl: Duration,
    /// How long subnets, security groups and AMIs are reused (free IPs change faster).
    pub discovery_ttl: Duration,
    pub ice_ttl: Duration,
    /// How long a launch template may go unused before pruning deletes it.
    pub template_ttl: Duration,
    /// Attempts per CreateFleet (the SDK's own retries are off for it, see `fleet`).
    pub launch_attempts: u32,
    /// First backoff between CreateFleet attempts; doubles each time.
    pub launch_backoff: Duration,
    pub clock: Arc<dyn Clock>,
    /// Where the public AMI parameters live (`/aws/service`). The emulator refuses to store
    /// parameters under `/aws/`, so tests publish theirs under another root.
    pub public_parameter_root: String,
    /// The agent cannot reach AWS endpoints that have no VPC endpoint: the Price List API
    /// is not asked, and the embedded on-demand tables stand (Karpenter's `isolatedVPC`).
    pub isolated_vpc: bool,
}

impl std::fmt::Debug for Ec2Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Options")
            .field("cluster_name", &self.cluster_name)
            .field("cluster_endpoint", &self.cluster_endpoint)
            .field("kubernetes_version", &self.kubernetes_version)
            .finish_non_exhaustive()
    }
}

impl Ec2Options {
    pub fn new(cluster_name: &str) -> Ec2Options {
        Ec2Options {
            cluster_name: cluster_name.to_string(),
            cluster_endpoint: None,
            cluster_ca: None,
            service_cidr: None,
            kubernetes_version: None,
            catalog_ttl: Duration::from_secs(300),
            discovery_ttl: Duration::from_secs(60),
            ice_ttl: ICE_TTL,
            template_ttl: TEMPLATE_TTL,
            launch_attempts: 5,
            launch_backoff: Duration::from_millis(200),
            clock: Arc::new(SystemClock),
            public_parameter_root: "/aws/service".into(),
            isolated_vpc: false,
        }
    }
}

/// The agent's EC2 cloud. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Ec2Cloud {
    pub(crate) ec2: aws_sdk_ec2::Client,
    pub(crate) ssm: aws_sdk_ssm::Client,
    pub(crate) eks: aws_sdk_eks::Client,
    pub(crate) options: Ec2Options,
    pub(crate) ice: IceCache,
    pub(crate) raw: tokio::sync::Mutex<Option<Arc<Cached<RawCatalog>>>>,
    pub(crate) cluster: tokio::sync::OnceCell<ClusterInfo>,
    /// Subnets per selector key.
    pub(crate) subnets: Mutex<HashMap<String, Cached<Vec<Subnet>>>>,
    /// Security group IDs per selector key.
    pub(crate) security_groups: Mutex<HashMap<String, Cached<Vec<String>>>>,
    /// AMIs per selector key.
    pub(crate) amis: Mutex<HashMap<String, Cached<ResolvedAmis>>>,
    /// Launch template name -> ID and when a launch last used it (or pruning first saw it),
    /// for templates known to exist.
    pub(crate) templates: Mutex<HashMap<String, super::launch_template::KnownTemplate>>,
    /// The last catalogue built per NodeClass name, with what it was built from (see
    /// `node_class_catalog`).
    pub(crate) catalogs: Mutex<HashMap<String, (String, crate::catalog::Catalog)>>,
    /// Capacity reservations per selection (see `capacity_reservations`).
    pub(crate) reservations:
        Mutex<HashMap<String, Cached<Vec<crate::catalog::reservations::ReservationRecord>>>>,
    /// The client's Region, whose on-demand prices and Spot history the catalogue uses.
    pub(crate) region: String,
    /// The Price List API, where the Region has an endpoint the agent may reach.
    pub(crate) price_list: Option<aws_sdk_pricing::Client>,
}

impl std::fmt::Debug for Ec2Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Cloud")
            .field("options", &self.options)
            .field("ice", &self.ice)
            .finish_non_exhaustive()
    }
}

impl Ec2Cloud {
    pub fn new(config: &SdkConfig, options: Ec2Options) -> Ec2Cloud {
        let region = config
            .region()
            .map_or("us-east-1", |r| r.as_ref())
            .to_string();
        Ec2Cloud {
            price_list: super::price_list::client(config, &region, options.isolated_vpc),
            region,
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            ice: IceCache::new(options.ice_ttl, options.clock.clone()),
            options,
            raw: tokio::sync::Mutex::new(None),
            cluster: tokio::sync::OnceCell::new(),
            subnets: Mutex::new(HashMap::new()),
            security_groups: Mutex::new(HashMap::new()),
            amis: Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
            catalogs: Mutex::new(HashMap::new()),
            reservations: Mutex::new(HashMap::new()),
        }
    }

    pub fn cluster_name(&self) -> &str {
        &self.options.cluster_name
    }

    /// The insufficient-capacity cache size (a metric).
    pub fn ice_cache_len(&self) -> usize {
        self.ice.len()
    }

    pub(crate) fn fresh<T: Clone>(
        &self,
        map: &Mutex<HashMap<String, Cached<T>>>,
        key: &str,
    ) -> Option<T> {
        let now = self.options.clock.now();
        let m = map.lock().unwrap_or_else(|e| e.into_inner());
        m.get(key)
            .filter(|c| now.duration_since(c.at) < self.options.discovery_ttl)
            .map(|c| c.value.clone())
    }

    pub(crate) fn remember<T>(&self, map: &Mutex<HashMap<String, Cached<T>>>, key: &str, v: T) {
        let at = self.options.clock.now();
        map.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), Cached { at, value: v });
    }
}

#[async_trait::async_trait]
impl Cloud for Ec2Cloud {
    async fn catalog(&self, node_class: &NodeClass) -> Result<Catalog, CloudError> {
        self.node_class_catalog(node_class).await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.launch_nodeclaim(request).await
    }

    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.cluster_instances().await
    }

    async fn instance_for(&self, nodeclaim: &str) -> Result<Option<Instance>, CloudError> {
        self.nodeclaim_instance(nodeclaim).await
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        self.terminate_instances(instance_ids).await
    }

    async fn state_reason(&self, instance_id: &str) -> Result<Option<StateReason>, CloudError> {
        self.instance_state_reason(instance_id).await
    }

    fn unavailable(&self) -> UnavailableOfferings {
        self.ice.snapshot()
    }

    fn mark_unavailable(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) {
        self.ice.insert(capacity_type, instance_type, zone);
    }

    async fn prune_launch_templates(&self, in_use: &[NodeClass]) -> Result<(), CloudError> {
        self.prune_templates(in_use).await
    }

    async fn fargate_profiles(&self) -> Result<Vec<crate::fargate::FargateProfile>, CloudError> {
        self.active_fargate_profiles().await
    }

    async fn resolve(
        &self,
        node_class: &NodeClass,
    ) -> Result<crate::api::NodeClassStatus, CloudError> {
        self.resolve_node_class(node_class).await
    }

    async fn tag_adopted(
        &self,
        instance_id: &str,
        nodeclaim: &str,
        nodepool: &str,
    ) -> Result<(), CloudError> {
        self.tag_adopted_instance(instance_id, nodeclaim, nodepool)
            .await
    }

    async fn capacity_reservations(
        &self,
        ids: &[String],
    ) -> Result<Vec<crate::catalog::reservations::ReservationRecord>, CloudError> {
        self.reservations_by_id(ids).await
    }
}
