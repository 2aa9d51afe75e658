//! NodeClaims from a plan, shaped as Karpenter's: named `<nodepool>-<5 random>`, labelled
//! with the NodePool's template labels, the pool name and every requirement that has a
//! single value, annotated with the template's annotations and the drift hashes of the
//! NodePool template and NodeClass ([`crate::disruption::drift::stamp`]), owned by the
//! NodePool, and holding the termination finalizer from birth so no instance is ever
//! launched for a claim the agent could lose track of.
//!
//! This is the only place NodeClaims are created (`agent/tests/logic/one_creation_path.rs` checks
//! it, and that [`create`] is called by provisioning's round alone): interruption and
//! disruption disrupt claims, and provisioning replaces their pods. Adoption creates claims
//! here too, for capacity that already runs (Karpenter's nodes): [`adopted`] records a
//! node, it launches nothing, and [`is_adopted`] tells the lifecycle loop not to launch for
//! it. A floor below both loops, so that neither borrows it from the other; the claim's
//! status writes ([`patch_status`]), which the lifecycle loop and adoption both make, live
//! here with it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use rand::Rng;
use serde_json::json;

use crate::api::node_claim::ResourceRequirements;
use crate::api::served::Served;
use crate::api::{
    NodeClaim, NodeClaimSpec, NodeClass, NodePool, NodeSelectorRequirementWithMinValues,
};
use crate::controllers::context::Context;
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

/// A claim's metadata, launched or adopted alike: the termination finalizer, so the
/// instance goes before the claim does, and the pool as owner, so deleting the pool
/// deletes its claims.
fn claim_metadata(
    served: &Served,
    name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    pool: &NodePool,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: Some(labels),
        annotations: Some(annotations),
        finalizers: Some(vec![served.termination_finalizer().into()]),
        owner_references: pool.metadata.uid.clone().map(|uid| {
            vec![OwnerReference {
                api_version: served.node_pools().api_version,
                kind: "NodePool".into(),
                name: pool.name_any(),
                uid,
                block_owner_deletion: Some(true),
                controller: None,
            }]
        }),
        ..Default::default()
    }
}

/// The NodeClaim object for a planned claim. Drift compares the stamped hashes with
/// today's; stamping at birth means a change made right after launch still drifts the node
/// (claims stamped later get the then-current hashes, which would hide such a change).
pub fn build(
    served: &Served,
    plan: &NewNodeClaim,
    pool: &NodePool,
    class: Option<&NodeClass>,
) -> NodeClaim {
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
    labels.insert(
        labels::NODE_CLASS.into(),
        pool.spec.template.spec.node_class_ref.name.clone(),
    );
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
        metadata: claim_metadata(served, name, labels, annotations, pool),
        spec,
        status: None,
    }
}

/// Creates the claim and puts it in the local store at once, so the next round counts it
/// as in flight even before the watch delivers it.
pub(crate) async fn create(ctx: &Context, claim: &NodeClaim) -> Result<NodeClaim, kube::Error> {
    let api = ctx.node_claim_api();
    let created = api.create(&PostParams::default(), claim).await?;
    ctx.state
        .node_claims
        .insert(&created.name_any(), created.clone());
    Ok(created)
}

/// Annotation on a claim made for a node another controller launched: what it was
/// (`karpenter.sh/v1 NodeClaim general-x7k2p`). Launch never acts on such a claim: its
/// status comes from the running node.
pub const ADOPTED_FROM: &str = "joiner.dev/adopted-from";

/// The NodeClaim recording a running node of `pool`: named `name`, its requirements pinned
/// to the node's instance type, zone and capacity type (the node is what it is), labelled
/// and stamped as a claim of the pool would be, so consolidation, expiry and drift treat it
/// as one of theirs.
pub fn adopted(
    served: &Served,
    name: &str,
    from: &str,
    node_labels: &BTreeMap<String, String>,
    pool: &NodePool,
    class: Option<&NodeClass>,
) -> NodeClaim {
    let pool_name = pool.name_any();
    let t = &pool.spec.template.spec;
    let mut labels: BTreeMap<String, String> = pool.spec.template.metadata.labels.clone();
    let mut requirements = Vec::new();
    for key in [
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::ARCH,
    ] {
        if let Some(v) = node_labels.get(key) {
            labels.insert(key.to_string(), v.clone());
            requirements.push(NodeSelectorRequirementWithMinValues {
                key: key.to_string(),
                operator: "In".into(),
                values: vec![v.clone()],
                min_values: None,
            });
        }
    }
    for (k, v) in node_labels {
        if labels::is_type_label(k) || k == labels::ZONE_ID {
            labels.insert(k.clone(), v.clone());
        }
    }
    labels.insert(labels::KARPENTER_NODEPOOL.into(), pool_name.clone());
    labels.insert(labels::JOINER_NODEPOOL.into(), pool_name.clone());
    labels.insert(labels::NODE_CLASS.into(), t.node_class_ref.name.clone());
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    if let Some(class) = class {
        annotations.extend(crate::disruption::drift::stamp(&pool.spec, &class.spec));
    }
    annotations.insert(ADOPTED_FROM.into(), from.to_string());
    NodeClaim {
        metadata: claim_metadata(served, name.to_string(), labels, annotations, pool),
        spec: NodeClaimSpec {
            node_class_ref: t.node_class_ref.clone(),
            requirements,
            resources: ResourceRequirements::default(),
            taints: t.taints.clone(),
            startup_taints: vec![],
            expire_after: Some(t.expire_after.clone()),
            termination_grace_period: t.termination_grace_period.clone(),
        },
        status: None,
    }
}

/// Creates an adopted claim; one that exists already (an adoption retried after a crash)
/// is returned as it is.
pub(crate) async fn create_adopted(
    ctx: &Context,
    claim: &NodeClaim,
) -> Result<NodeClaim, kube::Error> {
    let api = ctx.node_claim_api();
    let out = match api.create(&PostParams::default(), claim).await {
        Ok(c) => c,
        Err(kube::Error::Api(e)) if e.code == 409 => api.get(&claim.name_any()).await?,
        Err(e) => return Err(e),
    };
    ctx.state.node_claims.insert(&out.name_any(), out.clone());
    Ok(out)
}

/// Whether a claim records a node another controller launched.
pub fn is_adopted(claim: &NodeClaim) -> bool {
    claim.annotations().contains_key(ADOPTED_FROM)
}

/// Writes a claim's status (merge patch) and keeps the local store current.
pub async fn patch_status(
    ctx: &Context,
    name: &str,
    status: serde_json::Value,
) -> Result<NodeClaim, kube::Error> {
    let api = ctx.node_claim_api();
    let out = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await;
    match out {
        Ok(c) => {
            ctx.state.node_claims.insert(name, c.clone());
            Ok(c)
        }
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims/status patch", &e);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_claim_is_pinned_to_its_node_and_stamped_as_the_pools() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodePool",
            "metadata": {"name": "general", "uid": "u-1"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                    "expireAfter": "336h"}}}
        }))
        .unwrap();
        let class: NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
            "metadata": {"name": "default"},
            "spec": {"subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "nodes"}
        }))
        .unwrap();
        let node_labels: BTreeMap<String, String> = [
            (labels::INSTANCE_TYPE, "m5.large"),
            (labels::ZONE, "us-east-1a"),
            (labels::CAPACITY_TYPE, "spot"),
            (labels::ARCH, "amd64"),
            (labels::INSTANCE_FAMILY, "m5"),
            (labels::HOSTNAME, "ip-10-0-0-1"),
            ("karpenter.sh/registered", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = adopted(
            &Served::joiner(),
            "general-k7x2p",
            "karpenter.sh/v1 NodeClaim general-k7x2p",
            &node_labels,
            &pool,
            Some(&class),
        );
        assert_eq!(c.name_any(), "general-k7x2p");
        assert!(is_adopted(&c));
        let l = c.labels();
        assert_eq!(l[labels::JOINER_NODEPOOL], "general");
        assert_eq!(l[labels::INSTANCE_FAMILY], "m5");
        assert_eq!(l["team"], "web");
        assert!(!l.contains_key(labels::HOSTNAME) && !l.contains_key("karpenter.sh/registered"));
        let view = c.view().unwrap();
        assert!(view.allows(labels::INSTANCE_TYPE, "m5.large"));
        assert!(!view.allows(labels::INSTANCE_TYPE, "m5.xlarge"));
        assert!(!view.allows(labels::CAPACITY_TYPE, "on-demand"));
        assert_eq!(c.spec.expire_after.as_deref(), Some("336h"));
        assert!(c
            .annotations()
            .contains_key(crate::disruption::drift::NODEPOOL_HASH));
        assert_eq!(c.finalizers(), &["joiner.dev/termination".to_string()]);
    }
}
