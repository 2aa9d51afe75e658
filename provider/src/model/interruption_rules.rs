//! `joiner_interruption_rules` as a struct.
//!
//! The five on/off switches are one map keyed by [`RuleKind`], so resource code loops over
//! kinds instead of naming five attributes; the attribute names come from
//! [`RuleKind::attribute`], the same place the schema takes them from.

use std::collections::BTreeMap;

use super::attr::{get, Attr, Model, Planned};
use crate::policy::events::RuleKind;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InterruptionRulesModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub queue_arn: Option<String>,
    /// `None` is a null attribute, `Some(empty)` is `tags = {}`.
    pub tags: Option<BTreeMap<String, String>>,
    pub rule_names: Option<BTreeMap<String, String>>,
    pub rule_arns: Option<BTreeMap<String, String>>,
    /// Each kind's switch; a kind missing here is null. Planned: the rule names and ARNs
    /// are known at plan time only once every switch is.
    pub switches: BTreeMap<RuleKind, Planned<bool>>,
    pub timeouts: Value,
}

impl Attr for InterruptionRulesModel {
    fn from_attr(v: &Value) -> Self {
        InterruptionRulesModel {
            id: get(v, "id"),
            cluster_name: get(v, "cluster_name"),
            queue_arn: get(v, "queue_arn"),
            tags: get(v, "tags"),
            rule_names: get(v, "rule_names"),
            rule_arns: get(v, "rule_arns"),
            switches: RuleKind::ALL
                .into_iter()
                .filter(|k| !v.get(k.attribute()).is_null())
                .map(|k| (k, get(v, k.attribute())))
                .collect(),
            timeouts: v.get("timeouts").clone(),
        }
    }

    fn to_attr(&self) -> Value {
        let mut v = Value::object([
            ("id", self.id.to_attr()),
            ("cluster_name", self.cluster_name.to_attr()),
            ("queue_arn", self.queue_arn.to_attr()),
            ("tags", self.tags.to_attr()),
            ("rule_names", self.rule_names.to_attr()),
            ("rule_arns", self.rule_arns.to_attr()),
            ("timeouts", self.timeouts.clone()),
        ]);
        for k in RuleKind::ALL {
            let on = self.switches.get(&k).map(Attr::to_attr);
            v.set_attr(k.attribute(), on.unwrap_or(Value::Null));
        }
        v
    }
}

impl Model for InterruptionRulesModel {}

impl InterruptionRulesModel {
    /// The kinds switched on; a null switch is on (the schema's default).
    pub fn enabled_kinds(&self) -> Vec<RuleKind> {
        RuleKind::ALL
            .into_iter()
            .filter(|k| self.switches.get(k).is_none_or(|on| **on))
            .collect()
    }

    pub fn cluster(&self) -> String {
        self.cluster_name.clone().unwrap_or_default()
    }
}
