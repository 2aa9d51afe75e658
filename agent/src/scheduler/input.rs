//! What the scheduler takes in and gives back: plain structs, so that controllers convert
//! from Kubernetes objects once (see [`super::convert`]) and tests and benchmarks build
//! them directly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use crate::api::launch_policy::{MinValuesPolicy, PriceRatio};
use crate::api::validate::FieldError;
use crate::api::{NodePoolSpec, ParsedRequirements};
use crate::catalog::daemonsets::DaemonSet;
use crate::catalog::{CapacityType, KubeletSettings};
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{Taint, Toleration};

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    /// Key, operator (In, NotIn, Exists, DoesNotExist) and values.
    pub match_expressions: Vec<(String, Operator, Vec<String>)>,
}

impl LabelSelector {
    pub fn labels<const N: usize>(pairs: [(&str, &str); N]) -> LabelSelector {
        LabelSelector {
            match_labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: vec![],
        }
    }

    /// The selector as requirements; an invalid expression selects nothing.
    pub fn to_requirements(&self) -> Requirements {
        let mut r = Requirements::from_labels(&self.match_labels);
        for (k, op, values) in &self.match_expressions {
            match Requirement::new(*op, values) {
                Ok(req) if !op.is_bound() => r.add(k, req),
                _ => r.add(k, Requirement::listed(BTreeSet::new())),
            }
        }
        r
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    #[default]
    DoNotSchedule,
    ScheduleAnyway,
}

/// `nodeAffinityPolicy` / `nodeTaintsPolicy` of a spread: whether nodes (and NodePools) the
/// pod could not use still count as domains. Kubernetes defaults: affinity Honor, taints
/// Ignore; `None` on the constraint means that default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeInclusionPolicy {
    Honor,
    Ignore,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// None selects no pods (so only the pod's own placement counts, as in Kubernetes).
    pub label_selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    /// Keys whose values on the incoming pod join the selector (`matchLabelKeys`), so that
    /// e.g. `pod-template-hash` spreads each ReplicaSet revision on its own.
    pub match_label_keys: Vec<String>,
    /// None: Honor (domains come only from nodes/NodePools matching the pod's selector
    /// and required node affinity).
    pub node_affinity_policy: Option<NodeInclusionPolicy>,
    /// None: Ignore (domains of nodes/NodePools whose taints the pod does not tolerate count).
    pub node_taints_policy: Option<NodeInclusionPolicy>,
}

impl TopologySpreadConstraint {
    pub fn honors_node_affinity(&self) -> bool {
        self.node_affinity_policy != Some(NodeInclusionPolicy::Ignore)
    }

    pub fn honors_taints(&self) -> bool {
        self.node_taints_policy == Some(NodeInclusionPolicy::Honor)
    }
}

/// A required (or preferred) pod affinity / anti-affinity term.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub label_selector: Option<LabelSelector>,
    /// Namespaces whose pods count. With no `namespace_selector` either, the pod's own
    /// namespace.
    pub namespaces: Vec<String>,
    /// Namespaces selected by their labels ([`Input::namespace_labels`]), in addition to
    /// `namespaces`; an empty selector selects every namespace.
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

/// A pending pod, reduced to what scheduling needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Sum of container requests (max with init containers), plus overhead. `pods` is 1.
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: a node must satisfy one of these terms. Empty: no constraint.
    pub required_node_affinity: Vec<Requirements>,
    /// Preferred node affinity terms with their weights.
    pub preferred_node_affinity: Vec<(i32, Requirements)>,
    pub tolerations: Vec<Toleration>,
    pub topology_spread: Vec<TopologySpreadConstraint>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    /// Preferred pod affinity terms with their weights (1-100): preferences with a price.
    pub preferred_pod_affinity: Vec<(i32, PodAffinityTerm)>,
    pub preferred_pod_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    /// For a pod displaced from a node that is going away: that node's values of the keys
    /// the pod's required spreads count over (zone, a capacity split...). See
    /// [`super::schedule`] for why the plan sends it back there.
    pub home: BTreeMap<String, String>,
}

impl Pod {
    pub fn new(namespace: &str, name: &str, cpu_milli: i64, memory_bytes: i64) -> Pod {
        Pod {
            namespace: namespace.into(),
            name: name.into(),
            requests: Resources::pod(cpu_milli, memory_bytes),
            ..Default::default()
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Records, for a pod about to be displaced from a node with `node_labels`, the node's
    /// values of the keys its required spreads count over (hostname aside: a node of its
    /// own is never home again).
    pub fn set_home(&mut self, node_labels: &BTreeMap<String, String>) {
        self.home = self
            .topology_spread
            .iter()
            .filter(|s| {
                s.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
                    && s.topology_key != crate::labels::HOSTNAME
            })
            .filter_map(|s| {
                let v = node_labels.get(&s.topology_key)?;
                Some((s.topology_key.clone(), v.clone()))
            })
            .collect();
    }
}

/// A pod already bound to a node (or nominated to an in-flight NodeClaim): it uses
/// capacity (its requests) and counts for topology spread and pod (anti-)affinity (its
/// namespace, labels and required anti-affinity terms, which repel incoming pods that they
/// select).
///
/// It shares the pod's view rather than copying it: bound pods are most of a round's input
/// and of a disruption pass's world, and the agent's pod store already holds one view per
/// workload, so a round refers to it (a copy per pod per round was most of a pass's memory
/// at 100,000 pods).
#[derive(Clone, Default, PartialEq)]
pub struct BoundPod(Arc<Pod>);

impl BoundPod {
    pub fn from_pod(p: &Pod) -> BoundPod {
        BoundPod(Arc::new(p.clone()))
    }

    pub fn shared(p: Arc<Pod>) -> BoundPod {
        BoundPod(p)
    }

    pub fn anti_affinity(&self) -> &[PodAffinityTerm] {
        &self.0.pod_anti_affinity
    }
}

impl std::ops::Deref for BoundPod {
    type Target = Pod;

    fn deref(&self) -> &Pod {
        &self.0
    }
}

/// What a bound pod is to the scheduler, and so what the disruption pass's fingerprint
/// reads: not the rest of the view.
impl std::fmt::Debug for BoundPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundPod")
            .field("namespace", &self.namespace)
            .field("labels", &self.labels)
            .field("requests", &self.requests)
            .field("anti_affinity", &self.anti_affinity())
            .finish()
    }
}

/// A bound pod that would need a place elsewhere if its node went: its name beside its
/// workload's shared view. A disruption pass holds one for every movable pod of the cluster
/// and re-plans only the few a trial moves, so it copies the view only then.
#[derive(Clone, PartialEq)]
pub struct MovablePod {
    pub name: String,
    pub view: BoundPod,
}

impl MovablePod {
    /// From a whole pod (its view copied once), as tests and benches build them.
    pub fn from_pod(p: &Pod) -> MovablePod {
        MovablePod {
            name: p.name.clone(),
            view: BoundPod::from_pod(p),
        }
    }

    /// The pod, named, as a round plans it.
    pub fn to_pod(&self) -> Pod {
        Pod {
            name: self.name.clone(),
            ..(*self.view.0).clone()
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.view.namespace, self.name)
    }
}

/// All of the view, unlike [`BoundPod`]'s: a trial re-plans the pod, so the disruption
/// pass's fingerprint must see every field the plan reads.
impl std::fmt::Debug for MovablePod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MovablePod")
            .field("name", &self.name)
            .field("view", &*self.view.0)
            .finish()
    }
}

/// A registered node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub pods: Vec<BoundPod>,
    /// Cordoned or being deleted: no new pods.
    pub unschedulable: bool,
}

/// A NodeClaim that was launched but whose node has not registered yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InFlightClaim {
    pub name: String,
    pub nodepool: String,
    /// Its requirements (zone, capacity type, instance types...): a pod may use it only if
    /// every value still possible satisfies the pod.
    pub requirements: Requirements,
    /// The NodePool's taints, without its startup taints (pods need not tolerate those).
    pub taints: Vec<Taint>,
    /// What it will be able to hold: the smallest candidate's allocatable minus DaemonSets.
    pub allocatable: Resources,
    pub pods: Vec<BoundPod>,
}

impl InFlightClaim {
    /// A claim this round (or a simulation) plans, as capacity already coming: it will hold
    /// what its smallest candidate holds once DaemonSets take their share.
    pub fn planned(
        catalog: &crate::catalog::Catalog,
        claim: &NewNodeClaim,
        name: &str,
        taints: Vec<Taint>,
    ) -> InFlightClaim {
        let allocatable = claim
            .instance_types
            .iter()
            .filter_map(|c| catalog.get(&c.instance_type))
            .map(|it| {
                crate::catalog::volume_limits::with_ebs_limit(&it.allocatable, &it.record)
                    .minus(&claim.daemonset_overhead)
            })
            .min_by_key(|a| (a.cpu_milli, a.memory_bytes))
            .unwrap_or_default();
        InFlightClaim {
            name: name.to_string(),
            nodepool: claim.nodepool.clone(),
            requirements: claim.requirements.clone(),
            taints,
            allocatable,
            pods: vec![],
        }
    }
}

/// A NodePool as the scheduler needs it; [`NodePoolInput::from_api`] converts the CRD.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePoolInput {
    pub name: String,
    pub weight: i32,
    pub node_class: String,
    /// Template labels become `In [value]` requirements here too.
    pub labels: BTreeMap<String, String>,
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Limits by resource name (`cpu` in millicores, memory in bytes, others in units).
    pub limits: BTreeMap<String, i64>,
    /// Capacity of the pool's existing nodes and in-flight claims, counted against limits.
    pub usage: Resources,
    /// `minValuesPolicy`: whether an unmet `minValues` stops the pool (Strict) or is relaxed.
    pub min_values_policy: MinValuesPolicy,
    /// `candidatePriceRatio`: a claim's dearest candidate at most this times its cheapest.
    pub candidate_price_ratio: PriceRatio,
}

/// A NodePool as a round reads it: validated, and converted for the scheduler with the
/// same parse of its requirements, which the drift check then takes too (it names the
/// entry a node violates, so it keeps them as written).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedPool {
    /// Its usage is left for the round to count.
    pub input: NodePoolInput,
    pub requirements: ParsedRequirements,
}

impl ParsedPool {
    /// The pool, or every problem of its spec with its field path.
    pub fn parse(name: &str, spec: &NodePoolSpec) -> Result<ParsedPool, Vec<FieldError>> {
        let requirements = crate::api::parse_requirements(&spec.template.spec.requirements);
        let errors = crate::api::validate::node_pool_parsed(spec, &requirements, "spec");
        if !errors.is_empty() {
            return Err(errors);
        }
        // Validation reads every field the conversion does, so this fails only if the two
        // part ways; the error then still names its field.
        let input = NodePoolInput::from_parsed(name, spec, &requirements, Resources::default())
            .map_err(|e| {
                let (path, message) = e.split_once(": ").unwrap_or(("spec", &e));
                vec![FieldError {
                    path: path.to_string(),
                    message: message.to_string(),
                }]
            })?;
        Ok(ParsedPool {
            input,
            requirements,
        })
    }
}

impl NodePoolInput {
    /// From the CRD, after validation ([`crate::api::validate::node_pool`]). Errors name the field.
    pub fn from_api(
        name: &str,
        spec: &NodePoolSpec,
        usage: Resources,
    ) -> Result<NodePoolInput, String> {
        let requirements = crate::api::parse_requirements(&spec.template.spec.requirements);
        NodePoolInput::from_parsed(name, spec, &requirements, usage)
    }

    /// [`Self::from_api`] over the spec's requirements as the caller parsed them.
    pub fn from_parsed(
        name: &str,
        spec: &NodePoolSpec,
        parsed: &ParsedRequirements,
        usage: Resources,
    ) -> Result<NodePoolInput, String> {
        let s = &spec.template.spec;
        let mut requirements = parsed
            .merged()
            .map_err(|e| format!("spec.template.spec.{e}"))?;
        for (k, v) in &spec.template.metadata.labels {
            requirements.add(k, Requirement::one(v));
        }
        let mut limits = BTreeMap::new();
        for (k, q) in &spec.limits {
            let v = match k.as_str() {
                "cpu" => crate::resources::parse_cpu_milli(q),
                _ => crate::resources::parse_bytes(q),
            }
            .map_err(|e| format!("spec.limits[{k:?}]: {e}"))?;
            limits.insert(k.clone(), v);
        }
        Ok(NodePoolInput {
            name: name.into(),
            weight: spec.weight.unwrap_or(0),
            node_class: s.node_class_ref.name.clone(),
            labels: spec.template.metadata.labels.clone(),
            requirements,
            taints: crate::api::convert_taints(&s.taints)
                .map_err(|e| format!("spec.template.spec.taints: {e}"))?,
            startup_taints: crate::api::convert_taints(&s.startup_taints)
                .map_err(|e| format!("spec.template.spec.startupTaints: {e}"))?,
            limits,
            usage,
            min_values_policy: MinValuesPolicy::of(spec.min_values_policy.as_deref())
                .map_err(|e| format!("spec.minValuesPolicy: {e}"))?,
            candidate_price_ratio: PriceRatio::of(spec.candidate_price_ratio.as_deref())
                .map_err(|e| format!("spec.candidatePriceRatio: {e}"))?,
        })
    }
}

/// A NodeClass as the scheduler needs it: its kubelet settings change allocatable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClassInput {
    pub name: String,
    pub kubelet: KubeletSettings,
}

/// Offerings that recently failed for want of capacity, keyed like Karpenter's cache:
/// capacity type × instance type × zone, plus what EC2 refused wholesale: a vCPU quota of
/// one capacity type for one instance-family group ([`crate::catalog::vcpu_quota_group`]),
/// or a whole capacity type. The caller owns the TTL (the scheduler reads no clock).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnavailableOfferings {
    pub offerings: BTreeSet<(CapacityType, String, String)>,
    pub quota_groups: BTreeSet<(CapacityType, &'static str)>,
    pub capacity_types: BTreeSet<CapacityType>,
}

impl UnavailableOfferings {
    pub fn insert(&mut self, ct: CapacityType, instance_type: &str, zone: &str) {
        self.offerings
            .insert((ct, instance_type.to_string(), zone.to_string()));
    }

    /// Every type of `instance_type`'s vCPU quota group, for capacity type `ct`.
    pub fn insert_quota_group(&mut self, ct: CapacityType, instance_type: &str) {
        self.quota_groups
            .insert((ct, crate::catalog::vcpu_quota_group(instance_type)));
    }

    pub fn insert_capacity_type(&mut self, ct: CapacityType) {
        self.capacity_types.insert(ct);
    }

    pub fn contains(&self, ct: CapacityType, instance_type: &str, zone: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        self.capacity_types.contains(&ct)
            || (!self.quota_groups.is_empty()
                && self
                    .quota_groups
                    .contains(&(ct, crate::catalog::vcpu_quota_group(instance_type))))
            || self
                .offerings
                .contains(&(ct, instance_type.to_string(), zone.to_string()))
    }

    /// Entries of any kind (the insufficient-capacity cache size metric).
    pub fn len(&self) -> usize {
        self.offerings.len() + self.quota_groups.len() + self.capacity_types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offerings.is_empty() && self.quota_groups.is_empty() && self.capacity_types.is_empty()
    }
}

/// Everything one scheduling round looks at.
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub in_flight: Vec<InFlightClaim>,
    /// Any order: they are tried by descending weight, then name.
    pub node_pools: Vec<NodePoolInput>,
    pub node_classes: Vec<NodeClassInput>,
    pub daemonsets: Vec<DaemonSet>,
    pub unavailable: UnavailableOfferings,
    /// Labels of namespaces, for `namespaceSelector` on pod affinity terms. A namespace
    /// missing here has no labels.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// How much more the round may cost to honour preferences (ScheduleAnyway spreads,
    /// preferred node and pod affinity) than the same pods placed without them.
    pub preference_budget: PreferenceBudget,
}

/// A fraction of the round's cost without preferences: 0.10 lets honouring preferences
/// raise the $/h of the new NodeClaims by at most 10 %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreferenceBudget(pub f64);

impl Default for PreferenceBudget {
    fn default() -> Self {
        PreferenceBudget(0.10)
    }
}

/// Where an already-known piece of capacity took a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Node(String),
    InFlight(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Index into [`Input::pods`].
    pub pod: usize,
    pub target: Target,
}

/// One candidate instance type of a new NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub instance_type: String,
    /// The price the launch is expected to pay: Spot when Spot is allowed and offered, else on-demand.
    pub price: f64,
    pub capacity_type: CapacityType,
    /// Zones where the type is offered with the claim's capacity types.
    pub zones: Vec<String>,
}

/// A node to launch.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNodeClaim {
    pub nodepool: String,
    pub node_class: String,
    /// Indexes into [`Input::pods`].
    pub pods: Vec<usize>,
    /// NodePool requirements narrowed by the pods (zone, capacity type...), plus
    /// `node.kubernetes.io/instance-type In [candidates]`.
    pub requirements: Requirements,
    /// Cheapest first, at most 60.
    pub instance_types: Vec<Candidate>,
    pub zones: Vec<String>,
    /// Spot first when both are allowed: Spot is preferred, on-demand the fallback.
    pub capacity_types: Vec<CapacityType>,
    /// Pod requests plus DaemonSet overhead of the cheapest candidate.
    pub requests: Resources,
    pub daemonset_overhead: Resources,
    /// For pools with `minValues`: whether a minimum was relaxed to launch the claim
    /// (`BestEffort`; its requirements then carry the minimums actually met).
    pub min_values_relaxed: Option<bool>,
}

/// A pod that could not be placed, with one reason per NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: usize,
    pub reasons: Vec<String>,
}

/// How the round treated the pods' preferences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PreferenceMode {
    /// No pod has preferences, or honouring them all stayed within the budget.
    #[default]
    Honoured,
    /// Preferences only chose among the nodes and domains the round needs anyway.
    WithinLaunchedCapacity,
    /// Preferences were dropped: even spreading over launched capacity cost too much.
    Ignored,
}

/// What honouring preferences would have cost, and which were relaxed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreferenceReport {
    pub mode: PreferenceMode,
    /// $/h of the new NodeClaims (cheapest candidate each): with every preference honoured
    /// as far as pods fit, without any preference, and of the plan returned.
    pub cost_honoured: f64,
    pub cost_without: f64,
    pub cost_chosen: f64,
    /// Per pod (index into [`Input::pods`]): the preferences not honoured as constraints,
    /// e.g. `topologySpreadConstraints[1] on kubernetes.io/hostname (ScheduleAnyway)`.
    pub relaxed: Vec<(usize, Vec<String>)>,
}

/// The scheduler's decisions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub placements: Vec<Placement>,
    pub new_claims: Vec<NewNodeClaim>,
    pub unschedulable: Vec<Unschedulable>,
    pub preferences: PreferenceReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(requirements: serde_json::Value) -> NodePoolSpec {
        serde_json::from_value(serde_json::json!({
            "template": {"spec": {"nodeClassRef": {"name": "default"}, "requirements": requirements}},
            "limits": {"cpu": "100", "memory": "400Gi"},
        }))
        .unwrap()
    }

    #[test]
    fn a_parsed_pool_is_the_verdict_and_the_input_its_spec_gives() {
        let good = spec(serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
        ]));
        let parsed = ParsedPool::parse("general", &good).unwrap();
        assert_eq!(
            Ok(parsed.input),
            NodePoolInput::from_api("general", &good, Resources::default())
        );
        let bad = spec(serde_json::json!([
            {"key": "kubernetes.io/arch", "operator": "Equals", "values": ["amd64"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["four"]},
        ]));
        let errors = ParsedPool::parse("general", &bad).unwrap_err();
        assert_eq!(errors, crate::api::validate::node_pool(&bad, "spec"));
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
