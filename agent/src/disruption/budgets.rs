//! Disruption budgets: how many of a NodePool's nodes may be voluntarily disrupted at once.
//!
//! As in Karpenter v1: each budget caps nodes as a count (`5`) or a percentage of the pool's
//! nodes (`10%`, rounded up), optionally only inside a cron window (`schedule` +
//! `duration`), optionally only for some reasons. The strictest budget in force for a reason
//! wins; with no budget in force the reason is unlimited. Nodes already being disrupted use
//! up the allowance. Interruption handling never asks: the node is going anyway.

use crate::api::cron::Schedule;

/// Why a node is voluntarily disrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    Empty,
    Underutilized,
    Drifted,
    Expired,
}

impl Reason {
    pub const ALL: [Reason; 4] = [
        Reason::Empty,
        Reason::Underutilized,
        Reason::Drifted,
        Reason::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    Count(u32),
    Percent(u32),
}

impl Nodes {
    pub fn parse(s: &str) -> Result<Nodes, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let p: u32 = p
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage"))?;
            if p > 100 {
                return Err(format!("{s:?} is over 100%"));
            }
            Ok(Nodes::Percent(p))
        } else {
            s.parse()
                .map(Nodes::Count)
                .map_err(|_| format!("{s:?} is neither a node count nor a percentage"))
        }
    }

    /// Nodes allowed out of `total` (percentages round up, as Karpenter's do).
    pub fn of(self, total: usize) -> usize {
        match self {
            Nodes::Count(n) => n as usize,
            Nodes::Percent(p) => (total * p as usize).div_ceil(100),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub nodes: Nodes,
    /// The window: schedule and its duration in seconds.
    pub window: Option<(Schedule, u64)>,
    /// Empty: every reason.
    pub reasons: Vec<Reason>,
}

impl Budget {
    pub fn applies_to(&self, reason: Reason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }

    pub fn in_force(&self, now: i64) -> bool {
        match &self.window {
            None => true,
            Some((s, d)) => s.active(now, *d),
        }
    }
}

/// A NodePool's budgets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Budgets(pub Vec<Budget>);

impl Budgets {
    /// From the API, errors naming `spec.disruption.budgets[i].<field>`.
    pub fn from_api(budgets: &[crate::api::node_pool::Budget]) -> Result<Budgets, String> {
        let mut out = Vec::new();
        for (i, b) in budgets.iter().enumerate() {
            let path = format!("spec.disruption.budgets[{i}]");
            let nodes = Nodes::parse(&b.nodes).map_err(|e| format!("{path}.nodes: {e}"))?;
            let window = match (&b.schedule, &b.duration) {
                (None, None) => None,
                (Some(s), Some(d)) => Some((
                    Schedule::parse(s).map_err(|e| format!("{path}.schedule: {e}"))?,
                    crate::api::duration::parse_seconds(d)
                        .map_err(|e| format!("{path}.duration: {e}"))?,
                )),
                _ => {
                    return Err(format!(
                        "{path}: schedule and duration must be set together"
                    ))
                }
            };
            let reasons = b
                .reasons
                .iter()
                .map(|r| {
                    Reason::parse(r).ok_or_else(|| {
                        format!(
                            "{path}.reasons: {r:?} is not one of Empty, Underutilized, Drifted, Expired"
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            out.push(Budget {
                nodes,
                window,
                reasons,
            });
        }
        Ok(Budgets(out))
    }

    /// How many nodes may be disrupting for `reason` at `now` in a pool of `total` nodes
    /// (`usize::MAX` when no budget is in force).
    pub fn limit(&self, reason: Reason, total: usize, now: i64) -> usize {
        self.strictest(reason, total, now)
            .map_or(usize::MAX, |(_, nodes)| nodes)
    }

    /// The budget that sets [`Budgets::limit`] (its index, first of equals) and its node
    /// count, or None when none is in force: what a plan names as the pace of replacement.
    pub fn strictest(&self, reason: Reason, total: usize, now: i64) -> Option<(usize, usize)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, b)| b.applies_to(reason) && b.in_force(now))
            .map(|(i, b)| (i, b.nodes.of(total)))
            .min_by_key(|&(i, nodes)| (nodes, i))
    }

    /// How many more nodes may start disrupting, given `disrupting` already are.
    pub fn allowed(&self, reason: Reason, total: usize, disrupting: usize, now: i64) -> usize {
        self.limit(reason, total, now).saturating_sub(disrupting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_pool::Budget as ApiBudget;
    use proptest::prelude::*;

    const MON_0000: i64 = 1_795_392_000;

    fn b(
        nodes: &str,
        schedule: Option<&str>,
        duration: Option<&str>,
        reasons: &[&str],
    ) -> ApiBudget {
        ApiBudget {
            nodes: nodes.into(),
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn nodes_values() {
        assert_eq!(Nodes::parse("10%").unwrap().of(25), 3);
        assert_eq!(Nodes::parse("10%").unwrap().of(5), 1);
        assert_eq!(Nodes::parse("0%").unwrap().of(100), 0);
        assert_eq!(Nodes::parse("3").unwrap().of(1), 3);
        assert!(Nodes::parse("101%").is_err());
        assert!(Nodes::parse("-1").is_err());
        assert!(Nodes::parse("ten").unwrap_err().contains("neither"));
    }

    #[test]
    fn strictest_in_force_wins() {
        let budgets = Budgets::from_api(&[
            b("10%", None, None, &[]),
            b("0", Some("0 9 * * mon-fri"), Some("8h"), &["Underutilized"]),
            b("1", None, None, &["Drifted"]),
        ])
        .unwrap();
        let in_hours = MON_0000 + 10 * 3600;
        let at_night = MON_0000 + 20 * 3600;
        assert_eq!(budgets.limit(Reason::Underutilized, 50, in_hours), 0);
        assert_eq!(budgets.limit(Reason::Underutilized, 50, at_night), 5);
        assert_eq!(budgets.limit(Reason::Empty, 50, in_hours), 5);
        assert_eq!(budgets.limit(Reason::Drifted, 50, in_hours), 1);
        assert_eq!(budgets.allowed(Reason::Empty, 50, 4, in_hours), 1);
        assert_eq!(budgets.allowed(Reason::Empty, 50, 7, in_hours), 0);
        assert_eq!(Budgets::default().limit(Reason::Expired, 3, 0), usize::MAX);
    }

    #[test]
    fn api_errors_name_the_field() {
        let e =
            Budgets::from_api(&[b("10%", None, None, &[]), b("x", None, None, &[])]).unwrap_err();
        assert!(e.starts_with("spec.disruption.budgets[1].nodes"), "{e}");
        let e = Budgets::from_api(&[b("1", Some("@daily"), None, &[])]).unwrap_err();
        assert!(e.contains("together"), "{e}");
        let e = Budgets::from_api(&[b("1", Some("bad"), Some("1h"), &[])]).unwrap_err();
        assert!(e.starts_with("spec.disruption.budgets[0].schedule"), "{e}");
        let e = Budgets::from_api(&[b("1", None, None, &["Lonely"])]).unwrap_err();
        assert!(e.contains("reasons"), "{e}");
    }

    proptest! {
        /// Adding a budget never allows more; the allowance never exceeds any budget in force.
        #[test]
        fn adding_budgets_only_tightens(
            counts in proptest::collection::vec((0u32..20, any::<bool>(), 0usize..4), 1..6),
            total in 0usize..200,
            disrupting in 0usize..10,
            hour in 0i64..24,
        ) {
            let now = MON_0000 + hour * 3600;
            let api: Vec<ApiBudget> = counts.iter().map(|(n, pct, r)| {
                let nodes = if *pct { format!("{}%", n * 5) } else { n.to_string() };
                let reasons: &[&str] = match r { 0 => &[], 1 => &["Empty"], 2 => &["Drifted"], _ => &["Underutilized", "Empty"] };
                b(&nodes, (hour % 2 == 0).then_some("0 9 * * *"), (hour % 2 == 0).then_some("4h"), reasons)
            }).collect();
            for reason in Reason::ALL {
                let mut prev = usize::MAX;
                for k in 1..=api.len() {
                    let budgets = Budgets::from_api(&api[..k]).unwrap();
                    let a = budgets.allowed(reason, total, disrupting, now);
                    prop_assert!(a <= prev);
                    prev = a;
                    for bud in &budgets.0 {
                        if bud.applies_to(reason) && bud.in_force(now) {
                            prop_assert!(a + disrupting <= bud.nodes.of(total).max(disrupting));
                        }
                    }
                }
            }
        }
    }
}
