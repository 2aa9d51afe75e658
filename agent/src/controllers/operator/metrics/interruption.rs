//! Interruption metrics (`joiner_interruption_*`), written by the interruption loop's queue
//! consumer and by provisioning and termination as they replace and drain its nodes. Kept
//! in their own struct, registered into the agent's registry with one call, so tests and
//! benchmarks can read them directly.

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{l as labels, Labels};

pub struct InterruptionMetrics {
    /// Messages received, by event kind (`unparsed` when the body could not be read).
    pub received: Family<Labels, Counter<u64, AtomicU64>>,
    /// Actions taken, by action (replace, rebalance_replace, event_only) and kind.
    pub actions: Family<Labels, Counter<u64, AtomicU64>>,
    /// Messages deleted without an action, by reason (malformed, unknown_kind,
    /// invalid_detail, foreign_account, not_ours, duplicate, state_not_actionable, ...).
    pub dropped: Family<Labels, Counter<u64, AtomicU64>>,
    /// Messages deleted from the queue.
    pub deleted: Counter<u64, AtomicU64>,
    /// SQS API errors by operation and code.
    pub errors: Family<Labels, Counter<u64, AtomicU64>>,
    /// Message visible in the queue (SQS `SentTimestamp`) → node cordoned (after its
    /// replacement is Initialized, or when the notice runs short).
    pub message_to_cordon: Histogram,
    /// Message visible in the queue → the provisioner created (or named an in-flight)
    /// replacement for the node's pods.
    pub message_to_replacement: Histogram,
    /// NodeClaims the provisioner created holding pods of interrupted nodes.
    pub replacements: Counter<u64, AtomicU64>,
    /// Messages received and not yet handled: a number that stays up means the handlers
    /// are slower than the warnings arrive.
    pub in_flight: Gauge<i64, AtomicI64>,
    /// How long the oldest message of the latest receive had waited in the queue, in
    /// seconds (0 after an empty receive). A warning gives two minutes: time spent queued is
    /// time not spent replacing.
    pub message_age: Gauge<f64, AtomicU64>,
}

impl Default for InterruptionMetrics {
    fn default() -> Self {
        InterruptionMetrics::new()
    }
}

impl InterruptionMetrics {
    pub fn new() -> InterruptionMetrics {
        let m = InterruptionMetrics {
            received: Family::default(),
            actions: Family::default(),
            dropped: Family::default(),
            deleted: Counter::default(),
            errors: Family::default(),
            message_to_cordon: Histogram::new([
                0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
            ]),
            message_to_replacement: Histogram::new([
                0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
            ]),
            replacements: Counter::default(),
            in_flight: Gauge::default(),
            message_age: Gauge::default(),
        };
        // Every kind from the start, so a quiet queue reads as zero warnings, not as none.
        for k in crate::interruption::messages::Kind::ALL {
            drop(m.received.get_or_create(&labels(&[("kind", k.as_str())])));
        }
        m
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "interruption_messages_received",
            "Interruption queue messages received, by event kind",
            self.received.clone(),
        );
        r.register(
            "interruption_actions",
            "Interruption actions taken, by action and event kind",
            self.actions.clone(),
        );
        r.register(
            "interruption_messages_dropped",
            "Interruption messages deleted without action, by reason",
            self.dropped.clone(),
        );
        r.register(
            "interruption_messages_deleted",
            "Interruption messages deleted from the queue",
            self.deleted.clone(),
        );
        r.register(
            "interruption_queue_errors",
            "SQS errors by operation and code",
            self.errors.clone(),
        );
        r.register(
            "interruption_message_to_cordon_seconds",
            "Interruption message visible in the queue to node cordoned",
            self.message_to_cordon.clone(),
        );
        r.register(
            "interruption_message_to_replacement_seconds",
            "Interruption message visible in the queue to replacement NodeClaim created or named",
            self.message_to_replacement.clone(),
        );
        r.register(
            "interruption_replacements",
            "NodeClaims created by the provisioner for pods of interrupted nodes",
            self.replacements.clone(),
        );
        r.register(
            "interruption_messages_in_flight",
            "Interruption messages received and not yet handled",
            self.in_flight.clone(),
        );
        r.register(
            "interruption_message_age_seconds",
            "Time the oldest message of the latest receive had waited in the queue (0 when it was empty)",
            self.message_age.clone(),
        );
    }

    pub fn drop_reason(&self, reason: &str) {
        self.dropped
            .get_or_create(&labels(&[("reason", reason)]))
            .inc();
    }

    pub fn received_kind(&self, kind: &str) {
        self.received
            .get_or_create(&labels(&[("kind", kind)]))
            .inc();
    }

    pub fn action(&self, action: &str, kind: &str) {
        self.actions
            .get_or_create(&labels(&[("action", action), ("kind", kind)]))
            .inc();
    }

    pub fn dropped_count(&self, reason: &str) -> u64 {
        self.dropped
            .get_or_create(&labels(&[("reason", reason)]))
            .get()
    }

    pub fn action_count(&self, action: &str, kind: &str) -> u64 {
        self.actions
            .get_or_create(&labels(&[("action", action), ("kind", kind)]))
            .get()
    }
}
