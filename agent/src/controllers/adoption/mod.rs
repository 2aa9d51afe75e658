//! Adopting Karpenter's running nodes, so that a team moving from Karpenter keeps its nodes
//! and its pods where they are (`--adopt-karpenter-namespace`).
//!
//! A Node Karpenter launched carries `karpenter.sh/nodepool`; when a joiner NodePool of the
//! same name exists (or one that lists it in [`ADOPTS_ANNOTATION`]), the node becomes one of
//! that pool's NodeClaims, with no drain and no new instance:
//! 1. a joiner NodeClaim recording the node (named as Karpenter's claim, pinned to the
//!    node's type, zone and capacity type, stamped with the pool's drift hashes) is created;
//!    the instance is tagged as this cluster's and the claim's, so the agent's tag-scoped
//!    IAM rights (termination among them) reach it;
//! 2. the claim's status is written from the Node (Launched, Registered, Initialized:
//!    `Adopted`): only then do the other loops act on it (a claim not yet Launched is
//!    left alone by garbage collection, and launch never acts on an adopted claim);
//! 3. Karpenter's NodeClaim loses its finalizer and is deleted (with Karpenter gone nothing
//!    would ever release it, and deleting it then terminates nothing);
//! 4. the Node gets the claim's labels and joiner's finalizer in place of Karpenter's: this
//!    last write marks the adoption done; a crash before it repeats the steps, each of
//!    which is idempotent.
//!
//! From then on consolidation, expiry, drift and interruption treat the node as their own,
//! and its instance is terminated only through joiner.
//!
//! Two controllers must never act on one node: while Karpenter's leader Lease is held and
//! renewed, nothing is adopted, and the refusal is said where an operator looks (an Event on
//! each node waiting, the pool's `KarpenterNodesAdopted` condition, a log line and the
//! `joiner_adoption_refused_total` metric).

pub mod karpenter;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::ResourceExt;
use serde_json::json;

use crate::api::{NodeClaim, NodePool};
use crate::controllers::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::{nodeclaims, pool_status};
use crate::labels;

/// See [`labels::ADOPTS_KARPENTER_NODEPOOLS`].
pub const ADOPTS_ANNOTATION: &str = labels::ADOPTS_KARPENTER_NODEPOOLS;
/// The pool condition saying whether Karpenter's nodes could be adopted.
pub const ADOPTED_CONDITION: &str = "KarpenterNodesAdopted";
const PASS: Duration = Duration::from_secs(5);

/// The loop: a pass every few seconds while Karpenter-labelled nodes wait (adoption is a
/// one-off migration; its cost when nothing waits is one scan of the node cache).
pub async fn run(ctx: Arc<Context>) {
    let Some(namespace) = ctx
        .config
        .adopt_karpenter_namespace
        .clone()
        .filter(|n| !n.is_empty())
    else {
        return std::future::pending().await;
    };
    if ctx.served.is_karpenter() {
        // Serving Karpenter's API, the agent is Karpenter's controller: its nodes are
        // already the agent's own.
        tracing::warn!("--adopt-karpenter-namespace is ignored with --api karpenter");
        return std::future::pending().await;
    }
    loop {
        pass(&ctx, &namespace).await;
        tokio::time::sleep(PASS).await;
    }
}

/// A Node waiting for adoption, and the joiner pool that takes it.
struct Waiting {
    node: Arc<Node>,
    karpenter_pool: String,
    pool: Arc<NodePool>,
}

/// The joiner pool adopting Karpenter pool `karpenter_pool`: one that lists it, else the
/// one of the same name.
fn adopting_pool(ctx: &Context, karpenter_pool: &str) -> Option<Arc<NodePool>> {
    let pools = ctx.state.node_pools.list();
    pools
        .iter()
        .find(|p| {
            p.annotations()
                .get(ADOPTS_ANNOTATION)
                .is_some_and(|v| v.split(',').any(|n| n.trim() == karpenter_pool))
        })
        .or_else(|| pools.iter().find(|p| p.name_any() == karpenter_pool))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .cloned()
}

fn waiting(ctx: &Context) -> Vec<Waiting> {
    ctx.state
        .nodes
        .state()
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|node| {
            let karpenter_pool = karpenter::node_pool(&node)?;
            match ctx.state.claim_for_node(&node) {
                // joiner launched it (a node of ours registering carries the pool label
                // before its claim's name).
                Some(c) if !nodeclaims::is_adopted(&c) => return None,
                // Adopted, and the node's own write (the last step) is done.
                Some(_)
                    if node.labels().contains_key(labels::JOINER_NODECLAIM)
                        && !karpenter::has_finalizer(node.as_ref()) =>
                {
                    return None
                }
                _ => {}
            }
            let pool = adopting_pool(ctx, &karpenter_pool)?;
            Some(Waiting {
                node,
                karpenter_pool,
                pool,
            })
        })
        .collect()
}

pub async fn pass(ctx: &Context, namespace: &str) {
    let waiting = waiting(ctx);
    if waiting.is_empty() {
        return;
    }
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), namespace);
    let lease = match leases.get_opt(karpenter::LEASE_NAME).await {
        Ok(l) => l,
        Err(e) => {
            ctx.metrics.kube_error("leases get (Karpenter's)", &e);
            tracing::warn!(namespace, error = %e, "reading Karpenter's leader Lease failed; adopting nothing until it can be read");
            return;
        }
    };
    if let Some(holder) = lease
        .as_ref()
        .and_then(|l| karpenter::live_holder(l, jiff::Timestamp::now()))
    {
        refuse(ctx, namespace, &holder, &waiting).await;
        return;
    }
    let claims = karpenter_claims(ctx).await;
    let mut adopted: BTreeMap<String, usize> = BTreeMap::new();
    for w in &waiting {
        match adopt(ctx, w, &claims).await {
            Ok(name) => {
                *adopted.entry(w.pool.name_any()).or_default() += 1;
                tracing::info!(node = %w.node.name_any(), nodeclaim = %name, nodepool = %w.pool.name_any(), karpenter_nodepool = %w.karpenter_pool, "adopted Karpenter's node");
            }
            Err(e) => {
                ctx.metrics.adoption_failures.inc();
                tracing::warn!(node = %w.node.name_any(), error = %e, "adopting Karpenter's node failed; retrying");
            }
        }
    }
    for (pool, n) in adopted {
        ctx.metrics.nodes_adopted.inc_by(n as u64);
        pool_status::set_condition(
            ctx,
            &pool,
            ADOPTED_CONDITION,
            true,
            "Adopted",
            &format!("{n} of Karpenter's nodes adopted in the last pass"),
        )
        .await;
    }
}

async fn refuse(ctx: &Context, namespace: &str, holder: &str, waiting: &[Waiting]) {
    let message = format!(
        "Karpenter's controller holds Lease {namespace}/{} ({holder}): joiner does not act on Karpenter's nodes while it runs; scale Karpenter to zero to hand them over",
        karpenter::LEASE_NAME
    );
    ctx.metrics.adoption_refused.inc();
    tracing::warn!(nodes = waiting.len(), holder, "{message}");
    let mut pools = std::collections::BTreeSet::new();
    for w in waiting {
        ctx.events
            .publish(
                &events::reference(w.node.as_ref()),
                Type::Warning,
                "AdoptionRefused",
                &message,
            )
            .await;
        pools.insert(w.pool.name_any());
    }
    for pool in pools {
        pool_status::set_condition(
            ctx,
            &pool,
            ADOPTED_CONDITION,
            false,
            "KarpenterRunning",
            &message,
        )
        .await;
    }
}

/// Karpenter's NodeClaims by node name (and by providerID), when its CRD is installed.
async fn karpenter_claims(ctx: &Context) -> Vec<karpenter::Claim> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "nodeclaims");
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
    match api.list(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(karpenter::Claim::read)
            .collect(),
        // No CRD (Karpenter's chart already removed): the nodes are adopted by their labels.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims.karpenter.sh list", &e);
            Vec::new()
        }
    }
}

/// Who a waiting node is to joiner: its instance, Karpenter's claim for it if any, and the
/// NodeClaim name it is adopted under.
struct Adoptee<'a> {
    node_name: String,
    provider_id: String,
    instance_id: String,
    kclaim: Option<&'a karpenter::Claim>,
    name: String,
    /// What the node is adopted from, as the conditions and events say it.
    from: String,
}

fn adoptee<'a>(
    ctx: &Context,
    w: &Waiting,
    claims: &'a [karpenter::Claim],
) -> Result<Adoptee<'a>, String> {
    let node = &w.node;
    let node_name = node.name_any();
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or_else(|| format!("node {node_name} has no providerID"))?;
    let instance_id = provider_id
        .rsplit('/')
        .next()
        .filter(|id| id.starts_with("i-"))
        .ok_or_else(|| format!("node {node_name}'s providerID {provider_id} names no instance"))?
        .to_string();
    let kclaim = claims.iter().find(|c| {
        c.node_name.as_deref() == Some(&node_name) || c.provider_id.as_deref() == Some(&provider_id)
    });
    // Named as Karpenter named it, so `kubectl get nodeclaims` reads the same before and
    // after; a node whose claim is gone gets a name derived from the instance.
    // An adoption cut short already named the claim (found by the node's providerID once
    // its status is written, or by the node's label).
    let name = ctx
        .state
        .claim_for_node(node)
        .filter(|c| nodeclaims::is_adopted(c))
        .map(|c| c.name_any())
        .or_else(|| node.labels().get(labels::JOINER_NODECLAIM).cloned())
        .or_else(|| kclaim.map(|c| c.name.clone()))
        .unwrap_or_else(|| {
            format!(
                "{}-{}",
                w.pool.name_any(),
                instance_id.trim_start_matches("i-")
            )
        });
    let from = match kclaim {
        Some(c) => format!("karpenter.sh/v1 NodeClaim {}", c.name),
        None => format!("Karpenter node {node_name}"),
    };
    Ok(Adoptee {
        node_name,
        provider_id,
        instance_id,
        kclaim,
        name,
        from,
    })
}

async fn adopt(ctx: &Context, w: &Waiting, claims: &[karpenter::Claim]) -> Result<String, String> {
    let a = adoptee(ctx, w, claims)?;
    let name = &a.name;
    let class = ctx
        .state
        .node_classes
        .get(&w.pool.spec.template.spec.node_class_ref.name);
    let claim = nodeclaims::adopted(
        &ctx.served,
        name,
        &a.from,
        w.node.labels(),
        &w.pool,
        class.as_deref(),
    );
    let created = nodeclaims::create_adopted(ctx, &claim)
        .await
        .map_err(|e| format!("creating NodeClaim {name} (nodeclaims create): {e}"))?;

    // 1. The instance becomes this cluster's, before the claim says Launched: until then
    //    garbage collection leaves the claim alone (it looks only at launched claims), and
    //    an instance tagged for a claim that exists is no orphan.
    ctx.cloud
        .tag_adopted(&a.instance_id, name, &w.pool.name_any())
        .await
        .map_err(|e| {
            ctx.metrics.cloud_error(&e);
            format!("tagging instance {}: {e}", a.instance_id)
        })?;

    // 2. Status from the running node.
    write_adopted_status(ctx, &a, &w.node, &created).await?;

    // 3. Karpenter's claim goes, releasing nothing.
    if let Some(k) = a.kclaim {
        release_karpenter_claim(ctx, &k.name).await?;
    }

    // 4. The node, last: this write marks the adoption done.
    take_node(ctx, &a, w).await?;
    let message = format!(
        "adopted from {} as NodeClaim {name} of NodePool {}: no pod moved",
        a.from,
        w.pool.name_any()
    );
    ctx.events
        .publish(
            &events::reference(w.node.as_ref()),
            Type::Normal,
            "Adopted",
            &message,
        )
        .await;
    ctx.events
        .publish(
            &events::reference(&created),
            Type::Normal,
            "Adopted",
            &message,
        )
        .await;
    ctx.claims.add(name);
    Ok(a.name)
}

/// The adopted claim's status as the running node shows it: launched, registered and
/// initialized, with the node's capacity and allocatable.
async fn write_adopted_status(
    ctx: &Context,
    a: &Adoptee<'_>,
    node: &Node,
    created: &NodeClaim,
) -> Result<(), String> {
    let name = &a.name;
    let status = node.status.clone().unwrap_or_default();
    let quantities =
        |m: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect::<BTreeMap<String, String>>()
        };
    let mut conds = created.status.clone().unwrap_or_default().conditions;
    for c in [LAUNCHED, REGISTERED, INITIALIZED] {
        conditions::set(&mut conds, c, true, "Adopted", &a.from);
    }
    let image = a.kclaim.and_then(|c| c.image_id.clone());
    nodeclaims::patch_status(
        ctx,
        name,
        json!({
            "providerID": a.provider_id,
            "nodeName": a.node_name,
            "imageID": image,
            "capacity": quantities(status.capacity),
            "allocatable": quantities(status.allocatable),
            "conditions": conds,
        }),
    )
    .await
    .map_err(|e| format!("writing NodeClaim {name}'s status (nodeclaims/status patch): {e}"))?;
    Ok(())
}

/// Labels the node as the claim's and swaps Karpenter's termination finalizer for joiner's.
async fn take_node(ctx: &Context, a: &Adoptee<'_>, w: &Waiting) -> Result<(), String> {
    let node_name = &a.node_name;
    let mut fins: Vec<String> = w
        .node
        .finalizers()
        .iter()
        .filter(|f| *f != karpenter::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    if !fins.iter().any(|f| f == ctx.finalizer()) {
        fins.push(ctx.finalizer().into());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {
        "labels": {
            labels::JOINER_NODECLAIM: a.name,
            labels::JOINER_NODEPOOL: w.pool.name_any(),
        },
        "finalizers": fins,
    }});
    nodes
        .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            ctx.metrics.kube_error("nodes patch (adoption)", &e);
            format!("labelling node {node_name} (nodes patch): {e}")
        })?;
    Ok(())
}

async fn release_karpenter_claim(ctx: &Context, name: &str) -> Result<(), String> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "nodeclaims");
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
    let patch = json!({"metadata": {"finalizers": null}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims.karpenter.sh patch", &e);
            return Err(format!(
                "releasing Karpenter's NodeClaim {name} (nodeclaims.karpenter.sh patch): {e}"
            ));
        }
    }
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            ctx.metrics.kube_error("nodeclaims.karpenter.sh delete", &e);
            Err(format!(
                "deleting Karpenter's NodeClaim {name} (nodeclaims.karpenter.sh delete): {e}"
            ))
        }
    }
}
