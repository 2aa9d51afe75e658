//! The agent's Prometheus metrics (`joiner_*`), served on `/metrics`. One registry per
//! agent so several in-process agents (tests) do not share counters.

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub mod disruption;
pub mod interruption;

pub type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Registry,
    /// Pods waiting for capacity the last round saw.
    pub pods_pending: Gauge<i64, AtomicI64>,
    /// Pods a round placed on existing, in-flight or new capacity.
    pub pods_scheduled: Counter<u64, AtomicU64>,
    /// Pods no NodePool can take.
    pub pods_unschedulable: Counter<u64, AtomicU64>,
    /// Pending pods the agent leaves alone, by reason (daemonset, scheduler-name, malformed).
    pub pods_ignored: Family<Labels, Gauge<i64, AtomicI64>>,
    pub scheduling_duration: Histogram,
    pub scheduling_rounds: Counter<u64, AtomicU64>,
    /// Last pending pod of a batch observed → launch request sent, per NodeClaim.
    pub reaction: Histogram,
    pub nodeclaims_created: Family<Labels, Counter<u64, AtomicU64>>,
    pub nodeclaims_launched: Family<Labels, Counter<u64, AtomicU64>>,
    pub nodeclaims_registered: Family<Labels, Counter<u64, AtomicU64>>,
    pub nodeclaims_registration_timeouts: Family<Labels, Counter<u64, AtomicU64>>,
    pub nodeclaims_initialized: Family<Labels, Counter<u64, AtomicU64>>,
    pub nodeclaims_terminated: Family<Labels, Counter<u64, AtomicU64>>,
    /// Terminations that waited for a drained node's volumes to detach, by how the wait
    /// ended (`detached`, or `grace_period_elapsed` with attachments left).
    pub volume_detach_waits: Family<Labels, Counter<u64, AtomicU64>>,
    pub cloud_errors: Family<Labels, Counter<u64, AtomicU64>>,
    pub kube_errors: Family<Labels, Counter<u64, AtomicU64>>,
    pub ice_cache_size: Gauge<i64, AtomicI64>,
    /// Objects that could not be read (bad CRD fields, unparseable quantities), by kind.
    pub malformed_objects: Family<Labels, Counter<u64, AtomicU64>>,
    pub evictions: Family<Labels, Counter<u64, AtomicU64>>,
    pub gc_instances_terminated: Counter<u64, AtomicU64>,
    pub gc_nodeclaims_deleted: Counter<u64, AtomicU64>,
    /// Karpenter's nodes adopted, adoptions that failed (retried), and passes that found
    /// Karpenter's controller running and adopted nothing.
    pub nodes_adopted: Counter<u64, AtomicU64>,
    pub adoption_failures: Counter<u64, AtomicU64>,
    pub adoption_refused: Counter<u64, AtomicU64>,
    pub leader: Gauge<i64, AtomicI64>,
    /// Launched NodeClaims, by nodepool, capacity type and zone (`inventory`).
    pub nodes: Family<Labels, Gauge<i64, AtomicI64>>,
    /// What those nodes cost per hour at the agent's own prices, in the Region's currency
    /// (`price_currency`): USD, or CNY in the China Regions, whatever the metric's name says.
    pub nodes_price: Family<Labels, Gauge<f64, AtomicU64>>,
    /// 1 for the currency every price metric is in, with the Region and the on-demand
    /// table's Region and date (`catalog::prices`).
    pub price_currency: Family<Labels, Gauge<i64, AtomicI64>>,
    /// Pods bound to the agent's nodes, by nodepool.
    pub pods_bound: Family<Labels, Gauge<i64, AtomicI64>>,
    /// Age of the oldest pod waiting for capacity, read from the watch (not from the last
    /// round: a pod a pool's limit holds back triggers no new round, yet keeps waiting).
    pub pods_pending_oldest: Gauge<f64, AtomicU64>,
    /// Pod-seconds spent waiting for capacity: its rate is the average number of pods
    /// waiting.
    pub pods_pending_seconds: Counter<f64, AtomicU64>,
    /// 1 when the last round left pods unplaced because this pool's limits were reached.
    pub nodepool_at_limit: Family<Labels, Gauge<i64, AtomicI64>>,
    /// Launches that failed, by nodepool and the AWS error code.
    pub launch_failures: Family<Labels, Counter<u64, AtomicU64>>,
    /// Cloud calls IAM refused (any service); by operation in `cloud_errors`.
    pub iam_refusals: Counter<u64, AtomicU64>,
    /// NodeClaims waiting in the launch and termination work queue.
    pub claim_queue_depth: Gauge<i64, AtomicI64>,
    /// NodeClaim deletion requested → instance terminated and claim released: the
    /// replacement wait and the drain, which is what an interrupted node's pods live through.
    pub termination_duration: Histogram,
    /// Read from /proc at each scrape.
    pub resident_memory: Gauge<i64, AtomicI64>,
    /// `joiner_interruption_*` (see [`interruption`]).
    pub interruption: std::sync::Arc<interruption::InterruptionMetrics>,
    /// `joiner_disruption_*` (see [`disruption`]).
    pub disruption: std::sync::Arc<disruption::DisruptionMetrics>,
}

pub fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Nodepool and capacity-type labels for the per-claim counters.
pub fn claim_labels(claim: &crate::api::NodeClaim) -> Labels {
    use kube::ResourceExt;
    let labels = claim.labels();
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
    l(&[
        ("nodepool", get(crate::labels::JOINER_NODEPOOL)),
        ("capacity_type", get(crate::labels::CAPACITY_TYPE)),
    ])
}

impl Metrics {
    /// Names the currency of every price the agent reports, and says once in the log which
    /// on-demand table prices `region` (another Region's stands in where it has none).
    pub fn record_price_list(&self, region: &str) {
        let prices = crate::catalog::prices::OnDemandPrices::for_region(region);
        let currency = prices.currency().code();
        let labels = l(&[
            ("region", region),
            ("currency", currency),
            ("table", prices.table_region()),
            ("published", prices.published()),
        ]);
        self.price_currency.get_or_create(&labels).set(1);
        if prices.is_estimate() {
            tracing::warn!(
                region,
                table = prices.table_region(),
                published = prices.published(),
                currency,
                "no on-demand price table for this Region; its partition's reference table stands in, so Spot is weighed against estimated on-demand prices until the Region's price list is read (never in GovCloud or with --isolated-vpc)"
            );
        } else {
            tracing::info!(
                region,
                published = prices.published(),
                currency,
                "on-demand prices from the Region's embedded table"
            );
        }
    }

    pub fn new() -> Metrics {
        // Registered below, once every metric exists.
        let mut m = Metrics {
            registry: Registry::default(),
            pods_pending: Gauge::default(),
            pods_scheduled: Counter::default(),
            pods_unschedulable: Counter::default(),
            pods_ignored: Family::default(),
            scheduling_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            scheduling_rounds: Counter::default(),
            reaction: Histogram::new([
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 5.0, 10.0, 15.0,
            ]),
            nodeclaims_created: Family::default(),
            nodeclaims_launched: Family::default(),
            nodeclaims_registered: Family::default(),
            nodeclaims_registration_timeouts: Family::default(),
            nodeclaims_initialized: Family::default(),
            nodeclaims_terminated: Family::default(),
            volume_detach_waits: Family::default(),
            cloud_errors: Family::default(),
            kube_errors: Family::default(),
            ice_cache_size: Gauge::default(),
            malformed_objects: Family::default(),
            evictions: Family::default(),
            gc_instances_terminated: Counter::default(),
            gc_nodeclaims_deleted: Counter::default(),
            nodes_adopted: Counter::default(),
            adoption_failures: Counter::default(),
            adoption_refused: Counter::default(),
            leader: Gauge::default(),
            nodes: Family::default(),
            nodes_price: Family::default(),
            price_currency: Family::default(),
            pods_bound: Family::default(),
            pods_pending_oldest: Gauge::default(),
            pods_pending_seconds: Counter::default(),
            nodepool_at_limit: Family::default(),
            launch_failures: Family::default(),
            iam_refusals: Counter::default(),
            claim_queue_depth: Gauge::default(),
            termination_duration: Histogram::new([
                1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0, 300.0, 600.0,
            ]),
            resident_memory: Gauge::default(),
            interruption: Default::default(),
            disruption: Default::default(),
        };
        let mut registry = Registry::with_prefix("joiner");
        m.register_scheduling(&mut registry);
        m.register_nodeclaims(&mut registry);
        m.register_inventory(&mut registry);
        m.register_health(&mut registry);
        m.interruption.register(&mut registry);
        m.disruption.register(&mut registry);
        m.registry = registry;
        m
    }

    /// Pending pods and the scheduling rounds that place them.
    fn register_scheduling(&self, r: &mut Registry) {
        r.register(
            "pods_pending",
            "Pods waiting for capacity in the last scheduling round",
            self.pods_pending.clone(),
        );
        r.register(
            "pods_scheduled",
            "Pods the scheduler placed",
            self.pods_scheduled.clone(),
        );
        r.register(
            "pods_unschedulable",
            "Pods no NodePool could take",
            self.pods_unschedulable.clone(),
        );
        r.register(
            "pods_ignored",
            "Pending pods the agent does not provision for in the last round, by reason",
            self.pods_ignored.clone(),
        );
        r.register(
            "scheduling_duration_seconds",
            "Duration of one scheduling round (state to plan)",
            self.scheduling_duration.clone(),
        );
        r.register(
            "scheduling_rounds",
            "Scheduling rounds run",
            self.scheduling_rounds.clone(),
        );
        r.register(
            "reaction_seconds",
            "Last pending pod of a batch observed to launch request sent",
            self.reaction.clone(),
        );
    }

    /// A NodeClaim's life: created, launched (or failed), registered, initialized, terminated.
    fn register_nodeclaims(&self, r: &mut Registry) {
        r.register(
            "nodeclaims_created",
            "NodeClaims created, by nodepool",
            self.nodeclaims_created.clone(),
        );
        r.register(
            "nodeclaims_launched",
            "NodeClaims launched, by nodepool and capacity type",
            self.nodeclaims_launched.clone(),
        );
        r.register(
            "nodeclaims_registered",
            "NodeClaims whose Node registered, by nodepool and capacity type",
            self.nodeclaims_registered.clone(),
        );
        r.register(
            "nodeclaims_registration_timeouts",
            "NodeClaims deleted because their Node did not register within the registration TTL, by nodepool",
            self.nodeclaims_registration_timeouts.clone(),
        );
        r.register(
            "nodeclaims_initialized",
            "NodeClaims whose Node initialized, by nodepool and capacity type",
            self.nodeclaims_initialized.clone(),
        );
        r.register(
            "nodeclaims_terminated",
            "NodeClaims terminated, by nodepool and capacity type",
            self.nodeclaims_terminated.clone(),
        );
        r.register(
            "nodeclaims_volume_detach_waits",
            "NodeClaim terminations that waited for the drained node's VolumeAttachments to go, by result (detached, grace_period_elapsed)",
            self.volume_detach_waits.clone(),
        );
        r.register(
            "nodeclaims_launch_failures",
            "NodeClaim launches that failed, by nodepool and error code",
            self.launch_failures.clone(),
        );
        r.register(
            "nodeclaim_queue_depth",
            "NodeClaims waiting in the launch and termination work queue",
            self.claim_queue_depth.clone(),
        );
        r.register(
            "nodeclaims_termination_duration_seconds",
            "NodeClaim deletion requested to instance terminated and claim released (replacement wait and drain included)",
            self.termination_duration.clone(),
        );
    }

    /// What the agent runs now (`inventory`): nodes, their price, bound and waiting pods, pools at
    /// their limits.
    fn register_inventory(&self, r: &mut Registry) {
        r.register(
            "nodes",
            "Launched NodeClaims, by nodepool, capacity type and zone",
            self.nodes.clone(),
        );
        r.register(
            "nodes_price_usd_per_hour",
            "Hourly price of the launched NodeClaims at the agent's prices, by nodepool, capacity type and zone, in the currency price_currency names (CNY in the China Regions)",
            self.nodes_price.clone(),
        );
        r.register(
            "price_currency",
            "1 for the currency the agent's prices are in (the Region's: CNY in the China Regions, USD elsewhere), with the on-demand table it uses and that table's date",
            self.price_currency.clone(),
        );
        r.register(
            "pods_bound",
            "Pods bound to the agent's nodes, by nodepool",
            self.pods_bound.clone(),
        );
        r.register(
            "pods_pending_oldest_seconds",
            "Age of the oldest pod kube-scheduler could not place and the agent provisions for (0 when none)",
            self.pods_pending_oldest.clone(),
        );
        r.register(
            "pods_pending_seconds",
            "Pod-seconds spent waiting for capacity",
            self.pods_pending_seconds.clone(),
        );
        r.register(
            "nodepool_at_limit",
            "1 when the last scheduling round left pods unplaced because the nodepool's limits were reached",
            self.nodepool_at_limit.clone(),
        );
    }

    /// The agent's own health: errors by API and code, IAM refusals, garbage collection,
    /// adoption, leadership and memory.
    fn register_health(&self, r: &mut Registry) {
        r.register(
            "cloud_errors",
            "Cloud API errors by operation and code",
            self.cloud_errors.clone(),
        );
        r.register(
            "kubernetes_errors",
            "Kubernetes API errors by operation and code",
            self.kube_errors.clone(),
        );
        r.register(
            "ice_cache_size",
            "Offerings in the insufficient-capacity cache",
            self.ice_cache_size.clone(),
        );
        r.register(
            "malformed_objects",
            "Objects that could not be read, by kind",
            self.malformed_objects.clone(),
        );
        r.register(
            "evictions",
            "Eviction API calls by result",
            self.evictions.clone(),
        );
        r.register(
            "gc_instances_terminated",
            "Orphaned instances terminated by garbage collection",
            self.gc_instances_terminated.clone(),
        );
        r.register(
            "gc_nodeclaims_deleted",
            "NodeClaims deleted because their instance was gone",
            self.gc_nodeclaims_deleted.clone(),
        );
        r.register(
            "nodes_adopted",
            "Karpenter's nodes adopted as NodeClaims",
            self.nodes_adopted.clone(),
        );
        r.register(
            "adoption_failures",
            "Adoptions of Karpenter's nodes that failed and are retried",
            self.adoption_failures.clone(),
        );
        r.register(
            "adoption_refused",
            "Adoption passes that found Karpenter's controller running and adopted nothing",
            self.adoption_refused.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader Lease",
            self.leader.clone(),
        );
        r.register(
            "iam_refusals",
            "Cloud calls refused by IAM (UnauthorizedOperation, AccessDenied)",
            self.iam_refusals.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the agent process",
            self.resident_memory.clone(),
        );
    }

    pub fn cloud_error(&self, e: &crate::cloud::CloudError) {
        self.cloud_errors
            .get_or_create(&l(&[("operation", &e.operation), ("code", &e.code)]))
            .inc();
        if is_iam_refusal(&e.code) {
            self.iam_refusals.inc();
        }
    }

    /// A failed launch: counted as a cloud error and by its pool and code.
    pub fn launch_failure(&self, nodepool: &str, e: &crate::cloud::CloudError) {
        self.cloud_error(e);
        self.launch_failures
            .get_or_create(&l(&[("nodepool", nodepool), ("code", &e.code)]))
            .inc();
    }

    pub fn kube_error(&self, operation: &str, e: &kube::Error) {
        let code = match e {
            kube::Error::Api(s) => s.code.to_string(),
            _ => "transport".to_string(),
        };
        self.kube_errors
            .get_or_create(&l(&[("operation", operation), ("code", &code)]))
            .inc();
    }

    pub fn malformed(&self, kind: &str) {
        self.malformed_objects
            .get_or_create(&l(&[("kind", kind)]))
            .inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        if let Some(rss) = resident_memory_bytes() {
            self.resident_memory.set(rss);
        }
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The codes AWS answers a call IAM did not allow with: EC2's, and the query and JSON
/// protocols' (SQS, STS, IAM; SSM, EKS, KMS, Pricing).
pub fn is_iam_refusal(code: &str) -> bool {
    matches!(
        code,
        "UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException"
    )
}

/// VmRSS from /proc/self/status (Linux), in bytes.
fn resident_memory_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
