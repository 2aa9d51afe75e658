//! The interruption events joiner listens to, and the EventBridge pattern for each.
//!
//! One rule per event kind (rather than one rule matching all of them) so that a kind can
//! be switched off in place, and so that each rule's metrics in CloudWatch show how often
//! that kind of interruption happens.

use joiner_agent::interruption::messages::Kind;
use serde_json::Value;

/// An event kind the agent acts on (design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleKind {
    /// Two minutes' notice before EC2 reclaims a Spot instance: drain and replace.
    SpotInterruption,
    /// EC2 thinks a Spot instance is at elevated risk: recorded as an event only.
    Rebalance,
    /// An instance is stopping or terminating outside the agent's control.
    StateChange,
    /// AWS Health scheduled maintenance (retirement, reboot) of an EC2 instance.
    ScheduledChange,
    /// An instance in an interruptible capacity reservation is being reclaimed.
    CapacityReservationInterruption,
}

impl RuleKind {
    pub const ALL: [RuleKind; 5] = [
        RuleKind::SpotInterruption,
        RuleKind::Rebalance,
        RuleKind::StateChange,
        RuleKind::ScheduledChange,
        RuleKind::CapacityReservationInterruption,
    ];

    /// The resource attribute that switches this kind on or off, also the key of the
    /// `rule_names`/`rule_arns` maps.
    pub fn attribute(self) -> &'static str {
        match self {
            RuleKind::SpotInterruption => "spot_interruption",
            RuleKind::Rebalance => "rebalance",
            RuleKind::StateChange => "state_change",
            RuleKind::ScheduledChange => "scheduled_change",
            RuleKind::CapacityReservationInterruption => "capacity_reservation_interruption",
        }
    }

    /// The suffix of the rule name.
    pub fn suffix(self) -> &'static str {
        match self {
            RuleKind::SpotInterruption => "spot-interruption",
            RuleKind::Rebalance => "rebalance",
            RuleKind::StateChange => "state-change",
            RuleKind::ScheduledChange => "scheduled-change",
            RuleKind::CapacityReservationInterruption => "capacity-interruption",
        }
    }

    pub fn from_suffix(suffix: &str) -> Option<RuleKind> {
        RuleKind::ALL.into_iter().find(|k| k.suffix() == suffix)
    }

    pub fn description(self) -> &'static str {
        match self {
            RuleKind::SpotInterruption => "joiner: EC2 Spot interruption warnings",
            RuleKind::Rebalance => "joiner: EC2 rebalance recommendations",
            RuleKind::StateChange => "joiner: EC2 instances stopping or terminating",
            RuleKind::ScheduledChange => "joiner: AWS Health scheduled changes for EC2",
            RuleKind::CapacityReservationInterruption => {
                "joiner: EC2 capacity reservation interruption warnings"
            }
        }
    }

    /// The event kind of the agent's that this rule delivers.
    pub fn agent_kind(self) -> Kind {
        match self {
            RuleKind::SpotInterruption => Kind::SpotInterruption,
            RuleKind::Rebalance => Kind::Rebalance,
            RuleKind::StateChange => Kind::StateChange,
            RuleKind::ScheduledChange => Kind::ScheduledChange,
            RuleKind::CapacityReservationInterruption => Kind::CapacityReservationInterruption,
        }
    }

    /// The EventBridge event pattern: the agent's own for the kind
    /// (`joiner_agent::interruption::messages::Kind::event_pattern`), which its parser and
    /// its end-to-end tests use too.
    pub fn pattern(self) -> Value {
        self.agent_kind().event_pattern()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_agent_kind_has_one_rule() {
        let kinds: Vec<Kind> = RuleKind::ALL.iter().map(|k| k.agent_kind()).collect();
        assert_eq!(kinds, Kind::ALL.to_vec());
    }

    #[test]
    fn state_change_pattern_keeps_only_the_states_acted_on() {
        assert_eq!(
            RuleKind::StateChange.pattern(),
            json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"],
                   "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]}})
        );
    }

    #[test]
    fn one_detail_type_per_rule() {
        let mut seen = std::collections::BTreeSet::new();
        for k in RuleKind::ALL {
            let p = k.pattern();
            let types = p["detail-type"].as_array().unwrap();
            assert_eq!(types.len(), 1, "{k:?}");
            assert!(seen.insert(types[0].as_str().unwrap().to_string()));
            assert_eq!(RuleKind::from_suffix(k.suffix()), Some(k));
        }
    }

    #[test]
    fn health_rule_matches_ec2_scheduled_changes_only() {
        let p = RuleKind::ScheduledChange.pattern();
        assert_eq!(p["source"], json!(["aws.health"]));
        assert_eq!(p["detail-type"], json!(["AWS Health Event"]));
        assert_eq!(p["detail"]["service"], json!(["EC2"]));
        assert_eq!(p["detail"]["eventTypeCategory"], json!(["scheduledChange"]));
    }

    #[test]
    fn spot_warning_pattern() {
        assert_eq!(
            RuleKind::SpotInterruption.pattern(),
            json!({"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]})
        );
    }
}
