//! Conversions from Kubernetes objects (k8s-openapi) to the scheduler's plain structs, so
//! that controllers convert once per object and the core stays free of API types; and back,
//! from a planned claim to the NodeClaim spec the provisioner writes.
//!
//! Malformed fields are reported with their path; nothing here panics.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::api::node_pool::NodePoolSpec;
use crate::api::NodeClaimSpec;
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{Effect, Taint, Toleration};

use super::input::{
    LabelSelector, NewNodeClaim, NodeInclusionPolicy, Pod, PodAffinityTerm,
    TopologySpreadConstraint, WhenUnsatisfiable,
};

/// A container's requests, a limit standing in for a request it lacks: the API server
/// defaults a Pod's requests so (`SetDefaults_Pod`, `pkg/apis/core/v1/defaults.go`), but
/// not a template's, and a DaemonSet's template is read here for the pods it will make.
fn requests_of(c: &core::Container, path: &str) -> Result<Resources, String> {
    let Some(res) = c.resources.as_ref() else {
        return Ok(Resources::default());
    };
    let requested = |k: &String| res.requests.as_ref().is_some_and(|r| r.contains_key(k));
    let mut r = Resources::from_quantities(
        res.requests
            .iter()
            .flatten()
            .map(|(k, q)| (k.as_str(), q.0.as_str())),
    )
    .map_err(|e| format!("{path}.resources.requests.{e}"))?;
    let defaulted = Resources::from_quantities(
        res.limits
            .iter()
            .flatten()
            .filter(|(k, _)| !requested(k))
            .map(|(k, q)| (k.as_str(), q.0.as_str())),
    )
    .map_err(|e| format!("{path}.resources.limits.{e}"))?;
    r.add(&defaulted);
    Ok(r)
}

/// Effective requests like the kube-scheduler: sum of containers (plus restartable init
/// containers, i.e. sidecars), max with each regular init container, plus pod overhead.
pub fn pod_requests(spec: &core::PodSpec) -> Result<Resources, String> {
    let mut sum = Resources::default();
    for (i, c) in spec.containers.iter().enumerate() {
        sum.add(&requests_of(c, &format!("spec.containers[{i}]"))?);
    }
    let mut sidecars = Resources::default();
    let mut peak = Resources::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = requests_of(c, &format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
        } else {
            peak.max_with(&r.plus(&sidecars));
        }
    }
    sum.add(&sidecars);
    sum.max_with(&peak);
    if let Some(o) = &spec.overhead {
        let o = Resources::from_quantities(o.iter().map(|(k, q)| (k.as_str(), q.0.as_str())))
            .map_err(|e| format!("spec.overhead.{e}"))?;
        sum.add(&o);
    }
    sum.pods = 1;
    Ok(sum)
}

fn selector(s: &meta::LabelSelector, path: &str) -> Result<LabelSelector, String> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: vec![],
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let op: Operator = e
            .operator
            .parse()
            .map_err(|m| format!("{path}.matchExpressions[{i}].operator: {m}"))?;
        if op.is_bound() {
            return Err(format!("{path}.matchExpressions[{i}].operator: must be one of In, NotIn, Exists, DoesNotExist"));
        }
        out.match_expressions
            .push((e.key.clone(), op, e.values.clone().unwrap_or_default()));
    }
    Ok(out)
}

pub(crate) fn node_term(t: &core::NodeSelectorTerm, path: &str) -> Result<Requirements, String> {
    let mut r = Requirements::new();
    for (i, e) in t.match_expressions.iter().flatten().enumerate() {
        let op: Operator = e
            .operator
            .parse()
            .map_err(|m| format!("{path}.matchExpressions[{i}].operator: {m}"))?;
        if matches!(op, Operator::Gte | Operator::Lte) {
            // A NodePool operator; Kubernetes' node selectors do not have it.
            return Err(format!(
                "{path}.matchExpressions[{i}].operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
            ));
        }
        let req = Requirement::new(op, e.values.as_deref().unwrap_or_default())
            .map_err(|m| format!("{path}.matchExpressions[{i}].values: {m}"))?;
        r.add(&e.key, req);
    }
    Ok(r)
}

fn affinity_term(t: &core::PodAffinityTerm, path: &str) -> Result<PodAffinityTerm, String> {
    Ok(PodAffinityTerm {
        label_selector: t
            .label_selector
            .as_ref()
            .map(|s| selector(s, &format!("{path}.labelSelector")))
            .transpose()?,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        namespace_selector: t
            .namespace_selector
            .as_ref()
            .map(|s| selector(s, &format!("{path}.namespaceSelector")))
            .transpose()?,
        topology_key: t.topology_key.clone(),
    })
}

fn inclusion_policy(v: Option<&str>, path: &str) -> Result<Option<NodeInclusionPolicy>, String> {
    match v {
        None | Some("") => Ok(None),
        Some("Honor") => Ok(Some(NodeInclusionPolicy::Honor)),
        Some("Ignore") => Ok(Some(NodeInclusionPolicy::Ignore)),
        Some(_) => Err(format!("{path}: must be one of Honor, Ignore")),
    }
}

fn weighted_terms(
    terms: Option<&Vec<core::WeightedPodAffinityTerm>>,
    path: &str,
) -> Result<Vec<(i32, PodAffinityTerm)>, String> {
    let mut out = Vec::new();
    for (i, t) in terms.into_iter().flatten().enumerate() {
        if !(1..=100).contains(&t.weight) {
            return Err(format!("{path}[{i}].weight: must be in 1..100"));
        }
        out.push((
            t.weight,
            affinity_term(
                &t.pod_affinity_term,
                &format!("{path}[{i}].podAffinityTerm"),
            )?,
        ));
    }
    Ok(out)
}

pub fn toleration(t: &core::Toleration, path: &str) -> Result<Toleration, String> {
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(Effect::parse(e).map_err(|m| format!("{path}.effect: {m}"))?),
    };
    let exists = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => false,
        Some("Exists") => true,
        Some(_) => return Err(format!("{path}.operator: must be one of Equal, Exists")),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        exists,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

pub fn taint(t: &core::Taint, path: &str) -> Result<Taint, String> {
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: Effect::parse(&t.effect).map_err(|m| format!("{path}.effect: {m}"))?,
    })
}

pub fn owned_by_daemonset(p: &core::Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
}

/// Pods that live and die with their node: DaemonSet pods (the DaemonSet controller puts
/// one on every matching node) and static pods (their mirror objects). A drain leaves them.
pub fn goes_with_node(p: &core::Pod) -> bool {
    owned_by_daemonset(p)
        || p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Whether the pod needs a place elsewhere when its node goes: not one that goes with the
/// node, not finished, not already being deleted. The one definition shared by
/// provisioning (pods of disrupted nodes count as needing capacity), consolidation's
/// simulation, interruption, the drain, and the provider's plan preview.
pub fn reschedulable(p: &core::Pod) -> bool {
    let done = matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    );
    !(goes_with_node(p) || done || p.metadata.deletion_timestamp.is_some())
}

/// A pending pod for the scheduler.
pub fn pod(p: &core::Pod) -> Result<Pod, String> {
    let spec = p.spec.as_ref().ok_or("spec: missing")?;
    let mut out = Pod {
        namespace: p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: p.metadata.name.clone().unwrap_or_default(),
        labels: p.metadata.labels.clone().unwrap_or_default(),
        requests: pod_requests(spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        ..Default::default()
    };
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        out.tolerations
            .push(toleration(t, &format!("spec.tolerations[{i}]"))?);
    }
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.topologySpreadConstraints[{i}]");
        out.topology_spread.push(spread_constraint(c, &path)?);
    }
    if let Some(a) = &spec.affinity {
        if let Some(na) = &a.node_affinity {
            node_affinity(na, &mut out)?;
        }
        if let Some(pa) = &a.pod_affinity {
            pod_affinity(pa, &mut out)?;
        }
        if let Some(pa) = &a.pod_anti_affinity {
            pod_anti_affinity(pa, &mut out)?;
        }
    }
    Ok(out)
}

fn spread_constraint(
    c: &core::TopologySpreadConstraint,
    path: &str,
) -> Result<TopologySpreadConstraint, String> {
    let when = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        _ => {
            return Err(format!(
                "{path}.whenUnsatisfiable: must be one of DoNotSchedule, ScheduleAnyway"
            ))
        }
    };
    let sel = c
        .label_selector
        .as_ref()
        .map(|s| selector(s, &format!("{path}.labelSelector")))
        .transpose()?;
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable: when,
        label_selector: sel,
        min_domains: c.min_domains,
        // Applied by the scheduler against the pod's labels.
        match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
        node_affinity_policy: inclusion_policy(
            c.node_affinity_policy.as_deref(),
            &format!("{path}.nodeAffinityPolicy"),
        )?,
        node_taints_policy: inclusion_policy(
            c.node_taints_policy.as_deref(),
            &format!("{path}.nodeTaintsPolicy"),
        )?,
    })
}

fn node_affinity(na: &core::NodeAffinity, out: &mut Pod) -> Result<(), String> {
    if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
        for (i, t) in req.node_selector_terms.iter().enumerate() {
            out.required_node_affinity.push(node_term(
                t,
                &format!("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"),
            )?);
        }
    }
    for (i, t) in na
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        let r = node_term(
            &t.preference,
            &format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
        )?;
        out.preferred_node_affinity.push((t.weight, r));
    }
    Ok(())
}

fn pod_affinity(pa: &core::PodAffinity, out: &mut Pod) -> Result<(), String> {
    for (i, t) in pa
        .required_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        out.pod_affinity.push(affinity_term(
            t,
            &format!(
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            ),
        )?);
    }
    out.preferred_pod_affinity = weighted_terms(
        pa.preferred_during_scheduling_ignored_during_execution
            .as_ref(),
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    )?;
    Ok(())
}

fn pod_anti_affinity(pa: &core::PodAntiAffinity, out: &mut Pod) -> Result<(), String> {
    for (i, t) in pa
        .required_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        out.pod_anti_affinity.push(affinity_term(
            t,
            &format!(
                "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            ),
        )?);
    }
    out.preferred_pod_anti_affinity = weighted_terms(
        pa.preferred_during_scheduling_ignored_during_execution
            .as_ref(),
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    )?;
    Ok(())
}

/// Back from the plan to the API: the NodeClaim the provisioner writes for a planned claim.
impl NodeClaimSpec {
    /// The spec of a NodeClaim the scheduler planned, from its NodePool's template: the
    /// claim's requirements (candidate types cheapest first, zones, capacity types), the
    /// pods' requests plus DaemonSet overhead, and the template's taints and lifetimes.
    pub fn from_plan(claim: &NewNodeClaim, pool: &NodePoolSpec) -> NodeClaimSpec {
        let mut requirements = crate::api::requirements_to_api(&claim.requirements);
        // The instance-type list is written cheapest first (the launch order), not sorted.
        if let Some(it) = requirements
            .iter_mut()
            .find(|r| r.key == crate::labels::INSTANCE_TYPE && r.operator == "In")
        {
            it.values = claim
                .instance_types
                .iter()
                .map(|c| c.instance_type.clone())
                .collect();
        }
        let r = &claim.requests;
        let mut requests = BTreeMap::new();
        requests.insert("cpu".to_string(), crate::resources::fmt_cpu(r.cpu_milli));
        requests.insert(
            "memory".to_string(),
            crate::resources::fmt_bytes(r.memory_bytes),
        );
        requests.insert("pods".to_string(), r.pods.to_string());
        for (k, v) in &r.extended {
            requests.insert(k.clone(), v.to_string());
        }
        let t = &pool.template.spec;
        NodeClaimSpec {
            node_class_ref: t.node_class_ref.clone(),
            requirements,
            resources: crate::api::node_claim::ResourceRequirements { requests },
            taints: t.taints.clone(),
            startup_taints: t.startup_taints.clone(),
            expire_after: Some(t.expire_after.clone()),
            termination_grace_period: t.termination_grace_period.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_limit_stands_in_for_a_missing_request_as_the_api_server_defaults_it() {
        let c: core::Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        }))
        .unwrap();
        let r = requests_of(&c, "spec.containers[0]").unwrap();
        assert_eq!(r.cpu_milli, 100, "a request stands over its limit");
        assert_eq!(
            r.memory_bytes,
            1 << 30,
            "the limit stands in for the missing request"
        );
        let bad: core::Container = serde_json::from_value(serde_json::json!({
            "name": "c", "resources": {"limits": {"memory": "lots"}},
        }))
        .unwrap();
        let e = requests_of(&bad, "spec.containers[0]").unwrap_err();
        assert!(
            e.starts_with("spec.containers[0].resources.limits.memory"),
            "{e}"
        );
    }

    use super::*;

    #[test]
    fn converts_a_pod() {
        let p: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "256Mi", "nvidia.com/gpu": "1"}}}
                ],
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
                ],
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}
                }],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}
                        ]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 10, "preference": {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}]}}
                        ]
                    },
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}
                    ]}
                }
            }
        }))
        .unwrap();
        let out = pod(&p).unwrap();
        assert_eq!(out.key(), "shop/web-1");
        // containers 500m + sidecar 100m = 600m; init peaks at 2000m + 0 sidecar before it.
        assert_eq!(out.requests.cpu_milli, 2000);
        assert_eq!(out.requests.memory_bytes, 512 << 20);
        assert_eq!(out.requests.extended["nvidia.com/gpu"], 1);
        assert_eq!(out.tolerations.len(), 1);
        assert_eq!(
            out.topology_spread[0].when_unsatisfiable,
            WhenUnsatisfiable::DoNotSchedule
        );
        assert_eq!(out.required_node_affinity.len(), 1);
        assert_eq!(out.preferred_node_affinity[0].0, 10);
        assert_eq!(
            out.pod_anti_affinity[0].topology_key,
            "kubernetes.io/hostname"
        );
    }

    #[test]
    fn converts_preferences_policies_and_namespace_selectors() {
        let p: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web", "pod-template-hash": "abc"}},
            "spec": {
                "containers": [],
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "capacity-spread",
                    "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}},
                    "matchLabelKeys": ["pod-template-hash"],
                    "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"
                }],
                "affinity": {
                    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 40, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                            "labelSelector": {"matchLabels": {"app": "db"}},
                            "namespaceSelector": {"matchLabels": {"team": "data"}}}}
                    ]},
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["shop", "edge"]}}
                    ]}
                }
            }
        }))
        .unwrap();
        let out = pod(&p).unwrap();
        let s = &out.topology_spread[0];
        assert_eq!(s.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
        assert_eq!(s.match_label_keys, vec!["pod-template-hash".to_string()]);
        assert_eq!(s.node_affinity_policy, Some(NodeInclusionPolicy::Ignore));
        assert_eq!(s.node_taints_policy, Some(NodeInclusionPolicy::Honor));
        assert!(!s.honors_node_affinity() && s.honors_taints());
        let (w, t) = &out.preferred_pod_affinity[0];
        assert_eq!(*w, 40);
        assert_eq!(
            t.namespace_selector.as_ref().unwrap().match_labels["team"],
            "data"
        );
        let (w, t) = &out.preferred_pod_anti_affinity[0];
        assert_eq!(*w, 100);
        assert_eq!(t.namespaces, vec!["shop".to_string(), "edge".to_string()]);
        // Defaults: Honor node affinity, Ignore taints.
        assert!(TopologySpreadConstraint::default().honors_node_affinity());
        assert!(!TopologySpreadConstraint::default().honors_taints());

        let bad: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"containers": [], "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule",
                "nodeTaintsPolicy": "Sometimes"
            }]}
        }))
        .unwrap();
        assert_eq!(
            pod(&bad).unwrap_err(),
            "spec.topologySpreadConstraints[0].nodeTaintsPolicy: must be one of Honor, Ignore"
        );
        let bad: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"containers": [], "affinity": {"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "podAffinityTerm": {"topologyKey": "k"}}
                ]}}}
        }))
        .unwrap();
        assert_eq!(
            pod(&bad).unwrap_err(),
            "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be in 1..100"
        );
    }

    #[test]
    fn malformed_fields_name_their_path() {
        let p: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}
        }))
        .unwrap();
        assert!(pod(&p)
            .unwrap_err()
            .starts_with("spec.containers[0].resources.requests.cpu: invalid quantity"));
        let p: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"containers": [], "tolerations": [{"key": "a", "operator": "Maybe"}]}
        }))
        .unwrap();
        assert_eq!(
            pod(&p).unwrap_err(),
            "spec.tolerations[0].operator: must be one of Equal, Exists"
        );
        let p = core::Pod::default();
        assert_eq!(pod(&p).unwrap_err(), "spec: missing");
    }
}
