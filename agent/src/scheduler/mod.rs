//! The scheduling core: pending pods and cluster state in, placements and new NodeClaims
//! out. Pure: no I/O, no clock, no randomness; the same input gives the same plan.
//!
//! Entry point: [`schedule`]`(&Catalog, &Input) -> Plan`; provisioning's rounds call
//! [`schedule_with_spare_room`], which adds room for displaced pods of several domains.
//!
//! Like Karpenter, pods are taken in order of CPU then memory request (descending) and each
//! tries existing nodes, then in-flight NodeClaims, then NodeClaims planned in this round,
//! then a new NodeClaim from the first NodePool (by weight) that can take it.
//!
//! Topology domains come from every NodePool that could take the pod, as in Karpenter:
//! zones and capacity types it offers, and the values its requirements list for custom
//! labels (`capacity-spread In [1,2,3,4]`), so spreads push pods across NodePools; a claim
//! of such a pool is narrowed to one value. Preferences (ScheduleAnyway spreads, preferred
//! node and pod affinity) have a price: see [`preferences`].
//!
//! What keeps it fast (5,000 pods in well under Karpenter's 3.45 s; see `benches/`):
//! - instance types are bit sets, intersected per NodePool × requirement term once;
//! - a claim's zone and capacity type are bit masks checked against per-type offering
//!   masks, so offering filters never touch strings in the hot loop;
//! - topology counts are integer arrays per (key, selector) group;
//! - a claim accepts pods up to a *target* type chosen when it opens ([`sizing`]), so
//!   adding a pod is a resource comparison, not a rescan of every type; the full candidate
//!   list is built once per claim at the end ([`candidates`]);
//! - claims that cannot take even the smallest remaining pod leave the scan list.

mod bitset;
mod candidates;
mod claims;
pub mod convert;
pub mod fit;
pub mod headroom;
pub mod input;
mod pod;
mod pools;
mod preferences;
mod reserved;
mod sizing;
mod spare;
mod topology;
pub mod volumes;
pub mod zone_ids;

pub use crate::resources::NODES;
use std::collections::{BTreeMap, HashMap};

pub use input::*;
pub use spare::{schedule_with_spare_room, spare_rooms};

use crate::catalog::Catalog;
use crate::labels;
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::{first_untolerated, Taint};

use bitset::Bitset;
use pod::{PodInfo, Terms};
use pools::{Pool, Zones, CT_ON_DEMAND, CT_RESERVED, CT_SPOT};
use reserved::{Hold, Ledger};
use topology::Topology;

/// Plans one round. See the module docs and [`preferences`] for how preferences are priced.
///
/// Pods displaced from nodes that are going away are planned back into the domains they
/// leave ([`Pod::home`]) where a NodePool can launch there. Their nodes are drained one by
/// one, so the counts kube-scheduler's maxSkew compares after a drain lack that node's pods
/// only: under a maxSkew 1 spread they may go nowhere but the domains they left. A plan
/// that balanced all displaced pods at once would put their room elsewhere, and they would
/// wait for capacity beside it. Pods that cannot go home are planned as any pod.
pub fn schedule(catalog: &Catalog, input: &Input) -> Plan {
    if input.pods.iter().all(|p| p.home.is_empty()) {
        return preferences::schedule_priced(catalog, input);
    }
    let mut homed = input.clone();
    for p in &mut homed.pods {
        for (k, v) in &p.home {
            p.node_selector.insert(k.clone(), v.clone());
        }
    }
    let plan = preferences::schedule_priced(catalog, &homed);
    let homeless: Vec<usize> = plan
        .unschedulable
        .iter()
        .map(|u| u.pod)
        .filter(|&i| !input.pods[i].home.is_empty())
        .collect();
    if homeless.is_empty() {
        return plan;
    }
    for i in homeless {
        homed.pods[i] = input.pods[i].clone();
    }
    preferences::schedule_priced(catalog, &homed)
}

/// How a pass treats preferences (see [`preferences`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Honoured as constraints, relaxed one at a time when a pod does not fit.
    Full,
    /// Ignored.
    Hard,
    /// Never open capacity; only choose among existing nodes and already-opened claims.
    Spread,
}

/// Capacity that already exists: a registered node or an in-flight NodeClaim.
struct Slot {
    target: Target,
    labels: BTreeMap<String, String>,
    /// For in-flight claims: requirements with several values still possible.
    reqs: Requirements,
    taints: Vec<Taint>,
    free: Resources,
    host: u32,
    schedulable: bool,
}

/// A NodeClaim planned in this round.
#[derive(Clone)]
pub(crate) struct Claim {
    pool: usize,
    reqs: Requirements,
    types: Bitset,
    zone_mask: u64,
    ct_mask: u8,
    target: usize,
    used: Resources,
    pods: Vec<usize>,
    host: u32,
    open: bool,
    /// Its place in a capacity reservation (see [`reserved`]).
    hold: Option<Hold>,
}

/// Which constraints an attempt honours.
#[derive(Clone, Copy)]
pub(crate) struct Attempt {
    term: u32,
    /// The required term `term` narrows with preferred node affinity. Spread domains are
    /// counted over this one: kube-scheduler's `nodeAffinityPolicy` looks at required
    /// affinity only, so a preferred zone must not shrink the domains a hard spread
    /// balances over (it would pile every such pod into the preferred zone).
    required: u32,
    /// Preferences (ScheduleAnyway spreads, preferred pod affinity) act as constraints.
    soft: bool,
    /// Preferences only rank the capacity that accepts the pod.
    score: bool,
    /// A new NodeClaim may be opened.
    allow_new: bool,
}

/// Why a topology domain was refused.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reject {
    SpreadAbsent,
    Spread(i32),
    Affinity,
    AntiAffinity,
    OthersAntiAffinity,
}

impl Reject {
    fn message(self, key: &str) -> String {
        match self {
            Reject::SpreadAbsent => {
                format!("topology spread on {key}: the node would not have that label")
            }
            Reject::Spread(s) => {
                format!("topology spread on {key} (maxSkew {s}) would be exceeded")
            }
            Reject::Affinity => format!("pod affinity on {key} is not satisfied"),
            Reject::AntiAffinity => format!("pod anti-affinity on {key} is not satisfied"),
            Reject::OthersAntiAffinity => {
                format!("another pod's anti-affinity on {key} excludes it")
            }
        }
    }
}

/// A domain of some topology key on a piece of capacity.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Dom {
    Known(Option<u32>),
    Undecided,
    Absent,
}

pub(crate) struct Scheduler<'a> {
    catalog: &'a Catalog,
    input: &'a Input,
    mode: Mode,
    zones: Zones,
    /// Catalogue types that are GPU, accelerator or bare metal, read once a round (see
    /// [`candidates`]): every claim's pricing asks, and the answer reads labels.
    exotic: Bitset,
    pools: Vec<Pool>,
    terms: Terms,
    topo: Topology,
    infos: Vec<PodInfo>,
    requests: Vec<Resources>,
    slots: Vec<Slot>,
    claims: Vec<Claim>,
    open: Vec<usize>,
    closed_in_open: usize,
    /// Per group: claims before this index all hold a pod of the group (see `exclusive_start`).
    exclusive_prefix: Vec<usize>,
    pool_term_types: HashMap<(usize, u32), Result<Bitset, String>>,
    universe_cache: HashMap<(u32, u32, u64, bool), Vec<u32>>,
    zone_dom: Vec<u32>,
    /// Domains of the capacity types: Spot, on-demand, reserved.
    ct_dom: [u32; 3],
    /// Places left in the round's capacity reservations.
    ledger: Ledger,
    /// Capacity of the target types of this round's claims, per pool (for limits).
    committed: Vec<Resources>,
    /// Pending demand from the current pod on, for sizing.
    demand: sizing::Demand,
    min_cpu: i64,
    suffix_min_mem: Vec<i64>,
    placements: Vec<Placement>,
    unschedulable: Vec<Unschedulable>,
}

/// Anti-affinity terms of pods already running are groups too, so that pending pods
/// learn which of them select them.
fn register_running_anti_affinity(input: &Input, topo: &mut Topology) {
    let running = input
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .chain(input.in_flight.iter().flat_map(|c| c.pods.iter()));
    for p in running {
        for t in p.anti_affinity() {
            let g = topo.affinity_group(&p.namespace, t);
            topo.groups[g as usize].has_owners = true;
        }
    }
}

/// The groups whose members are counted, per group. Without preferences, groups only
/// preferences use need no counting: pods in them must not pin claims to a domain (the
/// plan must equal the same pods without preferences).
fn used_groups(mode: Mode, topo: &Topology, infos: &[PodInfo]) -> Vec<bool> {
    let mut used_group = vec![mode != Mode::Hard; topo.groups.len()];
    for (g, grp) in topo.groups.iter().enumerate() {
        used_group[g] |= grp.has_owners;
    }
    for info in infos {
        let hard = info.spreads.iter().filter(|s| s.hard).map(|s| s.group);
        let aff = info.affinity.iter().map(|a| a.0);
        for g in hard.chain(aff).chain(info.anti.iter().copied()) {
            used_group[g as usize] = true;
        }
    }
    used_group
}

/// Topology keys the pod constrains or is counted under, in a stable order.
fn topology_keys(info: &PodInfo, topo: &Topology, soft_on: bool) -> Vec<String> {
    let groups = info
        .spreads
        .iter()
        .filter(|s| s.hard || soft_on)
        .map(|s| s.group)
        .chain(info.affinity.iter().map(|a| a.0))
        .chain(info.anti.iter().copied())
        .chain(info.soft_affinity.iter().filter(|_| soft_on).map(|a| a.0))
        .chain(info.soft_anti.iter().filter(|_| soft_on).map(|a| a.0))
        .chain(info.member_of.iter().copied());
    let mut keys: Vec<String> = Vec::new();
    for g in groups {
        let k = &topo.groups[g as usize].key;
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys
}

/// The host-level groups that allow one of the pod's kind per node: its hostname
/// anti-affinity, and hard hostname spreads of maxSkew 1 that count the pod itself.
fn exclusive_groups(info: &PodInfo, topo: &Topology) -> Vec<u32> {
    let mut exclusive: Vec<u32> = info
        .anti
        .iter()
        .copied()
        .filter(|g| topo.groups[*g as usize].is_host)
        .collect();
    exclusive.extend(
        info.spreads
            .iter()
            .filter(|s| {
                s.hard && s.self_match && s.max_skew == 1 && topo.groups[s.group as usize].is_host
            })
            .map(|s| s.group),
    );
    exclusive
}

impl<'a> Scheduler<'a> {
    pub(crate) fn new(catalog: &'a Catalog, input: &'a Input, mode: Mode) -> Scheduler<'a> {
        let zones = Zones::from_catalog(catalog, input);
        let ledger = Ledger::from_catalog(catalog);
        let pools = pools::build_pools(catalog, input, &zones, &ledger);
        let mut topo = Topology::default();
        topo.namespace_labels = std::sync::Arc::new(input.namespace_labels.clone());
        let zone_dom = zones.names.iter().map(|z| topo.domains.id(z)).collect();
        let ct_dom = [
            topo.domains.id(labels::CAPACITY_TYPE_SPOT),
            topo.domains.id(labels::CAPACITY_TYPE_ON_DEMAND),
            topo.domains.id(labels::CAPACITY_TYPE_RESERVED),
        ];
        register_running_anti_affinity(input, &mut topo);
        let mut terms = Terms::default();
        terms.intern(Requirements::new());
        let mut infos: Vec<PodInfo> = input
            .pods
            .iter()
            .map(|p| pod::compile(p, &pools, &mut terms, &mut topo))
            .collect();
        let used_group = used_groups(mode, &topo, &infos);
        let soft_on = mode != Mode::Hard;
        for (info, p) in infos.iter_mut().zip(&input.pods) {
            info.member_of = (0..topo.groups.len() as u32)
                .filter(|g| used_group[*g as usize])
                .filter(|g| topo.groups[*g as usize].matches(&p.namespace, &p.labels))
                .collect();
            info.keys = topology_keys(info, &topo, soft_on);
            info.exclusive = exclusive_groups(info, &topo);
        }
        let requests = input
            .pods
            .iter()
            .map(|p| {
                let mut r = p.requests.clone();
                r.pods = r.pods.max(1);
                r
            })
            .collect();
        let mut exotic = Bitset::empty(catalog.types.len());
        for (t, it) in catalog.types.iter().enumerate() {
            if it.is_exotic() {
                exotic.set(t);
            }
        }
        let mut s = Scheduler {
            catalog,
            input,
            mode,
            zones,
            exotic,
            committed: vec![Resources::default(); pools.len()],
            pools,
            terms,
            topo,
            infos,
            requests,
            slots: Vec::new(),
            claims: Vec::new(),
            open: Vec::new(),
            closed_in_open: 0,
            exclusive_prefix: Vec::new(),
            pool_term_types: HashMap::new(),
            universe_cache: HashMap::new(),
            zone_dom,
            ct_dom,
            ledger,
            demand: Default::default(),
            min_cpu: 0,
            suffix_min_mem: Vec::new(),
            placements: Vec::new(),
            unschedulable: Vec::new(),
        };
        s.add_existing();
        s.exclusive_prefix = vec![0; s.topo.groups.len()];
        s
    }

    /// Registers nodes and in-flight claims as slots, counting their pods for topology.
    fn add_existing(&mut self) {
        for n in &self.input.nodes {
            let host = n.labels.get(labels::HOSTNAME).unwrap_or(&n.name);
            let mut free = n.allocatable.clone();
            for p in &n.pods {
                free.sub(&p.requests);
            }
            let slot = Slot {
                target: Target::Node(n.name.clone()),
                labels: n.labels.clone(),
                reqs: Requirements::new(),
                taints: n.taints.clone(),
                free,
                host: self.topo.domains.id(host),
                schedulable: !n.unschedulable,
            };
            self.push_slot(slot, &n.pods);
        }
        for c in &self.input.in_flight {
            let mut labels: BTreeMap<String, String> = BTreeMap::new();
            for (k, r) in c.requirements.iter() {
                if let Some(v) = r.single_value() {
                    labels.insert(k.clone(), v.to_string());
                }
            }
            labels.insert(labels::KARPENTER_NODEPOOL.into(), c.nodepool.clone());
            labels.insert(labels::JOINER_NODEPOOL.into(), c.nodepool.clone());
            let mut free = c.allocatable.clone();
            for p in &c.pods {
                free.sub(&p.requests);
            }
            let slot = Slot {
                target: Target::InFlight(c.name.clone()),
                labels,
                reqs: c.requirements.clone(),
                taints: c.taints.clone(),
                free,
                host: self.topo.domains.id(&format!("nodeclaim/{}", c.name)),
                schedulable: true,
            };
            self.push_slot(slot, &c.pods);
        }
    }

    fn push_slot(&mut self, slot: Slot, pods: &[BoundPod]) {
        for v in slot.labels.values() {
            self.topo.domains.id(v);
        }
        let s = self.slots.len();
        self.slots.push(slot);
        for p in pods {
            for g in 0..self.topo.groups.len() {
                let key = self.topo.groups[g].key.clone();
                let Dom::Known(Some(d)) = self.slot_dom(s, &key) else {
                    continue;
                };
                if self.topo.groups[g].matches(&p.namespace, &p.labels) {
                    self.topo.groups[g].add(d, 1);
                }
            }
            for t in p.anti_affinity() {
                let g = self.topo.affinity_group(&p.namespace, t) as usize;
                self.topo.groups[g].has_owners = true;
                if let Dom::Known(Some(d)) = self.slot_dom(s, &t.topology_key) {
                    self.topo.groups[g].add_owner(d);
                }
            }
        }
    }

    /// Whether any pod has a preference (so pricing them matters).
    pub(crate) fn has_preferences(&self) -> bool {
        self.infos
            .iter()
            .any(|i| i.has_soft() || !i.preferred.is_empty())
    }

    /// Opens empty claims (pool, target type) before any pod is placed: the capacity a
    /// pass without preferences launched, over which [`Mode::Spread`] spreads.
    pub(crate) fn preopen(&mut self, claims: &[(usize, usize, Option<Hold>)]) {
        for &(p, t, hold) in claims {
            let host = self
                .topo
                .domains
                .id(&format!("nodeclaim/new-{}", self.claims.len()));
            let cap = pools::one_node(&self.catalog.types[t].capacity);
            self.committed[p].add(&cap);
            // A reserved shape keeps its reservation (when this pass still has the place).
            let hold = hold.filter(|h| self.ledger.left(h.offer.res, None) > 0);
            self.ledger.transfer(None, hold);
            let (zone_mask, ct_mask) = match hold {
                Some(h) => (1 << h.offer.zone, CT_RESERVED),
                None => (self.pools[p].zone_mask, self.pools[p].ct_mask),
            };
            let c = self.claims.len();
            self.claims.push(Claim {
                pool: p,
                reqs: self.pools[p].input.requirements.clone(),
                types: self.pools[p].types.clone(),
                zone_mask,
                ct_mask,
                target: t,
                used: Resources::default(),
                pods: Vec::new(),
                host,
                open: true,
                hold,
            });
            self.open.push(c);
        }
    }

    /// The plan and, per new NodeClaim in it, its (pool, target type, reservation).
    pub(crate) fn run(mut self) -> (Plan, Vec<(usize, usize, Option<Hold>)>) {
        let order = pod::order(&self.input.pods);
        self.min_cpu = order
            .iter()
            .map(|&i| self.requests[i].cpu_milli)
            .min()
            .unwrap_or(0);
        self.suffix_min_mem = vec![i64::MAX; order.len() + 1];
        for k in (0..order.len()).rev() {
            self.suffix_min_mem[k] =
                self.suffix_min_mem[k + 1].min(self.requests[order[k]].memory_bytes);
        }
        for &i in &order {
            self.demand.pods += 1;
            self.demand.cpu_milli += self.requests[i].cpu_milli;
            self.demand.memory_bytes += self.requests[i].memory_bytes;
        }
        for (pos, &i) in order.iter().enumerate() {
            if let Err(reasons) = self.place(i, pos) {
                self.unschedulable.push(Unschedulable { pod: i, reasons });
            }
            self.demand.pods -= 1;
            self.demand.cpu_milli -= self.requests[i].cpu_milli;
            self.demand.memory_bytes -= self.requests[i].memory_bytes;
        }
        let (new_claims, failed) = candidates::finalize(&self);
        let shapes = self
            .claims
            .iter()
            .filter(|c| !c.pods.is_empty())
            .map(|c| (c.pool, c.target, c.hold))
            .collect();
        self.unschedulable.extend(failed);
        self.unschedulable.sort_by_key(|u| u.pod);
        self.placements.sort_by_key(|p| p.pod);
        let plan = Plan {
            placements: self.placements,
            new_claims,
            unschedulable: self.unschedulable,
            preferences: PreferenceReport::default(),
        };
        (plan, shapes)
    }

    /// Tries the pod with all its preferences, then relaxes them one at a time (see
    /// [`Mode`] for what each pass keeps).
    fn place(&mut self, i: usize, pos: usize) -> Result<(), Vec<String>> {
        let n_pref = self.infos[i].preferred.len();
        let has_soft = self.infos[i].has_soft();
        // (preferred node-affinity terms kept, preferences as constraints, as scores, new claims)
        let levels: Vec<(usize, bool, bool, bool)> = match self.mode {
            Mode::Full => {
                let levels = n_pref + usize::from(has_soft);
                (0..=levels)
                    .map(|l| {
                        (
                            n_pref.saturating_sub(l),
                            has_soft && l < levels,
                            false,
                            true,
                        )
                    })
                    .collect()
            }
            Mode::Hard => vec![(0, false, false, true)],
            Mode::Spread => (0..=n_pref)
                .map(|l| (n_pref - l, false, true, l == n_pref))
                .collect(),
        };
        let mut last = Vec::new();
        for (keep_pref, soft, score, allow_new) in levels {
            for ti in 0..self.infos[i].terms.len() {
                let base = self.infos[i].terms[ti];
                let term = if keep_pref == 0 {
                    base
                } else {
                    let mut r = self.terms.list[base as usize].clone();
                    for p in &self.infos[i].preferred[..keep_pref] {
                        r = r.intersect(p);
                    }
                    if r.unsatisfiable_key().is_some() {
                        continue;
                    }
                    self.terms.intern(r)
                };
                let att = Attempt {
                    term,
                    required: base,
                    soft,
                    score,
                    allow_new,
                };
                match self.attempt(i, pos, att) {
                    Ok(()) => return Ok(()),
                    Err(r) => last = r,
                }
            }
        }
        if last.is_empty() {
            last.push("no nodepool can run it: none is defined".to_string());
        }
        Err(last)
    }

    fn attempt(&mut self, i: usize, pos: usize, att: Attempt) -> Result<(), Vec<String>> {
        let mins = self.spread_minimums(i, att);
        if att.score {
            if self.attempt_scored(i, pos, att, &mins) {
                return Ok(());
            }
        } else if self.attempt_existing(i, pos, att, &mins) {
            return Ok(());
        }
        if !att.allow_new {
            return Err(vec!["no launched capacity honours its preferences".into()]);
        }
        self.attempt_new(i, pos, att, &mins)
    }

    /// First fit over existing nodes and in-flight claims, then this round's claims.
    fn attempt_existing(&mut self, i: usize, pos: usize, att: Attempt, mins: &[i32]) -> bool {
        for s in 0..self.slots.len() {
            if self.slot_accepts(i, att, s, mins) {
                self.commit_slot(i, s);
                return true;
            }
        }
        let start = self.exclusive_start(i);
        let mut k = self.open.partition_point(|&c| c < start);
        while k < self.open.len() {
            let c = self.open[k];
            k += 1;
            if !self.claims[c].open {
                continue;
            }
            let claim = &self.claims[c];
            let fits = self.requests[i]
                .plus(&claim.used)
                .fits_in(&self.pools[claim.pool].alloc[claim.target]);
            if !fits || !self.infos[i].tolerated[claim.pool] {
                continue;
            }
            let claim = std::mem::replace(&mut self.claims[c], Claim::placeholder());
            let result = self.evaluate(&claim, i, att, mins, false);
            self.claims[c] = claim;
            if let Ok(update) = result {
                self.commit_claim(c, i, update, pos);
                return true;
            }
        }
        false
    }

    /// Over the same capacity as [`Self::attempt_existing`], the place whose domains the
    /// pod's preferences rank best (existing capacity first on ties, then claim order):
    /// this spreads pods over the nodes the round launches anyway.
    fn attempt_scored(&mut self, i: usize, pos: usize, att: Attempt, mins: &[i32]) -> bool {
        let mut best_slot: Option<(i64, usize)> = None;
        for s in 0..self.slots.len() {
            if self.slot_accepts(i, att, s, mins) {
                let pen = self.slot_penalty(i, s);
                if best_slot.is_none_or(|b| pen < b.0) {
                    best_slot = Some((pen, s));
                    if pen == 0 {
                        break;
                    }
                }
            }
        }
        if let Some((0, s)) = best_slot {
            self.commit_slot(i, s);
            return true;
        }
        let mut best_claim: Option<(i64, usize, claims::Update)> = None;
        let start = self.exclusive_start(i);
        let mut k = self.open.partition_point(|&c| c < start);
        while k < self.open.len() {
            let c = self.open[k];
            k += 1;
            if !self.claims[c].open {
                continue;
            }
            let claim = &self.claims[c];
            let fits = self.requests[i]
                .plus(&claim.used)
                .fits_in(&self.pools[claim.pool].alloc[claim.target]);
            if !fits || !self.infos[i].tolerated[claim.pool] {
                continue;
            }
            let claim = std::mem::replace(&mut self.claims[c], Claim::placeholder());
            let result = self.evaluate(&claim, i, att, mins, false);
            self.claims[c] = claim;
            if let Ok(update) = result {
                let pen = update.penalty;
                let better = best_claim.as_ref().is_none_or(|b| pen < b.0)
                    && best_slot.is_none_or(|b| pen < b.0);
                if better {
                    best_claim = Some((pen, c, update));
                    if pen == 0 {
                        break;
                    }
                }
            }
        }
        if let Some((_, c, update)) = best_claim {
            self.commit_claim(c, i, update, pos);
            return true;
        }
        if let Some((_, s)) = best_slot {
            self.commit_slot(i, s);
            return true;
        }
        false
    }

    fn slot_penalty(&self, i: usize, s: usize) -> i64 {
        self.infos[i]
            .keys
            .iter()
            .map(|key| match self.slot_dom(s, key) {
                Dom::Known(d) => self.soft_penalty(i, key, d),
                _ => 0,
            })
            .sum()
    }

    /// How much landing in domain `d` of `key` goes against the pod's preferences: the
    /// matching pods already there for each ScheduleAnyway spread (so pods fill the
    /// emptiest domain first), weighted counts for preferred anti-affinity, and the weight
    /// of each preferred affinity left unmet.
    pub(crate) fn soft_penalty(&self, i: usize, key: &str, d: Option<u32>) -> i64 {
        let info = &self.infos[i];
        let count = |g: u32| -> i64 {
            d.map(|d| self.topo.groups[g as usize].count(d) as i64)
                .unwrap_or(0)
        };
        let mut pen = 0;
        for sp in info.spreads.iter().filter(|s| !s.hard) {
            if self.topo.groups[sp.group as usize].key == key {
                pen += if d.is_some() { count(sp.group) } else { 1_000 };
            }
        }
        for &(g, w) in &info.soft_anti {
            if self.topo.groups[g as usize].key == key {
                pen += w as i64 * count(g);
            }
        }
        for &(g, self_match, w) in &info.soft_affinity {
            let grp = &self.topo.groups[g as usize];
            if grp.key == key && count(g) == 0 && !(grp.total == 0 && self_match) {
                pen += w as i64;
            }
        }
        pen
    }

    fn attempt_new(
        &mut self,
        i: usize,
        pos: usize,
        att: Attempt,
        mins: &[i32],
    ) -> Result<(), Vec<String>> {
        let mut reasons = Vec::new();
        for p in 0..self.pools.len() {
            let host = self
                .topo
                .domains
                .id(&format!("nodeclaim/new-{}", self.claims.len()));
            let claim = Claim {
                pool: p,
                reqs: self.pools[p].input.requirements.clone(),
                types: self.pools[p].types.clone(),
                zone_mask: self.pools[p].zone_mask,
                ct_mask: self.pools[p].ct_mask,
                target: usize::MAX,
                used: Resources::default(),
                pods: Vec::new(),
                host,
                open: true,
                hold: None,
            };
            match self.evaluate(&claim, i, att, mins, true) {
                Ok(update) => {
                    let c = self.claims.len();
                    self.claims.push(claim);
                    self.open.push(c);
                    self.commit_claim(c, i, update, pos);
                    return Ok(());
                }
                Err(r) => reasons.push(format!("nodepool {:?}: {r}", self.pools[p].input.name)),
            }
        }
        Err(reasons)
    }

    /// The first claim that could take a pod which must be alone on its node among some
    /// group (hostname anti-affinity, hostname spread with maxSkew 1). Counts only grow, so
    /// the prefix of claims already holding such a pod only grows: each group keeps a
    /// cursor and a scan starts there instead of at the first claim.
    fn exclusive_start(&mut self, i: usize) -> usize {
        let mut start = 0;
        for k in 0..self.infos[i].exclusive.len() {
            let g = self.infos[i].exclusive[k] as usize;
            let mut c = self.exclusive_prefix[g];
            while c < self.claims.len() && self.topo.groups[g].count(self.claims[c].host) >= 1 {
                c += 1;
            }
            self.exclusive_prefix[g] = c;
            start = start.max(c);
        }
        start
    }

    fn slot_dom(&self, s: usize, key: &str) -> Dom {
        let slot = &self.slots[s];
        if key == labels::HOSTNAME {
            return Dom::Known(Some(slot.host));
        }
        if let Some(v) = slot.labels.get(key) {
            return Dom::Known(self.topo.domains.get(v));
        }
        if slot.reqs.get(key).is_some() {
            return Dom::Undecided;
        }
        Dom::Absent
    }

    fn slot_accepts(&self, i: usize, att: Attempt, s: usize, mins: &[i32]) -> bool {
        let slot = &self.slots[s];
        if !slot.schedulable || !self.requests[i].fits_in(&slot.free) {
            return false;
        }
        let pod = &self.input.pods[i];
        if first_untolerated(&slot.taints, &pod.tolerations).is_some() {
            return false;
        }
        let term = &self.terms.list[att.term as usize];
        let reqs_ok = term.iter().all(|(k, want)| match slot.labels.get(k) {
            Some(v) => want.has(v),
            None => match slot.reqs.get(k).and_then(|r| r.finite_values()) {
                Some(vals) => !vals.is_empty() && vals.iter().all(|v| want.has(v)),
                None => want.matches(None),
            },
        });
        if !reqs_ok {
            return false;
        }
        self.infos[i].keys.iter().all(|key| {
            let dom = self.slot_dom(s, key);
            dom != Dom::Undecided && self.check_domain(i, att, key, dom, mins).is_ok()
        })
    }

    fn commit_slot(&mut self, i: usize, s: usize) {
        self.slots[s].free.sub(&self.requests[i]);
        self.placements.push(Placement {
            pod: i,
            target: self.slots[s].target.clone(),
        });
        let doms: Vec<(String, Option<u32>)> = self.infos[i]
            .keys
            .iter()
            .map(|k| match self.slot_dom(s, k) {
                Dom::Known(d) => (k.clone(), d),
                _ => (k.clone(), None),
            })
            .collect();
        self.count_pod(i, &doms);
    }

    /// Records the pod in every group it matches and every anti-affinity group it carries,
    /// given the domain of each involved key where it landed.
    fn count_pod(&mut self, i: usize, doms: &[(String, Option<u32>)]) {
        let find = |key: &str| doms.iter().find(|(k, _)| k == key).and_then(|(_, d)| *d);
        for gi in 0..self.infos[i].member_of.len() {
            let g = self.infos[i].member_of[gi] as usize;
            if let Some(d) = find(&self.topo.groups[g].key) {
                self.topo.groups[g].add(d, 1);
            }
        }
        for gi in 0..self.infos[i].anti.len() {
            let g = self.infos[i].anti[gi] as usize;
            if let Some(d) = find(&self.topo.groups[g].key) {
                self.topo.groups[g].add_owner(d);
            }
        }
    }

    /// Whether a pod may land in domain `dom` of `key` under this attempt. The rejection
    /// is a small value, formatted only when it becomes a reason (this runs in the hot loop).
    fn check_domain(
        &self,
        i: usize,
        att: Attempt,
        key: &str,
        dom: Dom,
        mins: &[i32],
    ) -> Result<(), Reject> {
        let info = &self.infos[i];
        let count = |g: u32| -> i32 {
            match dom {
                Dom::Known(Some(d)) => self.topo.groups[g as usize].count(d),
                _ => 0,
            }
        };
        for (si, sp) in info.spreads.iter().enumerate() {
            let g = &self.topo.groups[sp.group as usize];
            if g.key != key || !(sp.hard || att.soft) {
                continue;
            }
            if dom == Dom::Absent {
                return Err(Reject::SpreadAbsent);
            }
            let c = count(sp.group) + i32::from(sp.self_match);
            if c - mins[si] > sp.max_skew {
                return Err(Reject::Spread(sp.max_skew));
            }
        }
        for &(g, self_match) in &info.affinity {
            let grp = &self.topo.groups[g as usize];
            if grp.key != key {
                continue;
            }
            let bootstrap = grp.total == 0 && self_match;
            if dom == Dom::Absent || (count(g) == 0 && !bootstrap) {
                return Err(Reject::Affinity);
            }
        }
        for &g in &info.anti {
            if self.topo.groups[g as usize].key == key && count(g) > 0 {
                return Err(Reject::AntiAffinity);
            }
        }
        if att.soft {
            for &(g, self_match, _) in &info.soft_affinity {
                let grp = &self.topo.groups[g as usize];
                if grp.key != key {
                    continue;
                }
                let bootstrap = grp.total == 0 && self_match;
                if dom == Dom::Absent || (count(g) == 0 && !bootstrap) {
                    return Err(Reject::Affinity);
                }
            }
            for &(g, _) in &info.soft_anti {
                if self.topo.groups[g as usize].key == key && count(g) > 0 {
                    return Err(Reject::AntiAffinity);
                }
            }
        }
        for &g in &info.member_of {
            let grp = &self.topo.groups[g as usize];
            if grp.has_owners && grp.key == key {
                if let Dom::Known(Some(d)) = dom {
                    if grp.owners(d) > 0 {
                        return Err(Reject::OthersAntiAffinity);
                    }
                }
            }
        }
        Ok(())
    }

    /// The global minimum count of each spread constraint's group over its eligible domains.
    fn spread_minimums(&mut self, i: usize, att: Attempt) -> Vec<i32> {
        let n = self.infos[i].spreads.len();
        let mut mins = vec![0; n];
        for (si, min) in mins.iter_mut().enumerate() {
            let (group, min_domains, hard) = {
                let sp = &self.infos[i].spreads[si];
                (sp.group, sp.min_domains, sp.hard)
            };
            if self.topo.groups[group as usize].is_host || !(hard || att.soft) {
                continue;
            }
            let universe = self.universe(i, si, att.required);
            if (universe.len() as i32) < min_domains {
                continue;
            }
            let g = &self.topo.groups[group as usize];
            *min = universe.iter().map(|d| g.count(*d)).min().unwrap_or(0);
        }
        mins
    }

    /// Domains of spread `si`'s key the pod counts: those of existing capacity and of
    /// every NodePool (zones and capacity types they offer, values their requirements
    /// list), narrowed by the pod's node requirements unless `nodeAffinityPolicy: Ignore`
    /// and to what it tolerates when `nodeTaintsPolicy: Honor`.
    fn universe(&mut self, i: usize, si: usize, term: u32) -> Vec<u32> {
        let (group, honor_affinity, honor_taints) = {
            let sp = &self.infos[i].spreads[si];
            (sp.group, sp.honor_affinity, sp.honor_taints)
        };
        let term = if honor_affinity { term } else { 0 };
        let tolerated_mask: u64 = self.infos[i]
            .tolerated
            .iter()
            .enumerate()
            .filter(|(p, ok)| (**ok || !honor_taints) && *p < 64)
            .fold(0, |m, (p, _)| m | (1 << p));
        let cache_key = (group, term, tolerated_mask, honor_taints);
        if let Some(u) = self.universe_cache.get(&cache_key) {
            return u.clone();
        }
        let key = self.topo.groups[group as usize].key.clone();
        let reqs = self.terms.list[term as usize].clone();
        let want = reqs.get(&key).cloned();
        let mut values: std::collections::BTreeSet<String> = Default::default();
        let tolerations = &self.input.pods[i].tolerations;
        for s in &self.slots {
            if !s.schedulable || !reqs.matches_labels(&s.labels) {
                continue;
            }
            if honor_taints && first_untolerated(&s.taints, tolerations).is_some() {
                continue;
            }
            if let Some(v) = s.labels.get(&key) {
                values.insert(v.clone());
            }
        }
        for p in 0..self.pools.len() {
            if p >= 64 || tolerated_mask & (1 << p) == 0 {
                continue;
            }
            let Ok(types) = self.types_for(p, term) else {
                continue;
            };
            let pool = &self.pools[p];
            if key == labels::ZONE {
                let mut m = 0;
                for t in types.iter() {
                    m |= pool.zones_of(t, pool.zone_mask, pool.ct_mask);
                }
                values.extend(self.zones.names_of(m));
            } else if key == labels::CAPACITY_TYPE {
                for t in types.iter() {
                    if pool.ct_mask & CT_SPOT != 0 && pool.spot_zones[t] & pool.zone_mask != 0 {
                        values.insert(labels::CAPACITY_TYPE_SPOT.into());
                    }
                    if pool.ct_mask & CT_ON_DEMAND != 0 && pool.od_zones[t] & pool.zone_mask != 0 {
                        values.insert(labels::CAPACITY_TYPE_ON_DEMAND.into());
                    }
                    if pool.ct_mask & CT_RESERVED != 0 && pool.res_zones[t] & pool.zone_mask != 0 {
                        values.insert(labels::CAPACITY_TYPE_RESERVED.into());
                    }
                }
            } else if key == labels::KARPENTER_NODEPOOL || key == labels::JOINER_NODEPOOL {
                values.insert(pool.input.name.clone());
            } else if let Some(v) = pool.input.labels.get(&key) {
                values.insert(v.clone());
            } else if let Some(vs) = pool
                .input
                .requirements
                .get(&key)
                .and_then(|r| r.finite_values())
            {
                values.extend(vs.iter().cloned());
            } else {
                for t in types.iter() {
                    if let Some(v) = self.catalog.types[t].labels.get(&key) {
                        values.insert(v.clone());
                    }
                }
            }
        }
        let ids: Vec<u32> = values
            .into_iter()
            .filter(|v| want.as_ref().is_none_or(|w| w.has(v)))
            .map(|v| self.topo.domains.id(&v))
            .collect();
        self.universe_cache.insert(cache_key, ids.clone());
        ids
    }

    /// Types of pool `p` whose labels satisfy requirement term `term` (cached).
    fn types_for(&mut self, p: usize, term: u32) -> Result<Bitset, String> {
        if let Some(r) = self.pool_term_types.get(&(p, term)) {
            return r.clone();
        }
        let reqs = &self.terms.list[term as usize];
        let pool = &self.pools[p];
        let result = fit::term_refusal(&pool.input, reqs)
            .map_err(|r| r.message)
            .map(|()| {
                let mut b = Bitset::empty(self.catalog.types.len());
                for t in pool.types.iter() {
                    if self.catalog.types[t].labels_match(reqs) {
                        b.set(t);
                    }
                }
                b
            });
        self.pool_term_types.insert((p, term), result.clone());
        result
    }
}
