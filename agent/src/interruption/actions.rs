//! What to do about an interruption event: pure decisions, so the controller stays a thin
//! loop and the rules are unit-tested without a queue or a cluster.
//!
//! - Spot interruption warning, EC2 scheduled change, an instance stopping or terminating,
//!   capacity-reservation interruption: the node is going whatever we do, so replacement
//!   capacity is launched first, then the node is cordoned and drained. Disruption budgets
//!   do not apply.
//! - Rebalance recommendation: the instance is only at elevated risk. By default the agent
//!   records an Event. A NodePool opts in to proactive replacement with the annotation
//!   [`REBALANCE_ANNOTATION`]` = "replace"`; [`RebalanceLimiter`] caps how many of its nodes
//!   are replaced per window, and the replacement excludes the offering that got the
//!   recommendation, so a pool cannot loop replacing nodes onto the same at-risk capacity.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::messages::{Detail, Event};

/// NodePool annotation that opts in to replacing nodes on rebalance recommendations.
pub const REBALANCE_ANNOTATION: &str = "joiner.dev/rebalance";
/// How long EC2 gives between a Spot interruption warning (or a capacity reservation
/// interruption) and taking the instance back.
pub const SPOT_NOTICE_SECONDS: u64 = 120;

/// By when an interrupted instance's pods must have left it: the drain may wait for their
/// replacements until then (less the pods' termination grace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice<'a> {
    /// This long after the event's `time`.
    AfterEvent(u64),
    /// At this RFC 3339 time (a scheduled change's start).
    At(&'a str),
    /// The instance is already going: drain at once.
    Now,
    /// EC2 gives no deadline (a rebalance recommendation): the caller's own bound applies.
    Unbounded,
}

/// The notice an event gives.
pub fn notice(event: &Event) -> Notice<'_> {
    match &event.detail {
        Detail::SpotInterruption(_) | Detail::CapacityReservationInterruption(_) => {
            Notice::AfterEvent(SPOT_NOTICE_SECONDS)
        }
        Detail::ScheduledChange(d) => d.start_time.as_deref().map_or(Notice::Now, Notice::At),
        Detail::StateChange(_) => Notice::Now,
        Detail::Rebalance(_) => Notice::Unbounded,
    }
}

/// NodePool annotation with the replacement rate limit, `N/duration` (default `1/5m`).
pub const REBALANCE_LIMIT_ANNOTATION: &str = "joiner.dev/rebalance-limit";
/// The default rate: one rebalance replacement per NodePool per five minutes.
pub const DEFAULT_REBALANCE_LIMIT: (u32, u64) = (1, 300);

/// The NodeClaim condition set on an interrupted claim (Karpenter's `DisruptionReason`).
pub const DISRUPTED_CONDITION: &str = "Disrupted";

/// What the controller does with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Launch replacement capacity, then cordon and drain; ignores budgets.
    Replace {
        /// Event/condition reason, e.g. `SpotInterrupted`.
        reason: &'static str,
        /// Whether the instance's offering goes into the insufficient-capacity cache
        /// (Spot or a reservation reclaimed: that capacity is short right now).
        mark_offering_unavailable: bool,
    },
    /// A rebalance recommendation: replace only if the NodePool opted in and its limiter
    /// allows; otherwise an Event.
    Rebalance,
    /// Nothing to do, with why (counted as a drop).
    Ignore(&'static str),
}

/// The action for an event.
pub fn action_for(event: &Event) -> Action {
    match &event.detail {
        Detail::SpotInterruption(_) => Action::Replace {
            reason: "SpotInterrupted",
            mark_offering_unavailable: true,
        },
        // The owner is taking the reservation's capacity back: like a Spot reclaim, the
        // replacement must not go into the same reservation.
        Detail::CapacityReservationInterruption(_) => Action::Replace {
            reason: "CapacityReservationInterrupted",
            mark_offering_unavailable: true,
        },
        Detail::StateChange(d) => match d.state.as_str() {
            "stopping" | "stopped" => Action::Replace {
                reason: "InstanceStopping",
                mark_offering_unavailable: false,
            },
            "shutting-down" | "terminated" => Action::Replace {
                reason: "InstanceTerminating",
                mark_offering_unavailable: false,
            },
            _ => Action::Ignore("state_not_actionable"),
        },
        Detail::ScheduledChange(d) => {
            if d.service == "EC2" && d.event_type_category == "scheduledChange" {
                Action::Replace {
                    reason: "ScheduledChange",
                    mark_offering_unavailable: false,
                }
            } else {
                Action::Ignore("health_not_actionable")
            }
        }
        Detail::Rebalance(_) => Action::Rebalance,
    }
}

/// Whether a NodePool's annotations opt in to rebalance replacement, and its rate limit.
pub fn rebalance_policy(annotations: &BTreeMap<String, String>) -> Option<(u32, u64)> {
    if annotations.get(REBALANCE_ANNOTATION).map(String::as_str) != Some("replace") {
        return None;
    }
    Some(
        annotations
            .get(REBALANCE_LIMIT_ANNOTATION)
            .and_then(|s| parse_limit(s).ok())
            .unwrap_or(DEFAULT_REBALANCE_LIMIT),
    )
}

/// Parses `N/duration` (`2/10m`).
pub fn parse_limit(s: &str) -> Result<(u32, u64), String> {
    let (n, d) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected N/duration, e.g. 1/5m"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a count"))?;
    let d = crate::api::duration::parse_seconds(d.trim()).map_err(|e| format!("{s:?}: {e}"))?;
    if n == 0 || d == 0 {
        return Err(format!("{s:?}: count and duration must be positive"));
    }
    Ok((n, d))
}

/// Per-NodePool sliding-window limiter for rebalance replacements. Time is passed in
/// (seconds), so it is deterministic under test.
#[derive(Debug, Default)]
pub struct RebalanceLimiter {
    taken: HashMap<String, VecDeque<u64>>,
}

impl RebalanceLimiter {
    /// Takes a slot for `pool` at `now` if fewer than `limit.0` were taken in the last
    /// `limit.1` seconds.
    pub fn try_take(&mut self, pool: &str, limit: (u32, u64), now: u64) -> bool {
        let q = self.taken.entry(pool.to_string()).or_default();
        while q.front().is_some_and(|t| t + limit.1 <= now) {
            q.pop_front();
        }
        if q.len() as u32 >= limit.0 {
            return false;
        }
        q.push_back(now);
        true
    }
}

/// Remembers event IDs recently acted on: EventBridge delivers at least once, and a
/// duplicate must not launch a second replacement.
#[derive(Debug)]
pub struct SeenEvents {
    ttl: u64,
    order: VecDeque<(u64, String)>,
    ids: HashMap<String, u64>,
}

impl SeenEvents {
    pub fn new(ttl_seconds: u64) -> SeenEvents {
        SeenEvents {
            ttl: ttl_seconds,
            order: VecDeque::new(),
            ids: HashMap::new(),
        }
    }

    /// True the first time `key` is seen within the TTL.
    pub fn first(&mut self, key: &str, now: u64) -> bool {
        while let Some((t, k)) = self.order.front() {
            if t + self.ttl > now {
                break;
            }
            if self.ids.get(k) == Some(t) {
                self.ids.remove(k);
            }
            self.order.pop_front();
        }
        if self.ids.contains_key(key) {
            return false;
        }
        self.ids.insert(key.to_string(), now);
        self.order.push_back((now, key.to_string()));
        true
    }

    /// Forgets `key` (the action failed and should be retried on redelivery).
    pub fn forget(&mut self, key: &str) {
        self.ids.remove(key);
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::messages::parse;
    use super::*;

    fn ev(detail_type: &str, source: &str, detail: serde_json::Value) -> Event {
        parse(
            &serde_json::json!({"id": "x", "source": source, "detail-type": detail_type, "detail": detail})
                .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn each_kind_gives_its_notice() {
        let spot = ev(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1", "instance-action": "terminate"}),
        );
        assert_eq!(notice(&spot), Notice::AfterEvent(SPOT_NOTICE_SECONDS));
        let stopping = ev(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1", "state": "stopping"}),
        );
        assert_eq!(notice(&stopping), Notice::Now);
        let scheduled = ev(
            "AWS Health Event",
            "aws.health",
            serde_json::json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": "2026-12-01T10:00:00Z",
                "affectedEntities": [{"entityValue": "i-1"}]}),
        );
        assert_eq!(notice(&scheduled), Notice::At("2026-12-01T10:00:00Z"));
        let rebalance = ev(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1"}),
        );
        assert_eq!(notice(&rebalance), Notice::Unbounded);
    }

    #[test]
    fn actions_by_kind() {
        let spot = ev(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1", "instance-action": "terminate"}),
        );
        assert_eq!(
            action_for(&spot),
            Action::Replace {
                reason: "SpotInterrupted",
                mark_offering_unavailable: true
            }
        );
        for (state, want) in [
            ("stopping", Some("InstanceStopping")),
            ("stopped", Some("InstanceStopping")),
            ("shutting-down", Some("InstanceTerminating")),
            ("terminated", Some("InstanceTerminating")),
            ("running", None),
            ("pending", None),
        ] {
            let e = ev(
                "EC2 Instance State-change Notification",
                "aws.ec2",
                serde_json::json!({"instance-id": "i-1", "state": state}),
            );
            match (action_for(&e), want) {
                (Action::Replace { reason, .. }, Some(w)) => assert_eq!(reason, w),
                (Action::Ignore(_), None) => {}
                (a, w) => panic!("{state}: {a:?} vs {w:?}"),
            }
        }
        let health = |service: &str, cat: &str| {
            ev(
                "AWS Health Event",
                "aws.health",
                serde_json::json!({"service": service, "eventTypeCategory": cat,
                    "affectedEntities": [{"entityValue": "i-1"}]}),
            )
        };
        assert!(matches!(
            action_for(&health("EC2", "scheduledChange")),
            Action::Replace {
                reason: "ScheduledChange",
                ..
            }
        ));
        assert_eq!(
            action_for(&health("RDS", "scheduledChange")),
            Action::Ignore("health_not_actionable")
        );
        assert_eq!(
            action_for(&health("EC2", "issue")),
            Action::Ignore("health_not_actionable")
        );
        let rb = ev(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1"}),
        );
        assert_eq!(action_for(&rb), Action::Rebalance);
        let cr = ev(
            "EC2 Capacity Reservation Instance Interruption Warning",
            "aws.ec2",
            serde_json::json!({"instance-id": "i-1", "instance-action": "terminate"}),
        );
        assert!(matches!(
            action_for(&cr),
            Action::Replace {
                mark_offering_unavailable: true,
                ..
            }
        ));
    }

    #[test]
    fn rebalance_opt_in_and_limits() {
        let mut a = BTreeMap::new();
        assert_eq!(rebalance_policy(&a), None);
        a.insert(REBALANCE_ANNOTATION.into(), "replace".into());
        assert_eq!(rebalance_policy(&a), Some(DEFAULT_REBALANCE_LIMIT));
        a.insert(REBALANCE_LIMIT_ANNOTATION.into(), "3/10m".into());
        assert_eq!(rebalance_policy(&a), Some((3, 600)));
        // A bad limit falls back to the default rather than disabling the opt-in.
        a.insert(REBALANCE_LIMIT_ANNOTATION.into(), "lots".into());
        assert_eq!(rebalance_policy(&a), Some(DEFAULT_REBALANCE_LIMIT));
        a.insert(REBALANCE_ANNOTATION.into(), "event".into());
        assert_eq!(rebalance_policy(&a), None);
        assert!(parse_limit("0/5m").is_err());
        assert!(parse_limit("1/0s").is_err());
        assert!(parse_limit("1").unwrap_err().contains("N/duration"));
    }

    #[test]
    fn limiter_windows_per_pool() {
        let mut l = RebalanceLimiter::default();
        assert!(l.try_take("a", (2, 60), 0));
        assert!(l.try_take("a", (2, 60), 10));
        assert!(!l.try_take("a", (2, 60), 59));
        assert!(l.try_take("b", (2, 60), 59), "pools are independent");
        assert!(l.try_take("a", (2, 60), 60), "the first slot expired");
        assert!(!l.try_take("a", (2, 60), 65));
    }

    #[test]
    fn duplicates_within_ttl() {
        let mut s = SeenEvents::new(300);
        assert!(s.first("e1", 0));
        assert!(!s.first("e1", 299));
        assert!(s.first("e2", 100));
        assert!(s.first("e1", 300), "expired after the TTL");
        s.forget("e2");
        assert!(s.first("e2", 301));
        assert_eq!(s.len(), 2);
    }
}
