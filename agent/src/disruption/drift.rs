//! Drift: a NodeClaim no longer matches what its NodePool and NodeClass would launch today.
//!
//! Three checks, as in Karpenter v1:
//! - **static fields**: a hash of the NodePool template's static part (labels, annotations,
//!   taints, startup taints, NodeClass reference) and of the NodeClass spec's static part
//!   (everything but the selector terms, which resolve dynamically) is stamped on the
//!   NodeClaim at launch ([`NODEPOOL_HASH`], [`NODECLASS_HASH`], with [`HASH_VERSION`]); a
//!   different hash today means drift. Claims without the annotations are not drifted (they
//!   predate stamping; the controller stamps them with today's hashes);
//! - **AMI**: the instance's image is not among the AMIs the NodeClass resolves to now;
//! - **requirements**: the node's labels violate the NodePool's requirements (changed
//!   requirements do not touch the hash, so narrowing a pool drifts only the nodes outside).
//!
//! Only the template is hashed, not the whole NodePool spec: a change to limits, weight or
//! budgets must not drift nodes. (A whole-spec `joiner.dev/nodepool-hash` the provisioner
//! once wrote was never read and is gone.)
//!
//! The hash is FNV-1a over canonical JSON: stable across Rust releases and agent restarts,
//! unlike `std`'s hasher, and it needs no crate in the pure half.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::{NodeClassSpec, NodePoolSpec};

pub const NODEPOOL_HASH: &str = "joiner.dev/nodepool-template-hash";
pub const NODECLASS_HASH: &str = "joiner.dev/nodeclass-hash";
/// Bumped when what the hashes cover changes, so an upgrade does not drift every node.
pub const HASH_VERSION_ANNOTATION: &str = "joiner.dev/hash-version";
pub const HASH_VERSION: &str = "v1";

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hash_of<T: Serialize>(v: &T) -> String {
    // Struct fields serialise in declaration order and maps are BTreeMaps: canonical.
    let json = serde_json::to_vec(v).unwrap_or_default();
    format!("{:016x}", fnv1a(&json))
}

/// The hash of a NodePool template's static fields.
pub fn nodepool_hash(spec: &NodePoolSpec) -> String {
    let t = &spec.template;
    hash_of(&(
        &t.metadata.labels,
        &t.metadata.annotations,
        &t.spec.taints,
        &t.spec.startup_taints,
        &t.spec.node_class_ref,
    ))
}

/// The hash of a NodeClass spec's static fields (selector terms excluded).
pub fn nodeclass_hash(spec: &NodeClassSpec) -> String {
    let mut s = spec.clone();
    s.subnet_selector_terms.clear();
    s.security_group_selector_terms.clear();
    s.ami_selector_terms.clear();
    // Which reservations a class selects is dynamic too (Karpenter: `hash:"ignore"`).
    s.capacity_reservation_selector_terms.clear();
    hash_of(&s)
}

/// The annotations to stamp on a NodeClaim at launch.
pub fn stamp(pool: &NodePoolSpec, class: &NodeClassSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NODEPOOL_HASH.to_string(), nodepool_hash(pool)),
        (NODECLASS_HASH.to_string(), nodeclass_hash(class)),
        (
            HASH_VERSION_ANNOTATION.to_string(),
            HASH_VERSION.to_string(),
        ),
    ])
}

/// What drift looks at for one NodeClaim.
pub struct DriftInput<'a> {
    pub claim_annotations: &'a BTreeMap<String, String>,
    /// The node's labels, completed with the catalogue's labels of its instance type.
    pub node_labels: &'a BTreeMap<String, String>,
    /// The image the instance runs (NodeClaim `status.imageID`).
    pub image_id: Option<&'a str>,
    pub pool: &'a NodePoolSpec,
    pub class: Option<&'a NodeClassSpec>,
    /// The AMIs the NodeClass resolves to now (its status); empty when unknown.
    pub resolved_amis: &'a [String],
}

/// Why a claim drifted, or None.
pub fn drift_reason(d: &DriftInput) -> Option<String> {
    let versioned = d
        .claim_annotations
        .get(HASH_VERSION_ANNOTATION)
        .map(String::as_str)
        == Some(HASH_VERSION);
    if versioned {
        if let Some(h) = d.claim_annotations.get(NODEPOOL_HASH) {
            if *h != nodepool_hash(d.pool) {
                return Some("the NodePool's template changed".into());
            }
        }
        if let (Some(h), Some(class)) = (d.claim_annotations.get(NODECLASS_HASH), d.class) {
            if *h != nodeclass_hash(class) {
                return Some("the NodeClass changed".into());
            }
        }
    }
    if let Some(image) = d.image_id.filter(|i| !i.is_empty()) {
        let explicit: Vec<String> = d
            .class
            .map(|c| {
                c.ami_selector_terms
                    .iter()
                    .filter_map(|t| t.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        let all_explicit = d.class.is_some_and(|c| {
            !c.ami_selector_terms.is_empty() && c.ami_selector_terms.iter().all(|t| t.id.is_some())
        });
        let allowed: &[String] = if !d.resolved_amis.is_empty() {
            d.resolved_amis
        } else if all_explicit {
            &explicit
        } else {
            &[]
        };
        if !allowed.is_empty() && !allowed.iter().any(|a| a == image) {
            return Some(format!(
                "its AMI {image} is no longer selected by the NodeClass"
            ));
        }
    }
    match crate::api::convert_requirements(&d.pool.template.spec.requirements) {
        Ok(reqs) => {
            // Keys the node does not carry are not judged: the agent cannot tell.
            let mut known = crate::requirements::Requirements::new();
            for (k, r) in reqs.iter() {
                if d.node_labels.contains_key(k) {
                    known.add(k, r.clone());
                }
            }
            if let Some(m) = known.first_mismatch(d.node_labels) {
                return Some(format!("it violates the NodePool's requirement {m}"));
            }
        }
        Err(_) => return None,
    }
    for (k, v) in &d.pool.template.metadata.labels {
        if d.node_labels.get(k).is_some_and(|have| have != v) {
            return Some(format!("its label {k} is not {v}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_class::AmiSelectorTerm;
    use crate::api::{NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};

    fn pool() -> NodePoolSpec {
        let mut p = NodePoolSpec::default();
        p.template.spec.node_class_ref = NodeClassReference {
            group: "joiner.dev".into(),
            kind: "NodeClass".into(),
            name: "default".into(),
        };
        p.template.spec.requirements = vec![NodeSelectorRequirementWithMinValues {
            key: "karpenter.sh/capacity-type".into(),
            operator: "In".into(),
            values: vec!["spot".into(), "on-demand".into()],
            min_values: None,
        }];
        p
    }

    fn class() -> NodeClassSpec {
        NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                id: Some("ami-1".into()),
                ..Default::default()
            }],
            role: Some("node".into()),
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn hashes_cover_static_fields_only() {
        let p = pool();
        let h = nodepool_hash(&p);
        assert_eq!(h, nodepool_hash(&p.clone()), "deterministic");
        let mut q = p.clone();
        q.template.spec.requirements.clear();
        q.weight = Some(50);
        q.template.spec.expire_after = "1h".into();
        assert_eq!(
            nodepool_hash(&q),
            h,
            "requirements and behaviour are not hashed"
        );
        q.template.spec.taints.push(Taint {
            key: "k".into(),
            value: "v".into(),
            effect: "NoSchedule".into(),
        });
        assert_ne!(nodepool_hash(&q), h);
        let c = class();
        let mut d = c.clone();
        d.ami_selector_terms[0].id = Some("ami-2".into());
        assert_eq!(
            nodeclass_hash(&d),
            nodeclass_hash(&c),
            "selectors resolve dynamically"
        );
        d.user_data = Some("echo hi".into());
        assert_ne!(nodeclass_hash(&d), nodeclass_hash(&c));
        // Pinned, so a change to the hashing is a conscious one (it would drift every node).
        assert_eq!(nodepool_hash(&NodePoolSpec::default()).len(), 16);
    }

    fn input<'a>(
        ann: &'a BTreeMap<String, String>,
        node: &'a BTreeMap<String, String>,
        image: Option<&'a str>,
        pool: &'a NodePoolSpec,
        class: Option<&'a NodeClassSpec>,
        amis: &'a [String],
    ) -> DriftInput<'a> {
        DriftInput {
            claim_annotations: ann,
            node_labels: node,
            image_id: image,
            pool,
            class,
            resolved_amis: amis,
        }
    }

    #[test]
    fn drift_reasons() {
        let p = pool();
        let c = class();
        let ann = stamp(&p, &c);
        let node = labels(&[("karpenter.sh/capacity-type", "spot")]);

        assert_eq!(
            drift_reason(&input(&ann, &node, Some("ami-1"), &p, Some(&c), &[])),
            None
        );

        let mut p2 = p.clone();
        p2.template
            .metadata
            .labels
            .insert("team".into(), "a".into());
        let r = drift_reason(&input(&ann, &node, Some("ami-1"), &p2, Some(&c), &[])).unwrap();
        assert!(r.contains("template"), "{r}");

        let mut c2 = c.clone();
        c2.tags.insert("x".into(), "y".into());
        let r = drift_reason(&input(&ann, &node, Some("ami-1"), &p, Some(&c2), &[])).unwrap();
        assert!(r.contains("NodeClass changed"), "{r}");

        let mut c3 = c.clone();
        c3.ami_selector_terms[0].id = Some("ami-2".into());
        let r = drift_reason(&input(&ann, &node, Some("ami-1"), &p, Some(&c3), &[])).unwrap();
        assert!(r.contains("AMI ami-1"), "{r}");
        // Resolved AMIs (the NodeClass status) win over explicit IDs.
        assert_eq!(
            drift_reason(&input(
                &ann,
                &node,
                Some("ami-1"),
                &p,
                Some(&c3),
                &["ami-1".into()]
            )),
            None
        );

        let mut p3 = p.clone();
        p3.template.spec.requirements[0].values = vec!["on-demand".into()];
        let r = drift_reason(&input(&ann, &node, Some("ami-1"), &p3, Some(&c), &[])).unwrap();
        assert!(r.contains("karpenter.sh/capacity-type"), "{r}");

        // Unstamped claims are not hash-drifted; a key the node lacks is not judged.
        let none = BTreeMap::new();
        assert_eq!(
            drift_reason(&input(&none, &node, None, &p2, Some(&c2), &[])),
            None
        );
        let mut p4 = p.clone();
        p4.template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: "karpenter.k8s.aws/instance-category".into(),
                operator: "In".into(),
                values: vec!["c".into()],
                min_values: None,
            });
        assert_eq!(
            drift_reason(&input(&ann, &node, None, &p4, Some(&c), &[])),
            None
        );
    }
}
