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
//! The NodePool's share of drift is [`PoolDrift`]: the loop reaches it through
//! [`drift_reason`] with the hash a claim was stamped with, and the provider's plan preview
//! through [`template_drift`] with the template in Terraform's state, so that a plan never
//! promises a drift the agent will not act on, nor hides one it will.
//!
//! The hash is FNV-1a over canonical JSON: stable across Rust releases and agent restarts,
//! unlike `std`'s hasher, and it needs no crate in the pure half.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::api::{NodeClassSpec, NodePoolSpec, ParsedRequirements};
use crate::catalog::Catalog;

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

/// A static field of a NodePool template: changing any of them drifts every node of the
/// pool. [`nodepool_hash`] covers exactly these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateField {
    NodeClass,
    Labels,
    Annotations,
    Taints,
    StartupTaints,
}

impl TemplateField {
    /// In the order a reviewer is pointed at them when several changed.
    pub const ALL: [TemplateField; 5] = [
        TemplateField::NodeClass,
        TemplateField::Labels,
        TemplateField::Annotations,
        TemplateField::Taints,
        TemplateField::StartupTaints,
    ];

    fn differs(self, a: &NodePoolSpec, b: &NodePoolSpec) -> bool {
        let (a, b) = (&a.template, &b.template);
        match self {
            TemplateField::NodeClass => a.spec.node_class_ref != b.spec.node_class_ref,
            TemplateField::Labels => a.metadata.labels != b.metadata.labels,
            TemplateField::Annotations => a.metadata.annotations != b.metadata.annotations,
            TemplateField::Taints => a.spec.taints != b.spec.taints,
            TemplateField::StartupTaints => a.spec.startup_taints != b.spec.startup_taints,
        }
    }
}

/// Why a node no longer fits its NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolDrift {
    /// The template's static fields hash differently from the hash stamped at launch. The
    /// field is known only when the template the node was launched from is.
    Template(Option<TemplateField>),
    /// The node's label violates the pool's requirement at `index`.
    Requirement {
        index: usize,
        key: String,
        value: String,
        requirement: String,
    },
    /// The node's label differs from the template's.
    Label {
        key: String,
        want: String,
        have: String,
    },
}

impl fmt::Display for PoolDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolDrift::Template(_) => f.write_str("the NodePool's template changed"),
            PoolDrift::Requirement {
                key, requirement, ..
            } => write!(
                f,
                "it violates the NodePool's requirement {key} {requirement}"
            ),
            PoolDrift::Label { key, want, .. } => write!(f, "its label {key} is not {want}"),
        }
    }
}

/// The labels drift judges a node by: its own, completed with the catalogue's labels of
/// its instance type, which a node may not carry (a kubelet that labels only a few).
pub fn completed_labels(
    catalog: &Catalog,
    instance_type: &str,
    node_labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut full = node_labels.clone();
    if let Some(t) = catalog.get(instance_type) {
        for (k, v) in &t.labels {
            full.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    full
}

/// Whether a node launched from `old` drifts once its pool is `new`, and why: exactly what
/// [`drift_reason`] decides for a claim stamped from `old` whose NodeClass and AMI have not
/// changed. `new_requirements` as for [`DriftInput::requirements`], `node_labels` as for
/// [`DriftInput::node_labels`].
pub fn template_drift(
    old: &NodePoolSpec,
    new: &NodePoolSpec,
    new_requirements: &ParsedRequirements,
    node_labels: &BTreeMap<String, String>,
) -> Option<PoolDrift> {
    if nodepool_hash(old) != nodepool_hash(new) {
        let field = TemplateField::ALL.into_iter().find(|f| f.differs(old, new));
        return Some(PoolDrift::Template(field));
    }
    requirement_drift(new, new_requirements, node_labels)
}

/// The pool's requirements and template labels against the node's labels. A key the node
/// does not carry is not judged: the agent cannot tell what the node would have had.
fn requirement_drift(
    pool: &NodePoolSpec,
    reqs: &ParsedRequirements,
    node_labels: &BTreeMap<String, String>,
) -> Option<PoolDrift> {
    // A pool whose requirements do not parse is refused by validation; drifting its nodes
    // on a guess would replace them for nothing.
    if reqs.entries.iter().any(|(_, read)| read.is_err()) {
        return None;
    }
    for (index, (key, read)) in reqs.entries.iter().enumerate() {
        let (Some(value), Ok((_, req))) = (node_labels.get(key), read) else {
            continue;
        };
        if !req.has(value) {
            return Some(PoolDrift::Requirement {
                index,
                key: key.clone(),
                value: value.clone(),
                requirement: req.to_string(),
            });
        }
    }
    for (k, v) in &pool.template.metadata.labels {
        if let Some(have) = node_labels.get(k).filter(|have| *have != v) {
            return Some(PoolDrift::Label {
                key: k.clone(),
                want: v.clone(),
                have: have.clone(),
            });
        }
    }
    None
}

/// The hash of a NodePool template's static fields ([`TemplateField`]).
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
    /// The pool's requirements as the round parsed them once for all its nodes
    /// ([`crate::scheduler::ParsedPool`]).
    pub requirements: &'a ParsedRequirements,
    pub class: Option<&'a NodeClassSpec>,
    /// [`nodepool_hash`] of `pool` and [`nodeclass_hash`] of `class`: the caller hashes each
    /// pool and class once for all their nodes (at thousands of nodes, hashing per claim
    /// was a good part of a disruption pass).
    pub pool_hash: &'a str,
    pub class_hash: Option<&'a str>,
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
            if h != d.pool_hash {
                return Some(PoolDrift::Template(None).to_string());
            }
        }
        if let (Some(h), Some(now)) = (d.claim_annotations.get(NODECLASS_HASH), d.class_hash) {
            if h != now {
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
    requirement_drift(d.pool, d.requirements, d.node_labels).map(|r| r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_class::AmiSelectorTerm;
    use crate::api::{NodeClassReference, NodeSelectorRequirementWithMinValues, Taint};
    use crate::scheduler::ParsedPool;

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

    fn parse(pool: &NodePoolSpec) -> ParsedRequirements {
        crate::api::parse_requirements(&pool.template.spec.requirements)
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

    #[test]
    fn every_template_field_is_hashed_and_named() {
        let p = pool();
        let node = labels(&[("karpenter.sh/capacity-type", "spot")]);
        type Change = fn(&mut NodePoolSpec);
        let changes: [(TemplateField, Change); 5] = [
            (TemplateField::NodeClass, |q| {
                q.template.spec.node_class_ref.name = "other".into()
            }),
            (TemplateField::Labels, |q| {
                q.template.metadata.labels.insert("k".into(), "v".into());
            }),
            (TemplateField::Annotations, |q| {
                q.template
                    .metadata
                    .annotations
                    .insert("k".into(), "v".into());
            }),
            (TemplateField::Taints, |q| {
                q.template.spec.taints.push(Taint {
                    key: "k".into(),
                    value: "v".into(),
                    effect: "NoSchedule".into(),
                })
            }),
            (TemplateField::StartupTaints, |q| {
                q.template.spec.startup_taints.push(Taint {
                    key: "k".into(),
                    value: "v".into(),
                    effect: "NoSchedule".into(),
                })
            }),
        ];
        for (field, change) in changes {
            let mut q = p.clone();
            change(&mut q);
            assert_ne!(nodepool_hash(&q), nodepool_hash(&p), "{field:?}");
            assert_eq!(
                template_drift(&p, &q, &parse(&q), &node),
                Some(PoolDrift::Template(Some(field)))
            );
            // What the loop decides for a claim stamped from `p`.
            let ann = stamp(&p, &class());
            let reason = reason(&ann, &node, None, &q, Some(&class()), &[]);
            assert_eq!(reason, Some(PoolDrift::Template(Some(field)).to_string()));
        }
        assert_eq!(template_drift(&p, &p, &parse(&p), &node), None);
    }

    /// What the loop decides for one claim of a pool read on its own.
    fn reason(
        ann: &BTreeMap<String, String>,
        node: &BTreeMap<String, String>,
        image: Option<&str>,
        pool: &NodePoolSpec,
        class: Option<&NodeClassSpec>,
        amis: &[String],
    ) -> Option<String> {
        drift_reason(&DriftInput {
            claim_annotations: ann,
            node_labels: node,
            image_id: image,
            pool,
            requirements: &crate::api::parse_requirements(&pool.template.spec.requirements),
            class,
            pool_hash: &nodepool_hash(pool),
            class_hash: class.map(nodeclass_hash).as_deref(),
            resolved_amis: amis,
        })
    }

    /// Each pool by name, and each node with the index of its pool and its labels.
    type Pools = Vec<(String, NodePoolSpec)>;
    type Nodes = Vec<(usize, BTreeMap<String, String>)>;

    /// A round's NodePools, each with three requirements (one on a key its template also
    /// labels, which validation holds against the label), and nodes that satisfy them, break
    /// one, or lack a required label.
    fn world() -> (Pools, Nodes) {
        let req =
            |key: &str, operator: &str, values: &[&str]| NodeSelectorRequirementWithMinValues {
                key: key.into(),
                operator: operator.into(),
                values: values.iter().map(|v| v.to_string()).collect(),
                min_values: None,
            };
        let pools: Pools = (0..4)
            .map(|i| {
                let mut p = pool();
                p.template.spec.expire_after = "720h".into();
                let team = format!("team-{i}");
                p.template
                    .metadata
                    .labels
                    .insert("team".into(), team.clone());
                p.template.spec.requirements.extend([
                    req("karpenter.k8s.aws/instance-category", "In", &["c", "m"]),
                    req("team", "In", &[team.as_str()]),
                ]);
                (format!("pool-{i}"), p)
            })
            .collect();
        let mut nodes = Vec::new();
        for i in 0..pools.len() {
            let team = format!("team-{i}");
            for n in 0..60 {
                let mut l = labels(&[("karpenter.sh/capacity-type", "spot"), ("team", &team)]);
                match n % 3 {
                    0 => l.insert("karpenter.k8s.aws/instance-category".into(), "c".into()),
                    1 => l.insert("karpenter.k8s.aws/instance-category".into(), "r".into()),
                    _ => None,
                };
                nodes.push((i, l));
            }
        }
        (pools, nodes)
    }

    /// What a provisioning and disruption round does with its pools: the validation verdict,
    /// the scheduler's input, and the drift check of every node.
    fn round(
        pools: &[(String, NodePoolSpec)],
        nodes: &[(usize, BTreeMap<String, String>)],
    ) -> (crate::scheduler::Input, Vec<Option<String>>) {
        let parsed: Vec<ParsedPool> = pools
            .iter()
            .map(|(name, spec)| ParsedPool::parse(name, spec).unwrap())
            .collect();
        let none = BTreeMap::new();
        let drift = nodes
            .iter()
            .map(|(i, l)| {
                drift_reason(&DriftInput {
                    claim_annotations: &none,
                    node_labels: l,
                    image_id: None,
                    pool: &pools[*i].1,
                    requirements: &parsed[*i].requirements,
                    class: None,
                    pool_hash: &nodepool_hash(&pools[*i].1),
                    class_hash: None,
                    resolved_amis: &[],
                })
            })
            .collect();
        let sched = crate::scheduler::Input {
            node_pools: parsed.into_iter().map(|p| p.input).collect(),
            ..Default::default()
        };
        (sched, drift)
    }

    #[test]
    fn a_round_parses_each_pools_requirements_once() {
        let (pools, nodes) = world();
        let before = crate::requirements::PARSES.with(|n| n.get());
        let (input, drift) = round(&pools, &nodes);
        let parses = crate::requirements::PARSES.with(|n| n.get()) - before;
        let entries: usize = pools
            .iter()
            .map(|(_, p)| p.template.spec.requirements.len())
            .sum();
        assert_eq!(
            parses,
            entries,
            "{} pools, {} nodes",
            pools.len(),
            nodes.len()
        );
        assert_eq!(input.node_pools.len(), pools.len());
        // Only the nodes whose category the pools exclude drift; a node without the label
        // is not judged.
        let drifted: Vec<usize> = (0..nodes.len()).filter(|n| drift[*n].is_some()).collect();
        assert_eq!(
            drifted,
            (0..nodes.len())
                .filter(|n| n % 60 % 3 == 1)
                .collect::<Vec<_>>()
        );
        assert!(drift[1]
            .as_deref()
            .is_some_and(|r| r.contains("instance-category")));
    }

    #[test]
    fn drift_reasons() {
        let p = pool();
        let c = class();
        let ann = stamp(&p, &c);
        let node = labels(&[("karpenter.sh/capacity-type", "spot")]);

        assert_eq!(reason(&ann, &node, Some("ami-1"), &p, Some(&c), &[]), None);

        let mut p2 = p.clone();
        p2.template
            .metadata
            .labels
            .insert("team".into(), "a".into());
        let r = reason(&ann, &node, Some("ami-1"), &p2, Some(&c), &[]).unwrap();
        assert!(r.contains("template"), "{r}");

        let mut c2 = c.clone();
        c2.tags.insert("x".into(), "y".into());
        let r = reason(&ann, &node, Some("ami-1"), &p, Some(&c2), &[]).unwrap();
        assert!(r.contains("NodeClass changed"), "{r}");

        let mut c3 = c.clone();
        c3.ami_selector_terms[0].id = Some("ami-2".into());
        let r = reason(&ann, &node, Some("ami-1"), &p, Some(&c3), &[]).unwrap();
        assert!(r.contains("AMI ami-1"), "{r}");
        // Resolved AMIs (the NodeClass status) win over explicit IDs.
        assert_eq!(
            reason(&ann, &node, Some("ami-1"), &p, Some(&c3), &["ami-1".into()]),
            None
        );

        let mut p3 = p.clone();
        p3.template.spec.requirements[0].values = vec!["on-demand".into()];
        let r = reason(&ann, &node, Some("ami-1"), &p3, Some(&c), &[]).unwrap();
        assert!(r.contains("karpenter.sh/capacity-type"), "{r}");

        // Unstamped claims are not hash-drifted; a key the node lacks is not judged.
        let none = BTreeMap::new();
        assert_eq!(reason(&none, &node, None, &p2, Some(&c2), &[]), None);
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
        assert_eq!(reason(&ann, &node, None, &p4, Some(&c), &[]), None);
    }
}
