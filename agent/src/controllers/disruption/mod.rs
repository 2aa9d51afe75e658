//! The disruption loop (leader only): every few seconds, reads the cluster into a
//! [`World`], runs the pure [`decide`], and carries the decisions out by disrupting the
//! chosen NodeClaims ([`disrupted::disrupt`], with the decision's reason). It never creates
//! capacity: provisioning plans the disrupted nodes' pods in its next batch (the
//! replacements a decision simulated come out of that batch), and termination drains each
//! node once its replacements are Initialized, or at once when the decision showed the pods
//! fit on existing nodes. Every decision gets an Event on the Node and the NodeClaim naming
//! the reason and the saving, and metrics by reason.
//!
//! NodeClaims without the drift hashes of [`crate::disruption::drift`] are stamped with
//! today's hashes on first sight (the provisioner stamps them at launch).
//!
//! Each pass writes Karpenter's `Consolidatable` and `Drifted` conditions on the claims
//! ([`claim_conditions`]), also scales static pools down to their `replicas` ([`static_pools`]), and
//! keeps each pool's tally of consolidation evictions of the last hour, which
//! `consolidationEvictionsPerHour` caps, in the NodePool's status so that it survives a
//! change of leader.

pub mod claim_conditions;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::api::{NodeClaim, NodeClass, NodePool, ParsedRequirements};
use crate::catalog::{CapacityType, Catalog};
use crate::controllers::claim_termination::TerminationReason;
use crate::controllers::conditions;
use crate::controllers::context::Context;
use crate::controllers::disrupted::{self, Mark};
use crate::controllers::do_not_disrupt::{has_do_not_disrupt, pod_has_do_not_disrupt};
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::disruption::DisruptionMetrics;
use crate::controllers::operator::metrics::l as ml;
use crate::controllers::scheduling_input;
use crate::controllers::state::pods::POD_DELETION_COST;
use crate::controllers::state::PodRecord;
use crate::disruption::budgets::Reason;
use crate::disruption::decide::{decide, Candidate, Config, Decision, PoolPolicy, World};
use crate::disruption::drift::{self, DriftInput};
use crate::disruption::quiet::{self, Quiet};
use crate::disruption::{balanced, static_pools};
use crate::labels;
use crate::scheduler;

/// Time between passes.
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);

fn termination_reason(r: Reason) -> TerminationReason {
    match r {
        Reason::Empty => TerminationReason::Empty,
        Reason::Underutilized => TerminationReason::Underutilized,
        Reason::Drifted => TerminationReason::Drifted,
        Reason::Expired => TerminationReason::Expired,
    }
}

fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let ml_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let me_ok = sel.match_expressions.iter().flatten().all(|e| {
        let have = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    ml_ok && me_ok
}

/// Whether evicting `pod` now would break a PDB (one that allows no disruption and selects it).
fn pdb_blocks(pdbs: &[Arc<PodDisruptionBudget>], pod: &PodRecord) -> bool {
    let ns = pod.namespace();
    let labels = pod.labels();
    pdbs.iter().any(|b| {
        b.namespace().unwrap_or_default() == ns
            && b.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selector_matches(s, labels))
            && b.status
                .as_ref()
                .is_some_and(|s| s.disruptions_allowed <= 0)
    })
}

fn ts(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.as_ref().map(|t| t.0.as_second())
}

pub struct Disruption {
    ctx: Arc<Context>,
    metrics: Arc<DisruptionMetrics>,
    pub config: Config,
    /// Per node: the pods seen last pass and when that set last changed.
    pod_sets: Mutex<HashMap<String, (u64, i64)>>,
    /// Per pool: consolidation's evictions (time, pods) of the last hour; read from the
    /// NodePool's status the first time the pool is seen.
    evictions: Mutex<HashMap<String, Vec<(i64, u32)>>>,
    /// The last pass that decided nothing, which later passes over the same world skip.
    quiet: Mutex<Quiet>,
}

/// `Balanced`'s cost of evicting these pods.
fn eviction_cost(pods: &[&Arc<PodRecord>]) -> f64 {
    balanced::pods_cost(pods.iter().map(|p| {
        let deletion = p
            .annotations
            .get(POD_DELETION_COST)
            .and_then(|v| v.trim().parse::<f64>().ok());
        balanced::eviction_cost(p.priority, deletion)
    }))
}

/// A claim whose node the world holds, with its pool (and class) and the pods on it.
struct ClaimOnNode<'a> {
    claim: &'a NodeClaim,
    node: &'a Node,
    snode: scheduler::Node,
    pool_name: String,
    pool: &'a NodePool,
    /// The pool's requirements as the round parsed them.
    requirements: &'a ParsedRequirements,
    class: Option<&'a NodeClass>,
    /// What drift compares the claim with now.
    now: &'a PoolNow,
    pods: Vec<Arc<PodRecord>>,
}

/// What drift compares every claim of a pool with, worked out once per pass rather than per
/// claim: the pool's and its class's hashes, and the AMIs the class resolves to.
struct PoolNow {
    pool_hash: String,
    class_hash: Option<String>,
    amis: Vec<String>,
}

impl PoolNow {
    fn of(pool: &NodePool, class: Option<&NodeClass>) -> PoolNow {
        PoolNow {
            pool_hash: drift::nodepool_hash(&pool.spec),
            class_hash: class.map(|c| drift::nodeclass_hash(&c.spec)),
            amis: class
                .and_then(|c| c.status.as_ref())
                .map(|s| s.amis.iter().map(|a| a.id.clone()).collect())
                .unwrap_or_default(),
        }
    }
}

impl Disruption {
    pub fn new(ctx: Arc<Context>, metrics: Arc<DisruptionMetrics>) -> Disruption {
        Disruption {
            ctx,
            metrics,
            config: Config::default(),
            pod_sets: Mutex::new(HashMap::new()),
            evictions: Mutex::new(HashMap::new()),
            quiet: Mutex::new(Quiet::default()),
        }
    }

    /// Reads the cluster into a [`World`]; stamps unstamped claims.
    pub async fn world(&self) -> (World, Catalog) {
        let ctx = &self.ctx;
        let now = jiff::Timestamp::now().as_second();
        let round = scheduling_input::build(ctx).await;
        let mut sched = round.input;
        // Pending pods and the displaced pods of disrupted nodes: consolidation pauses
        // for both, so it never counts as free the capacity in flight for them.
        let pending = sched.pods.len();
        sched.pods.clear();
        let catalog = round.catalog;
        let pdbs: Vec<Arc<PodDisruptionBudget>> = ctx.state.pdbs.state();

        let pools = self.pool_policies(&round.pools, now);
        let mut nodes_by_name: HashMap<String, scheduler::Node> =
            sched.nodes.drain(..).map(|n| (n.name.clone(), n)).collect();
        let mut candidates = Vec::new();
        let mut to_stamp = Vec::new();
        let mut seen_nodes = HashSet::new();
        let mut pods_by_node = ctx.state.pods_by_node();
        let mut pools_now: HashMap<String, PoolNow> = HashMap::new();
        // Claims in name order, like everything else in the world (see `quiet`).
        let mut claims = ctx.state.node_claims.list();
        claims.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for claim in claims {
            let Some(node) = ctx.state.node_for_claim(&claim) else {
                continue;
            };
            let node_name = node.name_any();
            let Some(snode) = nodes_by_name.remove(&node_name) else {
                continue;
            };
            let pool_name = claim
                .labels()
                .get(labels::JOINER_NODEPOOL)
                .cloned()
                .unwrap_or_default();
            let (Some(pool), Some(requirements)) = (
                round.pools.get(&pool_name),
                round.requirements.get(&pool_name),
            ) else {
                nodes_by_name.insert(node_name, snode);
                continue;
            };
            let class = ctx
                .state
                .node_classes
                .get(&pool.spec.template.spec.node_class_ref.name);
            if let Some(c) = &class {
                to_stamp.push((claim.clone(), pool.clone(), c.clone()));
            }
            seen_nodes.insert(node_name.clone());
            let now_of_pool = pools_now
                .entry(pool_name.clone())
                .or_insert_with(|| PoolNow::of(pool, class.as_deref()));
            let on = ClaimOnNode {
                claim: &claim,
                node: &node,
                snode,
                pool_name,
                pool,
                requirements,
                class: class.as_deref(),
                now: now_of_pool,
                pods: pods_by_node.remove(&node_name).unwrap_or_default(),
            };
            candidates.push(self.candidate(on, &catalog, &pdbs, now));
        }
        self.pod_sets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n, _| seen_nodes.contains(n));
        for (claim, pool, class) in to_stamp {
            self.stamp_if_missing(&claim, &pool, Some(&class)).await;
        }
        let mut other_nodes: Vec<scheduler::Node> = nodes_by_name.into_values().collect();
        other_nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let world = World {
            candidates,
            other_nodes,
            in_flight: std::mem::take(&mut sched.in_flight),
            pools,
            sched,
            pending_pods: pending,
            now,
        };
        (world, catalog)
    }

    /// The consolidation candidate a claim's node makes: its movable pods, its offering
    /// and price, its age and last pod change, and what may keep it from being disrupted.
    fn candidate(
        &self,
        on: ClaimOnNode<'_>,
        catalog: &Catalog,
        pdbs: &[Arc<PodDisruptionBudget>],
        now: i64,
    ) -> Candidate {
        let ClaimOnNode {
            claim,
            node,
            snode,
            pool_name,
            pool,
            requirements,
            class,
            now: pool_now,
            pods: on_node,
        } = on;
        let node_name = node.name_any();
        let movable: Vec<&Arc<PodRecord>> = on_node.iter().filter(|p| p.reschedulable()).collect();
        // Each pod held to where its volumes can be reached, as provisioning reads it; a
        // pod whose volumes cannot be read keeps its node (it could not be placed).
        let mut volumes_unread = false;
        let pods: Vec<scheduler::MovablePod> = movable
            .iter()
            .filter(|p| p.unreadable.is_none())
            .filter_map(|p| match p.movable_with(self.ctx.state.volumes.as_ref()) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::debug!(pod = %format!("{}/{}", p.namespace(), p.name()), error = %e, "pod's volumes cannot be read; its node is not disrupted");
                    volumes_unread = true;
                    None
                }
            })
            .collect();
        let created = ts(&claim.metadata.creation_timestamp).unwrap_or(now);
        let last_pod_change = self.last_pod_change(&node_name, &movable, created, now);
        let status = claim.status.as_ref();
        let node_labels = node.labels();
        let label = |k: &str| {
            claim
                .labels()
                .get(k)
                .or_else(|| node_labels.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let itype = label(labels::INSTANCE_TYPE);
        let zone = label(labels::ZONE);
        let ct = CapacityType::parse(&label(labels::CAPACITY_TYPE));
        let full_labels = drift::completed_labels(catalog, &itype, node_labels);
        let drift = drift::drift_reason(&DriftInput {
            claim_annotations: claim.annotations(),
            node_labels: &full_labels,
            image_id: status.and_then(|s| s.image_id.as_deref()),
            pool: &pool.spec,
            requirements,
            class: class.map(|c| &c.spec),
            pool_hash: &pool_now.pool_hash,
            class_hash: pool_now.class_hash.as_deref(),
            resolved_amis: &pool_now.amis,
        });
        let disrupting =
            disrupted::is_disrupted(claim) || node.metadata.deletion_timestamp.is_some();
        Candidate {
            node: snode,
            pods,
            nodeclaim: claim.name_any(),
            nodepool: pool_name,
            price: catalog.price_of(&itype, &zone, ct),
            instance_type: itype,
            zone,
            capacity_type: ct,
            created,
            last_pod_change,
            initialized: status
                .is_some_and(|s| conditions::is_true(&s.conditions, conditions::INITIALIZED)),
            disrupting,
            do_not_disrupt: has_do_not_disrupt(&node.metadata)
                || volumes_unread
                || movable.iter().any(|p| pod_has_do_not_disrupt(p)),
            pdb_blocked: movable.iter().any(|p| pdb_blocks(pdbs, p)),
            eviction_cost: Some(eviction_cost(&movable)),
            expire_after: claim
                .spec
                .expire_after
                .as_deref()
                .and_then(|e| crate::api::duration::parse_or_never(e).ok())
                .flatten(),
            drift,
        }
    }

    /// The disruption settings of the round's NodePools, each with its evictions of the
    /// last hour; a pool whose settings cannot be read is left out, and its nodes alone.
    fn pool_policies(
        &self,
        round_pools: &HashMap<String, Arc<crate::api::NodePool>>,
        now: i64,
    ) -> Vec<PoolPolicy> {
        let mut pools = Vec::new();
        for (name, p) in round_pools {
            match PoolPolicy::from_api(name, &p.spec) {
                Ok(mut pp) => {
                    pp.evictions_last_hour = self.evictions_last_hour(p, now);
                    pools.push(pp)
                }
                Err(e) => {
                    self.ctx.metrics.malformed("NodePool");
                    tracing::warn!(nodepool = %name, error = %e, "NodePool disruption settings cannot be read; its nodes are left alone");
                }
            }
        }
        pools
    }

    /// When the set of a node's movable pods last changed, by a fingerprint of their uids
    /// remembered from pass to pass.
    fn last_pod_change(
        &self,
        node_name: &str,
        movable: &[&Arc<PodRecord>],
        created: i64,
        now: i64,
    ) -> i64 {
        let mut uids: Vec<&str> = movable.iter().map(|p| p.uid.as_str()).collect();
        uids.sort();
        let fp = uids.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, u| {
            u.bytes().fold(h ^ 0xff, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        });
        let newest_pod = movable
            .iter()
            .filter_map(|p| p.created)
            .max()
            .unwrap_or(created);
        let mut pod_sets = self.pod_sets.lock().unwrap_or_else(|p| p.into_inner());
        let entry = pod_sets
            .entry(node_name.to_string())
            .or_insert((fp, newest_pod.max(created)));
        if entry.0 != fp {
            *entry = (fp, now);
        }
        entry.1
    }

    async fn stamp_if_missing(
        &self,
        claim: &NodeClaim,
        pool: &crate::api::NodePool,
        class: Option<&crate::api::NodeClass>,
    ) {
        let ann = claim.annotations();
        if ann.contains_key(drift::NODEPOOL_HASH) || claim.metadata.deletion_timestamp.is_some() {
            return;
        }
        let Some(class) = class else { return };
        let stamp = drift::stamp(&pool.spec, &class.spec);
        let api = self.ctx.node_claim_api();
        let patch = serde_json::json!({"metadata": {"annotations": stamp}});
        if let Err(e) = api
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            self.ctx
                .metrics
                .kube_error("nodeclaims patch (drift hashes)", &e);
        }
    }

    /// The pool's consolidation evictions of the last hour (seeded from its status).
    fn evictions_last_hour(&self, pool: &crate::api::NodePool, now: i64) -> u32 {
        let mut all = self.evictions.lock().unwrap_or_else(|p| p.into_inner());
        let records = all.entry(pool.name_any()).or_insert_with(|| {
            pool.status
                .iter()
                .flat_map(|s| s.consolidation_evictions.iter())
                .filter_map(|r| {
                    let t: jiff::Timestamp = r.time.parse().ok()?;
                    Some((t.as_second(), r.pods))
                })
                .collect()
        });
        records.retain(|(t, _)| now - t < 3600);
        records.iter().map(|(_, n)| n).sum()
    }

    /// Adds a consolidation's evictions to its pools' tallies and writes them to status.
    async fn record_evictions(&self, d: &Decision) {
        let now = jiff::Timestamp::now();
        let mut per_pool: BTreeMap<&str, u32> = BTreeMap::new();
        for n in &d.nodes {
            let pods = self
                .ctx
                .state
                .pods_on(&n.node)
                .iter()
                .filter(|p| p.reschedulable())
                .count() as u32;
            *per_pool.entry(n.nodepool.as_str()).or_default() += pods;
        }
        for (pool, pods) in per_pool {
            self.metrics
                .consolidation_evictions
                .get_or_create(&ml(&[("nodepool", pool)]))
                .inc_by(u64::from(pods));
            let records: Vec<crate::api::node_pool::EvictionRecord> = {
                let mut all = self.evictions.lock().unwrap_or_else(|p| p.into_inner());
                let r = all.entry(pool.to_string()).or_default();
                r.push((now.as_second(), pods));
                r.retain(|(t, _)| now.as_second() - t < 3600);
                r.iter()
                    .map(|(t, n)| crate::api::node_pool::EvictionRecord {
                        time: jiff::Timestamp::from_second(*t).unwrap_or(now).to_string(),
                        pods: *n,
                    })
                    .collect()
            };
            let api: Api<crate::api::NodePool> = Api::all(self.ctx.client.clone());
            let patch = serde_json::json!({"status": {"consolidationEvictions": records}});
            if let Err(e) = api
                .patch_status(pool, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                self.ctx
                    .metrics
                    .kube_error("nodepools/status patch (consolidation evictions)", &e);
            }
        }
    }

    /// Static pools over their `replicas` give up their surplus claims.
    async fn scale_static_pools(&self) {
        let ctx = &self.ctx;
        for pool in ctx.state.node_pools.list() {
            let Some(replicas) = pool.spec.replicas else {
                continue;
            };
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = pool.name_any();
            let claims: Vec<Arc<NodeClaim>> = ctx
                .state
                .node_claims
                .list()
                .into_iter()
                .filter(|c| c.labels().get(labels::JOINER_NODEPOOL) == Some(&name))
                .collect();
            let members: Vec<static_pools::Member> = claims
                .iter()
                .map(|c| {
                    let node = ctx.state.node_for_claim(c);
                    let pods: Vec<Arc<PodRecord>> = node
                        .as_ref()
                        .map(|n| ctx.state.pods_on(&n.name_any()))
                        .unwrap_or_default();
                    let movable: Vec<&Arc<PodRecord>> =
                        pods.iter().filter(|p| p.reschedulable()).collect();
                    static_pools::Member {
                        nodeclaim: c.name_any(),
                        launched: node.is_some(),
                        pods: movable.len(),
                        do_not_disrupt: node
                            .as_ref()
                            .is_some_and(|n| has_do_not_disrupt(&n.metadata))
                            || movable.iter().any(|p| pod_has_do_not_disrupt(p)),
                        disrupting: disrupted::is_disrupted(c),
                    }
                })
                .collect();
            for claim_name in static_pools::surplus(replicas, &members) {
                let Some(claim) = ctx.state.node_claims.get(&claim_name) else {
                    continue;
                };
                let message = format!(
                    "NodePool {name} keeps {replicas} node(s) (replicas) and has more; this one goes"
                );
                ctx.events
                    .publish(
                        &events::reference(claim.as_ref()),
                        Type::Normal,
                        "Disrupting",
                        &format!("Overprovisioned: {message}"),
                    )
                    .await;
                let mark = Mark {
                    reason: TerminationReason::Overprovisioned,
                    condition_reason: "Overprovisioned",
                    message: &message,
                    deadline: disrupted::voluntary_deadline(ctx, jiff::Timestamp::now()),
                    replaced_by: None,
                };
                match disrupted::disrupt(ctx, &claim, mark).await {
                    Ok(()) => {
                        self.metrics
                            .nodes_disrupted
                            .get_or_create(&ml(&[
                                ("reason", "Overprovisioned"),
                                ("nodepool", &name),
                            ]))
                            .inc();
                    }
                    Err(e) => {
                        tracing::warn!(nodeclaim = %claim_name, error = %e, "scaling a static NodePool down")
                    }
                }
            }
        }
    }

    /// One pass: decide, then act. Returns the decisions taken. A pass over the same world
    /// as a pass that decided nothing, before any of decide's time rules flips, is skipped
    /// (see [`quiet`]): its answer is known.
    pub async fn pass(&self) -> Vec<Decision> {
        let started = Instant::now();
        self.scale_static_pools().await;
        let (mut world, catalog) = self.world().await;
        let world_ms = started.elapsed().as_millis();
        claim_conditions::sync(&self.ctx, &world).await;
        claim_conditions::hold_unmarked(&self.ctx, &mut world);
        let fingerprint = quiet::fingerprint(&world, &catalog);
        let lock = || self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        if lock().holds(fingerprint, world.now) {
            tracing::debug!(
                candidates = world.candidates.len(),
                world_ms,
                took_ms = started.elapsed().as_millis(),
                "disruption pass skipped: the world is the last quiet pass's"
            );
            self.metrics.passes_skipped.inc();
            self.metrics
                .pass_duration
                .observe(started.elapsed().as_secs_f64());
            return Vec::new();
        }
        let outcome = decide(&catalog, &world, &self.config);
        lock().record(&world, fingerprint, !outcome.decisions.is_empty());
        self.metrics
            .pass_duration
            .observe(started.elapsed().as_secs_f64());
        // The histogram mixes skipped passes with full ones: the debug line below says what
        // a full one cost to decide.
        let decided_ms = started.elapsed().as_millis() as u64;
        let mut blocked: BTreeMap<&str, i64> = BTreeMap::new();
        for b in &outcome.blocked {
            let key = if b.why.contains("do-not-disrupt") {
                "do_not_disrupt"
            } else if b.why.contains("PodDisruptionBudget") {
                "pdb"
            } else if b.why.contains("evictions per hour") {
                "eviction_cap"
            } else if b.why.starts_with("Balanced") {
                "balanced"
            } else if b.why.contains("spot-to-spot") {
                "spot_to_spot"
            } else if b.why.contains("headroom") || b.why.contains("spare nodes") {
                "headroom"
            } else if b.why.contains("budget") {
                "budget"
            } else if b.why.contains("initialising") {
                "initialising"
            } else if b.why.contains("consolidateAfter") {
                "consolidate_after"
            } else {
                "unplaceable"
            };
            *blocked.entry(key).or_default() += 1;
            if matches!(
                key,
                "do_not_disrupt" | "pdb" | "budget" | "unplaceable" | "eviction_cap"
            ) {
                if let Some(node) = self.ctx.state.node(&b.node) {
                    self.ctx
                        .events
                        .publish(
                            &events::reference(node.as_ref()),
                            Type::Normal,
                            "DisruptionBlocked",
                            &format!("not disrupted ({}): {}", b.reason.as_str(), b.why),
                        )
                        .await;
                }
            }
        }
        tracing::debug!(
            candidates = world.candidates.len(),
            pending = world.pending_pods,
            decisions = outcome.decisions.len(),
            took_ms = decided_ms,
            world_ms,
            blocked = outcome.blocked.len(),
            // A sample: at thousands of nodes the whole list would be a line of megabytes.
            blocked_first = ?outcome.blocked.iter().take(5).map(|b| (&b.node, &b.why)).collect::<Vec<_>>(),
            "disruption pass"
        );
        for key in [
            "do_not_disrupt",
            "pdb",
            "budget",
            "initialising",
            "consolidate_after",
            "unplaceable",
            "eviction_cap",
            "balanced",
            "spot_to_spot",
            "headroom",
        ] {
            self.metrics
                .blocked
                .get_or_create(&ml(&[("reason", key)]))
                .set(blocked.get(key).copied().unwrap_or(0));
        }
        for d in &outcome.decisions {
            if d.reason == Reason::Underutilized {
                self.record_evictions(d).await;
            }
            self.execute(d.clone(), &catalog).await;
        }
        outcome.decisions
    }

    /// Carries a decision out: an Event per node, then the claims are disrupted; the
    /// provisioner and termination do the rest.
    async fn execute(&self, d: Decision, _catalog: &Catalog) {
        let ctx = &self.ctx;
        let action = if d.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        self.metrics
            .decisions
            .get_or_create(&ml(&[("reason", d.reason.as_str()), ("action", action)]))
            .inc();
        let now = jiff::Timestamp::now();
        let deadline = disrupted::voluntary_deadline(ctx, now);
        let message = format!(
            "{} ({}): {}",
            d.reason.as_str(),
            if d.saving >= 0.0 {
                format!("saving ${:.4}/h", d.saving)
            } else {
                format!("costing ${:.4}/h more", -d.saving)
            },
            d.message
        );
        // A delete decision simulated the pods onto existing nodes: nothing to wait for.
        let none: &[String] = &[];
        let replaced_by = d.replacements.is_empty().then_some(none);
        // Every node of the decision is marked before any drain starts: a pod evicted from
        // the first would otherwise be scheduled onto the second, and evicted again.
        for n in &d.nodes {
            if let Some(claim) = ctx.state.node_claims.get(&n.nodeclaim) {
                disrupted::taint_node(ctx, &claim).await;
            }
        }
        for n in &d.nodes {
            let Some(claim) = ctx.state.node_claims.get(&n.nodeclaim) else {
                continue;
            };
            ctx.events
                .publish(
                    &events::reference(claim.as_ref()),
                    Type::Normal,
                    "Disrupting",
                    &message,
                )
                .await;
            if let Some(node) = ctx.state.node(&n.node) {
                ctx.events
                    .publish(
                        &events::reference(node.as_ref()),
                        Type::Normal,
                        "Disrupting",
                        &message,
                    )
                    .await;
            }
            let mark = Mark {
                reason: termination_reason(d.reason),
                condition_reason: d.reason.as_str(),
                message: &message,
                deadline,
                replaced_by,
            };
            match disrupted::disrupt(ctx, &claim, mark).await {
                Ok(()) => {
                    self.metrics
                        .nodes_disrupted
                        .get_or_create(&ml(&[
                            ("reason", d.reason.as_str()),
                            ("nodepool", &n.nodepool),
                        ]))
                        .inc();
                }
                Err(e) => {
                    tracing::warn!(nodeclaim = %n.nodeclaim, error = %e, "disrupting a NodeClaim");
                }
            }
        }
        if d.saving > 0.0 {
            self.metrics
                .saving_micro_usd_per_hour
                .get_or_create(&ml(&[("reason", d.reason.as_str())]))
                .inc_by((d.saving * 1e6) as u64);
        }
        tracing::info!(reason = d.reason.as_str(), nodes = ?d.nodes.iter().map(|n| &n.node).collect::<Vec<_>>(), saving = d.saving, "{}", d.message);
    }
}

/// The loop: one pass every [`PASS_INTERVAL`].
pub async fn run(ctx: Arc<Context>) {
    let d = Disruption::new(ctx.clone(), ctx.metrics.disruption.clone());
    loop {
        tokio::time::sleep(PASS_INTERVAL).await;
        d.pass().await;
    }
}
