//! The disruption decision: which nodes to take away or replace in one pass, and why.
//! Pure: cluster state, prices and the time come in as data; decisions come out.
//!
//! Order, as in Karpenter v1: expired, then drifted, then empty nodes, then underutilised
//! ones (several nodes into at most one replacement first, then one node at a time). Every
//! move of pods is decided by simulating with the same [`scheduler::schedule`] the
//! provisioner uses: the candidate's pods become pending pods, the candidate is removed
//! from the cluster, and the plan must place every pod:
//! - no new NodeClaim: the node is deleted (its pods fit elsewhere);
//! - one new NodeClaim (consolidation): it replaces the node(s) only if it is cheaper by
//!   at least [`Config::min_saving_fraction`] of their price, and its candidate types are
//!   cut to those that keep that saving whichever one EC2 picks. Spot→Spot replacement
//!   needs [`Config::spot_to_spot_min_candidates`] cheaper Spot types (Karpenter's rule,
//!   so that a replacement is not just the next offering to be interrupted);
//! - drift and expiry may need any number of new NodeClaims.
//!
//! Decisions made earlier in the pass are folded into the simulated cluster (removed
//! nodes, pods moved, replacements in flight), so one pass can make several independent
//! decisions without double-counting free capacity.
//!
//! Never voluntarily disrupted: nodes not yet initialised, already being deleted, with a
//! do-not-disrupt annotation (node or pod), whose pods' PDBs allow no disruption now, and
//! (for consolidation) nodes whose pods changed less than `consolidateAfter` ago or that
//! are younger than it. Budgets are checked per NodePool and reason.
//!
//! Per pool (each a field of [`PoolPolicy`]):
//! - `Balanced` ([`super::balanced`]): a move must save at least half as large a share of
//!   the pool's cost as the share of its disruption it causes;
//! - as Karpenter v1.14, a node under its `consolidateAfter` (pods arrived or left
//!   recently) is no destination for consolidated pods, and the nodes a move puts pods on
//!   start their `consolidateAfter` again, so moves do not chain within one window;
//! - Spot→Spot replacement only when the pool opts in (Karpenter's feature gate);
//! - a cap on consolidation's evictions per hour;
//! - headroom: a move must leave the pool's headroom placeable, and spare nodes are kept;
//! - static pools (`replicas`) are never consolidated.

use std::collections::{BTreeMap, BTreeSet};

use super::balanced;
use super::budgets::{Budgets, Reason};
use crate::catalog::{CapacityType, Catalog};
use crate::resources::Resources;
use crate::scheduler::headroom::{self, Headroom};
use crate::scheduler::{
    self, BoundPod, InFlightClaim, Input, MovablePod, NewNodeClaim, Pod, Target,
};

/// Tunables of the decision.
#[derive(Debug, Clone)]
pub struct Config {
    /// A consolidation replacement must save at least this fraction of the replaced
    /// nodes' price (default 5 %), so the agent never churns for pennies.
    pub min_saving_fraction: f64,
    /// Spot→Spot replacement needs at least this many cheaper Spot candidate types.
    pub spot_to_spot_min_candidates: usize,
    /// Multi-node consolidation looks at most at this many candidates (Karpenter: 100).
    pub max_multi_node_candidates: usize,
    /// Single-node consolidation simulates at most this many candidates per pass.
    pub max_single_node_candidates: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_saving_fraction: 0.05,
            spot_to_spot_min_candidates: 15,
            max_multi_node_candidates: 100,
            max_single_node_candidates: 1_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Karpenter v1.14: underutilised nodes too, when the move scores (see [`balanced`]).
    Balanced,
}

impl Policy {
    pub fn parse(s: &str) -> Result<Policy, String> {
        match s {
            "WhenEmpty" => Ok(Policy::WhenEmpty),
            "WhenEmptyOrUnderutilized" | "" => Ok(Policy::WhenEmptyOrUnderutilized),
            "Balanced" => Ok(Policy::Balanced),
            _ => Err(format!(
                "spec.disruption.consolidationPolicy: {s:?} is not WhenEmpty, WhenEmptyOrUnderutilized or Balanced"
            )),
        }
    }

    fn consolidates_underutilized(self) -> bool {
        self != Policy::WhenEmpty
    }
}

/// A NodePool's disruption settings.
#[derive(Debug, Clone, Default)]
pub struct PoolPolicy {
    pub name: String,
    pub policy: Policy,
    /// Seconds; None for `Never` (no consolidation at all).
    pub consolidate_after: Option<u64>,
    pub budgets: Budgets,
    /// Spot→Spot replacement, when the pool opts in (Karpenter's feature gate).
    pub spot_to_spot: bool,
    /// Most pods consolidation may evict in any hour; None: no cap.
    pub evictions_per_hour: Option<u32>,
    /// Pods consolidation evicted from this pool in the last hour (the loop keeps the tally).
    pub evictions_last_hour: u32,
    /// Static pool: never consolidated.
    pub replicas: Option<i64>,
    pub headroom: Vec<Headroom>,
}

impl PoolPolicy {
    pub fn from_api(name: &str, spec: &crate::api::NodePoolSpec) -> Result<PoolPolicy, String> {
        let d = &spec.disruption;
        Ok(PoolPolicy {
            name: name.to_string(),
            policy: Policy::parse(&d.consolidation_policy)?,
            consolidate_after: crate::api::duration::parse_or_never(&d.consolidate_after)
                .map_err(|e| format!("spec.disruption.consolidateAfter: {e}"))?,
            budgets: Budgets::from_api(&d.budgets)?,
            spot_to_spot: d.spot_to_spot_consolidation,
            evictions_per_hour: d.consolidation_evictions_per_hour,
            evictions_last_hour: 0,
            replicas: spec.replicas,
            headroom: headroom::parse(&spec.headroom)?,
        })
    }

    /// Whether a node of this pool whose pods last changed at `last_pod_change` is inside
    /// its `consolidateAfter` window at `now` (Karpenter's `IsUnderConsolidateAfter`: a
    /// pool with `0s` or `Never` has no window).
    fn cooling(&self, last_pod_change: i64, now: i64) -> bool {
        match self.consolidate_after {
            Some(after) if after > 0 => now < last_pod_change.saturating_add(after as i64),
            _ => false,
        }
    }
}

/// One of the agent's nodes, as the decision sees it.
#[derive(Debug, Clone, Default)]
pub struct Candidate {
    /// The node as the scheduler sees it: labels, taints, allocatable, every bound pod
    /// (DaemonSet pods included, for the capacity they use).
    pub node: scheduler::Node,
    /// The pods that would have to move (no DaemonSet, mirror or finished pods).
    pub pods: Vec<MovablePod>,
    pub nodeclaim: String,
    pub nodepool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: Option<CapacityType>,
    /// USD per hour of its offering.
    pub price: f64,
    /// Seconds since the epoch.
    pub created: i64,
    /// When a pod last arrived on or left the node (or `created`).
    pub last_pod_change: i64,
    pub initialized: bool,
    /// Being deleted or already chosen: counts against budgets, never chosen again.
    pub disrupting: bool,
    /// The node or one of its pods carries `karpenter.sh/do-not-disrupt` or
    /// `joiner.dev/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// A pod's PodDisruptionBudget allows no disruption now.
    pub pdb_blocked: bool,
    /// Seconds; None for `Never`.
    pub expire_after: Option<u64>,
    /// Why the claim drifted (see [`super::drift`]).
    pub drift: Option<String>,
    /// What evicting its pods costs for `Balanced`: the sum of `max(0, EvictionCost)` of
    /// its pods ([`balanced::eviction_cost`]). None: 1 per pod (no priority or deletion cost).
    pub eviction_cost: Option<f64>,
}

impl Candidate {
    fn pods_cost(&self) -> f64 {
        self.eviction_cost.unwrap_or(self.pods.len() as f64)
    }
}

/// Everything one pass looks at.
#[derive(Debug, Clone, Default)]
pub struct World {
    pub candidates: Vec<Candidate>,
    /// Nodes that are not the agent's (other node groups, Fargate): pods may move there,
    /// they are never disrupted.
    pub other_nodes: Vec<scheduler::Node>,
    /// NodeClaims launched but not registered yet.
    pub in_flight: Vec<InFlightClaim>,
    pub pools: Vec<PoolPolicy>,
    /// The scheduler's view of pools, classes, DaemonSets and unavailable offerings (its
    /// `pods` and `nodes` are ignored).
    pub sched: Input,
    /// Pods waiting for capacity: while any wait, consolidation pauses, so it never takes
    /// away a node kube-scheduler is about to use or fights the provisioner.
    pub pending_pods: usize,
    pub now: i64,
}

/// A node chosen for disruption.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: String,
    pub price: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub reason: Reason,
    pub nodes: Vec<Chosen>,
    /// New capacity to launch (and wait for) before the nodes are drained.
    pub replacements: Vec<NewNodeClaim>,
    /// USD per hour saved (negative for drift/expiry replacements that cost more).
    pub saving: f64,
    /// The explanation put in the Event.
    pub message: String,
}

/// Why a candidate was not disrupted this pass (for Events and metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocked {
    pub node: String,
    pub reason: Reason,
    pub why: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub decisions: Vec<Decision>,
    pub blocked: Vec<Blocked>,
}

/// The simulated cluster of this pass, updated as decisions are made.
struct Sim<'a> {
    catalog: &'a Catalog,
    input: Input,
    /// Each node's room (allocatable less its pods' requests), by index in `input.nodes`.
    free: Vec<Resources>,
    /// Some pod already placed has a required anti-affinity term: it can keep a pod out of
    /// nodes beside its own, so every trial needs every node (see [`Sim::with_room`]).
    placed_anti_affinity: bool,
    /// Index of each candidate's node in `input.nodes`, None once removed.
    node_index: BTreeMap<String, usize>,
    /// Per pool: nodes in total, nodes disrupting.
    counts: BTreeMap<String, (usize, usize)>,
    replacement_seq: usize,
    /// Nodes (by name) inside their pool's `consolidateAfter` window: no destination for a
    /// consolidation's pods. Nodes a move puts pods on join it.
    cooling: BTreeSet<String>,
    /// Each candidate node's pool.
    pool_of: BTreeMap<String, String>,
    /// Per pool: pods consolidation has evicted in the last hour, this pass's included.
    evictions: BTreeMap<String, u32>,
    /// Per pool: its headroom's placeholder pods in force now.
    placeholders: BTreeMap<String, Vec<Pod>>,
    /// Pools whose headroom does not fit on their current capacity: provisioning is
    /// restoring it, and consolidation waits rather than take more away.
    headroom_short: BTreeSet<String>,
}

enum Trial {
    Fits {
        plan: scheduler::Plan,
        /// The moved pods, then any headroom placeholders (never committed).
        pods: Vec<Pod>,
        real: usize,
    },
    Unplaceable(String),
}

impl<'a> Sim<'a> {
    fn new(catalog: &'a Catalog, world: &World) -> Sim<'a> {
        let mut input = world.sched.clone();
        input.pods.clear();
        // The candidate price bound cuts what a launch lists, not what consolidation may
        // consider: spot-to-spot's "enough cheaper Spot types" counts them all (the
        // replacement itself is planned by provisioning, bound and all).
        for p in &mut input.node_pools {
            p.candidate_price_ratio = scheduler::PriceRatio(scheduler::PriceRatio::MAX);
        }
        input.nodes = world.other_nodes.clone();
        input.in_flight = world.in_flight.clone();
        let pools: BTreeMap<&str, &PoolPolicy> =
            world.pools.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut node_index = BTreeMap::new();
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut cooling = BTreeSet::new();
        let mut pool_of = BTreeMap::new();
        for c in &world.candidates {
            let e = counts.entry(c.nodepool.clone()).or_default();
            e.0 += 1;
            pool_of.insert(c.node.name.clone(), c.nodepool.clone());
            if c.disrupting {
                e.1 += 1;
                // A node on its way out takes no pods in the simulation.
                let mut n = c.node.clone();
                n.unschedulable = true;
                input.nodes.push(n);
            } else {
                if c.initialized
                    && pools
                        .get(c.nodepool.as_str())
                        .is_some_and(|p| p.cooling(c.last_pod_change, world.now))
                {
                    cooling.insert(c.node.name.clone());
                }
                node_index.insert(c.node.name.clone(), input.nodes.len());
                input.nodes.push(c.node.clone());
            }
        }
        let evictions = world
            .pools
            .iter()
            .map(|p| (p.name.clone(), p.evictions_last_hour))
            .collect();
        let free = input.nodes.iter().map(room).collect();
        let placed_anti_affinity = input
            .nodes
            .iter()
            .flat_map(|n| &n.pods)
            .chain(input.in_flight.iter().flat_map(|c| &c.pods))
            .any(|p| !p.anti_affinity().is_empty());
        let mut sim = Sim {
            catalog,
            input,
            free,
            placed_anti_affinity,
            node_index,
            counts,
            replacement_seq: 0,
            cooling,
            pool_of,
            evictions,
            placeholders: BTreeMap::new(),
            headroom_short: BTreeSet::new(),
        };
        for p in &world.pools {
            let taints = sim
                .input
                .node_pools
                .iter()
                .find(|np| np.name == p.name)
                .map(|np| np.taints.clone())
                .unwrap_or_default();
            let pods = headroom::placeholders(&p.name, &taints, &p.headroom, world.now);
            if pods.is_empty() {
                continue;
            }
            // Does the headroom fit on what exists (and is coming) now?
            sim.input.pods = pods.clone();
            let plan = scheduler::schedule(catalog, &sim.input);
            sim.input.pods.clear();
            if !plan.new_claims.is_empty() || !plan.unschedulable.is_empty() {
                sim.headroom_short.insert(p.name.clone());
            }
            sim.placeholders.insert(p.name.clone(), pods);
        }
        sim
    }

    fn allowed(&self, pool: &PoolPolicy, reason: Reason, now: i64) -> usize {
        let (total, disrupting) = self.counts.get(&pool.name).copied().unwrap_or_default();
        pool.budgets.allowed(reason, total, disrupting, now)
    }

    /// Why moving `pods` more pods out of `pool` would break its eviction cap, if it would.
    fn over_eviction_cap(&self, pool: &PoolPolicy, pods: usize) -> Option<String> {
        let cap = pool.evictions_per_hour?;
        let used = self.evictions.get(&pool.name).copied().unwrap_or(0);
        (used as usize + pods > cap as usize).then(|| {
            format!(
                "the NodePool's cap of {cap} consolidation evictions per hour would be exceeded \
                 ({used} in the last hour, {pods} more needed)"
            )
        })
    }

    /// Simulates removing `nodes` and rescheduling their pods. A consolidation trial puts
    /// nothing on nodes inside their `consolidateAfter`, and must keep the headroom of the
    /// nodes' pools placeable.
    fn trial(&mut self, nodes: &[&Candidate], consolidating: bool) -> Trial {
        // Planned as provisioning will plan them once the node goes: back into its domains
        // where they can (see `scheduler::schedule`).
        self.input.pods = nodes
            .iter()
            .flat_map(|c| {
                c.pods.iter().map(|p| {
                    let mut p = p.to_pod();
                    p.set_home(&c.node.labels);
                    p
                })
            })
            .collect();
        let real = self.input.pods.len();
        if consolidating {
            let pools: BTreeSet<&str> = nodes.iter().map(|c| c.nodepool.as_str()).collect();
            for p in pools {
                if let Some(ph) = self.placeholders.get(p) {
                    self.input.pods.extend(ph.iter().cloned());
                }
            }
        }
        let plan = match self.with_room(nodes, consolidating) {
            Some(kept) => {
                let all = std::mem::replace(&mut self.input.nodes, kept);
                let plan = scheduler::schedule(self.catalog, &self.input);
                self.input.nodes = all;
                plan
            }
            None => self.schedule_without(nodes, consolidating),
        };
        let pods = std::mem::take(&mut self.input.pods);
        if let Some(u) = plan.unschedulable.first() {
            if u.pod >= real {
                return Trial::Unplaceable(
                    "its NodePool's headroom would no longer fit anywhere".to_string(),
                );
            }
            let why = u.reasons.first().cloned().unwrap_or_default();
            return Trial::Unplaceable(format!(
                "pod {} would not fit anywhere: {why}",
                pods[u.pod].key()
            ));
        }
        Trial::Fits { plan, pods, real }
    }

    /// The nodes a trial's pods could be put on, when they are all the trial needs: pods with
    /// no spread and no pod (anti-)affinity, in a cluster where no placed pod has a required
    /// anti-affinity, land only on a schedulable node with room for at least the smallest
    /// of them, and nothing else about the other nodes changes where they go. None when
    /// that does not hold, or when most of a large cluster's nodes have room anyway (copying
    /// them would cost more than it saves). A trial per candidate over every node was
    /// quadratic in the cluster's size: 3 s a pass at 1,000 full nodes.
    fn with_room(&self, nodes: &[&Candidate], consolidating: bool) -> Option<Vec<scheduler::Node>> {
        if self.placed_anti_affinity || self.input.pods.iter().any(inter_pod) {
            return None;
        }
        let least = smallest(&self.input.pods)?;
        let leaving: BTreeSet<usize> = nodes
            .iter()
            .filter_map(|c| self.node_index.get(&c.node.name).copied())
            .collect();
        let mut kept = Vec::new();
        for (i, n) in self.input.nodes.iter().enumerate() {
            // Cheapest test first: in a full cluster almost every node stops at the room.
            if n.unschedulable || !least.fits_in(&self.free[i]) || leaving.contains(&i) {
                continue;
            }
            if consolidating && self.cooling.contains(&n.name) {
                continue;
            }
            kept.push(i);
            if self.input.nodes.len() > 64 && kept.len() * 2 > self.input.nodes.len() {
                return None;
            }
        }
        Some(
            kept.into_iter()
                .map(|i| self.input.nodes[i].clone())
                .collect(),
        )
    }

    /// Schedules the trial's pods on every node but `nodes`; a consolidation puts nothing on
    /// nodes inside their `consolidateAfter`.
    fn schedule_without(&mut self, nodes: &[&Candidate], consolidating: bool) -> scheduler::Plan {
        let mut removed = Vec::new();
        for c in nodes {
            if let Some(&i) = self.node_index.get(&c.node.name) {
                removed.push(i);
            }
        }
        removed.sort_unstable();
        let mut cooled = Vec::new();
        if consolidating {
            for n in self.input.nodes.iter_mut() {
                if !n.unschedulable && self.cooling.contains(&n.name) {
                    n.unschedulable = true;
                    cooled.push(n.name.clone());
                }
            }
        }
        // Take the nodes out (highest index first, so the others stay valid) and put them back.
        let mut taken = Vec::new();
        for &i in removed.iter().rev() {
            taken.push((i, self.input.nodes.remove(i)));
        }
        let plan = scheduler::schedule(self.catalog, &self.input);
        for (i, n) in taken.into_iter().rev() {
            self.input.nodes.insert(i, n);
        }
        for n in self.input.nodes.iter_mut() {
            if cooled.contains(&n.name) {
                n.unschedulable = false;
            }
        }
        plan
    }

    /// Folds a decision into the simulated cluster.
    fn commit(
        &mut self,
        nodes: &[&Candidate],
        moved: Moved<'_>,
        replacements: &[NewNodeClaim],
        now: i64,
        pools: &BTreeMap<&str, &PoolPolicy>,
    ) {
        let Moved { plan, pods, real } = moved;
        for c in nodes {
            if let Some(i) = self.node_index.remove(&c.node.name) {
                self.input.nodes[i].unschedulable = true;
                self.input.nodes[i].pods.clear();
            }
            if let Some(e) = self.counts.get_mut(&c.nodepool) {
                e.1 += 1;
            }
        }
        for p in plan.placements.iter().filter(|p| p.pod < real) {
            let bound = BoundPod::from_pod(&pods[p.pod]);
            self.placed_anti_affinity |= !bound.anti_affinity().is_empty();
            match &p.target {
                Target::Node(name) => {
                    if let Some(i) = self.input.nodes.iter().position(|n| &n.name == name) {
                        self.free[i].sub(&bound.requests);
                        self.input.nodes[i].pods.push(bound);
                    }
                    // The destination's pods changed: its consolidateAfter starts again.
                    let cools = self
                        .pool_of
                        .get(name)
                        .and_then(|pool| pools.get(pool.as_str()))
                        .is_some_and(|pool| pool.cooling(now, now));
                    if cools {
                        self.cooling.insert(name.clone());
                    }
                }
                Target::InFlight(name) => {
                    if let Some(c) = self.input.in_flight.iter_mut().find(|c| &c.name == name) {
                        c.pods.push(bound);
                    }
                }
            }
        }
        for r in replacements {
            self.replacement_seq += 1;
            let pool_taints = self
                .input
                .node_pools
                .iter()
                .find(|p| p.name == r.nodepool)
                .map(|p| p.taints.clone())
                .unwrap_or_default();
            let mut claim = InFlightClaim::planned(
                self.catalog,
                r,
                &format!("replacement-{}", self.replacement_seq),
                pool_taints,
            );
            claim.pods = r
                .pods
                .iter()
                .filter(|&&i| i < real)
                .map(|&i| BoundPod::from_pod(&pods[i]))
                .collect();
            self.placed_anti_affinity |= claim.pods.iter().any(|p| !p.anti_affinity().is_empty());
            self.input.in_flight.push(claim);
        }
    }

    /// Counts a consolidation's evictions against its pools' caps.
    fn count_evictions(&mut self, nodes: &[&Candidate]) {
        for c in nodes {
            *self.evictions.entry(c.nodepool.clone()).or_default() += c.pods.len() as u32;
        }
    }
}

/// A node's room: its allocatable less its pods' requests, as the scheduler counts it.
fn room(n: &scheduler::Node) -> Resources {
    let mut free = n.allocatable.clone();
    for p in &n.pods {
        free.sub(&p.requests);
    }
    free
}

/// Whether where a pod may go depends on other pods' places.
fn inter_pod(p: &Pod) -> bool {
    !p.topology_spread.is_empty()
        || !p.pod_affinity.is_empty()
        || !p.pod_anti_affinity.is_empty()
        || !p.preferred_pod_affinity.is_empty()
        || !p.preferred_pod_anti_affinity.is_empty()
}

/// The least of each resource the pods ask for (extended resources left out): every pod
/// asks at least this, so a node without room for it has room for none of them.
fn smallest(pods: &[Pod]) -> Option<Resources> {
    let mut it = pods.iter().map(|p| &p.requests);
    let mut least = it.next()?.clone();
    least.extended.clear();
    for r in it {
        least.cpu_milli = least.cpu_milli.min(r.cpu_milli);
        least.memory_bytes = least.memory_bytes.min(r.memory_bytes);
        least.pods = least.pods.min(r.pods);
        least.ephemeral_storage_bytes =
            least.ephemeral_storage_bytes.min(r.ephemeral_storage_bytes);
    }
    Some(least)
}

fn chosen(c: &Candidate) -> Chosen {
    Chosen {
        node: c.node.name.clone(),
        nodeclaim: c.nodeclaim.clone(),
        nodepool: c.nodepool.clone(),
        price: c.price,
    }
}

fn dollars(x: f64) -> String {
    format!("${x:.4}/h")
}

/// Why a node may not be voluntarily disrupted at all, or None.
fn voluntary_block(c: &Candidate) -> Option<&'static str> {
    if c.disrupting {
        Some("already being disrupted")
    } else if !c.initialized {
        Some("still initialising")
    } else if c.do_not_disrupt {
        Some("a do-not-disrupt annotation is set on the node or one of its pods")
    } else if c.pdb_blocked {
        Some("a PodDisruptionBudget of its pods allows no disruption now")
    } else {
        None
    }
}

/// Plans one disruption pass: each method in Karpenter's order, every decision folded into
/// the simulated cluster the next method sees.
pub fn decide(catalog: &Catalog, world: &World, config: &Config) -> Outcome {
    let mut pass = Pass::new(catalog, world, config);
    pass.replace_due(Reason::Expired);
    pass.replace_due(Reason::Drifted);
    pass.emptiness();
    let under = pass.underutilized();
    if world.pending_pods == 0 && !under.is_empty() {
        pass.multi_node_consolidation(&under);
        pass.single_node_consolidation(&under);
    }
    pass.out
}

/// One pass: the simulated cluster, the nodes its decisions already take, and what it says.
struct Pass<'a> {
    world: &'a World,
    config: &'a Config,
    pools: BTreeMap<&'a str, &'a PoolPolicy>,
    /// What `Balanced` takes fractions of, per pool.
    totals: BTreeMap<String, balanced::Totals>,
    sim: Sim<'a>,
    taken: BTreeSet<String>,
    out: Outcome,
    now: i64,
}

impl<'a> Pass<'a> {
    fn new(catalog: &'a Catalog, world: &'a World, config: &'a Config) -> Pass<'a> {
        Pass {
            world,
            config,
            pools: world.pools.iter().map(|p| (p.name.as_str(), p)).collect(),
            totals: pool_totals(world),
            sim: Sim::new(catalog, world),
            taken: BTreeSet::new(),
            out: Outcome::default(),
            now: world.now,
        }
    }

    fn block(&mut self, c: &Candidate, reason: Reason, why: &str) {
        self.out.blocked.push(blocked(c, reason, why));
    }

    /// Expiration or drift: each due node, oldest first, replaced with whatever capacity its
    /// pods need.
    fn replace_due(&mut self, reason: Reason) {
        let (world, now) = (self.world, self.now);
        let mut due: Vec<&Candidate> = world
            .candidates
            .iter()
            .filter(|c| match reason {
                Reason::Expired => c
                    .expire_after
                    .is_some_and(|e| now >= c.created.saturating_add(e as i64)),
                _ => c.drift.is_some(),
            })
            .filter(|c| !self.taken.contains(&c.node.name))
            .collect();
        due.sort_by_key(|c| (c.created, c.node.name.clone()));
        for c in due {
            if let Some(why) = voluntary_block(c) {
                if !c.disrupting {
                    self.block(c, reason, why);
                }
                continue;
            }
            let Some(pool) = self.pools.get(c.nodepool.as_str()).copied() else {
                continue;
            };
            if self.sim.allowed(pool, reason, now) == 0 {
                self.block(c, reason, "the NodePool's disruption budget is used up");
                continue;
            }
            match self.sim.trial(&[c], false) {
                Trial::Unplaceable(why) => self.out.blocked.push(Blocked {
                    node: c.node.name.clone(),
                    reason,
                    why,
                }),
                Trial::Fits { plan, pods, real } => {
                    let decision = replacement(c, reason, &plan, pods.len(), now);
                    let moved = Moved::of(&plan, &pods, real);
                    let new = &decision.replacements;
                    self.sim.commit(&[c], moved, new, now, &self.pools);
                    self.taken.insert(c.node.name.clone());
                    self.out.decisions.push(decision);
                }
            }
        }
    }

    /// Whether consolidation may consider `c` now: its pool consolidates and the node has
    /// been quiet long enough. Ok(None): the pool is static, whose nodes consolidation never
    /// considers.
    fn consolidatable(&self, c: &Candidate) -> Result<Option<&'a PoolPolicy>, &'static str> {
        let now = self.now;
        let pool = self
            .pools
            .get(c.nodepool.as_str())
            .copied()
            .ok_or("its NodePool is gone")?;
        if pool.replicas.is_some() {
            return Ok(None);
        }
        let after = pool
            .consolidate_after
            .ok_or("its NodePool's consolidateAfter is Never")?;
        if now < c.created.saturating_add(after as i64) {
            return Err("younger than its NodePool's consolidateAfter");
        }
        if now < c.last_pod_change.saturating_add(after as i64) {
            return Err("its pods changed less than consolidateAfter ago");
        }
        if self.sim.headroom_short.contains(&pool.name) {
            return Err("its NodePool's headroom is being restored");
        }
        Ok(Some(pool))
    }

    /// Emptiness: empty nodes deleted, most expensive first and as many as budgets allow,
    /// keeping the pools' spare nodes and room for their headroom; one decision per pool.
    fn emptiness(&mut self) {
        let (world, now) = (self.world, self.now);
        let mut empties: Vec<&Candidate> = world
            .candidates
            .iter()
            .filter(|c| c.pods.is_empty() && !self.taken.contains(&c.node.name))
            .collect();
        empties.sort_by(|a, b| {
            b.price
                .total_cmp(&a.price)
                .then(a.node.name.cmp(&b.node.name))
        });
        // Per pool: empty nodes that may go before its spare nodes are touched.
        let mut spare_room: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &world.pools {
            let spare = headroom::spare_nodes(&p.headroom, now) as usize;
            let empty = empties
                .iter()
                .filter(|c| c.nodepool == p.name && !c.disrupting)
                .count();
            spare_room.insert(p.name.as_str(), empty.saturating_sub(spare));
        }
        let mut per_pool: BTreeMap<String, Vec<&Candidate>> = BTreeMap::new();
        for c in empties {
            let pool = match self.may_delete_empty(c) {
                Ok(Some(pool)) => pool,
                Ok(None) => continue,
                Err(why) => {
                    self.block(c, Reason::Empty, why);
                    continue;
                }
            };
            let room = spare_room.entry(pool.name.as_str()).or_default();
            if *room == 0 {
                let why = "kept as one of its NodePool's spare nodes (headroom)";
                self.block(c, Reason::Empty, why);
                continue;
            }
            if self.sim.placeholders.contains_key(&pool.name) {
                // The headroom may be counting on this node's room.
                match self.sim.trial(&[c], true) {
                    Trial::Fits { plan, .. } if plan.new_claims.is_empty() => {}
                    _ => {
                        let why = "its room is its NodePool's headroom";
                        self.block(c, Reason::Empty, why);
                        continue;
                    }
                }
            }
            *room -= 1;
            let none = scheduler::Plan::default();
            self.sim
                .commit(&[c], Moved::of(&none, &[], 0), &[], now, &self.pools);
            self.taken.insert(c.node.name.clone());
            per_pool.entry(c.nodepool.clone()).or_default().push(c);
        }
        for (pool, nodes) in per_pool {
            self.out.decisions.push(emptied(&pool, &nodes));
        }
    }

    /// Whether the empty node `c` may go now as far as its pool and budget say: its pool;
    /// Ok(None) to pass over it silently; Err with why it stays.
    fn may_delete_empty(&self, c: &Candidate) -> Result<Option<&'a PoolPolicy>, &'static str> {
        if let Some(why) = voluntary_block(c) {
            return if c.disrupting { Ok(None) } else { Err(why) };
        }
        let Some(pool) = self.consolidatable(c)? else {
            return Ok(None);
        };
        if self.world.pending_pods > 0 {
            // A node that looks empty may be where kube-scheduler is about to put them.
            return Err("pods are waiting for capacity");
        }
        if self.sim.allowed(pool, Reason::Empty, self.now) == 0 {
            return Err("the NodePool's disruption budget is used up");
        }
        Ok(Some(pool))
    }

    /// The underutilised nodes consolidation may consider, cheapest to disrupt first: fewest
    /// pods, then the most expensive node (biggest saving).
    fn underutilized(&mut self) -> Vec<&'a Candidate> {
        let world = self.world;
        let mut under: Vec<&Candidate> = Vec::new();
        for c in &world.candidates {
            if self.taken.contains(&c.node.name) || c.pods.is_empty() {
                continue;
            }
            if let Some(why) = voluntary_block(c) {
                if !c.disrupting {
                    self.block(c, Reason::Underutilized, why);
                }
                continue;
            }
            match self.consolidatable(c) {
                Ok(Some(pool)) if pool.policy == Policy::Balanced => {
                    // The best a node can score is its delete (no replacement): when even
                    // that fails, no move of it will pass (Karpenter's candidate filter).
                    let t = self.totals.get(&pool.name).copied().unwrap_or_default();
                    let best = balanced::score(
                        c.price,
                        balanced::PER_NODE_COST + balanced::pods_cost([c.pods_cost()]),
                        t,
                    );
                    if best.approved() {
                        under.push(c);
                    } else {
                        let why = format!(
                            "Balanced: even deleting it would not pay: {}",
                            best.describe()
                        );
                        self.block(c, Reason::Underutilized, &why);
                    }
                }
                Ok(Some(pool)) if pool.policy.consolidates_underutilized() => under.push(c),
                Ok(_) => {}
                Err(why) => self.block(c, Reason::Underutilized, why),
            }
        }
        under.sort_by(|a, b| {
            a.pods
                .len()
                .cmp(&b.pods.len())
                .then(b.price.total_cmp(&a.price))
                .then(a.node.name.cmp(&b.node.name))
        });
        under
    }

    /// Why `nodes` may not all go now: a budget or an eviction cap.
    fn within_budget(&self, nodes: &[&Candidate]) -> Result<(), String> {
        let mut per_pool: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for c in nodes {
            let e = per_pool.entry(c.nodepool.as_str()).or_default();
            e.0 += 1;
            e.1 += c.pods.len();
        }
        for (p, (n, pods)) in per_pool {
            let Some(pool) = self.pools.get(p) else {
                return Err("its NodePool is gone".into());
            };
            if self.sim.allowed(pool, Reason::Underutilized, self.now) < n {
                return Err("the NodePool's disruption budget is used up".into());
            }
            if let Some(why) = self.sim.over_eviction_cap(pool, pods) {
                return Err(why);
            }
        }
        Ok(())
    }

    /// Tries to consolidate `set` (see [`Judge::consolidation`]).
    fn judge(&mut self, set: &[&Candidate]) -> Result<Move, Option<String>> {
        let judge = Judge {
            config: self.config,
            pools: &self.pools,
            totals: &self.totals,
        };
        judge.consolidation(&mut self.sim, set)
    }

    /// Makes a consolidation the judge found worth making.
    fn consolidate(&mut self, set: &[&Candidate], (d, plan, pods, real): Move) {
        let moved = Moved::of(&plan, &pods, real);
        self.sim
            .commit(set, moved, &d.replacements, self.now, &self.pools);
        self.sim.count_evictions(set);
        for c in set {
            self.taken.insert(c.node.name.clone());
        }
        self.out.decisions.push(d);
    }

    /// Multi-node consolidation: the longest prefix of `under` (binary search, as Karpenter)
    /// that consolidates into at most one new node within budgets.
    fn multi_node_consolidation(&mut self, under: &[&'a Candidate]) {
        let prefix: Vec<&Candidate> = under
            .iter()
            .copied()
            .take(self.config.max_multi_node_candidates)
            .collect();
        if prefix.len() < 2 {
            return;
        }
        let (mut lo, mut hi) = (2usize, prefix.len());
        let mut best: Option<(usize, Move)> = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let set = &prefix[..mid];
            let found = if self.within_budget(set).is_ok() {
                self.judge(set).ok()
            } else {
                None
            };
            match found {
                Some(m) => {
                    best = Some((mid, m));
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        if let Some((n, m)) = best {
            self.consolidate(&prefix[..n], m);
        }
    }

    /// Single-node consolidation, for the nodes multi-node consolidation left.
    fn single_node_consolidation(&mut self, under: &[&'a Candidate]) {
        for &c in under.iter().take(self.config.max_single_node_candidates) {
            if self.taken.contains(&c.node.name) {
                continue;
            }
            if let Err(why) = self.within_budget(&[c]) {
                self.block(c, Reason::Underutilized, &why);
                continue;
            }
            match self.judge(&[c]) {
                Ok(m) => self.consolidate(&[c], m),
                Err(Some(why)) => self.block(c, Reason::Underutilized, &why),
                Err(None) => {}
            }
        }
    }
}

/// The decision replacing an expired or drifted node by the trial's `plan`.
fn replacement(
    c: &Candidate,
    reason: Reason,
    plan: &scheduler::Plan,
    pods: usize,
    now: i64,
) -> Decision {
    let replacements = plan.new_claims.clone();
    let new_price: f64 = replacements
        .iter()
        .filter_map(|r| r.instance_types.first().map(|t| t.price))
        .sum();
    let what = match reason {
        Reason::Expired => format!(
            "expired ({}s after launch, expireAfter {}s)",
            now - c.created,
            c.expire_after.unwrap_or_default()
        ),
        _ => format!("drifted: {}", c.drift.as_deref().unwrap_or_default()),
    };
    let message = if replacements.is_empty() {
        format!("{} {what}; its {pods} pods fit on other nodes", c.node.name)
    } else {
        format!(
            "{} {what}; replaced by {} new node(s) for its {pods} pods",
            c.node.name,
            replacements.len(),
        )
    };
    Decision {
        reason,
        nodes: vec![chosen(c)],
        replacements,
        saving: c.price - new_price,
        message,
    }
}

/// The decision deleting a pool's empty `nodes`.
fn emptied(pool: &str, nodes: &[&Candidate]) -> Decision {
    let saving: f64 = nodes.iter().map(|c| c.price).sum();
    Decision {
        reason: Reason::Empty,
        nodes: nodes.iter().map(|c| chosen(c)).collect(),
        replacements: vec![],
        saving,
        message: format!(
            "{} empty node(s) of NodePool {pool} removed ({}), saving {}",
            nodes.len(),
            nodes
                .iter()
                .map(|c| c.node.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            dollars(saving)
        ),
    }
}

/// Per pool, what `Balanced` takes fractions of: every node's price and disruption cost,
/// candidates or not (Karpenter: non-candidates still count in the denominators).
fn pool_totals(world: &World) -> BTreeMap<String, balanced::Totals> {
    let mut out: BTreeMap<String, balanced::Totals> = BTreeMap::new();
    for c in &world.candidates {
        out.entry(c.nodepool.clone())
            .or_default()
            .add_node(c.price, balanced::pods_cost([c.pods_cost()]));
    }
    out
}

fn blocked(c: &Candidate, reason: Reason, why: &str) -> Blocked {
    Blocked {
        node: c.node.name.clone(),
        reason,
        why: why.to_string(),
    }
}

/// What a consolidation is judged by.
struct Judge<'a> {
    config: &'a Config,
    pools: &'a BTreeMap<&'a str, &'a PoolPolicy>,
    totals: &'a BTreeMap<String, balanced::Totals>,
}

/// A consolidation found worth making: the decision, the trial's plan, its pods, and how
/// many of those are real (the rest are headroom placeholders).
type Move = (Decision, scheduler::Plan, Vec<Pod>, usize);

impl Judge<'_> {
    /// Tries to consolidate `set` (delete, or replace with one cheaper node). `Err(Some)`
    /// says why a move that fits is not made, for the blocked list; `Err(None)`: no move.
    fn consolidation(&self, sim: &mut Sim, set: &[&Candidate]) -> Result<Move, Option<String>> {
        let Trial::Fits {
            mut plan,
            pods,
            real,
        } = sim.trial(set, true)
        else {
            return Err(None);
        };
        let price: f64 = set.iter().map(|c| c.price).sum();
        let names = set
            .iter()
            .map(|c| c.node.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let (replacements, new_price, mut message) = match plan.new_claims.len() {
            0 => (
                vec![],
                0.0,
                format!(
                    "underutilised {names}: its {real} pods fit on other nodes, saving {}",
                    dollars(price)
                ),
            ),
            1 => {
                let claim = &mut plan.new_claims[0];
                self.narrow_replacement(set, price, claim)?;
                let new_price = claim.instance_types[0].price;
                let saving = price - new_price;
                let message = format!(
                    "underutilised {names} ({}) replaced by one {} node ({} from {}), saving {} ({:.0}%)",
                    dollars(price),
                    claim.instance_types[0].capacity_type.as_str(),
                    claim.instance_types[0].instance_type,
                    dollars(new_price),
                    dollars(saving),
                    100.0 * saving / price
                );
                (vec![claim.clone()], new_price, message)
            }
            _ => return Err(None),
        };
        let saving = price - new_price;
        self.balanced_approval(set, price, saving, &mut message)?;
        let d = Decision {
            reason: Reason::Underutilized,
            nodes: set.iter().map(|c| chosen(c)).collect(),
            replacements,
            saving,
            message,
        };
        Ok((d, plan, pods, real))
    }

    /// Leaves the replacement only the instance types worth moving to: cheaper than the
    /// set by the minimum saving, cheaper than the set's own types when it replaces several
    /// nodes, and Spot under the spot-to-spot rules. `Err(None)` when none is left.
    fn narrow_replacement(
        &self,
        set: &[&Candidate],
        price: f64,
        claim: &mut NewNodeClaim,
    ) -> Result<(), Option<String>> {
        let max_price = price * (1.0 - self.config.min_saving_fraction);
        let all_spot = set
            .iter()
            .all(|c| c.capacity_type == Some(CapacityType::Spot));
        claim
            .instance_types
            .retain(|t| t.price <= max_price && t.price < price);
        if set.len() > 1 {
            // Replacing several nodes with one of their own types must beat the
            // cheapest of those, else deleting fewer nodes disrupts fewer pods for the
            // same saving (Karpenter's same-instance-type filter).
            let same = set
                .iter()
                .filter(|c| {
                    claim
                        .instance_types
                        .iter()
                        .any(|t| t.instance_type == c.instance_type)
                })
                .map(|c| c.price)
                .min_by(f64::total_cmp);
            if let Some(cap) = same {
                claim.instance_types.retain(|t| t.price < cap);
            }
        }
        if all_spot && claim.capacity_types.contains(&CapacityType::Spot) {
            self.spot_to_spot(set, claim)?;
        }
        if claim.instance_types.is_empty() {
            return Err(None);
        }
        Ok(())
    }

    /// Spot to Spot, as Karpenter: only when opted in, and for one node only with enough
    /// cheaper Spot types, launching from the cheapest of them, so that the replacement is
    /// not just the next offering to be interrupted and the next pass has nothing cheaper
    /// to move to.
    fn spot_to_spot(
        &self,
        set: &[&Candidate],
        claim: &mut NewNodeClaim,
    ) -> Result<(), Option<String>> {
        let config = self.config;
        let off: Vec<&str> = set
            .iter()
            .filter(|c| {
                !self
                    .pools
                    .get(c.nodepool.as_str())
                    .is_some_and(|p| p.spot_to_spot)
            })
            .map(|c| c.nodepool.as_str())
            .collect();
        if let Some(pool) = off.first() {
            return Err((set.len() == 1).then(|| {
                format!(
                    "spot-to-spot consolidation is off for NodePool {pool} \
                     (disruption.spotToSpotConsolidation)"
                )
            }));
        }
        claim
            .instance_types
            .retain(|t| t.capacity_type == CapacityType::Spot);
        claim.capacity_types.retain(|c| *c == CapacityType::Spot);
        if set.len() == 1 {
            let n = claim.instance_types.len();
            if n < config.spot_to_spot_min_candidates {
                return Err(Some(format!(
                    "spot-to-spot consolidation needs {} cheaper Spot types, {n} found",
                    config.spot_to_spot_min_candidates
                )));
            }
            let min_values = claim
                .requirements
                .iter()
                .any(|(_, r)| r.min_values.is_some());
            if !min_values {
                claim
                    .instance_types
                    .truncate(config.spot_to_spot_min_candidates);
            }
        }
        Ok(())
    }

    /// Balanced: each Balanced pool among the sources approves its share of the saving
    /// (its score is added to the message), or the move is not made.
    fn balanced_approval(
        &self,
        set: &[&Candidate],
        price: f64,
        saving: f64,
        message: &mut String,
    ) -> Result<(), Option<String>> {
        let mut by_pool: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for c in set {
            let e = by_pool.entry(c.nodepool.as_str()).or_default();
            e.0 += c.price;
            e.1 += balanced::PER_NODE_COST + balanced::pods_cost([c.pods_cost()]);
        }
        for (pool, (source, disruption)) in by_pool {
            if self.pools.get(pool).map(|p| p.policy) != Some(Policy::Balanced) {
                continue;
            }
            let share = if price > 0.0 {
                saving * source / price
            } else {
                0.0
            };
            let t = self.totals.get(pool).copied().unwrap_or_default();
            let score = balanced::score(share, disruption, t);
            if !score.approved() {
                return Err((set.len() == 1).then(|| format!("Balanced: {}", score.describe())));
            }
            message.push_str(&format!("; Balanced {}", score.describe()));
        }
        Ok(())
    }
}

/// Where a decision's pods went: the simulation's plan for them, the pods planned (the real
/// ones first, `real` of them, then headroom placeholders).
#[derive(Clone, Copy)]
struct Moved<'a> {
    plan: &'a scheduler::Plan,
    pods: &'a [Pod],
    real: usize,
}

impl<'a> Moved<'a> {
    fn of(plan: &'a scheduler::Plan, pods: &'a [Pod], real: usize) -> Self {
        Moved { plan, pods, real }
    }
}
