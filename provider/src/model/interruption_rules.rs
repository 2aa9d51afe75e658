//! `joiner_interruption_rules` as a struct.
//!
//! The five on/off switches are one map keyed by [`RuleKind`], so resource code loops over
//! kinds instead of naming five attributes; the attribute names come from
//! [`RuleKind::attribute`], the same place the schema takes them from.

use std::collections::BTreeMap;

use super::fields::*;
use super::nullable::*;
use super::Model;
use crate::protocol::prelude::*;
use crate::resources::interruption_rules::kinds::RuleKind;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InterruptionRulesModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub queue_arn: Option<String>,
    /// `None` is a null attribute, `Some(empty)` is `tags = {}`.
    pub tags: Option<BTreeMap<String, String>>,
    pub rule_names: Option<BTreeMap<String, String>>,
    pub rule_arns: Option<BTreeMap<String, String>>,
    /// Each kind's switch; a kind missing here is null (or unknown) in the value.
    pub switches: BTreeMap<RuleKind, bool>,
    pub timeouts: Value,
}

impl Model for InterruptionRulesModel {
    fn from_value(v: &Value) -> Self {
        InterruptionRulesModel {
            id: string(v, "id"),
            cluster_name: string(v, "cluster_name"),
            queue_arn: string(v, "queue_arn"),
            tags: nullable_map(v, "tags"),
            rule_names: nullable_map(v, "rule_names"),
            rule_arns: nullable_map(v, "rule_arns"),
            switches: RuleKind::ALL
                .into_iter()
                .filter_map(|k| boolean(v, k.attribute()).map(|on| (k, on)))
                .collect(),
            timeouts: v.get("timeouts").clone(),
        }
    }

    fn to_value(&self) -> Value {
        let mut v = Value::object([
            ("id", opt_str(&self.id)),
            ("cluster_name", opt_str(&self.cluster_name)),
            ("queue_arn", opt_str(&self.queue_arn)),
            ("tags", nullable_map_value(&self.tags)),
            ("rule_names", nullable_map_value(&self.rule_names)),
            ("rule_arns", nullable_map_value(&self.rule_arns)),
            ("timeouts", self.timeouts.clone()),
        ]);
        for k in RuleKind::ALL {
            v.set_attr(k.attribute(), opt_bool(self.switches.get(&k).copied()));
        }
        v
    }
}

impl InterruptionRulesModel {
    /// The kinds switched on; a null switch is on (the schema's default).
    pub fn enabled_kinds(&self) -> Vec<RuleKind> {
        RuleKind::ALL
            .into_iter()
            .filter(|k| self.switches.get(k).copied().unwrap_or(true))
            .collect()
    }

    pub fn cluster(&self) -> String {
        self.cluster_name.clone().unwrap_or_default()
    }
}
