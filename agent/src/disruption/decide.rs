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

use std::collections::BTreeMap;

use super::budgets::{Budgets, Reason};
use crate::catalog::{CapacityType, Catalog};
use crate::scheduler::{self, BoundPod, InFlightClaim, Input, NewNodeClaim, Pod, Target};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    WhenEmpty,
    WhenEmptyOrUnderutilized,
}

impl Policy {
    pub fn parse(s: &str) -> Result<Policy, String> {
        match s {
            "WhenEmpty" => Ok(Policy::WhenEmpty),
            "WhenEmptyOrUnderutilized" | "" => Ok(Policy::WhenEmptyOrUnderutilized),
            _ => Err(format!(
                "spec.disruption.consolidationPolicy: {s:?} is not WhenEmpty or WhenEmptyOrUnderutilized"
            )),
        }
    }
}

/// A NodePool's disruption settings.
#[derive(Debug, Clone)]
pub struct PoolPolicy {
    pub name: String,
    pub policy: Policy,
    /// Seconds; None for `Never` (no consolidation at all).
    pub consolidate_after: Option<u64>,
    pub budgets: Budgets,
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
        })
    }
}

/// One of the agent's nodes, as the decision sees it.
#[derive(Debug, Clone, Default)]
pub struct Candidate {
    /// The node as the scheduler sees it: labels, taints, allocatable, every bound pod
    /// (DaemonSet pods included, for the capacity they use).
    pub node: scheduler::Node,
    /// The pods that would have to move (no DaemonSet, mirror or finished pods).
    pub pods: Vec<Pod>,
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
    /// Index of each candidate's node in `input.nodes`, None once removed.
    node_index: BTreeMap<String, usize>,
    /// Per pool: nodes in total, nodes disrupting.
    counts: BTreeMap<String, (usize, usize)>,
    replacement_seq: usize,
}

enum Trial {
    Fits {
        plan: scheduler::Plan,
        pods: Vec<Pod>,
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
        let mut node_index = BTreeMap::new();
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for c in &world.candidates {
            let e = counts.entry(c.nodepool.clone()).or_default();
            e.0 += 1;
            if c.disrupting {
                e.1 += 1;
                // A node on its way out takes no pods in the simulation.
                let mut n = c.node.clone();
                n.unschedulable = true;
                input.nodes.push(n);
            } else {
                node_index.insert(c.node.name.clone(), input.nodes.len());
                input.nodes.push(c.node.clone());
            }
        }
        Sim {
            catalog,
            input,
            node_index,
            counts,
            replacement_seq: 0,
        }
    }

    fn allowed(&self, pool: &PoolPolicy, reason: Reason, now: i64) -> usize {
        let (total, disrupting) = self.counts.get(&pool.name).copied().unwrap_or_default();
        pool.budgets.allowed(reason, total, disrupting, now)
    }

    /// Simulates removing `nodes` and rescheduling their pods.
    fn trial(&mut self, nodes: &[&Candidate]) -> Trial {
        let mut removed = Vec::new();
        for c in nodes {
            if let Some(&i) = self.node_index.get(&c.node.name) {
                removed.push(i);
            }
        }
        removed.sort_unstable();
        // Take the nodes out (highest index first, so the others stay valid) and put them back.
        let mut taken = Vec::new();
        for &i in removed.iter().rev() {
            taken.push((i, self.input.nodes.remove(i)));
        }
        self.input.pods = nodes.iter().flat_map(|c| c.pods.iter().cloned()).collect();
        let plan = scheduler::schedule(self.catalog, &self.input);
        let pods = std::mem::take(&mut self.input.pods);
        for (i, n) in taken.into_iter().rev() {
            self.input.nodes.insert(i, n);
        }
        if let Some(u) = plan.unschedulable.first() {
            let why = u.reasons.first().cloned().unwrap_or_default();
            return Trial::Unplaceable(format!(
                "pod {} would not fit anywhere: {why}",
                pods[u.pod].key()
            ));
        }
        Trial::Fits { plan, pods }
    }

    /// Folds a decision into the simulated cluster.
    fn commit(
        &mut self,
        nodes: &[&Candidate],
        plan: &scheduler::Plan,
        pods: &[Pod],
        replacements: &[NewNodeClaim],
    ) {
        for c in nodes {
            if let Some(i) = self.node_index.remove(&c.node.name) {
                self.input.nodes[i].unschedulable = true;
                self.input.nodes[i].pods.clear();
            }
            if let Some(e) = self.counts.get_mut(&c.nodepool) {
                e.1 += 1;
            }
        }
        for p in &plan.placements {
            let bound = BoundPod::from_pod(&pods[p.pod]);
            match &p.target {
                Target::Node(name) => {
                    if let Some(n) = self.input.nodes.iter_mut().find(|n| &n.name == name) {
                        n.pods.push(bound);
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
            let allocatable = r
                .instance_types
                .iter()
                .filter_map(|c| self.catalog.get(&c.instance_type))
                .map(|it| it.allocatable.minus(&r.daemonset_overhead))
                .min_by_key(|a| (a.cpu_milli, a.memory_bytes))
                .unwrap_or_default();
            self.input.in_flight.push(InFlightClaim {
                name: format!("replacement-{}", self.replacement_seq),
                nodepool: r.nodepool.clone(),
                requirements: r.requirements.clone(),
                taints: pool_taints,
                allocatable,
                pods: r
                    .pods
                    .iter()
                    .map(|&i| BoundPod::from_pod(&pods[i]))
                    .collect(),
            });
        }
    }
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

/// Plans one disruption pass.
pub fn decide(catalog: &Catalog, world: &World, config: &Config) -> Outcome {
    let mut out = Outcome::default();
    let pools: BTreeMap<&str, &PoolPolicy> =
        world.pools.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut sim = Sim::new(catalog, world);
    let mut taken: std::collections::BTreeSet<String> = Default::default();
    let now = world.now;

    // Expired, then drifted: replaced with whatever capacity their pods need.
    for reason in [Reason::Expired, Reason::Drifted] {
        let mut due: Vec<&Candidate> = world
            .candidates
            .iter()
            .filter(|c| match reason {
                Reason::Expired => c
                    .expire_after
                    .is_some_and(|e| now >= c.created.saturating_add(e as i64)),
                _ => c.drift.is_some(),
            })
            .filter(|c| !taken.contains(&c.node.name))
            .collect();
        due.sort_by_key(|c| (c.created, c.node.name.clone()));
        for c in due {
            if let Some(why) = voluntary_block(c) {
                if !c.disrupting {
                    out.blocked.push(blocked(c, reason, why));
                }
                continue;
            }
            let Some(pool) = pools.get(c.nodepool.as_str()) else {
                continue;
            };
            if sim.allowed(pool, reason, now) == 0 {
                out.blocked.push(blocked(
                    c,
                    reason,
                    "the NodePool's disruption budget is used up",
                ));
                continue;
            }
            match sim.trial(&[c]) {
                Trial::Unplaceable(why) => out.blocked.push(Blocked {
                    node: c.node.name.clone(),
                    reason,
                    why,
                }),
                Trial::Fits { plan, pods } => {
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
                        format!(
                            "{} {what}; its {} pods fit on other nodes",
                            c.node.name,
                            pods.len()
                        )
                    } else {
                        format!(
                            "{} {what}; replaced by {} new node(s) for its {} pods",
                            c.node.name,
                            replacements.len(),
                            pods.len()
                        )
                    };
                    sim.commit(&[c], &plan, &pods, &replacements);
                    taken.insert(c.node.name.clone());
                    out.decisions.push(Decision {
                        reason,
                        nodes: vec![chosen(c)],
                        replacements,
                        saving: c.price - new_price,
                        message,
                    });
                }
            }
        }
    }

    // Consolidation candidates: the pool consolidates and the node has been quiet long enough.
    let consolidatable = |c: &Candidate| -> Result<&PoolPolicy, &'static str> {
        let pool = pools
            .get(c.nodepool.as_str())
            .copied()
            .ok_or("its NodePool is gone")?;
        let after = pool
            .consolidate_after
            .ok_or("its NodePool's consolidateAfter is Never")?;
        if now < c.created.saturating_add(after as i64) {
            return Err("younger than its NodePool's consolidateAfter");
        }
        if now < c.last_pod_change.saturating_add(after as i64) {
            return Err("its pods changed less than consolidateAfter ago");
        }
        Ok(pool)
    };

    // Empty nodes: deleted, as many as budgets allow.
    let mut empties: Vec<&Candidate> = world
        .candidates
        .iter()
        .filter(|c| c.pods.is_empty() && !taken.contains(&c.node.name))
        .collect();
    empties.sort_by(|a, b| {
        b.price
            .total_cmp(&a.price)
            .then(a.node.name.cmp(&b.node.name))
    });
    let mut empty_chosen: BTreeMap<String, Vec<&Candidate>> = BTreeMap::new();
    for c in empties {
        if let Some(why) = voluntary_block(c) {
            if !c.disrupting {
                out.blocked.push(blocked(c, Reason::Empty, why));
            }
            continue;
        }
        let pool = match consolidatable(c) {
            Ok(p) => p,
            Err(why) => {
                out.blocked.push(blocked(c, Reason::Empty, why));
                continue;
            }
        };
        if world.pending_pods > 0 {
            // A node that looks empty may be where kube-scheduler is about to put them.
            out.blocked
                .push(blocked(c, Reason::Empty, "pods are waiting for capacity"));
            continue;
        }
        if sim.allowed(pool, Reason::Empty, now) == 0 {
            out.blocked.push(blocked(
                c,
                Reason::Empty,
                "the NodePool's disruption budget is used up",
            ));
            continue;
        }
        sim.commit(&[c], &scheduler::Plan::default(), &[], &[]);
        taken.insert(c.node.name.clone());
        empty_chosen.entry(c.nodepool.clone()).or_default().push(c);
    }
    for (pool, nodes) in empty_chosen {
        let saving: f64 = nodes.iter().map(|c| c.price).sum();
        out.decisions.push(Decision {
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
        });
    }

    // Underutilised nodes.
    let mut under: Vec<&Candidate> = Vec::new();
    for c in &world.candidates {
        if taken.contains(&c.node.name) || c.pods.is_empty() {
            continue;
        }
        if let Some(why) = voluntary_block(c) {
            if !c.disrupting {
                out.blocked.push(blocked(c, Reason::Underutilized, why));
            }
            continue;
        }
        match consolidatable(c) {
            Ok(pool) if pool.policy == Policy::WhenEmptyOrUnderutilized => under.push(c),
            Ok(_) => {}
            Err(why) => out.blocked.push(blocked(c, Reason::Underutilized, why)),
        }
    }
    if world.pending_pods > 0 || under.is_empty() {
        return out;
    }
    // Cheapest to disrupt first: fewest pods, then the most expensive node (biggest saving).
    under.sort_by(|a, b| {
        a.pods
            .len()
            .cmp(&b.pods.len())
            .then(b.price.total_cmp(&a.price))
            .then(a.node.name.cmp(&b.node.name))
    });

    // Multi-node: the longest prefix (binary search, as Karpenter) that consolidates into at
    // most one new node within budgets.
    let prefix: Vec<&Candidate> = under
        .iter()
        .copied()
        .take(config.max_multi_node_candidates)
        .collect();
    let within_budget = |sim: &Sim, nodes: &[&Candidate]| -> bool {
        let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
        for c in nodes {
            *per_pool.entry(c.nodepool.as_str()).or_default() += 1;
        }
        per_pool.iter().all(|(p, n)| {
            pools
                .get(p)
                .is_some_and(|pool| sim.allowed(pool, Reason::Underutilized, now) >= *n)
        })
    };
    if prefix.len() >= 2 {
        let (mut lo, mut hi) = (2usize, prefix.len());
        let mut best: Option<(usize, Decision, scheduler::Plan, Vec<Pod>)> = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let set = &prefix[..mid];
            let ok = if within_budget(&sim, set) {
                consolidation(&mut sim, set, config)
            } else {
                None
            };
            match ok {
                Some((d, plan, pods)) => {
                    best = Some((mid, d, plan, pods));
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        if let Some((n, d, plan, pods)) = best {
            let set = &prefix[..n];
            sim.commit(set, &plan, &pods, &d.replacements);
            for c in set {
                taken.insert(c.node.name.clone());
            }
            out.decisions.push(d);
        }
    }

    // Single-node, for the rest.
    for &c in under.iter().take(config.max_single_node_candidates) {
        if taken.contains(&c.node.name) {
            continue;
        }
        if !within_budget(&sim, &[c]) {
            out.blocked.push(blocked(
                c,
                Reason::Underutilized,
                "the NodePool's disruption budget is used up",
            ));
            continue;
        }
        if let Some((d, plan, pods)) = consolidation(&mut sim, &[c], config) {
            sim.commit(&[c], &plan, &pods, &d.replacements);
            taken.insert(c.node.name.clone());
            out.decisions.push(d);
        }
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

/// Tries to consolidate `set` (delete, or replace with one cheaper node).
fn consolidation(
    sim: &mut Sim,
    set: &[&Candidate],
    config: &Config,
) -> Option<(Decision, scheduler::Plan, Vec<Pod>)> {
    let Trial::Fits { mut plan, pods } = sim.trial(set) else {
        return None;
    };
    let price: f64 = set.iter().map(|c| c.price).sum();
    let names = set
        .iter()
        .map(|c| c.node.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match plan.new_claims.len() {
        0 => {
            let d = Decision {
                reason: Reason::Underutilized,
                nodes: set.iter().map(|c| chosen(c)).collect(),
                replacements: vec![],
                saving: price,
                message: format!(
                    "underutilised {names}: its {} pods fit on other nodes, saving {}",
                    pods.len(),
                    dollars(price)
                ),
            };
            Some((d, plan, pods))
        }
        1 => {
            let max_price = price * (1.0 - config.min_saving_fraction);
            let claim = &mut plan.new_claims[0];
            let all_spot = set
                .iter()
                .all(|c| c.capacity_type == Some(CapacityType::Spot));
            claim.instance_types.retain(|t| t.price <= max_price);
            if set.len() > 1 {
                // Replacing several nodes with one of their own types must beat the cheapest
                // of those, else deleting fewer nodes disrupts fewer pods for the same
                // saving (Karpenter's same-instance-type filter).
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
            if all_spot {
                // Spot→Spot only with enough cheaper Spot types; otherwise on-demand ones.
                let spot = claim
                    .instance_types
                    .iter()
                    .filter(|t| t.capacity_type == CapacityType::Spot)
                    .count();
                if spot > 0 && spot < config.spot_to_spot_min_candidates {
                    claim
                        .instance_types
                        .retain(|t| t.capacity_type != CapacityType::Spot);
                    claim.capacity_types.retain(|c| *c != CapacityType::Spot);
                }
            }
            if claim.instance_types.is_empty() {
                return None;
            }
            let new_price = claim.instance_types[0].price;
            let saving = price - new_price;
            let d = Decision {
                reason: Reason::Underutilized,
                nodes: set.iter().map(|c| chosen(c)).collect(),
                replacements: vec![claim.clone()],
                saving,
                message: format!(
                    "underutilised {names} ({}) replaced by one {} node ({} from {}), saving {} ({:.0}%)",
                    dollars(price),
                    claim.instance_types[0].capacity_type.as_str(),
                    claim.instance_types[0].instance_type,
                    dollars(new_price),
                    dollars(saving),
                    100.0 * saving / price
                ),
            };
            Some((d, plan, pods))
        }
        _ => None,
    }
}
