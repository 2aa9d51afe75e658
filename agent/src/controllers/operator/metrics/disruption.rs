//! Disruption metrics (`joiner_disruption_*`), written by the disruption and repair loops and
//! by termination, registered into the agent's registry with one call so tests and
//! benchmarks can also read them directly.

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{l as labels, Labels};

pub struct DisruptionMetrics {
    /// Decisions taken, by reason and action (delete, replace).
    pub decisions: Family<Labels, Counter<u64, AtomicU64>>,
    /// Nodes disrupted, by reason and nodepool.
    pub nodes_disrupted: Family<Labels, Counter<u64, AtomicU64>>,
    /// Candidates left alone in the last pass, by reason.
    pub blocked: Family<Labels, Gauge<i64, AtomicI64>>,
    /// Price per hour saved by decisions, in millionths of the Region's currency (USD, or CNY
    /// in the China Regions: `price_currency`), so the counter stays an integer.
    pub saving_micro_usd_per_hour: Family<Labels, Counter<u64, AtomicU64>>,
    /// Every pass, skipped ones included (see `passes_skipped`).
    pub pass_duration: Histogram,
    /// Passes skipped because the world was the same as in a pass that decided nothing.
    pub passes_skipped: Counter<u64, AtomicU64>,
    /// Disrupted nodes drained before their replacements were Initialized (the deadline
    /// less the pods' grace came first).
    pub replacement_failures: Counter<u64, AtomicU64>,
    /// Node repair: nodes replaced, by nodepool and condition.
    pub nodes_repaired: Family<Labels, Counter<u64, AtomicU64>>,
    /// Node repair: nodes past their toleration held back because too much of their pool
    /// is unhealthy, by nodepool, in the last pass.
    pub repair_held: Family<Labels, Gauge<i64, AtomicI64>>,
    /// Pods consolidation evicted, by nodepool (what `consolidationEvictionsPerHour` caps).
    pub consolidation_evictions: Family<Labels, Counter<u64, AtomicU64>>,
}

impl Default for DisruptionMetrics {
    fn default() -> Self {
        DisruptionMetrics::new()
    }
}

impl DisruptionMetrics {
    pub fn new() -> DisruptionMetrics {
        let m = DisruptionMetrics {
            decisions: Family::default(),
            nodes_disrupted: Family::default(),
            blocked: Family::default(),
            saving_micro_usd_per_hour: Family::default(),
            pass_duration: Histogram::new([
                0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            passes_skipped: Counter::default(),
            replacement_failures: Counter::default(),
            nodes_repaired: Family::default(),
            repair_held: Family::default(),
            consolidation_evictions: Family::default(),
        };
        // Every reason and action from the start: a dashboard's rate over a series that
        // appears only at the first decision shows nothing, not zero, until then.
        for r in crate::disruption::budgets::Reason::ALL {
            for action in ["delete", "replace"] {
                drop(
                    m.decisions
                        .get_or_create(&labels(&[("reason", r.as_str()), ("action", action)])),
                );
            }
        }
        m
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "disruption_decisions",
            "Disruption decisions, by reason and action",
            self.decisions.clone(),
        );
        r.register(
            "disruption_nodes",
            "Nodes voluntarily disrupted, by reason and nodepool",
            self.nodes_disrupted.clone(),
        );
        r.register(
            "disruption_blocked",
            "Disruption candidates left alone in the last pass, by reason",
            self.blocked.clone(),
        );
        r.register(
            "disruption_saving_micro_usd_per_hour",
            "Hourly price saved by disruption decisions, in millionths of the currency price_currency names (USD; CNY in the China Regions), by reason",
            self.saving_micro_usd_per_hour.clone(),
        );
        r.register(
            "disruption_pass_duration_seconds",
            "Duration of one disruption pass (state, simulation, decisions), skipped passes included",
            self.pass_duration.clone(),
        );
        r.register(
            "disruption_passes_skipped",
            "Disruption passes skipped: the cluster was as a pass that decided nothing left it, and no time rule had flipped",
            self.passes_skipped.clone(),
        );
        r.register(
            "disruption_replacement_failures",
            "Disrupted nodes drained before their replacements were Initialized",
            self.replacement_failures.clone(),
        );
        r.register(
            "repair_nodes",
            "Nodes replaced by node repair, by nodepool and condition",
            self.nodes_repaired.clone(),
        );
        r.register(
            "repair_held",
            "Unhealthy nodes past their toleration not repaired because over 20 % of their NodePool is unhealthy, by nodepool",
            self.repair_held.clone(),
        );
        r.register(
            "disruption_consolidation_evictions",
            "Pods evicted by consolidation decisions, by nodepool",
            self.consolidation_evictions.clone(),
        );
    }

    pub fn decision_count(&self, reason: &str, action: &str) -> u64 {
        self.decisions
            .get_or_create(&labels(&[("reason", reason), ("action", action)]))
            .get()
    }
}
