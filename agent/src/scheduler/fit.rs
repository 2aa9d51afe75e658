//! Whether any node of a NodePool could run a pod, ignoring what is free where: the
//! scheduler's own tests of a pool (its taints, its requirements against each of the pod's
//! node-affinity terms, a type of the catalogue that satisfies both), asked once.
//!
//! The provider's plan preview asks it of the pods a NodePool change would move, so that
//! "would become unschedulable" in a plan means what the provisioner will find.

use crate::catalog::{volume_limits, Catalog};
use crate::labels;
use crate::requirements::Requirements;
use crate::taints::{first_untolerated, Taint};

use super::input::{NodePoolInput, Pod};

/// Why no node of a pool could run a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stranded {
    /// A taint of the pool's template the pod does not tolerate.
    Taint(Taint),
    /// The pool refuses every node-affinity term of the pod: the first term's refusal.
    Requirements(TermRefusal),
    /// The requirements agree, but no type of the catalogue the pool admits satisfies the
    /// pod's terms and holds its requests.
    NoType,
}

impl std::fmt::Display for Stranded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stranded::Taint(t) => write!(f, "does not tolerate taint {t}"),
            Stranded::Requirements(r) => write!(f, "{r}"),
            Stranded::NoType => f.write_str("no instance type the pool admits could hold it"),
        }
    }
}

/// Why a pool refuses one of a pod's requirement terms: the key, and the scheduler's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermRefusal {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for TermRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whether a node of `pool` may satisfy a pod's requirement term, before instance types:
/// the pool's requirements (its labels included) must be compatible with it, and a pod
/// selecting a NodePool by name must select this one.
pub(crate) fn term_refusal(pool: &NodePoolInput, term: &Requirements) -> Result<(), TermRefusal> {
    if let Some(c) = pool.requirements.conflict(term) {
        return Err(TermRefusal {
            key: c.key.to_string(),
            message: format!("incompatible requirements: {c}"),
        });
    }
    // The pool's own name is a label its nodes get but its requirements do not list.
    let other_pool = [labels::KARPENTER_NODEPOOL, labels::JOINER_NODEPOOL]
        .into_iter()
        .find_map(|k| {
            term.get(k)
                .filter(|r| !r.matches(Some(&pool.name)))
                .map(|r| (k, r))
        });
    match other_pool {
        Some((k, r)) => Err(TermRefusal {
            key: k.to_string(),
            message: format!("the pod requires {k} {r}"),
        }),
        None => Ok(()),
    }
}

/// The pod's required node-affinity terms, each intersected with its nodeSelector, as
/// the scheduler compiles them.
pub(crate) fn terms(pod: &Pod) -> Vec<Requirements> {
    let selector = Requirements::from_labels(&pod.node_selector);
    if pod.required_node_affinity.is_empty() {
        vec![selector]
    } else {
        pod.required_node_affinity
            .iter()
            .map(|t| selector.intersect(t))
            .collect()
    }
}

/// Whether the pod's requests fit a node of the type, its EBS volumes within what the type
/// attaches (the limit is added only for a pod that has some: this runs per type).
fn fits_type(pod: &Pod, t: &crate::catalog::InstanceType) -> bool {
    if pod
        .requests
        .extended
        .contains_key(volume_limits::EBS_ATTACH_RESOURCE)
    {
        pod.requests
            .fits_in(&volume_limits::with_ebs_limit(&t.allocatable, &t.record))
    } else {
        pod.requests.fits_in(&t.allocatable)
    }
}

/// Why no node of `pool` could ever run `pod`, or None when one could.
pub fn stranded(catalog: &Catalog, pool: &NodePoolInput, pod: &Pod) -> Option<Stranded> {
    if let Some(t) = first_untolerated(&pool.taints, &pod.tolerations) {
        return Some(Stranded::Taint(t.clone()));
    }
    let mut first_refusal = None;
    let mut agreed = false;
    for term in terms(pod) {
        match term_refusal(pool, &term) {
            Err(e) => {
                first_refusal.get_or_insert(e);
            }
            Ok(()) => {
                agreed = true;
                let both = pool.requirements.intersect(&term);
                let fits = catalog
                    .types
                    .iter()
                    .any(|t| t.allowed_by(&both) && t.labels_match(&term) && fits_type(pod, t));
                if fits {
                    return None;
                }
            }
        }
    }
    Some(match (agreed, first_refusal) {
        (false, Some(why)) => Stranded::Requirements(why),
        _ => Stranded::NoType,
    })
}
