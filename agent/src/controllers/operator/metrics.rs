//! The agent's Prometheus metrics (`joiner_*`), served on `/metrics`. One registry per
//! agent so several in-process agents (tests) do not share counters.

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

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
    /// `joiner_interruption_*` (see `crate::controllers::interruption::metrics`).
    pub interruption:
        std::sync::Arc<crate::controllers::interruption::metrics::InterruptionMetrics>,
    /// `joiner_disruption_*` (see `crate::controllers::disruption::metrics`).
    pub disruption: std::sync::Arc<crate::controllers::disruption::metrics::DisruptionMetrics>,
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
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("joiner"),
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
            interruption: Default::default(),
            disruption: Default::default(),
        };
        let r = &mut m.registry;
        r.register(
            "pods_pending",
            "Pods waiting for capacity in the last scheduling round",
            m.pods_pending.clone(),
        );
        r.register(
            "pods_scheduled",
            "Pods the scheduler placed",
            m.pods_scheduled.clone(),
        );
        r.register(
            "pods_unschedulable",
            "Pods no NodePool could take",
            m.pods_unschedulable.clone(),
        );
        r.register(
            "pods_ignored",
            "Pending pods the agent does not provision for in the last round, by reason",
            m.pods_ignored.clone(),
        );
        r.register(
            "scheduling_duration_seconds",
            "Duration of one scheduling round (state to plan)",
            m.scheduling_duration.clone(),
        );
        r.register(
            "scheduling_rounds",
            "Scheduling rounds run",
            m.scheduling_rounds.clone(),
        );
        r.register(
            "reaction_seconds",
            "Last pending pod of a batch observed to launch request sent",
            m.reaction.clone(),
        );
        r.register(
            "nodeclaims_created",
            "NodeClaims created, by nodepool",
            m.nodeclaims_created.clone(),
        );
        r.register(
            "nodeclaims_launched",
            "NodeClaims launched, by nodepool and capacity type",
            m.nodeclaims_launched.clone(),
        );
        r.register(
            "nodeclaims_registered",
            "NodeClaims whose Node registered, by nodepool and capacity type",
            m.nodeclaims_registered.clone(),
        );
        r.register(
            "nodeclaims_registration_timeouts",
            "NodeClaims deleted because their Node did not register within the registration TTL, by nodepool",
            m.nodeclaims_registration_timeouts.clone(),
        );
        r.register(
            "nodeclaims_initialized",
            "NodeClaims whose Node initialized, by nodepool and capacity type",
            m.nodeclaims_initialized.clone(),
        );
        r.register(
            "nodeclaims_terminated",
            "NodeClaims terminated, by nodepool and capacity type",
            m.nodeclaims_terminated.clone(),
        );
        r.register(
            "cloud_errors",
            "Cloud API errors by operation and code",
            m.cloud_errors.clone(),
        );
        r.register(
            "kubernetes_errors",
            "Kubernetes API errors by operation and code",
            m.kube_errors.clone(),
        );
        r.register(
            "ice_cache_size",
            "Offerings in the insufficient-capacity cache",
            m.ice_cache_size.clone(),
        );
        r.register(
            "malformed_objects",
            "Objects that could not be read, by kind",
            m.malformed_objects.clone(),
        );
        r.register(
            "evictions",
            "Eviction API calls by result",
            m.evictions.clone(),
        );
        r.register(
            "gc_instances_terminated",
            "Orphaned instances terminated by garbage collection",
            m.gc_instances_terminated.clone(),
        );
        r.register(
            "gc_nodeclaims_deleted",
            "NodeClaims deleted because their instance was gone",
            m.gc_nodeclaims_deleted.clone(),
        );
        r.register(
            "nodes_adopted",
            "Karpenter's nodes adopted as NodeClaims",
            m.nodes_adopted.clone(),
        );
        r.register(
            "adoption_failures",
            "Adoptions of Karpenter's nodes that failed and are retried",
            m.adoption_failures.clone(),
        );
        r.register(
            "adoption_refused",
            "Adoption passes that found Karpenter's controller running and adopted nothing",
            m.adoption_refused.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader Lease",
            m.leader.clone(),
        );
        m.interruption.register(r);
        m.disruption.register(r);
        m
    }

    pub fn cloud_error(&self, e: &crate::cloud::CloudError) {
        self.cloud_errors
            .get_or_create(&l(&[("operation", &e.operation), ("code", &e.code)]))
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
