//! Preferences with a price.
//!
//! Karpenter honours ScheduleAnyway spreads and preferred affinities as if they were
//! required until a pod cannot schedule: a soft hostname spread then launches one node per
//! pod, and a soft zone spread reaches zones where only exotic types are offered
//! (kubernetes-sigs/karpenter #666, aws/karpenter-provider-aws #4666). Here a round is
//! planned up to three times, and the first plan that costs at most
//! `1 + Input::preference_budget` times the plan without preferences (and schedules as
//! many pods) wins:
//! 1. [`Mode::Full`]: every preference honoured as a constraint, relaxed per pod only when
//!    it cannot fit;
//! 2. [`Mode::Spread`]: the capacity the plan without preferences launches is opened up
//!    front, and preferences only choose among it (emptiest domain first) — pods spread
//!    over the nodes the round launches anyway, new claims open only when nothing fits;
//! 3. [`Mode::Hard`]: preferences ignored.
//!
//! Required constraints keep their exact semantics in every pass. Pods without
//! preferences cost one pass, as before.

use crate::catalog::Catalog;

use super::input::{Input, Plan, PreferenceMode, PreferenceReport, WhenUnsatisfiable};
use super::{Mode, Scheduler};

/// $/h of a plan's new NodeClaims, each at its cheapest candidate.
pub fn plan_cost(plan: &Plan) -> f64 {
    plan.new_claims
        .iter()
        .filter_map(|c| c.instance_types.first())
        .map(|t| t.price)
        .sum()
}

fn scheduled(plan: &Plan) -> usize {
    plan.placements.len() + plan.new_claims.iter().map(|c| c.pods.len()).sum::<usize>()
}

pub(crate) fn schedule_priced(catalog: &Catalog, input: &Input) -> Plan {
    let full = Scheduler::new(catalog, input, Mode::Full);
    if !full.has_preferences() {
        return full.run().0;
    }
    let (mut full, _) = full.run();
    let (mut hard, shapes) = Scheduler::new(catalog, input, Mode::Hard).run();
    let budget = input.preference_budget.0.max(0.0);
    let (cost_full, cost_hard) = (plan_cost(&full), plan_cost(&hard));
    let affordable = |plan: &Plan, cost: f64| {
        scheduled(plan) >= scheduled(&hard) && cost <= cost_hard * (1.0 + budget) + 1e-9
    };
    let mut report = PreferenceReport {
        mode: PreferenceMode::Honoured,
        cost_honoured: cost_full,
        cost_without: cost_hard,
        cost_chosen: cost_full,
        relaxed: Vec::new(),
    };
    if affordable(&full, cost_full) {
        full.preferences = report;
        return full;
    }
    let mut spread = Scheduler::new(catalog, input, Mode::Spread);
    spread.preopen(&shapes);
    let (mut spread, _) = spread.run();
    let cost_spread = plan_cost(&spread);
    let (mut chosen, mode, cost) = if affordable(&spread, cost_spread) {
        (
            std::mem::take(&mut spread),
            PreferenceMode::WithinLaunchedCapacity,
            cost_spread,
        )
    } else {
        (
            std::mem::take(&mut hard),
            PreferenceMode::Ignored,
            cost_hard,
        )
    };
    report.mode = mode;
    report.cost_chosen = cost;
    report.relaxed = relaxed(input, mode);
    chosen.preferences = report;
    chosen
}

/// Every preference of every pod that the chosen pass did not honour as a constraint.
fn relaxed(input: &Input, mode: PreferenceMode) -> Vec<(usize, Vec<String>)> {
    let how = match mode {
        PreferenceMode::WithinLaunchedCapacity => "honoured over launched capacity only",
        _ => "ignored",
    };
    let mut out = Vec::new();
    for (i, p) in input.pods.iter().enumerate() {
        let mut list = Vec::new();
        for (k, s) in p.topology_spread.iter().enumerate() {
            if s.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway {
                list.push(format!(
                    "topologySpreadConstraints[{k}] on {} (ScheduleAnyway): {how}",
                    s.topology_key
                ));
            }
        }
        for (k, (w, _)) in p.preferred_node_affinity.iter().enumerate() {
            list.push(format!("preferred node affinity [{k}] (weight {w}): {how}"));
        }
        for (k, (w, t)) in p.preferred_pod_affinity.iter().enumerate() {
            list.push(format!(
                "preferred pod affinity [{k}] on {} (weight {w}): {how}",
                t.topology_key
            ));
        }
        for (k, (w, t)) in p.preferred_pod_anti_affinity.iter().enumerate() {
            list.push(format!(
                "preferred pod anti-affinity [{k}] on {} (weight {w}): {how}",
                t.topology_key
            ));
        }
        if !list.is_empty() {
            out.push((i, list));
        }
    }
    out
}
