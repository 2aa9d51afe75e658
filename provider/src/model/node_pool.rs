//! `joiner_node_pool` as a struct, and its mapping to and from the agent's `NodePoolSpec`.

use std::collections::BTreeMap;

use joiner_agent::api::node_pool::{
    Budget, Disruption, Headroom, NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec, Repair,
    RepairPolicy, TemplateMetadata,
};
use joiner_agent::api::{NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct NodePoolModel {
        pub id: Option<String>,
        pub cluster_name: Option<String>,
        pub name: Option<String>,
        pub node_class: Option<String>,
        pub weight: Option<i64>,
        /// Planned, as the requirements are: admission is computed only once both are known.
        pub labels: Planned<BTreeMap<String, String>>,
        pub annotations: BTreeMap<String, String>,
        pub requirements: Planned<Vec<RequirementModel>> => "requirement",
        pub taints: Vec<TaintModel> => "taint",
        pub startup_taints: Vec<TaintModel> => "startup_taint",
        pub limits: BTreeMap<String, String>,
        pub expire_after: Option<String>,
        pub termination_grace_period: Option<String>,
        pub disruption: Option<DisruptionModel>,
        /// `replace`: replace nodes on EC2 rebalance recommendations (the NodePool object's
        /// `joiner.dev/rebalance` annotation, which the agent reads; not the nodes').
        pub rebalance: Planned<Option<String>>,
        /// `N/duration`: at most N such replacements per window (`joiner.dev/rebalance-limit`).
        pub rebalance_limit: Option<String>,
        /// Karpenter NodePools whose running nodes this pool adopts (the object's
        /// `joiner.dev/adopts-karpenter-nodepools` annotation).
        pub adopts_karpenter_node_pools: Vec<String>,
        /// Launch policies (`spec.minValuesPolicy`, `spec.candidatePriceRatio`).
        pub min_values_policy: Option<String>,
        pub candidate_price_ratio: Option<String>,
        /// Static capacity, warm capacity (headroom) and node repair.
        pub replicas: Option<i64>,
        pub headroom: Vec<HeadroomModel> => "headroom",
        pub repair: Option<RepairModel>,
        /// Computed at plan time; carried through untouched.
        pub admitted_instance_types: Value,
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct HeadroomModel {
        pub cpu: Option<String>,
        pub memory: Option<String>,
        pub pods: Option<i64>,
        pub nodes: Option<i64>,
        pub schedule: Option<String>,
        pub duration: Option<String>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct RepairModel {
        pub policies: Vec<RepairPolicyModel> => "policy",
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct RepairPolicyModel {
        pub condition_type: String,
        pub condition_status: String,
        pub toleration_duration: String,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct RequirementModel {
        pub key: String,
        pub operator: String,
        pub values: Vec<String>,
        pub min_values: Option<i64>,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TaintModel {
        pub key: String,
        pub value: Option<String>,
        pub effect: String,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct DisruptionModel {
        pub consolidation_policy: Option<String>,
        pub consolidate_after: Option<String>,
        pub budgets: Vec<BudgetModel> => "budget",
        pub spot_to_spot_consolidation: Option<bool>,
        pub consolidation_evictions_per_hour: Option<i64>,
        /// Karpenter v1beta1's place for `expireAfter`; accepted by the schema only so that
        /// validation can say where it moved (it is never stored or sent).
        pub expire_after_v1beta1: Option<String> => "expire_after",
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct BudgetModel {
        pub nodes: String,
        pub schedule: Option<String>,
        pub duration: Option<String>,
        pub reasons: Vec<String>,
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
        if let Some(r) = &*self.rebalance {
            a.insert(REBALANCE_ANNOTATION.to_string(), r.clone());
        }
        if let Some(l) = &self.rebalance_limit {
            a.insert(REBALANCE_LIMIT_ANNOTATION.to_string(), l.clone());
        }
        if !self.adopts_karpenter_node_pools.is_empty() {
            a.insert(
                joiner_agent::labels::ADOPTS_KARPENTER_NODEPOOLS.to_string(),
                self.adopts_karpenter_node_pools.join(","),
            );
        }
        a
    }

    /// Reads the rebalance opt-in back from the object's annotations.
    pub fn set_object_annotations(&mut self, annotations: &BTreeMap<String, String>) {
        use joiner_agent::interruption::actions::{
            REBALANCE_ANNOTATION, REBALANCE_LIMIT_ANNOTATION,
        };
        self.rebalance = annotations.get(REBALANCE_ANNOTATION).cloned().into();
        self.rebalance_limit = annotations.get(REBALANCE_LIMIT_ANNOTATION).cloned();
        self.adopts_karpenter_node_pools = annotations
            .get(joiner_agent::labels::ADOPTS_KARPENTER_NODEPOOLS)
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
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
                spot_to_spot_consolidation: d.spot_to_spot_consolidation.unwrap_or(false),
                consolidation_evictions_per_hour: d
                    .consolidation_evictions_per_hour
                    .map(|n| n.clamp(0, i64::from(u32::MAX)) as u32),
            },
        };
        NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: TemplateMetadata {
                    labels: (*self.labels).clone(),
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
            min_values_policy: self.min_values_policy.clone(),
            candidate_price_ratio: self.candidate_price_ratio.clone(),
            replicas: self.replicas,
            headroom: self.headroom.iter().map(HeadroomModel::api).collect(),
            repair: self.repair.as_ref().map(|r| Repair {
                policies: r
                    .policies
                    .iter()
                    .map(|p| RepairPolicy {
                        condition_type: p.condition_type.clone(),
                        condition_status: p.condition_status.clone(),
                        toleration_duration: p.toleration_duration.clone(),
                    })
                    .collect(),
            }),
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
                spot_to_spot_consolidation: spec
                    .disruption
                    .spot_to_spot_consolidation
                    .then_some(true),
                consolidation_evictions_per_hour: spec
                    .disruption
                    .consolidation_evictions_per_hour
                    .map(i64::from),
                expire_after_v1beta1: None,
            })
        };
        NodePoolModel {
            id: Some(format!("{cluster}:{name}")),
            cluster_name: Some(cluster.into()),
            name: Some(name.into()),
            node_class: Some(t.node_class_ref.name.clone()),
            weight: spec.weight.map(i64::from),
            labels: spec.template.metadata.labels.clone().into(),
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
                .collect::<Vec<_>>()
                .into(),
            taints: t.taints.iter().map(taint_model).collect(),
            startup_taints: t.startup_taints.iter().map(taint_model).collect(),
            limits: spec.limits.clone(),
            expire_after: Some(t.expire_after.clone()).filter(|e| *e != "720h"),
            termination_grace_period: t.termination_grace_period.clone(),
            disruption,
            rebalance: None.into(),
            rebalance_limit: None,
            adopts_karpenter_node_pools: vec![],
            min_values_policy: spec.min_values_policy.clone(),
            candidate_price_ratio: spec.candidate_price_ratio.clone(),
            replicas: spec.replicas,
            headroom: spec.headroom.iter().map(HeadroomModel::from_api).collect(),
            repair: spec.repair.as_ref().map(|r| RepairModel {
                policies: r
                    .policies
                    .iter()
                    .map(|p| RepairPolicyModel {
                        condition_type: p.condition_type.clone(),
                        condition_status: p.condition_status.clone(),
                        toleration_duration: p.toleration_duration.clone(),
                    })
                    .collect(),
            }),
            admitted_instance_types: Value::Null,
            timeouts: Value::Null,
        }
    }
}

impl HeadroomModel {
    fn api(&self) -> Headroom {
        // Counts outside u32 are clamped; the validator has already refused them.
        let count = |v: Option<i64>| v.map(|n| n.clamp(0, i64::from(u32::MAX)) as u32);
        Headroom {
            cpu: self.cpu.clone(),
            memory: self.memory.clone(),
            pods: count(self.pods),
            nodes: count(self.nodes),
            schedule: self.schedule.clone(),
            duration: self.duration.clone(),
        }
    }

    fn from_api(h: &Headroom) -> HeadroomModel {
        HeadroomModel {
            cpu: h.cpu.clone(),
            memory: h.memory.clone(),
            pods: h.pods.map(i64::from),
            nodes: h.nodes.map(i64::from),
            schedule: h.schedule.clone(),
            duration: h.duration.clone(),
        }
    }
}
