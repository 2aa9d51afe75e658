//! The scheduler's [`Input`] from the cluster state: pending pods, nodes with their pods,
//! in-flight NodeClaims, usable NodePools with their usage, NodeClasses, DaemonSets and the
//! insufficient-capacity cache. Conversion errors are per object: a malformed pod or node
//! is counted and left out, never the round.
//!
//! Provisioning plans its round from it and disruption simulates with the same one, so it
//! is a floor below both. Pods a Fargate profile takes are left out
//! ([`super::fargate_view`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet as K8sDaemonSet;
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod};
use kube::ResourceExt;

use crate::api::{NodeClaim, NodeClass, NodePool, ParsedRequirements};
use crate::catalog::daemonsets::{self, DaemonSet};
use crate::catalog::{volume_limits, Catalog};
use crate::controllers::conditions;
use crate::controllers::context::Context;
use crate::controllers::disrupted::is_disrupted;
use crate::controllers::operator::metrics::l;
use crate::controllers::overlays;
use crate::controllers::pool_status;
use crate::controllers::state::{PodClass, PodRecord};
use crate::labels;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::scheduler::{
    convert, InFlightClaim, Input, Node, NodeClassInput, ParsedPool, UnavailableOfferings,
};
use crate::taints::Taint;

/// One round's input and what is needed to act on the plan.
pub struct Round {
    pub input: Input,
    pub catalog: Catalog,
    /// The pending pods behind the first `pods.len()` of `input.pods`, same order.
    pub pods: Vec<Arc<PodRecord>>,
    /// The rest of `input.pods`: reschedulable pods of disrupted or deleting nodes, each
    /// with its NodeClaim (index into `disrupted`). They need capacity before their node
    /// drains, so they are planned like pending pods.
    pub displaced: Vec<usize>,
    /// The disrupted NodeClaims whose pods are in `displaced`.
    pub disrupted: Vec<Arc<NodeClaim>>,
    pub pools: HashMap<String, Arc<NodePool>>,
    /// Each of `pools`' requirements as its verdict parsed them, for the drift check of
    /// every node of the pool.
    pub requirements: HashMap<String, ParsedRequirements>,
}

/// Taints that say a node is still starting; the capacity is counted as coming.
const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    labels::JOINER_UNREGISTERED_TAINT,
];

/// Adds `other`'s offerings to `base` (catalogues of NodeClasses differ only by zones and
/// kubelet settings; the per-pool zone requirement keeps each pool in its own zones).
fn merge_catalogs(mut base: Catalog, other: &Catalog) -> Catalog {
    let mut index: HashMap<String, usize> = base
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    for t in &other.types {
        match index.get(&t.name) {
            Some(&i) => {
                // An offering per zone and capacity type, and per reservation and the class
                // that selected it (a reservation serves only its class's pools).
                type Key = (
                    String,
                    crate::catalog::CapacityType,
                    Option<(String, String)>,
                );
                let key = |o: &crate::catalog::Offering| -> Key {
                    (
                        o.zone.clone(),
                        o.capacity_type,
                        o.reservation
                            .as_ref()
                            .map(|r| (r.id.clone(), r.node_class.clone())),
                    )
                };
                let have: BTreeSet<Key> = base.types[i].offerings.iter().map(key).collect();
                for o in &t.offerings {
                    if !have.contains(&key(o)) {
                        std::sync::Arc::make_mut(&mut base.types[i])
                            .offerings
                            .push(o.clone());
                    }
                }
            }
            None => {
                index.insert(t.name.clone(), base.types.len());
                base.types.push(t.clone());
            }
        }
    }
    let on_demand = base.on_demand;
    Catalog {
        on_demand,
        ..Catalog::from_shared(base.types)
    }
}

/// A DaemonSet's pod template as the scheduler's overhead model.
pub fn daemonset(ds: &K8sDaemonSet) -> Result<DaemonSet, String> {
    let spec = ds.spec.as_ref().ok_or("spec: missing")?;
    let pod = K8sPod {
        metadata: spec.template.metadata.clone().unwrap_or_default(),
        spec: spec.template.spec.clone(),
        status: None,
    };
    let p = convert::pod(&pod).map_err(|e| format!("spec.template.{e}"))?;
    Ok(DaemonSet {
        namespace: ds.namespace().unwrap_or_default(),
        name: ds.name_any(),
        requests: p.requests,
        node_selector: p.node_selector,
        node_affinity: p.required_node_affinity,
        tolerations: p.tolerations,
    })
}

fn node_resources(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Result<Resources, String> {
    let Some(m) = map else {
        return Ok(Resources::default());
    };
    Resources::from_quantities(m.iter().map(|(k, q)| (k.as_str(), q.0.as_str())))
}

fn elementwise_min(a: &Resources, b: &Resources) -> Resources {
    let mut r = Resources {
        cpu_milli: a.cpu_milli.min(b.cpu_milli),
        memory_bytes: a.memory_bytes.min(b.memory_bytes),
        pods: a.pods.min(b.pods),
        ephemeral_storage_bytes: a.ephemeral_storage_bytes.min(b.ephemeral_storage_bytes),
        extended: Default::default(),
    };
    for (k, v) in &a.extended {
        if let Some(w) = b.extended.get(k) {
            r.extended.insert(k.clone(), (*v).min(*w));
        }
    }
    r
}

/// Builds the round from the current state. Fetches each NodeClass's catalogue from the
/// cloud (cached there).
pub async fn build(ctx: &Context) -> Round {
    let mut served = served(ctx).await;
    let catalog = round_catalog(ctx, &served.catalogs);
    let mut input = Input {
        unavailable: ctx.cloud.unavailable(),
        ..Default::default()
    };
    ctx.metrics
        .ice_cache_size
        .set(input.unavailable.len() as i64);
    overhead_and_classes(ctx, &served.classes, &mut input);
    let (doomed, disrupted) = going_away(ctx);
    let mut pods = pods(ctx, &doomed, &mut input).await;
    let mut usage: HashMap<String, Resources> = HashMap::new();
    let attached = std::mem::take(&mut pods.attached);
    let with_node = nodes(
        ctx,
        pods.by_node,
        (&attached, &catalog),
        &mut input,
        &mut usage,
    );
    in_flight(ctx, &served, &with_node, &mut input, &mut usage);
    let requirements = node_pools(&mut served, &usage, &mut input);
    // Zone IDs as the zones they name, from the subnets the NodeClasses resolved.
    let zone_ids: crate::scheduler::zone_ids::ZoneIds = served
        .classes
        .values()
        .filter_map(|c| c.status.as_ref())
        .flat_map(|s| s.subnets.iter())
        .filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?)))
        .collect();
    crate::scheduler::zone_ids::rewrite(&mut input, &zone_ids);

    Round {
        input,
        catalog,
        pods: pods.pending,
        displaced: pods.displaced,
        disrupted,
        pools: served.pools,
        requirements,
    }
}

/// The NodePools that can be served this round, with their NodeClasses and one catalogue
/// per NodeClass in use.
struct Served {
    pools: HashMap<String, Arc<NodePool>>,
    /// Each pool as its verdict read it.
    parsed: HashMap<String, ParsedPool>,
    /// Each pool's NodeClass.
    pool_class: HashMap<String, Arc<NodeClass>>,
    /// The NodeClasses in use, by name.
    classes: HashMap<String, Arc<NodeClass>>,
    catalogs: HashMap<String, Catalog>,
}

/// The usable NodePools whose NodeClass has a catalogue; a NodeClass whose catalogue the
/// cloud cannot give leaves its pools out of this round.
async fn served(ctx: &Context) -> Served {
    let state = &ctx.state;
    let mut pools: HashMap<String, Arc<NodePool>> = HashMap::new();
    let mut parsed: HashMap<String, ParsedPool> = HashMap::new();
    let mut pool_class: HashMap<String, Arc<NodeClass>> = HashMap::new();
    for p in state.node_pools.list() {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Ok((class, read)) = pool_status::usable(state, &p) {
            pool_class.insert(p.name_any(), class);
            parsed.insert(p.name_any(), read);
            pools.insert(p.name_any(), p);
        }
    }
    let mut catalogs: HashMap<String, Catalog> = HashMap::new();
    let mut classes: HashMap<String, Arc<NodeClass>> = HashMap::new();
    for class in pool_class.values() {
        let name = class.name_any();
        if catalogs.contains_key(&name) || classes.contains_key(&name) {
            continue;
        }
        classes.insert(name.clone(), class.clone());
        match ctx.cloud.catalog(class).await {
            Ok(c) => {
                catalogs.insert(name, c);
            }
            Err(e) => {
                ctx.metrics.cloud_error(&e);
                tracing::warn!(nodeclass = %name, error = %e, "no catalogue for NodeClass; its NodePools are skipped this round");
            }
        }
    }
    pools.retain(|n, _| {
        pool_class
            .get(n)
            .is_some_and(|c| catalogs.contains_key(&c.name_any()))
    });
    parsed.retain(|n, _| pools.contains_key(n));
    Served {
        pools,
        parsed,
        pool_class,
        classes,
        catalogs,
    }
}

/// The round's one catalogue: the NodeClasses' merged, less what planned claims hold of
/// reservations, priced by the NodeOverlays.
fn round_catalog(ctx: &Context, catalogs: &HashMap<String, Catalog>) -> Catalog {
    let mut names: Vec<&String> = catalogs.keys().collect();
    names.sort();
    let catalog = names.iter().fold(Catalog::default(), |acc, n| {
        if acc.is_empty() {
            catalogs[*n].clone()
        } else {
            merge_catalogs(acc, &catalogs[*n])
        }
    });
    // Reservations are counted by EC2 once an instance is in them; claims planned into one
    // and not launched yet are counted here. NodeOverlays then price what every decision
    // of the round (and consolidation's simulations) reads.
    let state = &ctx.state;
    let catalog = crate::catalog::reservations::subtract(&catalog, &pending_reservations(state));
    overlays::apply(state, &catalog)
}

/// The DaemonSets whose pods every new node carries, and the NodeClasses' kubelet settings.
fn overhead_and_classes(
    ctx: &Context,
    classes: &HashMap<String, Arc<NodeClass>>,
    input: &mut Input,
) {
    for ds in in_name_order(ctx.state.daemonsets.state()) {
        match daemonset(&ds) {
            Ok(d) => input.daemonsets.push(d),
            Err(e) => {
                ctx.metrics.malformed("DaemonSet");
                tracing::debug!(daemonset = %ds.name_any(), error = %e, "DaemonSet left out of overhead");
            }
        }
    }
    for (name, class) in in_key_order(classes) {
        input.node_classes.push(NodeClassInput {
            name: name.clone(),
            kubelet: class.spec.kubelet_settings(),
        });
    }
}

/// Nodes going away (claim disrupted or deleting, or the Node deleting), each with the index
/// of its NodeClaim in the list returned beside: their reschedulable pods are planned as
/// needing capacity, not counted on the node.
fn going_away(ctx: &Context) -> (HashMap<String, usize>, Vec<Arc<NodeClaim>>) {
    let state = &ctx.state;
    let mut doomed: HashMap<String, usize> = HashMap::new();
    let mut disrupted: Vec<Arc<NodeClaim>> = Vec::new();
    for n in state.nodes.state() {
        let claim = state.claim_for_node(&n);
        let going = n.metadata.deletion_timestamp.is_some()
            || claim.as_ref().is_some_and(|c| is_disrupted(c));
        if let (true, Some(c)) = (going, claim) {
            doomed.insert(n.name_any(), disrupted.len());
            disrupted.push(c);
        }
    }
    (doomed, disrupted)
}

/// The round's pods, sorted out: see [`pods`].
struct Pods {
    /// The pending pods, in the order of `input.pods`.
    pending: Vec<Arc<PodRecord>>,
    /// For each displaced pod after them in `input.pods`: its NodeClaim's index.
    displaced: Vec<usize>,
    /// The bound pods of nodes that stay, per node.
    by_node: HashMap<String, Vec<crate::scheduler::BoundPod>>,
    /// The EBS volumes (their claims, `namespace/name`) bound pods use, per node.
    attached: HashMap<String, BTreeSet<String>>,
}

/// Pods: pending ones to place (those a Fargate profile takes left out), then displaced
/// ones of nodes going away, into `input`; bound ones per node. Counts what is ignored.
async fn pods(ctx: &Context, doomed: &HashMap<String, usize>, input: &mut Input) -> Pods {
    let mut displaced_pods: Vec<(crate::scheduler::Pod, usize)> = Vec::new();
    let mut pending = Vec::new();
    let mut ignored: HashMap<&'static str, i64> = HashMap::new();
    let mut by_node: HashMap<String, Vec<crate::scheduler::BoundPod>> = HashMap::new();
    let mut attached: HashMap<String, BTreeSet<String>> = HashMap::new();
    let fargate_profiles = ctx.fargate.profiles(ctx.cloud.as_ref(), &ctx.metrics).await;
    let mut held_for_fargate = std::collections::HashSet::new();
    for p in ctx.state.pods.in_name_order() {
        match p.class {
            PodClass::Provisionable
                if ctx.fargate.holds(&ctx.events, &fargate_profiles, &p).await =>
            {
                *ignored.entry("fargate-profile").or_default() += 1;
                held_for_fargate.insert(p.uid.clone());
            }
            PodClass::Provisionable => match &p.unreadable {
                None => match p.scheduler_pod_with(ctx.state.volumes.as_ref()) {
                    Ok(sp) => {
                        input.pods.push(sp);
                        pending.push(p.clone());
                    }
                    Err(e) => {
                        *ignored.entry("volumes").or_default() += 1;
                        volumes_not_ready(ctx, &p, &e).await;
                    }
                },
                Some(e) => {
                    *ignored.entry("malformed").or_default() += 1;
                    unreadable(ctx, &p, e).await;
                }
            },
            PodClass::Ignored(reason) => *ignored.entry(reason).or_default() += 1,
            PodClass::NotPending => {
                let Some(node) = p.node.as_ref().filter(|_| !p.finished) else {
                    continue;
                };
                if let Some(&claim) = doomed.get(node).filter(|_| p.reschedulable()) {
                    if p.unreadable.is_some() {
                        ctx.metrics.malformed("Pod");
                        continue;
                    }
                    // Its replacement must reach its volumes; until they can be read it
                    // waits rather than be planned where they are not.
                    let mut sp = match p.scheduler_pod_with(ctx.state.volumes.as_ref()) {
                        Ok(sp) => sp,
                        Err(e) => {
                            tracing::warn!(pod = %format!("{}/{}", p.namespace(), p.name()), error = %e, "displaced pod's volumes cannot be read; not planned this round");
                            continue;
                        }
                    };
                    if let Some(n) = ctx.state.node(node) {
                        sp.set_home(n.labels());
                    }
                    displaced_pods.push((sp, claim));
                    continue;
                }
                if p.unreadable.is_none() {
                    by_node
                        .entry(node.clone())
                        .or_default()
                        .push(crate::scheduler::BoundPod::shared(p.shape.clone()));
                }
                if !p.claims.is_empty() {
                    let ebs = crate::scheduler::volumes::ebs_claims(
                        p.namespace(),
                        &p.claims,
                        ctx.state.volumes.as_ref(),
                    );
                    attached.entry(node.clone()).or_default().extend(ebs);
                }
            }
        }
    }
    let mut displaced = Vec::new();
    for (p, claim) in displaced_pods {
        input.pods.push(p);
        displaced.push(claim);
    }
    ctx.fargate.retain_told(&held_for_fargate);
    for reason in [
        "daemonset",
        "scheduler-name",
        "malformed",
        "fargate-profile",
        "volumes",
    ] {
        ctx.metrics
            .pods_ignored
            .get_or_create(&l(&[("reason", reason)]))
            .set(ignored.get(reason).copied().unwrap_or(0));
    }
    Pods {
        pending,
        displaced,
        by_node,
        attached,
    }
}

/// Tells a pending pod's owner, by an event on it, that the agent cannot read it.
async fn unreadable(ctx: &Context, p: &PodRecord, e: &str) {
    tracing::warn!(pod = %format!("{}/{}", p.namespace(), p.name()), error = %e, "pending pod cannot be read");
    ctx.events
        .publish(
            &p.reference(),
            crate::controllers::events::Type::Warning,
            "FailedScheduling",
            &format!("joiner-agent cannot read this pod: {e}"),
        )
        .await;
}

/// Tells a pending pod's owner, by an event on it, why its volumes keep it out of the
/// round (kube-scheduler would refuse it on any node until they are ready).
async fn volumes_not_ready(ctx: &Context, p: &PodRecord, e: &str) {
    tracing::info!(pod = %format!("{}/{}", p.namespace(), p.name()), reason = %e, "pending pod's volumes are not ready; left out");
    ctx.events
        .publish(
            &p.reference(),
            crate::controllers::events::Type::Warning,
            "FailedScheduling",
            &format!("joiner-agent leaves this pod out: {e}"),
        )
        .await;
}

/// EBS volumes a node's attach limit has room for: its CSINode's count for the EBS CSI
/// driver, or, before the driver has registered there, the count the driver will report for
/// the node's type; less the volumes its pods use and those still attached there that no pod
/// of it uses (a volume being detached after its pod left, which kube-scheduler's
/// NodeVolumeLimits counts too). A driver that sets no count, or a type the catalogue does
/// not know, limits nothing, as in kube-scheduler.
fn ebs_room(
    ctx: &Context,
    node: &K8sNode,
    catalog: &Catalog,
    in_use: Option<&BTreeSet<String>>,
) -> i64 {
    const UNLIMITED: i64 = 1 << 40;
    let csi = ctx.state.volumes.csi_node(&node.name_any());
    let limit = match csi
        .as_ref()
        .and_then(|c| c.limits.get(volume_limits::EBS_CSI_DRIVER))
    {
        Some(count) => count.unwrap_or(UNLIMITED),
        None => node
            .labels()
            .get(labels::INSTANCE_TYPE)
            .and_then(|t| catalog.get(t))
            .map(|it| volume_limits::ebs_attach_limit(&it.record, Default::default()))
            .unwrap_or(UNLIMITED),
    };
    let used = in_use.map_or(0, |v| v.len() as i64);
    limit - used - lingering_attachments(ctx, &node.name_any(), in_use)
}

/// EBS VolumeAttachments on the node whose volume no claim in `in_use` is bound to.
fn lingering_attachments(ctx: &Context, node: &str, in_use: Option<&BTreeSet<String>>) -> i64 {
    use crate::scheduler::volumes::VolumeLookup;
    let bound: BTreeSet<String> = in_use
        .into_iter()
        .flatten()
        .filter_map(|key| {
            let (ns, name) = key.split_once('/')?;
            ctx.state.volumes.claim(ns, name)?.volume_name.clone()
        })
        .collect();
    ctx.state
        .volumes
        .attachments_on(node)
        .iter()
        .filter(|a| a.attacher == volume_limits::EBS_CSI_DRIVER)
        .filter(|a| a.volume.as_ref().is_some_and(|v| !bound.contains(v)))
        .count() as i64
}

/// The Nodes into `input`, with their bound pods and the EBS volumes they can still attach,
/// their capacity counted in their pool's `usage`; returns the NodeClaims that have a Node.
fn nodes(
    ctx: &Context,
    mut by_node: HashMap<String, Vec<crate::scheduler::BoundPod>>,
    (attached, catalog): (&HashMap<String, BTreeSet<String>>, &Catalog),
    input: &mut Input,
    usage: &mut HashMap<String, Resources>,
) -> BTreeSet<String> {
    let state = &ctx.state;
    let mut claims_with_node: BTreeSet<String> = BTreeSet::new();
    for n in in_name_order(state.nodes.state()) {
        let node: &K8sNode = &n;
        let claim = state.claim_for_node(node);
        if let Some(c) = &claim {
            claims_with_node.insert(c.name_any());
        }
        let status = node.status.as_ref();
        let mut allocatable = match node_resources(status.and_then(|s| s.allocatable.as_ref())) {
            Ok(r) => r,
            Err(e) => {
                ctx.metrics.malformed("Node");
                tracing::warn!(node = %node.name_any(), error = %e, "node allocatable cannot be read; node left out");
                continue;
            }
        };
        allocatable.extended.insert(
            volume_limits::EBS_ATTACH_RESOURCE.to_string(),
            ebs_room(ctx, node, catalog, attached.get(&node.name_any())),
        );
        let node_labels = node.labels().clone();
        if let Some(pool) = node_labels
            .get(labels::JOINER_NODEPOOL)
            .or_else(|| node_labels.get(labels::KARPENTER_NODEPOOL))
        {
            if let Ok(cap) = node_resources(status.and_then(|s| s.capacity.as_ref())) {
                count_node(usage.entry(pool.clone()).or_default(), &cap);
            }
        }
        let taints = node_taints(ctx, node, claim.as_deref());
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim.as_ref().is_some_and(|c| is_disrupted(c));
        input.nodes.push(Node {
            name: node.name_any(),
            labels: node_labels,
            taints,
            allocatable,
            pods: by_node.remove(&node.name_any()).unwrap_or_default(),
            unschedulable: deleting
                || node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
        });
    }
    claims_with_node
}

/// A node's taints as the scheduler sees them: without those that say it is still starting
/// (and its claim's startup taints until it is initialised).
fn node_taints(ctx: &Context, node: &K8sNode, claim: Option<&NodeClaim>) -> Vec<Taint> {
    let initialized = claim
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::INITIALIZED));
    let startup: Vec<String> = claim
        .map(|c| {
            c.spec
                .startup_taints
                .iter()
                .map(|t| t.key.clone())
                .collect()
        })
        .unwrap_or_default();
    let mut taints: Vec<Taint> = Vec::new();
    for (i, t) in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        if EPHEMERAL_TAINTS.contains(&t.key.as_str()) || (!initialized && startup.contains(&t.key))
        {
            continue;
        }
        match convert::taint(t, &format!("spec.taints[{i}]")) {
            Ok(t) => taints.push(t),
            Err(_) => ctx.metrics.malformed("Node"),
        }
    }
    taints
}

/// In-flight claims (launched or launching, no Node yet) into `input`, each with the
/// allocatable every one of its candidate types would give at least; their capacity counted
/// in their pool's `usage`.
fn in_flight(
    ctx: &Context,
    served: &Served,
    with_node: &BTreeSet<String>,
    input: &mut Input,
    usage: &mut HashMap<String, Resources>,
) {
    let state = &ctx.state;
    for c in in_name_order(state.node_claims.list()) {
        let name = c.name_any();
        if is_disrupted(&c) || with_node.contains(&name) {
            continue;
        }
        let pool = c
            .labels()
            .get(labels::JOINER_NODEPOOL)
            .cloned()
            .unwrap_or_default();
        let Ok(view) = c.view() else {
            ctx.metrics.malformed("NodeClaim");
            continue;
        };
        let taints = crate::api::convert_taints(&c.spec.taints).unwrap_or_default();
        let Some(class) = served
            .classes
            .get(&c.spec.node_class_ref.name)
            .cloned()
            .or_else(|| state.node_classes.get(&c.spec.node_class_ref.name))
        else {
            continue;
        };
        let kubelet = class.spec.kubelet_settings();
        let Some(cat) = served.catalogs.get(&class.name_any()) else {
            continue;
        };
        let types = c.candidate_types(&view, cat);
        let requirements = view.requirements;
        let mut alloc: Option<Resources> = None;
        let mut cap: Option<Resources> = None;
        for it in &types {
            let node_reqs = daemonsets::node_requirements(&pool, &requirements, it);
            let overhead = daemonsets::overhead(&input.daemonsets, &node_reqs, &taints);
            let a = volume_limits::with_ebs_limit(&it.allocatable_with(&kubelet), &it.record)
                .minus(&overhead);
            alloc = Some(match alloc {
                None => a,
                Some(prev) => elementwise_min(&prev, &a),
            });
            if cap.is_none() {
                cap = Some(it.capacity_with(&kubelet));
            }
        }
        let Some(allocatable) = alloc else { continue };
        if let Some(cap) = cap {
            count_node(usage.entry(pool.clone()).or_default(), &cap);
        }
        let mut reqs = requirements;
        reqs.add(labels::JOINER_NODEPOOL, Requirement::one(&pool));
        reqs.add(labels::KARPENTER_NODEPOOL, Requirement::one(&pool));
        input.in_flight.push(InFlightClaim {
            name,
            nodepool: pool,
            requirements: reqs,
            taints,
            allocatable,
            pods: vec![],
        });
    }
}

/// The NodePools into `input` with their usage, each kept in its NodeClass's zones; gives
/// back each pool's requirements as they were parsed.
fn node_pools(
    served: &mut Served,
    usage: &HashMap<String, Resources>,
    input: &mut Input,
) -> HashMap<String, ParsedRequirements> {
    let several = served.catalogs.len() > 1;
    let mut requirements = HashMap::new();
    let mut parsed: Vec<(String, ParsedPool)> = served.parsed.drain().collect();
    parsed.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, p) in parsed {
        let mut pi = p.input;
        pi.usage = usage.get(&name).cloned().unwrap_or_default();
        // Karpenter's `ec2nodeclass` label is the pool's class: a pod selecting it selects
        // the pools of that class.
        let class = pi.node_class.clone();
        pi.requirements
            .add(labels::NODE_CLASS, Requirement::one(&class));
        if several {
            if let Some(cat) = served
                .pool_class
                .get(&name)
                .and_then(|c| served.catalogs.get(&c.name_any()))
            {
                let zones: BTreeSet<String> = cat.zones();
                let mut z = Requirements::new();
                z.add(labels::ZONE, Requirement::listed(zones));
                pi.requirements = pi.requirements.intersect(&z);
            }
        }
        input.node_pools.push(pi);
        requirements.insert(name, p.requirements);
    }
    requirements
}

/// The objects in namespace/name order. The stores hand them out in hash order, which
/// changes as they fill; the round's input is built in this order instead, so that the same
/// cluster always gives the same input (and the same plan), and the disruption loop can
/// tell an unchanged cluster from its fingerprint.
fn in_name_order<K: kube::Resource>(mut objects: Vec<Arc<K>>) -> Vec<Arc<K>> {
    objects.sort_by(|a, b| {
        let (a, b) = (a.meta(), b.meta());
        (a.namespace.as_deref(), a.name.as_deref())
            .cmp(&(b.namespace.as_deref(), b.name.as_deref()))
    });
    objects
}

/// A map's entries in key order (see [`in_name_order`]).
fn in_key_order<V>(map: &HashMap<String, V>) -> Vec<(&String, &V)> {
    let mut entries: Vec<(&String, &V)> = map.iter().collect();
    entries.sort_by_key(|(k, _)| *k);
    entries
}

/// Per capacity reservation, the live NodeClaims planned into it whose instance is not
/// launched yet.
fn pending_reservations(
    state: &crate::controllers::state::ClusterState,
) -> std::collections::BTreeMap<String, u32> {
    let mut out = std::collections::BTreeMap::new();
    for c in state.node_claims.list() {
        let launched = c
            .status
            .as_ref()
            .is_some_and(|s| s.provider_id.as_deref().is_some_and(|p| !p.is_empty()));
        if launched || c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Ok(view) = c.view() else { continue };
        if let Some(id) = view
            .requirements
            .get(labels::CAPACITY_RESERVATION_ID)
            .and_then(|r| r.single_value())
        {
            *out.entry(id.to_string()).or_default() += 1;
        }
    }
    out
}

/// The insufficient-capacity cache as the scheduler wants it (kept for callers that build
/// inputs themselves, such as the disruption loop's simulations).
pub fn unavailable(ctx: &Context) -> UnavailableOfferings {
    ctx.cloud.unavailable()
}

/// Adds one node of capacity `cap` to a pool's usage, counted also as a node for a
/// `nodes` limit.
fn count_node(usage: &mut Resources, cap: &Resources) {
    usage.add(cap);
    *usage
        .extended
        .entry(crate::scheduler::NODES.to_string())
        .or_default() += 1;
}
