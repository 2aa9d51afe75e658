//! `joiner_node_pool` as a struct, and its mapping to and from the agent's `NodePoolSpec`.

use std::collections::BTreeMap;

use joiner_agent::api::node_pool::{
    Budget, Disruption, NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec, TemplateMetadata,
};
use joiner_agent::api::{NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};

use super::fields::*;
use super::Model;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePoolModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub name: Option<String>,
    pub node_class: Option<String>,
    pub weight: Option<i64>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub requirements: Vec<RequirementModel>,
    pub taints: Vec<TaintModel>,
    pub startup_taints: Vec<TaintModel>,
    pub limits: BTreeMap<String, String>,
    pub expire_after: Option<String>,
    pub termination_grace_period: Option<String>,
    pub disruption: Option<DisruptionModel>,
    /// `replace`: replace nodes on EC2 rebalance recommendations (the NodePool object's
    /// `joiner.dev/rebalance` annotation, which the agent reads; not the nodes').
    pub rebalance: Option<String>,
    /// `N/duration`: at most N such replacements per window (`joiner.dev/rebalance-limit`).
    pub rebalance_limit: Option<String>,
    /// Computed at plan time; carried through untouched.
    pub admitted_instance_types: Value,
    pub timeouts: Value,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequirementModel {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
    pub min_values: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaintModel {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisruptionModel {
    pub consolidation_policy: Option<String>,
    pub consolidate_after: Option<String>,
    pub budgets: Vec<BudgetModel>,
    /// Karpenter v1beta1's place for `expireAfter`; accepted by the schema only so that
    /// validation can say where it moved (it is never stored or sent).
    pub expire_after_v1beta1: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetModel {
    pub nodes: String,
    pub schedule: Option<String>,
    pub duration: Option<String>,
    pub reasons: Vec<String>,
}

impl Model for RequirementModel {
    fn from_value(v: &Value) -> Self {
        RequirementModel {
            key: string(v, "key").unwrap_or_default(),
            operator: string(v, "operator").unwrap_or_default(),
            values: strings(v, "values"),
            min_values: int(v, "min_values"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("key", Value::string(&self.key)),
            ("operator", Value::string(&self.operator)),
            ("values", opt_list(&self.values)),
            ("min_values", opt_int(self.min_values)),
        ])
    }
}

impl Model for TaintModel {
    fn from_value(v: &Value) -> Self {
        TaintModel {
            key: string(v, "key").unwrap_or_default(),
            value: string(v, "value"),
            effect: string(v, "effect").unwrap_or_default(),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("key", Value::string(&self.key)),
            ("value", opt_str(&self.value)),
            ("effect", Value::string(&self.effect)),
        ])
    }
}

impl Model for BudgetModel {
    fn from_value(v: &Value) -> Self {
        BudgetModel {
            nodes: string(v, "nodes").unwrap_or_default(),
            schedule: string(v, "schedule"),
            duration: string(v, "duration"),
            reasons: strings(v, "reasons"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("nodes", Value::string(&self.nodes)),
            ("schedule", opt_str(&self.schedule)),
            ("duration", opt_str(&self.duration)),
            ("reasons", opt_list(&self.reasons)),
        ])
    }
}

impl Model for DisruptionModel {
    fn from_value(v: &Value) -> Self {
        DisruptionModel {
            consolidation_policy: string(v, "consolidation_policy"),
            consolidate_after: string(v, "consolidate_after"),
            budgets: blocks(v, "budget"),
            expire_after_v1beta1: string(v, "expire_after"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("consolidation_policy", opt_str(&self.consolidation_policy)),
            ("consolidate_after", opt_str(&self.consolidate_after)),
            ("budget", block_list(&self.budgets)),
            ("expire_after", opt_str(&self.expire_after_v1beta1)),
        ])
    }
}

impl Model for NodePoolModel {
    fn from_value(v: &Value) -> Self {
        NodePoolModel {
            id: string(v, "id"),
            cluster_name: string(v, "cluster_name"),
            name: string(v, "name"),
            node_class: string(v, "node_class"),
            weight: int(v, "weight"),
            labels: map(v, "labels"),
            annotations: map(v, "annotations"),
            requirements: blocks(v, "requirement"),
            taints: blocks(v, "taint"),
            startup_taints: blocks(v, "startup_taint"),
            limits: map(v, "limits"),
            expire_after: string(v, "expire_after"),
            termination_grace_period: string(v, "termination_grace_period"),
            disruption: single(v, "disruption"),
            rebalance: string(v, "rebalance"),
            rebalance_limit: string(v, "rebalance_limit"),
            admitted_instance_types: v.get("admitted_instance_types").clone(),
            timeouts: v.get("timeouts").clone(),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("id", opt_str(&self.id)),
            ("cluster_name", opt_str(&self.cluster_name)),
            ("name", opt_str(&self.name)),
            ("node_class", opt_str(&self.node_class)),
            ("weight", opt_int(self.weight)),
            ("labels", opt_map(&self.labels)),
            ("annotations", opt_map(&self.annotations)),
            ("requirement", block_list(&self.requirements)),
            ("taint", block_list(&self.taints)),
            ("startup_taint", block_list(&self.startup_taints)),
            ("limits", opt_map(&self.limits)),
            ("expire_after", opt_str(&self.expire_after)),
            (
                "termination_grace_period",
                opt_str(&self.termination_grace_period),
            ),
            ("disruption", block_single(&self.disruption)),
            ("rebalance", opt_str(&self.rebalance)),
            ("rebalance_limit", opt_str(&self.rebalance_limit)),
            (
                "admitted_instance_types",
                self.admitted_instance_types.clone(),
            ),
            ("timeouts", self.timeouts.clone()),
        ])
    }
}

fn taint_api(t: &TaintModel) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone(),
    }
}

fn taint_model(t: &Taint) -> TaintModel {
    TaintModel {
        key: t.key.clone(),
        value: Some(t.value.clone()).filter(|v| !v.is_empty()),
        effect: t.effect.clone(),
    }
}

impl NodePoolModel {
    /// The annotations of the NodePool object itself (not its node template): the rebalance
    /// opt-in, which the agent reads from the pool.
    pub fn object_annotations(&self) -> BTreeMap<String, String> {
        use joiner_agent::interruption::actions::{
            REBALANCE_ANNOTATION, REBALANCE_LIMIT_ANNOTATION,
        };
        let mut a = BTreeMap::new();
        if let Some(r) = &self.rebalance {
            a.insert(REBALANCE_ANNOTATION.to_string(), r.clone());
        }
        if let Some(l) = &self.rebalance_limit {
            a.insert(REBALANCE_LIMIT_ANNOTATION.to_string(), l.clone());
        }
        a
    }

    /// Reads the rebalance opt-in back from the object's annotations.
    pub fn set_object_annotations(&mut self, annotations: &BTreeMap<String, String>) {
        use joiner_agent::interruption::actions::{
            REBALANCE_ANNOTATION, REBALANCE_LIMIT_ANNOTATION,
        };
        self.rebalance = annotations.get(REBALANCE_ANNOTATION).cloned();
        self.rebalance_limit = annotations.get(REBALANCE_LIMIT_ANNOTATION).cloned();
    }

    /// The CRD spec this configuration declares, with the CRD's defaults filled in, so that
    /// it compares equal to what the cluster stores.
    pub fn spec(&self) -> NodePoolSpec {
        let defaults = Disruption::default();
        let disruption = match &self.disruption {
            None => defaults,
            Some(d) => Disruption {
                consolidation_policy: d
                    .consolidation_policy
                    .clone()
                    .unwrap_or(defaults.consolidation_policy),
                consolidate_after: d
                    .consolidate_after
                    .clone()
                    .unwrap_or(defaults.consolidate_after),
                budgets: if d.budgets.is_empty() {
                    defaults.budgets
                } else {
                    d.budgets
                        .iter()
                        .map(|b| Budget {
                            nodes: b.nodes.clone(),
                            schedule: b.schedule.clone(),
                            duration: b.duration.clone(),
                            reasons: b.reasons.clone(),
                        })
                        .collect()
                },
            },
        };
        NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: TemplateMetadata {
                    labels: self.labels.clone(),
                    annotations: self.annotations.clone(),
                },
                spec: NodeClaimTemplateSpec {
                    node_class_ref: NodeClassReference {
                        group: joiner_agent::api::GROUP.into(),
                        kind: "NodeClass".into(),
                        name: self.node_class.clone().unwrap_or_default(),
                    },
                    requirements: self
                        .requirements
                        .iter()
                        .map(|r| NodeSelectorRequirementWithMinValues {
                            key: r.key.clone(),
                            operator: r.operator.clone(),
                            values: r.values.clone(),
                            min_values: r.min_values.map(|m| m as i32),
                        })
                        .collect(),
                    taints: self.taints.iter().map(taint_api).collect(),
                    startup_taints: self.startup_taints.iter().map(taint_api).collect(),
                    expire_after: self
                        .expire_after
                        .clone()
                        .unwrap_or_else(|| "720h".to_string()),
                    termination_grace_period: self.termination_grace_period.clone(),
                },
            },
            disruption,
            limits: self.limits.clone(),
            weight: self.weight.map(|w| w as i32),
        }
    }

    /// The configuration a stored spec corresponds to: values equal to the CRD defaults
    /// read as omitted, so an import matches a configuration that leaves them out.
    pub fn from_spec(cluster: &str, name: &str, spec: &NodePoolSpec) -> NodePoolModel {
        let t = &spec.template.spec;
        let defaults = Disruption::default();
        let disruption = if spec.disruption == defaults {
            None
        } else {
            Some(DisruptionModel {
                // A disruption block that differs from the defaults reads back whole.
                consolidation_policy: Some(spec.disruption.consolidation_policy.clone()),
                consolidate_after: Some(spec.disruption.consolidate_after.clone()),
                budgets: if spec.disruption.budgets == defaults.budgets {
                    Vec::new()
                } else {
                    spec.disruption
                        .budgets
                        .iter()
                        .map(|b| BudgetModel {
                            nodes: b.nodes.clone(),
                            schedule: b.schedule.clone(),
                            duration: b.duration.clone(),
                            reasons: b.reasons.clone(),
                        })
                        .collect()
                },
                expire_after_v1beta1: None,
            })
        };
        NodePoolModel {
            id: Some(format!("{cluster}:{name}")),
            cluster_name: Some(cluster.into()),
            name: Some(name.into()),
            node_class: Some(t.node_class_ref.name.clone()),
            weight: spec.weight.map(i64::from),
            labels: spec.template.metadata.labels.clone(),
            annotations: spec.template.metadata.annotations.clone(),
            requirements: t
                .requirements
                .iter()
                .map(|r| RequirementModel {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: r.values.clone(),
                    min_values: r.min_values.map(i64::from),
                })
                .collect(),
            taints: t.taints.iter().map(taint_model).collect(),
            startup_taints: t.startup_taints.iter().map(taint_model).collect(),
            limits: spec.limits.clone(),
            expire_after: Some(t.expire_after.clone()).filter(|e| *e != "720h"),
            termination_grace_period: t.termination_grace_period.clone(),
            disruption,
            rebalance: None,
            rebalance_limit: None,
            admitted_instance_types: Value::Null,
            timeouts: Value::Null,
        }
    }
}
