//! Adding a pod to a NodeClaim planned in this round (or to a fresh one): intersecting
//! requirements, narrowing undecided topology domains (zone, capacity type, instance
//! type labels) to the one the pod's constraints prefer, and keeping a target type that
//! fits everything on the claim.

use std::collections::BTreeSet;

use crate::labels;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::bitset::Bitset;
use super::input::MinValuesPolicy;
use super::pools::{one_node, resource_value, CT_ALL, CT_ON_DEMAND, CT_RESERVED, CT_SPOT};
use super::reserved::Hold;
use super::sizing::{pick_target, TargetOption};
use super::{Attempt, Claim, Dom, Scheduler};

/// What adding the pod changes on the claim.
pub(crate) struct Update {
    reqs: Option<Requirements>,
    types: Option<Bitset>,
    zone_mask: u64,
    ct_mask: u8,
    target: usize,
    hold: Option<Hold>,
    /// How much the claim goes against the pod's preferences (scored attempts only).
    pub penalty: i64,
}

impl Claim {
    pub(crate) fn placeholder() -> Claim {
        Claim {
            pool: 0,
            reqs: Requirements::new(),
            types: Bitset::empty(0),
            zone_mask: 0,
            ct_mask: 0,
            target: usize::MAX,
            used: Resources::default(),
            pods: Vec::new(),
            host: 0,
            open: false,
            hold: None,
        }
    }
}

/// Labels whose value comes from the instance type.
pub(crate) fn is_type_label(key: &str) -> bool {
    labels::is_type_label(key)
}

impl Scheduler<'_> {
    fn zone_mask_of(&self, reqs: &Requirements) -> u64 {
        match reqs.get(labels::ZONE) {
            None => u64::MAX,
            Some(r) => self
                .zones
                .names
                .iter()
                .enumerate()
                .filter(|(_, z)| r.has(z))
                .fold(0, |m, (i, _)| m | (1 << i)),
        }
    }

    fn ct_mask_of(reqs: &Requirements) -> u8 {
        let mut m = match reqs.get(labels::CAPACITY_TYPE) {
            None => CT_ALL,
            Some(r) => {
                let mut m = 0;
                if r.has(labels::CAPACITY_TYPE_SPOT) {
                    m |= CT_SPOT;
                }
                if r.has(labels::CAPACITY_TYPE_ON_DEMAND) {
                    m |= CT_ON_DEMAND;
                }
                if r.has(labels::CAPACITY_TYPE_RESERVED) {
                    m |= CT_RESERVED;
                }
                m
            }
        };
        // A reservation label the pod requires is on reserved nodes only.
        if reqs
            .iter()
            .any(|(k, r)| labels::is_reservation_label(k) && !r.matches(None))
        {
            m &= CT_RESERVED;
        }
        m
    }

    /// The domain of `key` on a claim in the state (reqs, types, masks).
    fn claim_dom(&self, claim: &Claim, reqs: &Requirements, zm: u64, ctm: u8, key: &str) -> Dom {
        if key == labels::HOSTNAME {
            return Dom::Known(Some(claim.host));
        }
        if key == labels::ZONE {
            return if zm.count_ones() == 1 {
                Dom::Known(Some(self.zone_dom[zm.trailing_zeros() as usize]))
            } else {
                Dom::Undecided
            };
        }
        if key == labels::CAPACITY_TYPE {
            return match ctm {
                CT_SPOT => Dom::Known(Some(self.ct_dom[0])),
                CT_ON_DEMAND => Dom::Known(Some(self.ct_dom[1])),
                CT_RESERVED => Dom::Known(Some(self.ct_dom[2])),
                _ => Dom::Undecided,
            };
        }
        if key == labels::KARPENTER_NODEPOOL || key == labels::JOINER_NODEPOOL {
            return Dom::Known(self.topo.domains.get(&self.pools[claim.pool].input.name));
        }
        if let Some(r) = reqs.get(key) {
            if let Some(v) = r.single_value() {
                return Dom::Known(self.topo.domains.get(v));
            }
            // A NodePool-defined domain (`capacity-spread In [1,2,3,4]`): the claim picks one.
            if r.finite_values().is_some_and(|v| v.len() > 1) {
                return Dom::Undecided;
            }
        }
        if is_type_label(key) {
            return Dom::Undecided;
        }
        Dom::Absent
    }

    /// Checks whether pod `i` can join `claim` and how the claim changes if it does.
    pub(crate) fn evaluate(
        &mut self,
        claim: &Claim,
        i: usize,
        att: Attempt,
        mins: &[i32],
        is_new: bool,
    ) -> Result<Update, String> {
        let p = claim.pool;
        if !self.infos[i].tolerated[p] {
            return Err(self.infos[i].untolerated_reason[p]
                .clone()
                .unwrap_or_default());
        }
        let term_empty = self.terms.list[att.term as usize].is_empty();
        let pool_types = if term_empty {
            None
        } else {
            Some(self.types_for(p, att.term)?)
        };
        self.evaluate_with(claim, i, att, mins, is_new, pool_types)
    }

    fn evaluate_with(
        &self,
        claim: &Claim,
        i: usize,
        att: Attempt,
        mins: &[i32],
        is_new: bool,
        pool_types: Option<Bitset>,
    ) -> Result<Update, String> {
        let mut u = Update {
            reqs: None,
            types: None,
            zone_mask: claim.zone_mask,
            ct_mask: claim.ct_mask,
            target: claim.target,
            hold: claim.hold,
            penalty: 0,
        };
        if let Some(pt) = pool_types {
            self.apply_term(claim, att, is_new, pt, &mut u)?;
        }
        self.narrow_topology(claim, i, att, mins, &mut u)?;
        self.settle_target(claim, i, is_new, &mut u)?;
        Ok(u)
    }

    /// Intersects the claim with the attempt's requirement term (and the pool's types for
    /// it): an existing claim must be compatible with the term, and some zone and capacity
    /// type must be left.
    fn apply_term(
        &self,
        claim: &Claim,
        att: Attempt,
        is_new: bool,
        pool_types: Bitset,
        u: &mut Update,
    ) -> Result<(), String> {
        let term = &self.terms.list[att.term as usize];
        if !is_new {
            claim
                .reqs
                .compatible(term)
                .map_err(|e| format!("incompatible requirements: {e}"))?;
        }
        u.types = Some(claim.types.and(&pool_types));
        u.reqs = Some(claim.reqs.intersect(term));
        u.zone_mask &= self.zone_mask_of(term);
        u.ct_mask &= Self::ct_mask_of(term);
        if u.zone_mask == 0 {
            return Err(format!(
                "no allowed zone satisfies {} {}",
                labels::ZONE,
                term.get(labels::ZONE)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            ));
        }
        if u.ct_mask == 0 {
            return Err(format!(
                "no allowed capacity type satisfies {} {}",
                labels::CAPACITY_TYPE,
                term.get(labels::CAPACITY_TYPE)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Narrows every topology key the pod involves to one domain the constraints allow
    /// (scoring the preferences on scored attempts); a key already decided is checked.
    fn narrow_topology(
        &self,
        claim: &Claim,
        i: usize,
        att: Attempt,
        mins: &[i32],
        u: &mut Update,
    ) -> Result<(), String> {
        for key in &self.infos[i].keys {
            let cur_reqs = u.reqs.as_ref().unwrap_or(&claim.reqs);
            let cur_types = u.types.as_ref().unwrap_or(&claim.types);
            let (zm, ctm) = (u.zone_mask, u.ct_mask);
            match self.claim_dom(claim, cur_reqs, zm, ctm, key) {
                Dom::Undecided => {
                    let best =
                        self.best_domain(claim, i, att, mins, key, cur_types, cur_reqs, zm, ctm)?;
                    if att.score {
                        u.penalty += best.0;
                    }
                    match best.3 {
                        Narrow::Zone(bit) => u.zone_mask = 1 << bit,
                        Narrow::Ct(bit) => u.ct_mask = bit,
                        Narrow::Requirement => {
                            let mut r = cur_reqs.clone();
                            r.add(key, Requirement::one(&best.1));
                            u.reqs = Some(r);
                        }
                        Narrow::TypeLabel => {
                            let value = best.1;
                            let mut b = Bitset::empty(self.catalog.types.len());
                            for t in cur_types.iter() {
                                if self.catalog.types[t].labels.get(key) == Some(&value) {
                                    b.set(t);
                                }
                            }
                            let mut r = cur_reqs.clone();
                            r.add(key, Requirement::one(&value));
                            u.types = Some(b);
                            u.reqs = Some(r);
                        }
                    }
                }
                dom => {
                    self.check_domain(i, att, key, dom, mins)
                        .map_err(|r| r.message(key))?;
                    if att.score {
                        if let Dom::Known(d) = dom {
                            u.penalty += self.soft_penalty(i, key, d);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Settles the claim's target type (and reservation) with the pod on it, and holds the
    /// pool's minValues over the types still fitting.
    fn settle_target(
        &self,
        claim: &Claim,
        i: usize,
        is_new: bool,
        u: &mut Update,
    ) -> Result<(), String> {
        let p = claim.pool;
        let pool = &self.pools[p];
        let types_ref = u.types.as_ref().unwrap_or(&claim.types);
        let need = claim.used.plus(&self.requests[i]);
        let cur_reqs = u.reqs.as_ref().unwrap_or(&claim.reqs);
        let (zm, ctm) = (u.zone_mask, u.ct_mask);
        // A reserved claim keeps its place while the place suits the pod; a market claim
        // keeps its target while the market offers it.
        let keep = !is_new
            && types_ref.get(claim.target)
            && need.fits_in(&pool.alloc[claim.target])
            && match claim.hold {
                Some(h) => {
                    zm & (1 << h.offer.zone) != 0
                        && ctm & CT_RESERVED != 0
                        && self.reservation_allowed(h, cur_reqs)
                }
                None => pool.market_viable(claim.target, zm, ctm),
            };
        let (target, hold) = if keep {
            (claim.target, claim.hold)
        } else {
            let own =
                (claim.target != usize::MAX).then(|| &self.catalog.types[claim.target].capacity);
            self.choose_target(p, types_ref, zm, ctm, &need, own, claim.hold, cur_reqs)?
        };
        if let Some(h) = hold {
            u.zone_mask = 1 << h.offer.zone;
            u.ct_mask = CT_RESERVED;
        }
        // A reservation pins the type; minValues (flexibility for the market) does not apply.
        if pool.has_min_values
            && pool.input.min_values_policy == MinValuesPolicy::Strict
            && hold.is_none()
        {
            let fitting: Vec<&std::collections::BTreeMap<String, String>> = types_ref
                .iter()
                .filter(|&t| pool.viable(t, zm, ctm) && need.fits_in(&pool.alloc[t]))
                .map(|t| &self.catalog.types[t].labels)
                .collect();
            cur_reqs.check_min_values(fitting.iter().copied())?;
        }
        u.target = target;
        u.hold = hold;
        Ok(())
    }

    /// The domain to narrow an open topology `key` of the claim to: the best-scoring (then
    /// the first by value) of those the pod's constraints allow, with how to narrow to it.
    #[allow(clippy::too_many_arguments)]
    fn best_domain(
        &self,
        claim: &Claim,
        i: usize,
        att: Attempt,
        mins: &[i32],
        key: &str,
        cur_types: &Bitset,
        cur_reqs: &Requirements,
        zm: u64,
        ctm: u8,
    ) -> Result<(i64, String, u32, Narrow), String> {
        let mut options: Vec<(i64, String, u32, Narrow)> = Vec::new();
        let mut last_err = None;
        let mut domains = self.domain_options(claim.pool, key, cur_types, cur_reqs, zm, ctm);
        if att.score && key == labels::ZONE {
            self.keep_affordable_zones(
                claim,
                &mut domains,
                cur_types,
                cur_reqs,
                zm,
                ctm,
                &claim.used.plus(&self.requests[i]),
            );
        }
        for (value, d, narrow) in domains {
            match self.check_domain(i, att, key, Dom::Known(d), mins) {
                Ok(()) => {
                    let score = self.domain_score(i, att, key, d);
                    options.push((score, value, d.unwrap_or(u32::MAX), narrow));
                }
                Err(e) => last_err = Some(e.message(key)),
            }
        }
        options
            .into_iter()
            .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
            .ok_or_else(|| {
                last_err.unwrap_or_else(|| format!("no instance type offers a {key} domain"))
            })
    }

    /// Scored attempts keep a soft zone spread from sending a pod to a zone where only
    /// dearer types are offered (a GPU-only zone, say): zones where the claim's target
    /// (or, for a new claim, the type it would get) is not offered are dropped, unless
    /// that leaves none.
    #[allow(clippy::too_many_arguments)]
    fn keep_affordable_zones(
        &self,
        claim: &Claim,
        domains: &mut Vec<(String, Option<u32>, Narrow)>,
        types: &Bitset,
        reqs: &Requirements,
        zm: u64,
        ctm: u8,
        need: &Resources,
    ) {
        let pool = &self.pools[claim.pool];
        let target = if claim.target != usize::MAX
            && types.get(claim.target)
            && need.fits_in(&pool.alloc[claim.target])
        {
            claim.target
        } else {
            match self.choose_target(claim.pool, types, zm, ctm, need, None, claim.hold, reqs) {
                Ok((t, _)) => t,
                Err(_) => return,
            }
        };
        let ok = pool.zones_of(target, zm, ctm);
        let any = domains
            .iter()
            .any(|(_, _, n)| matches!(n, Narrow::Zone(b) if ok & (1 << b) != 0));
        if any {
            domains.retain(|(_, _, n)| matches!(n, Narrow::Zone(b) if ok & (1 << b) != 0));
        }
    }

    /// Lower is better: the count of the pod's first spread on `key` (so spreads fill the
    /// emptiest domain), else the counts of the groups it belongs to on `key`.
    fn domain_score(&self, i: usize, att: Attempt, key: &str, d: Option<u32>) -> i64 {
        let count = |g: u32| {
            d.map(|d| self.topo.groups[g as usize].count(d))
                .unwrap_or(0) as i64
        };
        let info = &self.infos[i];
        if let Some(sp) = info
            .spreads
            .iter()
            .find(|s| (s.hard || att.soft) && self.topo.groups[s.group as usize].key == key)
        {
            return count(sp.group);
        }
        if att.score {
            return self.soft_penalty(i, key, d);
        }
        info.member_of
            .iter()
            .filter(|g| self.topo.groups[**g as usize].key == key)
            .map(|g| count(*g))
            .sum()
    }

    /// The domains an undecided key could take on this claim, with how to narrow to each.
    fn domain_options(
        &self,
        p: usize,
        key: &str,
        types: &Bitset,
        reqs: &Requirements,
        zm: u64,
        ctm: u8,
    ) -> Vec<(String, Option<u32>, Narrow)> {
        let pool = &self.pools[p];
        let mut out = Vec::new();
        if key == labels::ZONE {
            let mut m = 0;
            for t in types.iter() {
                m |= pool.zones_of(t, zm, ctm);
            }
            for (b, name) in self.zones.names.iter().enumerate() {
                if m & (1 << b) != 0 {
                    out.push((name.clone(), Some(self.zone_dom[b]), Narrow::Zone(b)));
                }
            }
        } else if key == labels::CAPACITY_TYPE {
            let (mut spot, mut od, mut res) = (false, false, false);
            for t in types.iter() {
                spot |= ctm & CT_SPOT != 0 && pool.spot_zones[t] & zm != 0;
                od |= ctm & CT_ON_DEMAND != 0 && pool.od_zones[t] & zm != 0;
                res |= ctm & CT_RESERVED != 0
                    && pool.res_zones[t] & zm != 0
                    && pool.reserved.get(&t).is_some_and(|offers| {
                        offers
                            .iter()
                            .any(|o| zm & (1 << o.zone) != 0 && self.ledger.left(o.res, None) > 0)
                    });
            }
            // "0"/"1"/"2" sort Spot first when counts tie: Spot is preferred (a reservation
            // is already preferred by price when the capacity type is left open).
            if spot {
                out.push(("0".into(), Some(self.ct_dom[0]), Narrow::Ct(CT_SPOT)));
            }
            if od {
                out.push(("1".into(), Some(self.ct_dom[1]), Narrow::Ct(CT_ON_DEMAND)));
            }
            if res {
                out.push(("2".into(), Some(self.ct_dom[2]), Narrow::Ct(CT_RESERVED)));
            }
        } else if is_type_label(key) {
            let values: BTreeSet<&String> = types
                .iter()
                .filter(|&t| pool.viable(t, zm, ctm))
                .filter_map(|t| self.catalog.types[t].labels.get(key))
                .collect();
            for v in values {
                out.push((v.clone(), self.topo.domains.get(v), Narrow::TypeLabel));
            }
        } else if let Some(values) = reqs.get(key).and_then(|r| r.finite_values()) {
            for v in values {
                out.push((v.clone(), self.topo.domains.get(v), Narrow::Requirement));
            }
        }
        out
    }

    /// The target type for a claim that must hold `need` (see [`super::sizing`]), and its
    /// place in a capacity reservation when one has room (see [`super::reserved`]).
    #[allow(clippy::too_many_arguments)]
    fn choose_target(
        &self,
        p: usize,
        types: &Bitset,
        zm: u64,
        ctm: u8,
        need: &Resources,
        own: Option<&Resources>,
        own_hold: Option<Hold>,
        reqs: &Requirements,
    ) -> Result<(usize, Option<Hold>), String> {
        let pool = &self.pools[p];
        let mut others = self.committed[p].clone();
        if let Some(o) = own {
            others.sub(&one_node(o));
        }
        if ctm & CT_RESERVED != 0 && !pool.reserved.is_empty() {
            if let Some(h) = self.reserved_target(p, types, zm, ctm, need, own_hold, reqs, &others)
            {
                return Ok((h.t, Some(h)));
            }
        }
        if ctm == CT_RESERVED {
            return Err(format!(
                "no capacity reservation of the nodepool's NodeClass has room for {}",
                describe(need)
            ));
        }
        let mut opts = Vec::new();
        let mut limit = None;
        for t in types.iter() {
            if !pool.market_viable(t, zm, ctm) || !need.fits_in(&pool.alloc[t]) {
                continue;
            }
            let cap = &self.catalog.types[t].capacity;
            if pool.has_limits && !pool.within_limits(&others, cap) {
                if limit.is_none() {
                    limit = pool.exceeded_limit(&others, cap);
                }
                continue;
            }
            opts.push(TargetOption {
                index: t,
                alloc: &pool.alloc[t],
                price: pool.price[t],
            });
        }
        if opts.is_empty() {
            if let Some(l) = limit {
                return Err(format!("limit {l} reached"));
            }
            let shown: Requirements = {
                let mut r = Requirements::new();
                for (k, v) in reqs.iter() {
                    if k != labels::KARPENTER_NODEPOOL && k != labels::JOINER_NODEPOOL {
                        r.add(k, v.clone());
                    }
                }
                r
            };
            let mut msg = format!("no instance type offers {}", describe(need));
            if !shown.is_empty() {
                msg.push_str(&format!(" with {shown}"));
            }
            if !self.input.unavailable.is_empty() {
                msg.push_str(" (some offerings are marked unavailable)");
            }
            return Err(msg);
        }
        if pool.has_limits {
            // Under a limit, a claim reserves the smallest type that holds what it has
            // (it grows as pods join): sizing for the whole demand would reserve headroom
            // that pods which cannot share a node never use. Candidates are widened
            // within what the other claims leave when the claim is finalised.
            return Ok((self.smallest_for_limits(p, &opts, &others), None));
        }
        Ok((
            pick_target(&opts, &self.demand).expect("options are not empty"),
            None,
        ))
    }

    /// Whether the reservation of `h` meets `reqs`' zone, capacity type and reservation
    /// labels (a pod may require `capacity-reservation-type In [capacity-block]`).
    fn reservation_allowed(&self, h: Hold, reqs: &Requirements) -> bool {
        let o = &self.catalog.types[h.t].offerings[h.offer.offering];
        crate::catalog::offering_allowed(o, reqs)
    }

    /// A place in a reservation for a claim that must hold `need`: among the pool's
    /// reservations with room in the claim's zones that fit it (and its limits), the type
    /// the sizing estimate prefers at reservation prices, in the zone with the most room.
    /// GPU, accelerator and metal reservations are taken only when no ordinary type fits.
    #[allow(clippy::too_many_arguments)]
    fn reserved_target(
        &self,
        p: usize,
        types: &Bitset,
        zm: u64,
        ctm: u8,
        need: &Resources,
        own_hold: Option<Hold>,
        reqs: &Requirements,
        others: &Resources,
    ) -> Option<Hold> {
        let pool = &self.pools[p];
        let mut holds: Vec<Hold> = Vec::new();
        for (&t, offers) in &pool.reserved {
            if !types.get(t) || !need.fits_in(&pool.alloc[t]) {
                continue;
            }
            if pool.has_limits && !pool.within_limits(others, &self.catalog.types[t].capacity) {
                continue;
            }
            let best = offers
                .iter()
                .filter(|o| zm & (1 << o.zone) != 0)
                .filter(|o| self.ledger.left(o.res, own_hold) > 0)
                .filter(|o| self.reservation_allowed(Hold { t, offer: **o }, reqs))
                .max_by(|a, b| {
                    let (la, lb) = (
                        self.ledger.left(a.res, own_hold),
                        self.ledger.left(b.res, own_hold),
                    );
                    la.cmp(&lb)
                        .then(b.zone.cmp(&a.zone))
                        .then(b.res.cmp(&a.res))
                });
            if let Some(o) = best {
                holds.push(Hold { t, offer: *o });
            }
        }
        let exotic = |t: usize| self.exotic.get(t);
        if holds.iter().any(|h| exotic(h.t)) {
            let ordinary = types
                .iter()
                .any(|t| !exotic(t) && pool.viable(t, zm, ctm) && need.fits_in(&pool.alloc[t]));
            if ordinary {
                holds.retain(|h| !exotic(h.t));
            }
        }
        let opts: Vec<TargetOption<'_>> = holds
            .iter()
            .map(|h| TargetOption {
                index: h.t,
                alloc: &pool.alloc[h.t],
                price: self.catalog.types[h.t].offerings[h.offer.offering].price,
            })
            .collect();
        let t = pick_target(&opts, &self.demand)?;
        holds.into_iter().find(|h| h.t == t)
    }

    /// The option using the least of the pool's remaining limit (the largest fraction
    /// over its limited resources), then the cheapest, then the lowest index.
    fn smallest_for_limits(
        &self,
        p: usize,
        opts: &[TargetOption<'_>],
        others: &Resources,
    ) -> usize {
        let pool = &self.pools[p];
        let share = |t: usize| -> f64 {
            let cap = &self.catalog.types[t].capacity;
            pool.input
                .limits
                .iter()
                .map(|(k, lim)| {
                    let left =
                        (*lim - resource_value(&pool.input.usage, k) - resource_value(others, k))
                            .max(1);
                    resource_value(&one_node(cap), k) as f64 / left as f64
                })
                .fold(0.0, f64::max)
        };
        opts.iter()
            .map(|o| (share(o.index), o.price, o.index))
            .min_by(|a, b| {
                a.0.total_cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.cmp(&b.2))
            })
            .map(|x| x.2)
            .expect("options are not empty")
    }

    pub(crate) fn commit_claim(&mut self, c: usize, i: usize, u: Update, pos: usize) {
        let p = self.claims[c].pool;
        self.ledger.transfer(self.claims[c].hold, u.hold);
        let old = self.claims[c].target;
        if old != u.target {
            if old != usize::MAX {
                let cap = one_node(&self.catalog.types[old].capacity);
                self.committed[p].sub(&cap);
            }
            let cap = one_node(&self.catalog.types[u.target].capacity);
            self.committed[p].add(&cap);
        }
        {
            let claim = &mut self.claims[c];
            if let Some(r) = u.reqs {
                claim.reqs = r;
            }
            if let Some(t) = u.types {
                claim.types = t;
            }
            claim.zone_mask = u.zone_mask;
            claim.ct_mask = u.ct_mask;
            claim.target = u.target;
            claim.hold = u.hold;
            claim.used.add(&self.requests[i]);
            claim.pods.push(i);
        }
        let claim = std::mem::replace(&mut self.claims[c], Claim::placeholder());
        let mut doms = Vec::with_capacity(self.infos[i].keys.len());
        for k in 0..self.infos[i].keys.len() {
            let key = self.infos[i].keys[k].clone();
            let d = match self.claim_dom(&claim, &claim.reqs, claim.zone_mask, claim.ct_mask, &key)
            {
                Dom::Known(Some(d)) => Some(d),
                Dom::Known(None) => {
                    // A value no pod was counted in yet: intern it now.
                    if key == labels::KARPENTER_NODEPOOL || key == labels::JOINER_NODEPOOL {
                        Some(self.topo.domains.id(&self.pools[p].input.name.clone()))
                    } else {
                        claim
                            .reqs
                            .get(&key)
                            .and_then(|r| r.single_value())
                            .map(|v| v.to_string())
                            .map(|v| self.topo.domains.id(&v))
                    }
                }
                _ => None,
            };
            doms.push((key, d));
        }
        let free = self.pools[p].alloc[claim.target].minus(&claim.used);
        let full = free.pods < 1
            || free.cpu_milli < self.min_cpu
            || free.memory_bytes < self.suffix_min_mem[pos + 1];
        self.claims[c] = claim;
        self.count_pod(i, &doms);
        if full && self.claims[c].open {
            self.claims[c].open = false;
            self.closed_in_open += 1;
            if self.closed_in_open * 2 > self.open.len() && self.open.len() > 16 {
                let claims = &self.claims;
                self.open.retain(|&c| claims[c].open);
                self.closed_in_open = 0;
            }
        }
    }
}

pub(crate) enum Narrow {
    Zone(usize),
    Ct(u8),
    TypeLabel,
    /// One of the values a NodePool requirement lists.
    Requirement,
}

fn describe(r: &Resources) -> String {
    let mut parts = vec![
        format!("cpu={}", crate::resources::fmt_cpu(r.cpu_milli)),
        format!("memory={}", crate::resources::fmt_bytes(r.memory_bytes)),
    ];
    if r.ephemeral_storage_bytes > 0 {
        parts.push(format!(
            "ephemeral-storage={}",
            crate::resources::fmt_bytes(r.ephemeral_storage_bytes)
        ));
    }
    for (k, v) in &r.extended {
        if *v > 0 {
            parts.push(format!("{k}={v}"));
        }
    }
    parts.join(" ")
}
