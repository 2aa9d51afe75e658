//! Pods compiled for scheduling: node requirements interned to small integers, topology
//! constraints resolved to counter groups, tolerated NodePools precomputed, and the order
//! Karpenter uses (CPU request descending, then memory descending).

use std::collections::HashMap;

use crate::requirements::Requirements;
use crate::taints::first_untolerated;

use super::input::{Pod, WhenUnsatisfiable};
use super::pools::Pool;
use super::topology::Topology;

/// Interned requirement sets: pods of one Deployment share their terms, so per-term work
/// (which instance types, which zones) is done once.
#[derive(Default)]
pub(crate) struct Terms {
    pub list: Vec<Requirements>,
    index: HashMap<Requirements, u32>,
}

impl Terms {
    pub fn intern(&mut self, r: Requirements) -> u32 {
        if let Some(id) = self.index.get(&r) {
            return *id;
        }
        let id = self.list.len() as u32;
        self.list.push(r.clone());
        self.index.insert(r, id);
        id
    }
}

pub(crate) struct Spread {
    pub group: u32,
    pub max_skew: i32,
    pub hard: bool,
    pub min_domains: i32,
    pub self_match: bool,
    /// `nodeAffinityPolicy: Honor`: only capacity matching the pod's node requirements
    /// provides domains.
    pub honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only capacity whose taints the pod tolerates does.
    pub honor_taints: bool,
}

pub(crate) struct PodInfo {
    /// Required node-affinity terms (any one must hold), each already intersected with
    /// the nodeSelector. Never empty.
    pub terms: Vec<u32>,
    /// Preferred node-affinity terms, highest weight first.
    pub preferred: Vec<Requirements>,
    pub spreads: Vec<Spread>,
    /// Required pod affinity groups, and whether the pod matches its own term.
    pub affinity: Vec<(u32, bool)>,
    /// Required anti-affinity groups this pod carries.
    pub anti: Vec<u32>,
    /// Preferred pod affinity: group, self match, weight.
    pub soft_affinity: Vec<(u32, bool, i32)>,
    /// Preferred pod anti-affinity: group, weight.
    pub soft_anti: Vec<(u32, i32)>,
    /// Groups whose selector selects this pod.
    pub member_of: Vec<u32>,
    /// Topology keys of all the groups above.
    pub keys: Vec<String>,
    /// Hostname groups of which this pod tolerates no member on its node.
    pub exclusive: Vec<u32>,
    /// Per pool (in pool order): the pool's taints are tolerated (startup taints excepted).
    pub tolerated: Vec<bool>,
    pub untolerated_reason: Vec<Option<String>>,
}

impl PodInfo {
    /// Whether the pod has preferences that are not plain node-affinity terms.
    pub fn has_soft(&self) -> bool {
        self.spreads.iter().any(|s| !s.hard)
            || !self.soft_affinity.is_empty()
            || !self.soft_anti.is_empty()
    }
}

pub(crate) fn compile(
    pod: &Pod,
    pools: &[Pool],
    terms: &mut Terms,
    topo: &mut Topology,
) -> PodInfo {
    let term_ids = super::fit::terms(pod)
        .into_iter()
        .map(|t| terms.intern(t))
        .collect();
    let mut preferred: Vec<(i32, &Requirements)> = pod
        .preferred_node_affinity
        .iter()
        .map(|(w, r)| (*w, r))
        .collect();
    preferred.sort_by_key(|p| std::cmp::Reverse(p.0));
    let spreads = pod
        .topology_spread
        .iter()
        .map(|c| {
            let group = topo.spread_group(&pod.namespace, &pod.labels, c);
            Spread {
                group,
                max_skew: c.max_skew.max(1),
                hard: c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule,
                min_domains: c.min_domains.unwrap_or(1).max(1),
                self_match: topo.groups[group as usize].matches(&pod.namespace, &pod.labels),
                honor_affinity: c.honors_node_affinity(),
                honor_taints: c.honors_taints(),
            }
        })
        .collect();
    let affinity = pod
        .pod_affinity
        .iter()
        .map(|t| {
            let g = topo.affinity_group(&pod.namespace, t);
            (
                g,
                topo.groups[g as usize].matches(&pod.namespace, &pod.labels),
            )
        })
        .collect();
    let anti = pod
        .pod_anti_affinity
        .iter()
        .map(|t| {
            let g = topo.affinity_group(&pod.namespace, t);
            topo.groups[g as usize].has_owners = true;
            g
        })
        .collect();
    let soft_affinity = pod
        .preferred_pod_affinity
        .iter()
        .map(|(w, t)| {
            let g = topo.affinity_group(&pod.namespace, t);
            (
                g,
                topo.groups[g as usize].matches(&pod.namespace, &pod.labels),
                *w,
            )
        })
        .collect();
    let soft_anti = pod
        .preferred_pod_anti_affinity
        .iter()
        .map(|(w, t)| (topo.affinity_group(&pod.namespace, t), *w))
        .collect();
    let untolerated_reason: Vec<Option<String>> = pools
        .iter()
        .map(|p| {
            first_untolerated(&p.input.taints, &pod.tolerations)
                .map(|t| format!("taint {t} is not tolerated"))
        })
        .collect();
    PodInfo {
        terms: term_ids,
        preferred: preferred.into_iter().map(|(_, r)| r.clone()).collect(),
        spreads,
        affinity,
        anti,
        soft_affinity,
        soft_anti,
        member_of: Vec::new(),
        keys: Vec::new(),
        exclusive: Vec::new(),
        tolerated: untolerated_reason.iter().map(Option::is_none).collect(),
        untolerated_reason,
    }
}

/// Karpenter's order: CPU descending, then memory descending; namespace and name keep it
/// total so the plan never depends on input order.
pub(crate) fn order(pods: &[Pod]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..pods.len()).collect();
    idx.sort_by(|&a, &b| {
        let (pa, pb) = (&pods[a], &pods[b]);
        pb.requests
            .cpu_milli
            .cmp(&pa.requests.cpu_milli)
            .then(pb.requests.memory_bytes.cmp(&pa.requests.memory_bytes))
            .then_with(|| pa.namespace.cmp(&pb.namespace))
            .then_with(|| pa.name.cmp(&pb.name))
            .then(a.cmp(&b))
    });
    idx
}
