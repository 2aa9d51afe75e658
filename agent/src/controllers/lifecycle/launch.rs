//! Launch: a NodeClaim becomes an instance through [`Cloud::launch`]. Before launching, the
//! cloud is asked whether an instance tagged with this claim already exists (a crash between
//! CreateFleet and the status update, or a stale cache): if so it is adopted, so a claim
//! never has two instances. Candidates are rebuilt from the claim's requirements and the
//! current catalogue, minus the insufficient-capacity cache, so a retried claim goes to
//! what is left; when nothing is left the claim fails with an Event and is deleted, and the
//! next round plans the pods again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::{ClaimView, NodeClaim};
use crate::catalog::{offering_allowed, CapacityType, Catalog};
use crate::cloud::{LaunchRequest, Launched, ReservedLaunch};
use crate::controllers::claim_termination::{request_termination, TerminationReason};
use crate::controllers::conditions::{self, LAUNCHED};
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::{nodeclaims, overlays};
use crate::labels;
use crate::scheduler::Candidate;

use super::Lifecycle;

/// The claim's launch candidates, cheapest first as the claim lists them, each with the
/// zones and capacity types its requirements allow. The insufficient-capacity cache is the
/// cloud's to apply ([`crate::cloud::fleet`]), at the moment it builds the request, so it is
/// not filtered here as well.
pub fn candidates(claim: &NodeClaim, view: &ClaimView, catalog: &Catalog) -> Vec<Candidate> {
    let mut out = Vec::new();
    for it in claim.candidate_types(view, catalog) {
        let offers: Vec<_> = it
            .offerings
            .iter()
            .filter(|o| offering_allowed(o, &view.requirements))
            .collect();
        let Some(best) = offers.iter().min_by(|a, b| {
            (a.capacity_type, a.price)
                .partial_cmp(&(b.capacity_type, b.price))
                .unwrap_or(std::cmp::Ordering::Equal)
        }) else {
            continue;
        };
        let zones: BTreeSet<String> = offers
            .iter()
            .filter(|o| o.capacity_type == best.capacity_type)
            .map(|o| o.zone.clone())
            .collect();
        out.push(Candidate {
            instance_type: it.name.clone(),
            price: best.price,
            capacity_type: best.capacity_type,
            zones: zones.into_iter().collect(),
        });
        if out.len() == 60 {
            break;
        }
    }
    out
}

/// Capacity types the claim allows: its reservation first, then Spot, then on-demand.
fn capacity_types(view: &ClaimView) -> Vec<CapacityType> {
    [
        CapacityType::Reserved,
        CapacityType::Spot,
        CapacityType::OnDemand,
    ]
    .into_iter()
    .filter(|ct| view.allows(labels::CAPACITY_TYPE, ct.as_str()))
    .collect()
}

/// The reservation a claim planned into one launches into: its
/// `karpenter.k8s.aws/capacity-reservation-id`, with what the catalogue knows of it.
fn reservation(view: &ClaimView, catalog: &Catalog) -> Option<ReservedLaunch> {
    let id = view
        .requirements
        .get(labels::CAPACITY_RESERVATION_ID)?
        .single_value()?;
    catalog
        .types
        .iter()
        .flat_map(|t| t.offerings.iter())
        .filter_map(|o| o.reservation.as_ref())
        .find(|r| r.id == id)
        .map(|r| ReservedLaunch {
            id: r.id.clone(),
            kind: r.kind,
            interruptible: r.interruptible,
        })
}

/// Zones the claim allows, among the catalogue's.
fn zones(view: &ClaimView, catalog: &Catalog) -> Vec<String> {
    catalog
        .zones()
        .into_iter()
        .filter(|z| view.allows(labels::ZONE, z))
        .collect()
}

/// Labels the kubelet may register with: the claim's, minus the `kubernetes.io` and
/// `k8s.io` namespaces the NodeRestriction admission refuses (except `node.kubernetes.io/`
/// and the well-known ones).
///
/// Nor the labels of the offering CreateFleet picks (instance type and its attributes,
/// zone, capacity type), nor the claim's name: these labels go into the user data, which
/// names the launch template, so each of them would multiply the templates (one per node
/// for the name, per type and zone for the rest; EC2 allows 5,000 a region). The node
/// registers with the unregistered taint ([`startup_taints`]), so nothing schedules on it
/// before registration copies the claim's labels, those included, onto it.
fn kubelet_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    claim
        .labels()
        .iter()
        .filter(|(k, _)| !labels::is_offering_label(k))
        .filter(|(k, _)| {
            let domain = k.split_once('/').map(|(d, _)| d).unwrap_or("");
            let restricted = domain == "kubernetes.io"
                || domain.ends_with(".kubernetes.io")
                || domain == "k8s.io"
                || domain.ends_with(".k8s.io");
            !restricted || domain == "node.kubernetes.io" || labels::is_well_known(k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The NodePool's startup taints plus `joiner.dev/unregistered:NoExecute`, which keeps every
/// pod off the node until registration has put the claim's labels and taints on it (a pod
/// selecting `capacity-type NotIn [spot]` would otherwise fit a Spot node that does not
/// carry the label yet). Registration removes it.
fn startup_taints(claim: &NodeClaim) -> Vec<crate::taints::Taint> {
    let mut taints = crate::api::convert_taints(&claim.spec.startup_taints).unwrap_or_default();
    taints.push(crate::taints::Taint::new(
        labels::JOINER_UNREGISTERED_TAINT,
        "",
        crate::taints::Effect::NoExecute,
    ));
    taints
}

async fn fail(ctx: &Context, claim: &NodeClaim, reason: &str, message: &str) {
    ctx.events
        .publish(&events::reference(claim), Type::Warning, reason, message)
        .await;
    let mut conds = claim.status.clone().unwrap_or_default().conditions;
    conditions::set(&mut conds, LAUNCHED, false, reason, message);
    let _ = nodeclaims::patch_status(ctx, &claim.name_any(), json!({"conditions": conds})).await;
}

pub async fn reconcile(ctx: &Context, own: &Lifecycle, claim: &NodeClaim) -> Option<Duration> {
    let name = claim.name_any();
    // A pool whose last nodes did not register waits out its back-off before launching:
    // the claim stays (its pods count on it), the instance is not bought yet.
    let pool = claim
        .labels()
        .get(labels::JOINER_NODEPOOL)
        .cloned()
        .unwrap_or_default();
    let wait = own
        .registration_health
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .wait(&pool, std::time::Instant::now());
    if let Some(wait) = wait {
        let msg = format!(
            "NodePool {pool} is in registration back-off (its last node did not register); launching in {}s",
            wait.as_secs().max(1)
        );
        tracing::info!(nodeclaim = %name, nodepool = %pool, "{msg}");
        ctx.events
            .publish(
                &events::reference(claim),
                Type::Normal,
                "LaunchDeferred",
                &msg,
            )
            .await;
        return Some(wait);
    }
    let class_name = &claim.spec.node_class_ref.name;
    let Some(class) = ctx.state.node_classes.get(class_name) else {
        fail(
            ctx,
            claim,
            "NodeClassNotFound",
            &format!("NodeClass {class_name:?} not found"),
        )
        .await;
        return Some(Duration::from_secs(30));
    };
    let catalog = match ctx.cloud.catalog(&class).await {
        Ok(c) => c,
        Err(e) => {
            ctx.metrics.cloud_error(&e);
            fail(ctx, claim, "LaunchFailed", &e.to_string()).await;
            return Some(Duration::from_secs(10));
        }
    };
    // The cloud adopts an instance already launched for this claim (a crash between
    // CreateFleet and the status update) before launching anything: one place for that
    // check, next to the launch it guards.
    let launched = match launch(ctx, claim, &class, &catalog).await {
        Ok(l) => l,
        Err(Failure::Retry(d)) => return Some(d),
        Err(Failure::Gone) => return None,
    };
    if ctx.config.test_hang_after_launch {
        tracing::warn!(nodeclaim = %name, instance = %launched.instance_id, "test hook: launched; hanging before recording it");
        std::future::pending::<()>().await;
    }
    record(ctx, claim, &class, &catalog, &launched).await
}

enum Failure {
    Retry(Duration),
    Gone,
}

async fn launch(
    ctx: &Context,
    claim: &NodeClaim,
    class: &crate::api::NodeClass,
    catalog: &Catalog,
) -> Result<Launched, Failure> {
    let name = claim.name_any();
    let view = match claim.view() {
        Ok(v) => v,
        Err(e) => {
            ctx.metrics.malformed("NodeClaim");
            fail(
                ctx,
                claim,
                "LaunchFailed",
                &format!("NodeClaim cannot be read: {e}"),
            )
            .await;
            return Err(Failure::Retry(Duration::from_secs(60)));
        }
    };
    let request = launch_request(ctx, claim, &view, class, catalog);
    let result = {
        let seen = ctx
            .batch_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        if let Some(t) = seen {
            ctx.metrics.reaction.observe(t.elapsed().as_secs_f64());
        }
        ctx.cloud.launch(&request).await
    };
    ctx.metrics
        .ice_cache_size
        .set(ctx.cloud.unavailable().len() as i64);
    match result {
        Ok(l) => Ok(l),
        Err(e) if e.is_insufficient_capacity() => {
            ctx.metrics.launch_failure(&request.nodepool, &e);
            let msg = format!(
                "no capacity for NodeClaim {name} in any of its {} candidate types ({}): {e}; the pods will be planned again",
                request.candidates.len(),
                request
                    .capacity_types
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            tracing::warn!(nodeclaim = %name, "{msg}");
            fail(ctx, claim, "InsufficientCapacity", &msg).await;
            if let Err(e) = request_termination(ctx, &name, TerminationReason::LaunchFailed).await {
                ctx.metrics.kube_error("nodeclaims delete", &e);
                return Err(Failure::Retry(Duration::from_secs(5)));
            }
            Err(Failure::Gone)
        }
        Err(e) => {
            ctx.metrics.launch_failure(&request.nodepool, &e);
            let explained = e.explained();
            tracing::warn!(nodeclaim = %name, error = %explained, "launch failed; retrying");
            fail(ctx, claim, "LaunchFailed", &explained).await;
            Err(Failure::Retry(Duration::from_secs(10)))
        }
    }
}

/// What the cloud is asked to launch for the claim. The candidates are priced with the
/// active NodeOverlays; when an overlay reprices one of them, the launch is prioritized
/// (EC2's own prices would order them otherwise) and carries the on-demand prices it goes by.
fn launch_request(
    ctx: &Context,
    claim: &NodeClaim,
    view: &ClaimView,
    class: &crate::api::NodeClass,
    catalog: &Catalog,
) -> LaunchRequest {
    let pool = claim
        .labels()
        .get(labels::JOINER_NODEPOOL)
        .cloned()
        .unwrap_or_default();
    let overlays = overlays::active(&ctx.state);
    let priced = crate::catalog::overlay::apply(catalog, &overlays);
    let candidates = candidates(claim, view, &priced);
    let prioritized = candidates
        .iter()
        .any(|c| crate::catalog::overlay::reprices(catalog, &overlays, &c.instance_type));
    // The on-demand fallback's order: the Region's list, overlaid when NodeOverlays changed it.
    let listed = if prioritized { &priced } else { catalog };
    let on_demand_prices = candidates
        .iter()
        .filter_map(|c| {
            let p = listed.get(&c.instance_type)?.on_demand_price()?;
            Some((c.instance_type.clone(), p))
        })
        .collect();
    LaunchRequest {
        nodeclaim: claim.name_any(),
        nodepool: pool,
        node_class: class.clone(),
        candidates,
        capacity_types: capacity_types(view),
        zones: zones(view, catalog),
        labels: kubelet_labels(claim),
        taints: crate::api::convert_taints(&claim.spec.taints).unwrap_or_default(),
        startup_taints: startup_taints(claim),
        reservation: reservation(view, catalog),
        prioritized,
        on_demand_prices,
    }
}

/// Writes what was launched: labels for the type, zone and capacity type (so `kubectl get
/// nodeclaims` shows them) and the status with the Launched condition.
async fn record(
    ctx: &Context,
    claim: &NodeClaim,
    class: &crate::api::NodeClass,
    catalog: &Catalog,
    l: &Launched,
) -> Option<Duration> {
    let name = claim.name_any();
    let mut new_labels: BTreeMap<String, String> = BTreeMap::new();
    let mut capacity = BTreeMap::new();
    let mut allocatable = BTreeMap::new();
    if let Some(it) = catalog.get(&l.instance_type) {
        new_labels.extend(it.labels.clone());
        let fmt = |r: &crate::resources::Resources| {
            let mut m = BTreeMap::new();
            m.insert("cpu".to_string(), crate::resources::fmt_cpu(r.cpu_milli));
            m.insert(
                "memory".to_string(),
                crate::resources::fmt_bytes(r.memory_bytes),
            );
            m.insert("pods".to_string(), r.pods.to_string());
            m.insert(
                "ephemeral-storage".to_string(),
                crate::resources::fmt_bytes(r.ephemeral_storage_bytes),
            );
            for (k, v) in &r.extended {
                m.insert(k.clone(), v.to_string());
            }
            m
        };
        let kubelet = class.spec.kubelet_settings();
        capacity = fmt(&it.capacity_with(&kubelet));
        allocatable = fmt(&it.allocatable_with(&kubelet));
    }
    new_labels.insert(labels::INSTANCE_TYPE.into(), l.instance_type.clone());
    new_labels.insert(labels::ZONE.into(), l.zone.clone());
    if let Some(id) = class
        .status
        .as_ref()
        .and_then(|s| s.subnets.iter().find(|s| s.zone == l.zone))
        .and_then(|s| s.zone_id.clone())
    {
        new_labels.insert(labels::ZONE_ID.into(), id);
    }
    new_labels.insert(
        labels::CAPACITY_TYPE.into(),
        l.capacity_type.as_str().into(),
    );
    let api = ctx.node_claim_api();
    if let Err(e) = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": new_labels}})),
        )
        .await
    {
        ctx.metrics.kube_error("nodeclaims patch", &e);
        tracing::warn!(nodeclaim = %name, error = %e, "recording the launch failed; retrying (the instance is adopted)");
        return Some(Duration::from_secs(2));
    }
    let mut conds = claim.status.clone().unwrap_or_default().conditions;
    conditions::set(&mut conds, LAUNCHED, true, "Launched", "");
    let status = json!({
        "providerID": l.provider_id,
        "imageID": l.image_id,
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conds,
    });
    match nodeclaims::patch_status(ctx, &name, status).await {
        Ok(updated) => {
            ctx.metrics
                .nodeclaims_launched
                .get_or_create(&crate::controllers::operator::metrics::claim_labels(
                    &updated,
                ))
                .inc();
            tracing::info!(
                nodeclaim = %name,
                instance = %l.instance_id,
                instance_type = %l.instance_type,
                zone = %l.zone,
                capacity_type = l.capacity_type.as_str(),
                "launched"
            );
            // Registration is checked on the Node's arrival; this is the TTL backstop.
            Some(Duration::from_secs(5))
        }
        Err(_) => Some(Duration::from_secs(2)),
    }
}
