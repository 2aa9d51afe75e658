//! Karpenter v1.14's `Balanced` consolidation policy: a move (nodes deleted, at most one
//! replacement) is made only when the share of the pool's cost it saves is at least half
//! the share of the pool's disruption it causes (score ≥ 1/k with k = 2).
//!
//! Why fractions of the pool: the same $0.05/h means little to a $50/h pool and much to a
//! $0.50/h one, and evicting 4 pods means little among 4,000 and much among 40. Both sides
//! being fractions, the decision does not change with the pool's size.
//!
//! Disruption is counted as Karpenter counts it: every node costs 1 (cordon, drain, a
//! replacement's boot), every pod on it `max(0, EvictionCost)`, where EvictionCost is 1
//! plus `controller.kubernetes.io/pod-deletion-cost` / 2^27 plus priority / 2^25, clamped
//! to [-10, 10]. So a pod that says it is expensive to restart weighs up to ten plain pods,
//! and one that says it is free weighs nothing. Empty nodes always pass (they save a whole
//! node for the per-node cost alone), so the score gates only moves that evict pods.

/// Karpenter's `BalancedK`.
pub const K: f64 = 2.0;

/// What draining and replacing a node costs before any pod is counted.
pub const PER_NODE_COST: f64 = 1.0;

/// Karpenter's `EvictionCost` of one pod.
pub fn eviction_cost(priority: Option<i32>, deletion_cost: Option<f64>) -> f64 {
    let mut cost = 1.0;
    if let Some(d) = deletion_cost {
        cost += d / f64::from(1u32 << 27);
    }
    if let Some(p) = priority {
        cost += f64::from(p) / f64::from(1u32 << 25);
    }
    cost.clamp(-10.0, 10.0)
}

/// What evicting these pods costs in the score: negative costs count as 0.
pub fn pods_cost(costs: impl IntoIterator<Item = f64>) -> f64 {
    costs.into_iter().map(|c| c.max(0.0)).sum()
}

/// A pool's totals the fractions are taken of: every node's price, and every node's
/// disruption cost (`PER_NODE_COST` + its pods'), candidates or not.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub cost: f64,
    pub disruption: f64,
}

impl Totals {
    pub fn add_node(&mut self, price: f64, pods_cost: f64) {
        self.cost += price;
        self.disruption += PER_NODE_COST + pods_cost;
    }
}

/// A move's score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub savings_fraction: f64,
    pub disruption_fraction: f64,
}

impl Score {
    /// Savings share over disruption share; 0 when nothing is saved.
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 {
            0.0
        } else if self.disruption_fraction <= 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    pub fn approved(&self) -> bool {
        self.value() >= 1.0 / K
    }

    /// For Events: `score 0.42 < 0.50 (savings 4.2 %, disruption 10.0 %)`.
    pub fn describe(&self) -> String {
        format!(
            "score {:.2} {} {:.2} (savings {:.1} % of the pool's cost, disruption {:.1} % of its pods and nodes)",
            self.value(),
            if self.approved() { ">=" } else { "<" },
            1.0 / K,
            100.0 * self.savings_fraction,
            100.0 * self.disruption_fraction
        )
    }
}

/// Scores a move that saves `savings` $/h and disrupts nodes costing `disruption` in all
/// (per-node costs included), against its pool's `totals`.
pub fn score(savings: f64, disruption: f64, totals: Totals) -> Score {
    if totals.cost <= 0.0 || totals.disruption <= 0.0 {
        return Score {
            savings_fraction: 0.0,
            disruption_fraction: 1.0,
        };
    }
    Score {
        savings_fraction: savings / totals.cost,
        disruption_fraction: disruption / totals.disruption,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(prices: &[(f64, usize)]) -> Totals {
        let mut t = Totals::default();
        for &(p, pods) in prices {
            t.add_node(p, pods as f64);
        }
        t
    }

    /// Karpenter's RFC examples (prices per day; the score is the same per hour). Its pool
    /// totals count pods only (80); with the per-node cost the denominators grow by the node
    /// count, which moves each score a little but none across the threshold.
    #[test]
    fn the_rfc_examples_decide_as_karpenter_does() {
        // Eight m7i.xlarge at $4.84/day, two m7i.2xlarge at $9.68/day, 80 pods.
        let mut nodes: Vec<(f64, usize)> = (0..8).map(|_| (4.84, 8)).collect();
        nodes.push((9.68, 8));
        nodes.push((9.68, 8));
        let t = pool(&nodes);
        assert!((t.cost - 58.08).abs() < 1e-9);
        // Oversized node: 3 pods to an m7i.large, saving $7.26.
        assert!(score(7.26, PER_NODE_COST + 3.0, t).approved());
        // Spare capacity delete: 4 pods, saving a whole xlarge.
        assert!(score(4.84, PER_NODE_COST + 4.0, t).approved());
        // Marginal move: 8 pods for $2.42.
        let s = score(2.42, PER_NODE_COST + 8.0, t);
        assert!(!s.approved(), "{}", s.describe());
        // Well packed: nothing saved, never.
        assert!(!score(0.0, PER_NODE_COST + 10.0, t).approved());
    }

    #[test]
    fn the_score_does_not_depend_on_the_pool_size() {
        let small = pool(&(0..10).map(|_| (4.84, 8)).collect::<Vec<_>>());
        let big = pool(&(0..100).map(|_| (4.84, 8)).collect::<Vec<_>>());
        let a = score(2.42, 9.0, small).value();
        let b = score(2.42 * 10.0, 90.0, big).value();
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    }

    #[test]
    fn eviction_cost_follows_deletion_cost_and_priority() {
        assert_eq!(eviction_cost(None, None), 1.0);
        assert_eq!(eviction_cost(None, Some(2_147_483_647.0)), 10.0);
        assert_eq!(eviction_cost(None, Some(-2_147_483_647.0)), -10.0);
        assert!((eviction_cost(Some(1 << 25), None) - 2.0).abs() < 1e-12);
        assert_eq!(pods_cost([1.0, -3.0, 10.0]), 11.0);
    }

    #[test]
    fn an_expensive_pod_keeps_its_node() {
        // Same saving, same pod count: one node's pods are cheap to restart, the other's are
        // model servers with the highest deletion cost.
        let cheap = 4.0;
        let dear = 1.0 + 3.0 * eviction_cost(None, Some(2_147_483_647.0));
        let mut t = pool(&(0..8).map(|_| (4.84, 8)).collect::<Vec<_>>());
        t.add_node(4.84, cheap);
        t.add_node(4.84, dear);
        assert!(score(4.84, PER_NODE_COST + cheap, t).approved());
        assert!(!score(4.84, PER_NODE_COST + dear, t).approved());
    }
}
