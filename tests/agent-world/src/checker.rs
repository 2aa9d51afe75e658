//! An independent checker of scheduling plans: given the input and the plan, it verifies
//! every hard constraint — requests within allocatable (minus DaemonSets), node selectors
//! and required node affinity for every candidate/zone/capacity type a claim may launch,
//! taints, required pod (anti-)affinity, DoNotSchedule spreads with their skew, and
//! NodePool limits under the worst-case launch.
//!
//! It shares no code with the scheduler: it reads only the public input/output types,
//! the catalogue and the requirement/resource value types, and recomputes domains, label
//! selectors, tolerations and counts itself, so a bug cannot hide in both.

use std::collections::{BTreeMap, BTreeSet};

use joiner_agent::catalog::{Catalog, InstanceType};
use joiner_agent::labels;
use joiner_agent::requirements::{Operator, Requirements};
use joiner_agent::resources::Resources;
use joiner_agent::scheduler::{
    Input, LabelSelector, NodeInclusionPolicy, NodePoolInput, Plan, Pod, PodAffinityTerm, Target,
    WhenUnsatisfiable,
};
use joiner_agent::taints::{Effect, Taint, Toleration};

/// The input as the plan is held to it: a displaced pod planned back into every domain of
/// its `home` counts only those domains for its spreads, as a node selector would make it.
/// The scheduler promises that much (its node's drain frees those domains first); a pod
/// planned anywhere else is held to the spreads over every domain.
fn homed(input: &Input, plan: &Plan) -> Input {
    let mut out = input.clone();
    let mut at = |i: usize, value: &dyn Fn(&str) -> Option<String>| {
        let pod = &mut out.pods[i];
        if !pod.home.is_empty() && pod.home.iter().all(|(k, v)| value(k).as_ref() == Some(v)) {
            let home = pod.home.clone();
            pod.node_selector.extend(home);
        }
    };
    for c in &plan.new_claims {
        let value = |k: &str| {
            let v = c.requirements.get(k)?.single_value()?;
            Some(v.to_string())
        };
        for &i in &c.pods {
            at(i, &value);
        }
    }
    for p in &plan.placements {
        let labels: BTreeMap<String, String> = match &p.target {
            Target::Node(name) => input
                .nodes
                .iter()
                .find(|n| &n.name == name)
                .map(|n| n.labels.clone())
                .unwrap_or_default(),
            Target::InFlight(name) => input
                .in_flight
                .iter()
                .find(|c| &c.name == name)
                .map(|c| {
                    c.requirements
                        .iter()
                        .filter_map(|(k, r)| Some((k.clone(), r.single_value()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
        };
        at(p.pod, &|k: &str| labels.get(k).cloned());
    }
    out
}

/// Where a pod runs, as far as the plan decides it.
#[derive(Debug, Clone)]
struct Place {
    host: String,
    /// Labels every node this place may become will carry.
    labels: BTreeMap<String, String>,
}

struct Member {
    namespace: String,
    labels: BTreeMap<String, String>,
    place: Place,
    /// Pending pod index, or None for a pod already bound.
    pending: Option<usize>,
    anti: Vec<PodAffinityTerm>,
}

fn selector_matches(sel: &LabelSelector, l: &BTreeMap<String, String>) -> bool {
    sel.match_labels.iter().all(|(k, v)| l.get(k) == Some(v))
        && sel.match_expressions.iter().all(|(k, op, vals)| {
            let have = l.get(k);
            match op {
                Operator::In => have.is_some_and(|v| vals.contains(v)),
                Operator::NotIn => have.is_none_or(|v| !vals.contains(v)),
                Operator::Exists => have.is_some(),
                Operator::DoesNotExist => have.is_none(),
                _ => false,
            }
        })
}

fn reqs_match(r: &Requirements, l: &BTreeMap<String, String>) -> bool {
    r.iter()
        .all(|(k, req)| req.matches(l.get(k).map(String::as_str)))
}

fn tolerates(tols: &[Toleration], t: &Taint) -> bool {
    if !matches!(t.effect, Effect::NoSchedule | Effect::NoExecute) {
        return true;
    }
    tols.iter().any(|tol| {
        let key_ok = (tol.key.is_empty() && tol.exists) || tol.key == t.key;
        let value_ok = tol.exists || tol.value == t.value;
        let effect_ok = tol.effect.is_none_or(|e| e == t.effect);
        key_ok && value_ok && effect_ok
    })
}

fn all_tolerated(tols: &[Toleration], taints: &[Taint]) -> bool {
    taints.iter().all(|t| tolerates(tols, t))
}

/// The pod's node selector plus one of its required node-affinity terms holds.
fn node_ok(pod: &Pod, l: &BTreeMap<String, String>) -> bool {
    pod.node_selector.iter().all(|(k, v)| l.get(k) == Some(v))
        && (pod.required_node_affinity.is_empty()
            || pod.required_node_affinity.iter().any(|t| reqs_match(t, l)))
}

fn term_namespaces(input: &Input, own: &str, t: &PodAffinityTerm) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = t.namespaces.iter().cloned().collect();
    if t.namespaces.is_empty() && t.namespace_selector.is_none() {
        out.insert(own.to_string());
    }
    if let Some(sel) = &t.namespace_selector {
        let mut known: BTreeSet<&String> = input.namespace_labels.keys().collect();
        let pods_ns = input.pods.iter().map(|p| &p.namespace);
        let bound_ns = input
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(|p| &p.namespace));
        known.extend(pods_ns.chain(bound_ns));
        for ns in known {
            let empty = BTreeMap::new();
            let l = input.namespace_labels.get(ns).unwrap_or(&empty);
            if selector_matches(sel, l) {
                out.insert(ns.clone());
            }
        }
    }
    out
}

fn term_selects(input: &Input, owner_ns: &str, t: &PodAffinityTerm, m: &Member) -> bool {
    let Some(sel) = &t.label_selector else {
        return false;
    };
    term_namespaces(input, owner_ns, t).contains(&m.namespace) && selector_matches(sel, &m.labels)
}

fn domain(place: &Place, key: &str) -> Option<String> {
    if key == labels::HOSTNAME {
        return Some(place.host.clone());
    }
    place.labels.get(key).cloned()
}

fn value(r: &Resources, name: &str) -> i64 {
    match name {
        "cpu" => r.cpu_milli,
        "memory" => r.memory_bytes,
        "pods" => r.pods,
        "ephemeral-storage" => r.ephemeral_storage_bytes,
        other => r.extended.get(other).copied().unwrap_or(0),
    }
}

fn pool_labels(pool: &NodePoolInput) -> BTreeMap<String, String> {
    let mut l = pool.labels.clone();
    l.insert(labels::KARPENTER_NODEPOOL.into(), pool.name.clone());
    l.insert(labels::JOINER_NODEPOOL.into(), pool.name.clone());
    l
}

/// Checks the plan; the error names the first violated constraint.
pub fn check(catalog: &Catalog, input: &Input, plan: &Plan) -> Result<(), String> {
    let homed = homed(input, plan);
    let input = &homed;
    let n = input.pods.len();
    let mut seen = vec![0; n];
    plan.placements.iter().for_each(|p| seen[p.pod] += 1);
    plan.new_claims
        .iter()
        .for_each(|c| c.pods.iter().for_each(|&p| seen[p] += 1));
    plan.unschedulable.iter().for_each(|u| seen[u.pod] += 1);
    if let Some(i) = seen.iter().position(|&s| s != 1) {
        return Err(format!("pod {i} appears {} times in the plan", seen[i]));
    }
    if let Some(u) = plan.unschedulable.iter().find(|u| u.reasons.is_empty()) {
        return Err(format!("pod {} is unschedulable without a reason", u.pod));
    }
    let pools: BTreeMap<&str, &NodePoolInput> = input
        .node_pools
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let mut members: Vec<Member> = Vec::new();
    let mut place_of: BTreeMap<usize, Place> = BTreeMap::new();

    // Existing nodes and in-flight claims.
    let mut used: BTreeMap<String, Resources> = BTreeMap::new();
    for node in &input.nodes {
        let host = node
            .labels
            .get(labels::HOSTNAME)
            .cloned()
            .unwrap_or_else(|| node.name.clone());
        let place = Place {
            host,
            labels: node.labels.clone(),
        };
        let mut r = Resources::default();
        for b in &node.pods {
            r.add(&b.requests);
            members.push(Member {
                namespace: b.namespace.clone(),
                labels: b.labels.clone(),
                place: place.clone(),
                pending: None,
                anti: b.anti_affinity().to_vec(),
            });
        }
        used.insert(format!("node/{}", node.name), r);
    }
    for c in &input.in_flight {
        let mut l: BTreeMap<String, String> = c
            .requirements
            .iter()
            .filter_map(|(k, r)| r.single_value().map(|v| (k.clone(), v.to_string())))
            .collect();
        l.insert(labels::KARPENTER_NODEPOOL.into(), c.nodepool.clone());
        let place = Place {
            host: format!("nodeclaim/{}", c.name),
            labels: l,
        };
        let mut r = Resources::default();
        for b in &c.pods {
            r.add(&b.requests);
            members.push(Member {
                namespace: b.namespace.clone(),
                labels: b.labels.clone(),
                place: place.clone(),
                pending: None,
                anti: b.anti_affinity().to_vec(),
            });
        }
        used.insert(format!("inflight/{}", c.name), r);
    }

    for p in &plan.placements {
        let pod = &input.pods[p.pod];
        let (place, alloc, taints, key) = match &p.target {
            Target::Node(name) => {
                let node = input
                    .nodes
                    .iter()
                    .find(|x| &x.name == name)
                    .ok_or(format!("placement on unknown node {name}"))?;
                if node.unschedulable {
                    return Err(format!("pod {} placed on cordoned node {name}", p.pod));
                }
                let host = node
                    .labels
                    .get(labels::HOSTNAME)
                    .cloned()
                    .unwrap_or_else(|| node.name.clone());
                (
                    Place {
                        host,
                        labels: node.labels.clone(),
                    },
                    node.allocatable.clone(),
                    node.taints.clone(),
                    format!("node/{name}"),
                )
            }
            Target::InFlight(name) => {
                let c = input
                    .in_flight
                    .iter()
                    .find(|x| &x.name == name)
                    .ok_or(format!("placement on unknown claim {name}"))?;
                let mut l: BTreeMap<String, String> = c
                    .requirements
                    .iter()
                    .filter_map(|(k, r)| r.single_value().map(|v| (k.clone(), v.to_string())))
                    .collect();
                l.insert(labels::KARPENTER_NODEPOOL.into(), c.nodepool.clone());
                // Every value still possible must satisfy the pod.
                for (k, r) in c.requirements.iter() {
                    if let Some(vals) = r.finite_values() {
                        for v in vals {
                            let mut one = l.clone();
                            one.insert(k.clone(), v.clone());
                            if !node_ok(pod, &one) {
                                return Err(format!(
                                    "pod {} on in-flight {name}: {k}={v} violates its node requirements",
                                    p.pod
                                ));
                            }
                        }
                    }
                }
                (
                    Place {
                        host: format!("nodeclaim/{name}"),
                        labels: l,
                    },
                    c.allocatable.clone(),
                    c.taints.clone(),
                    format!("inflight/{name}"),
                )
            }
        };
        if !node_ok(pod, &place.labels) {
            return Err(format!(
                "pod {} on {key}: node selector or required node affinity not satisfied",
                p.pod
            ));
        }
        if !all_tolerated(&pod.tolerations, &taints) {
            return Err(format!("pod {} on {key}: a taint is not tolerated", p.pod));
        }
        let u = used.entry(key.clone()).or_default();
        u.add(&pod.requests);
        if !u.fits_in(&alloc) {
            return Err(format!("{key} is over its allocatable: {u:?}"));
        }
        place_of.insert(p.pod, place);
    }

    // New claims.
    let mut worst: BTreeMap<&str, Resources> = BTreeMap::new();
    for (ci, c) in plan.new_claims.iter().enumerate() {
        let pool = *pools
            .get(c.nodepool.as_str())
            .ok_or(format!("claim {ci}: unknown nodepool {}", c.nodepool))?;
        if c.instance_types.is_empty() || c.instance_types.len() > 60 {
            return Err(format!("claim {ci}: {} candidates", c.instance_types.len()));
        }
        let mut need = Resources::default();
        for &p in &c.pods {
            need.add(&input.pods[p].requests);
        }
        // Labels every launch of this claim carries: its single-valued requirements, the
        // pool's template labels, zone/capacity type when pinned.
        let mut fixed = pool_labels(pool);
        for (k, r) in c.requirements.iter() {
            if let Some(v) = r.single_value() {
                fixed.insert(k.clone(), v.to_string());
            }
        }
        for (k, r) in pool.requirements.iter() {
            if k == labels::ZONE || k == labels::CAPACITY_TYPE {
                continue;
            }
            if r.finite_values().is_some() && !fixed.contains_key(k) {
                let is_type_label = catalog
                    .types
                    .first()
                    .is_some_and(|t| t.labels.contains_key(k));
                if !is_type_label {
                    return Err(format!(
                        "claim {ci}: pool-defined label {k} is not pinned to one value"
                    ));
                }
            }
            if let Some(v) = fixed.get(k) {
                if !r.matches(Some(v)) {
                    return Err(format!(
                        "claim {ci}: {k}={v} outside its pool's requirement"
                    ));
                }
            }
        }
        if c.zones.len() == 1 {
            fixed.insert(labels::ZONE.into(), c.zones[0].clone());
        }
        if c.capacity_types.len() == 1 {
            fixed.insert(
                labels::CAPACITY_TYPE.into(),
                c.capacity_types[0].as_str().into(),
            );
        }
        let mut max_cap = Resources::default();
        for cand in &c.instance_types {
            let it: &InstanceType = catalog
                .get(&cand.instance_type)
                .ok_or(format!("claim {ci}: unknown type {}", cand.instance_type))?;
            max_cap.max_with(&it.capacity);
            // Fits allocatable minus what the DaemonSets that land there request.
            let mut overhead = Resources::default();
            for ds in &input.daemonsets {
                let tolerated = all_tolerated(&ds.tolerations, &pool.taints);
                let mut l = it.labels.clone();
                l.extend(fixed.clone());
                if tolerated && ds.node_selector.iter().all(|(k, v)| l.get(k) == Some(v)) {
                    overhead.add(&ds.requests);
                }
            }
            overhead.max_with(&c.daemonset_overhead);
            if !need.plus(&overhead).fits_in(&it.allocatable) {
                return Err(format!(
                    "claim {ci}: {} cannot hold {need:?} plus DaemonSets {overhead:?}",
                    it.name
                ));
            }
            if cand.zones.is_empty() {
                return Err(format!("claim {ci}: {} has no zone", it.name));
            }
            for z in &cand.zones {
                if !c.zones.contains(z) {
                    return Err(format!("claim {ci}: candidate zone {z} not in the claim's"));
                }
                let offered = it
                    .offerings
                    .iter()
                    .any(|o| &o.zone == z && o.capacity_type == cand.capacity_type);
                if !offered || input.unavailable.contains(cand.capacity_type, &it.name, z) {
                    return Err(format!(
                        "claim {ci}: {} is not offered as {} in {z}",
                        it.name,
                        cand.capacity_type.as_str()
                    ));
                }
                // Every possible node: type labels, zone, capacity type, claim labels.
                let mut l = it.labels.clone();
                l.extend(fixed.clone());
                l.insert(labels::ZONE.into(), z.clone());
                l.insert(
                    labels::CAPACITY_TYPE.into(),
                    cand.capacity_type.as_str().into(),
                );
                if !reqs_match(&pool.requirements, &l) {
                    return Err(format!(
                        "claim {ci}: {} in {z} violates its pool's requirements",
                        it.name
                    ));
                }
                for &p in &c.pods {
                    if !node_ok(&input.pods[p], &l) {
                        return Err(format!(
                            "claim {ci}: pod {p} does not accept {} {} in {z}",
                            it.name,
                            cand.capacity_type.as_str()
                        ));
                    }
                }
            }
            if !c.capacity_types.contains(&cand.capacity_type) {
                return Err(format!("claim {ci}: candidate capacity type not listed"));
            }
        }
        for &p in &c.pods {
            if !all_tolerated(&input.pods[p].tolerations, &pool.taints) {
                return Err(format!("claim {ci}: pod {p} does not tolerate its pool"));
            }
        }
        worst.entry(pool.name.as_str()).or_default().add(&max_cap);
        let place = Place {
            host: format!("new/{ci}"),
            labels: fixed,
        };
        for &p in &c.pods {
            place_of.insert(p, place.clone());
        }
    }

    // Limits under the worst-case launch: every claim launching its largest candidate.
    for pool in &input.node_pools {
        let Some(w) = worst.get(pool.name.as_str()) else {
            continue;
        };
        for (k, lim) in &pool.limits {
            let total = value(&pool.usage, k) + value(w, k);
            if total > *lim {
                return Err(format!(
                    "nodepool {}: worst-case {k} {total} exceeds its limit {lim}",
                    pool.name
                ));
            }
        }
    }

    for (&i, place) in &place_of {
        let p = &input.pods[i];
        members.push(Member {
            namespace: p.namespace.clone(),
            labels: p.labels.clone(),
            place: place.clone(),
            pending: Some(i),
            anti: p.pod_anti_affinity.clone(),
        });
    }
    check_affinity(input, &members)?;
    check_spreads(catalog, input, &members)?;
    Ok(())
}

fn check_affinity(input: &Input, members: &[Member]) -> Result<(), String> {
    for (mi, m) in members.iter().enumerate() {
        // Required anti-affinity, both ways: the terms of every pod (bound or placed)
        // repel every other pod they select in the same domain.
        for t in &m.anti {
            let Some(d) = domain(&m.place, &t.topology_key) else {
                if m.pending.is_some() {
                    return Err(format!(
                        "pod {:?}: anti-affinity on {} with an undecided domain",
                        m.pending, t.topology_key
                    ));
                }
                continue;
            };
            for (oi, o) in members.iter().enumerate() {
                if oi == mi || (m.pending.is_none() && o.pending.is_none()) {
                    continue;
                }
                if domain(&o.place, &t.topology_key).as_ref() == Some(&d)
                    && term_selects(input, &m.namespace, t, o)
                {
                    return Err(format!(
                        "anti-affinity on {}: pods {:?} and {:?} share {d}",
                        t.topology_key, m.pending, o.pending
                    ));
                }
            }
        }
        let Some(i) = m.pending else { continue };
        let pod = &input.pods[i];
        for t in &pod.pod_affinity {
            let Some(d) = domain(&m.place, &t.topology_key) else {
                return Err(format!(
                    "pod {i}: affinity on {} with an undecided domain",
                    t.topology_key
                ));
            };
            let partner = members.iter().enumerate().any(|(oi, o)| {
                oi != mi
                    && domain(&o.place, &t.topology_key).as_ref() == Some(&d)
                    && term_selects(input, &pod.namespace, t, o)
            });
            let self_match = term_selects(input, &pod.namespace, t, m);
            let bound_match = members
                .iter()
                .any(|o| o.pending.is_none() && term_selects(input, &pod.namespace, t, o));
            // Kubernetes lets the first pod of a self-selecting group start a domain.
            let bootstrap = self_match && !bound_match;
            if !partner && !bootstrap {
                return Err(format!(
                    "pod {i}: affinity on {} not satisfied in {d}",
                    t.topology_key
                ));
            }
        }
    }
    Ok(())
}

/// The domains of `key` a pod counts under a spread, computed from the NodePools and
/// nodes directly.
fn universe(
    catalog: &Catalog,
    input: &Input,
    pod: &Pod,
    key: &str,
    honor_affinity: bool,
    honor_taints: bool,
) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for n in &input.nodes {
        if n.unschedulable
            || (honor_affinity && !node_ok(pod, &n.labels))
            || (honor_taints && !all_tolerated(&pod.tolerations, &n.taints))
        {
            continue;
        }
        if let Some(v) = n.labels.get(key) {
            out.insert(v.clone());
        }
    }
    for pool in &input.node_pools {
        if honor_taints && !all_tolerated(&pod.tolerations, &pool.taints) {
            continue;
        }
        let values: Vec<String> = if key == labels::ZONE || key == labels::CAPACITY_TYPE {
            let mut vs = BTreeSet::new();
            for it in &catalog.types {
                if !reqs_match_type(&pool.requirements, it) {
                    continue;
                }
                for o in &it.offerings {
                    let ct = o.capacity_type.as_str();
                    let zone_ok = pool
                        .requirements
                        .get(labels::ZONE)
                        .is_none_or(|r| r.matches(Some(&o.zone)));
                    let ct_ok = pool
                        .requirements
                        .get(labels::CAPACITY_TYPE)
                        .is_none_or(|r| r.matches(Some(ct)));
                    if zone_ok && ct_ok {
                        vs.insert(if key == labels::ZONE {
                            o.zone.clone()
                        } else {
                            ct.to_string()
                        });
                    }
                }
            }
            vs.into_iter().collect()
        } else if key == labels::KARPENTER_NODEPOOL {
            vec![pool.name.clone()]
        } else if let Some(v) = pool.labels.get(key) {
            vec![v.clone()]
        } else if let Some(vs) = pool.requirements.get(key).and_then(|r| r.finite_values()) {
            vs.iter().cloned().collect()
        } else if catalog.types.iter().any(|t| t.labels.contains_key(key)) {
            return None; // instance-type labels: not modelled here
        } else {
            vec![]
        };
        for v in values {
            if honor_affinity {
                let mut l = pool_labels(pool);
                l.insert(key.to_string(), v.clone());
                // Only the spread's key decides here; other keys were matched by the pool.
                let ok = pod.node_selector.get(key).is_none_or(|w| w == &v)
                    && (pod.required_node_affinity.is_empty()
                        || pod
                            .required_node_affinity
                            .iter()
                            .any(|t| t.get(key).is_none_or(|r| r.matches(Some(&v)))));
                if !ok {
                    continue;
                }
            }
            out.insert(v);
        }
    }
    Some(out)
}

fn reqs_match_type(r: &Requirements, it: &InstanceType) -> bool {
    r.iter().all(|(k, req)| match it.labels.get(k) {
        Some(v) => req.matches(Some(v)),
        None => true,
    })
}

/// DoNotSchedule spreads, checked on groups whose pending members all carry the same
/// constraint and node requirements (then skew holds at every step, hence at the end).
fn check_spreads(catalog: &Catalog, input: &Input, members: &[Member]) -> Result<(), String> {
    let mut done = BTreeSet::new();
    for (i, pod) in input.pods.iter().enumerate() {
        for c in &pod.topology_spread {
            if c.when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule {
                continue;
            }
            let Some(mut sel) = c.label_selector.clone() else {
                continue;
            };
            for k in &c.match_label_keys {
                if let Some(v) = pod.labels.get(k) {
                    sel.match_labels.insert(k.clone(), v.clone());
                }
            }
            let sig = format!("{}|{:?}|{:?}", pod.namespace, sel, c);
            if !done.insert(sig) {
                continue;
            }
            let selected = |ns: &str, l: &BTreeMap<String, String>| {
                ns == pod.namespace && selector_matches(&sel, l)
            };
            // Homogeneous: every pending pod the selector picks carries this constraint
            // (with the same effective selector) and the same node requirements.
            let homogeneous = input.pods.iter().all(|q| {
                !selected(&q.namespace, &q.labels)
                    || (q.topology_spread.contains(c)
                        && q.node_selector == pod.node_selector
                        && q.required_node_affinity == pod.required_node_affinity
                        && q.tolerations == pod.tolerations
                        && c.match_label_keys
                            .iter()
                            .all(|k| q.labels.get(k) == pod.labels.get(k)))
            });
            if !homogeneous {
                continue;
            }
            let key = c.topology_key.as_str();
            let mut counts: BTreeMap<String, i64> = BTreeMap::new();
            let mut landed: BTreeSet<String> = BTreeSet::new();
            for m in members {
                if !selected(&m.namespace, &m.labels) {
                    continue;
                }
                let d = domain(&m.place, key);
                if m.pending.is_some() && d.is_none() {
                    return Err(format!(
                        "pod {:?}: spread on {key} with an undecided domain",
                        m.pending
                    ));
                }
                if let Some(d) = d {
                    *counts.entry(d.clone()).or_default() += 1;
                    if m.pending.is_some() {
                        landed.insert(d);
                    }
                }
            }
            let skew = c.max_skew.max(1) as i64;
            if key == labels::HOSTNAME {
                // A new node is always a domain with 0 pods.
                for d in &landed {
                    if counts[d] > skew {
                        return Err(format!(
                            "spread on {key} (pod {i}): {d} holds {} > maxSkew {skew}",
                            counts[d]
                        ));
                    }
                }
                continue;
            }
            let honor_affinity = c.node_affinity_policy != Some(NodeInclusionPolicy::Ignore);
            let honor_taints = c.node_taints_policy == Some(NodeInclusionPolicy::Honor);
            let Some(universe) = universe(catalog, input, pod, key, honor_affinity, honor_taints)
            else {
                continue;
            };
            for d in &landed {
                if !universe.contains(d) {
                    return Err(format!(
                        "spread on {key} (pod {i}): landed in {d}, outside its domains {universe:?}"
                    ));
                }
            }
            let min = if (universe.len() as i32) < c.min_domains.unwrap_or(1) {
                0
            } else {
                universe
                    .iter()
                    .map(|d| counts.get(d).copied().unwrap_or(0))
                    .min()
                    .unwrap_or(0)
            };
            for d in &landed {
                if counts[d] - min > skew {
                    return Err(format!(
                        "spread on {key} (pod {i}): {d} holds {} against a minimum of {min} (maxSkew {skew}) {counts:?}",
                        counts[d]
                    ));
                }
            }
        }
    }
    Ok(())
}
