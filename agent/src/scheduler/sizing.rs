//! Choosing how big a new NodeClaim may grow.
//!
//! Karpenter lets a claim grow to the largest compatible type and launches the cheapest
//! type that fits what landed on it. With real prices (linear within a family) that packs
//! everything into one large node whose size rarely matches the demand: 100 pods of
//! 250m/512Mi end on one 32-vCPU node at 78 % CPU. Instead, when a claim is opened, the
//! scheduler picks a *target* type for it by estimating the cost of serving the pods still
//! pending with nodes of each candidate type: full nodes of that type plus the cheapest type
//! that fits the remainder. The claim then accepts pods up to the target's allocatable; at
//! the end every claim is re-priced over all types that fit what it actually holds, so the
//! last, partly filled claim of a run gets a right-sized type.
//!
//! The estimate uses the average shape of the pending pods (CPU, memory, one pod slot), so
//! it is O(T log T) per opened claim and independent of the number of pods.

use crate::resources::Resources;

/// The pods still pending, summed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Demand {
    pub pods: i64,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

/// A type that can serve as target: index, allocatable (after DaemonSets), price.
pub(crate) struct TargetOption<'a> {
    pub index: usize,
    pub alloc: &'a Resources,
    pub price: f64,
}

/// How many average pods fit on `alloc`; at least 1 because the caller only offers types
/// that fit the pod at hand.
fn slots(alloc: &Resources, d: &Demand) -> i64 {
    let n = d.pods.max(1);
    let mut s = alloc.pods.max(1);
    if d.cpu_milli > 0 {
        s = s.min(alloc.cpu_milli * n / d.cpu_milli);
    }
    if d.memory_bytes > 0 {
        s = s.min(((alloc.memory_bytes as i128 * n as i128) / d.memory_bytes as i128) as i64);
    }
    s.max(1)
}

/// The target with the lowest estimated cost for the whole pending demand; ties go to
/// more slots (fewer nodes), then to the lower index (name order), so it is deterministic.
pub(crate) fn pick_target(options: &[TargetOption<'_>], demand: &Demand) -> Option<usize> {
    if options.is_empty() {
        return None;
    }
    let n = demand.pods.max(1);
    let mut by_slots: Vec<(i64, f64)> = options
        .iter()
        .map(|o| (slots(o.alloc, demand), o.price))
        .collect();
    by_slots.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // Cheapest price among types with at least k slots: suffix minimum over slots order.
    let mut suffix_min = vec![f64::INFINITY; by_slots.len() + 1];
    for i in (0..by_slots.len()).rev() {
        suffix_min[i] = suffix_min[i + 1].min(by_slots[i].1);
    }
    let cheapest_fitting = |k: i64| -> f64 {
        let i = by_slots.partition_point(|(s, _)| *s < k);
        suffix_min[i]
    };
    let mut best: Option<(f64, i64, usize)> = None;
    for o in options {
        let s = slots(o.alloc, demand);
        let full = n / s;
        let rem = n % s;
        let cost = if full == 0 {
            o.price
        } else {
            full as f64 * o.price + if rem > 0 { cheapest_fitting(rem) } else { 0.0 }
        };
        let better = match best {
            None => true,
            Some((c, bs, bi)) => {
                let eps = 1e-9 * c.abs().max(1.0);
                cost < c - eps || ((cost - c).abs() <= eps && (s > bs || (s == bs && o.index < bi)))
            }
        };
        if better {
            best = Some((cost, s, o.index));
        }
    }
    best.map(|b| b.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: i64, mem_gi: i64, pods: i64) -> Resources {
        Resources {
            cpu_milli: cpu,
            memory_bytes: mem_gi << 30,
            pods,
            ..Default::default()
        }
    }

    #[test]
    fn splits_demand_instead_of_one_big_node() {
        // Linear prices; the big type fits all 100 pods, but 3 mid-size nodes plus a small
        // one for the remainder cost less than one big node with idle capacity.
        let small = r(3_900, 7, 58);
        let mid = r(7_900, 15, 58);
        let big = r(31_800, 62, 234);
        let opts = [
            TargetOption {
                index: 0,
                alloc: &small,
                price: 0.153,
            },
            TargetOption {
                index: 1,
                alloc: &mid,
                price: 0.306,
            },
            TargetOption {
                index: 2,
                alloc: &big,
                price: 1.224,
            },
        ];
        let d = Demand {
            pods: 100,
            cpu_milli: 25_000,
            memory_bytes: 50 << 30,
        };
        assert_eq!(pick_target(&opts, &d), Some(1));
        // A handful of pods left: the cheapest type that fits them all.
        let d = Demand {
            pods: 4,
            cpu_milli: 1_000,
            memory_bytes: 2 << 30,
        };
        assert_eq!(pick_target(&opts, &d), Some(0));
        assert_eq!(pick_target(&[], &d), None);
    }
}
