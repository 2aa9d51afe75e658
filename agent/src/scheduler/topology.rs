//! Topology bookkeeping: domains (zone names, hostnames, capacity types...) interned to
//! integers, and one counter per (topology key, namespaces, label selector) group, so that
//! checking a spread, affinity or anti-affinity constraint is an array lookup.
//!
//! Semantics follow the Kubernetes scheduler, with Karpenter's extension that a new node
//! is always a possible hostname domain (its count is 0), so hostname spread with
//! maxSkew 1 puts at most one matching pod per node.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::requirements::Requirements;

use super::input::{LabelSelector, PodAffinityTerm, TopologySpreadConstraint};

/// String ↔ integer ids for domain values.
#[derive(Default)]
pub(crate) struct Domains {
    ids: HashMap<String, u32>,
    pub names: Vec<String>,
}

impl Domains {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    key: String,
    namespaces: Vec<String>,
    namespace_selector: Option<LabelSelector>,
    selector: Option<LabelSelector>,
}

pub(crate) type NamespaceLabels = Arc<BTreeMap<String, BTreeMap<String, String>>>;

/// Pods matching one selector, counted per domain of one topology key.
pub(crate) struct Group {
    pub key: String,
    pub is_host: bool,
    namespaces: BTreeSet<String>,
    /// `namespaceSelector`, matched against [`Topology::namespace_labels`].
    namespace_selector: Option<Requirements>,
    namespace_labels: NamespaceLabels,
    selector: Option<Requirements>,
    counts: Vec<i32>,
    /// Pods that carry this group as a required anti-affinity term, per domain.
    owners: Vec<i32>,
    pub has_owners: bool,
    /// Matching pods anywhere (for the self-affinity bootstrap rule).
    pub total: i32,
}

impl Group {
    pub fn count(&self, d: u32) -> i32 {
        self.counts.get(d as usize).copied().unwrap_or(0)
    }

    pub fn owners(&self, d: u32) -> i32 {
        self.owners.get(d as usize).copied().unwrap_or(0)
    }

    pub fn add(&mut self, d: u32, n: i32) {
        let i = d as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
        self.total += n;
    }

    pub fn add_owner(&mut self, d: u32) {
        let i = d as usize;
        if self.owners.len() <= i {
            self.owners.resize(i + 1, 0);
        }
        self.owners[i] += 1;
    }

    pub fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        match &self.selector {
            None => false,
            Some(sel) => self.namespace_matches(namespace) && sel.matches_labels(labels),
        }
    }

    fn namespace_matches(&self, namespace: &str) -> bool {
        if self.namespaces.contains(namespace) {
            return true;
        }
        let Some(ns_sel) = &self.namespace_selector else {
            return false;
        };
        match self.namespace_labels.get(namespace) {
            Some(l) => ns_sel.matches_labels(l),
            None => ns_sel.matches_labels(&BTreeMap::new()),
        }
    }
}

#[derive(Default)]
pub(crate) struct Topology {
    pub domains: Domains,
    pub namespace_labels: NamespaceLabels,
    pub groups: Vec<Group>,
    index: HashMap<GroupKey, u32>,
}

impl Topology {
    fn group(
        &mut self,
        key: &str,
        namespaces: Vec<String>,
        namespace_selector: Option<&LabelSelector>,
        selector: Option<&LabelSelector>,
    ) -> u32 {
        let mut namespaces = namespaces;
        namespaces.sort();
        namespaces.dedup();
        let gk = GroupKey {
            key: key.to_string(),
            namespaces,
            namespace_selector: namespace_selector.cloned(),
            selector: selector.cloned(),
        };
        if let Some(g) = self.index.get(&gk) {
            return *g;
        }
        let id = self.groups.len() as u32;
        self.groups.push(Group {
            key: gk.key.clone(),
            is_host: gk.key == crate::labels::HOSTNAME,
            namespaces: gk.namespaces.iter().cloned().collect(),
            namespace_selector: gk
                .namespace_selector
                .as_ref()
                .map(LabelSelector::to_requirements),
            namespace_labels: self.namespace_labels.clone(),
            selector: gk.selector.as_ref().map(LabelSelector::to_requirements),
            counts: Vec::new(),
            owners: Vec::new(),
            has_owners: false,
            total: 0,
        });
        self.index.insert(gk, id);
        id
    }

    /// The group of a spread constraint; `matchLabelKeys` take the incoming pod's values
    /// (a key the pod lacks is ignored, as in Kubernetes).
    pub fn spread_group(
        &mut self,
        namespace: &str,
        pod_labels: &BTreeMap<String, String>,
        c: &TopologySpreadConstraint,
    ) -> u32 {
        let mut selector = c.label_selector.clone();
        if let Some(s) = selector.as_mut() {
            for k in &c.match_label_keys {
                if let Some(v) = pod_labels.get(k) {
                    s.match_labels.insert(k.clone(), v.clone());
                }
            }
        }
        self.group(
            &c.topology_key,
            vec![namespace.to_string()],
            None,
            selector.as_ref(),
        )
    }

    pub fn affinity_group(&mut self, namespace: &str, t: &PodAffinityTerm) -> u32 {
        let ns = if t.namespaces.is_empty() && t.namespace_selector.is_none() {
            vec![namespace.to_string()]
        } else {
            t.namespaces.clone()
        };
        self.group(
            &t.topology_key,
            ns,
            t.namespace_selector.as_ref(),
            t.label_selector.as_ref(),
        )
    }
}
