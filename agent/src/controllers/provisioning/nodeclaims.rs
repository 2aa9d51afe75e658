//! NodeClaims from a plan, shaped as Karpenter's: named `<nodepool>-<5 random>`, labelled
//! with the NodePool's template labels, the pool name and every requirement that has a
//! single value, annotated with the template's annotations and the drift hashes of the
//! NodePool template and NodeClass ([`crate::disruption::drift::stamp`]), owned by the
//! NodePool, and holding the termination finalizer from birth so no instance is ever
//! launched for a claim the agent could lose track of.
//!
//! This is the only place NodeClaims are created (`agent/tests/one_creation_path.rs` checks
//! it): interruption and disruption disrupt claims, and provisioning replaces their pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use rand::Rng;

use crate::api::{NodeClaim, NodeClaimSpec, NodeClass, NodePool};
use crate::controllers::{Context, TERMINATION_FINALIZER};
use crate::labels;
use crate::scheduler::NewNodeClaim;

/// `<nodepool>-<5 random lowercase alphanumerics>`, as Karpenter names claims.
pub fn claim_name(pool: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{pool}-{suffix}")
}

/// The NodeClaim object for a planned claim. Drift compares the stamped hashes with
/// today's; stamping at birth means a change made right after launch still drifts the node
/// (claims stamped later get the then-current hashes, which would hide such a change).
pub fn build(plan: &NewNodeClaim, pool: &NodePool, class: Option<&NodeClass>) -> NodeClaim {
    let pool_name = pool.name_any();
    let spec = NodeClaimSpec::from_plan(plan, &pool.spec);
    let mut labels: BTreeMap<String, String> = pool.spec.template.metadata.labels.clone();
    for (k, r) in plan.requirements.iter() {
        if k == labels::HOSTNAME {
            continue;
        }
        if let Some(v) = r.single_value() {
            labels.insert(k.clone(), v.to_string());
        }
    }
    labels.insert(labels::KARPENTER_NODEPOOL.into(), pool_name.clone());
    labels.insert(labels::JOINER_NODEPOOL.into(), pool_name.clone());
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    if let Some(class) = class {
        annotations.extend(crate::disruption::drift::stamp(&pool.spec, &class.spec));
    }
    if let Some(relaxed) = plan.min_values_relaxed {
        annotations.insert(
            crate::api::launch_policy::MIN_VALUES_RELAXED_ANNOTATION.into(),
            relaxed.to_string(),
        );
    }
    let name = claim_name(&pool_name);
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: Some(vec![TERMINATION_FINALIZER.into()]),
            owner_references: pool.metadata.uid.clone().map(|uid| {
                vec![OwnerReference {
                    api_version: "joiner.dev/v1".into(),
                    kind: "NodePool".into(),
                    name: pool_name.clone(),
                    uid,
                    block_owner_deletion: Some(true),
                    controller: None,
                }]
            }),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// Creates the claim and puts it in the local store at once, so the next round counts it
/// as in flight even before the watch delivers it.
pub(super) async fn create(ctx: &Context, claim: &NodeClaim) -> Result<NodeClaim, kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let created = api.create(&PostParams::default(), claim).await?;
    ctx.state
        .node_claims
        .insert(&created.name_any(), created.clone());
    Ok(created)
}
