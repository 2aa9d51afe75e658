//! When a disruption pass can be skipped.
//!
//! [`decide`](super::decide::decide) is pure: the same catalogue, world and clock give the
//! same decisions. A pass that decided nothing therefore decides nothing again while the
//! world is the same and none of decide's time rules has flipped, and simulating it again
//! is wasted work: at 70 nodes it was the agent's whole steady CPU (a 0.9 s simulation
//! every 5 s), and at 1,000 nodes several seconds a pass. Karpenter keeps the same idea as
//! its cluster's "consolidated" state. Here the test is exact rather than a timeout: a
//! fingerprint of everything decide reads except the clock ([`fingerprint`]), and the first
//! second at which the clock alone could change its answer ([`recheck_at`]).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};

use super::decide::{PoolPolicy, World};
use crate::catalog::Catalog;

/// The longest a quiet pass stands for the ones after it. The fingerprint and
/// [`recheck_at`] are meant to be complete; this bounds the cost of a time rule added to
/// decide and forgotten here (Karpenter re-validates its consolidated state after 5 min).
pub const MAX_QUIET_SECS: i64 = 300;

/// A hash of everything [`decide`](super::decide::decide) reads but the clock.
///
/// It hashes the inputs' `Debug` form: every field takes part without a hand-kept list,
/// and a field added to [`World`] must be named in the destructuring below or the build
/// fails. The world's collections come in a fixed order (the loop builds them sorted), so
/// an unchanged cluster gives the same fingerprint.
pub fn fingerprint(world: &World, catalog: &Catalog) -> u64 {
    use std::fmt::Write as _;
    struct Sink(DefaultHasher);
    impl std::fmt::Write for Sink {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let World {
        candidates,
        other_nodes,
        in_flight,
        pools,
        sched,
        pending_pods,
        now: _,
    } = world;
    let mut sink = Sink(DefaultHasher::new());
    let _ = write!(
        sink,
        "{candidates:?}|{other_nodes:?}|{in_flight:?}|{pools:?}|{sched:?}|{pending_pods}|{catalog:?}"
    );
    sink.0.finish()
}

/// The first second after `world.now` at which decide could answer differently for the
/// same world; None when the clock alone changes nothing.
///
/// decide's time rules, each a boundary here: a node expires at `created + expireAfter`;
/// consolidation waits for `created + consolidateAfter` and `lastPodChange +
/// consolidateAfter`; budget and headroom windows open on a schedule's minute and close
/// `duration` after one, so they flip only at seconds `0` and `duration mod 60` of a minute.
/// (The eviction cap's hour is not here: the loop recounts it into the world each pass.)
pub fn recheck_at(world: &World) -> Option<i64> {
    let now = world.now;
    let mut next: Option<i64> = None;
    let mut at = |t: i64| {
        if t > now {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    };
    let pools: BTreeMap<&str, &PoolPolicy> =
        world.pools.iter().map(|p| (p.name.as_str(), p)).collect();
    for c in &world.candidates {
        if let Some(e) = c.expire_after {
            at(c.created.saturating_add(e as i64));
        }
        if let Some(after) = pools
            .get(c.nodepool.as_str())
            .and_then(|p| p.consolidate_after)
        {
            at(c.created.saturating_add(after as i64));
            at(c.last_pod_change.saturating_add(after as i64));
        }
    }
    for p in &world.pools {
        let budget_windows = p.budgets.0.iter().filter_map(|b| b.window.as_ref());
        let headroom_windows = p.headroom.iter().filter_map(|h| h.window.as_ref());
        for (_, duration) in budget_windows.chain(headroom_windows) {
            if *duration > 0 {
                at(next_second_of_minute(now, 0));
                at(next_second_of_minute(now, (*duration % 60) as i64));
            }
        }
    }
    next
}

/// The first time after `now` whose second within the minute is `second`.
fn next_second_of_minute(now: i64, second: i64) -> i64 {
    let t = now - now.rem_euclid(60) + second;
    if t > now {
        t
    } else {
        t + 60
    }
}

/// What the last pass that decided nothing saw, so the next ones can be skipped.
#[derive(Debug, Default)]
pub struct Quiet {
    /// Its fingerprint, and the second its answer stops holding.
    last: Option<(u64, i64)>,
}

impl Quiet {
    /// Whether a pass over a world with this fingerprint, at `now`, would decide nothing.
    pub fn holds(&self, fingerprint: u64, now: i64) -> bool {
        self.last
            .is_some_and(|(f, until)| f == fingerprint && now < until)
    }

    /// Remembers a pass. One that decided something stands for nothing: its decisions
    /// change the cluster, and if carrying them out failed the next pass must try again.
    pub fn record(&mut self, world: &World, fingerprint: u64, decided: bool) {
        self.last = (!decided).then(|| {
            let cap = world.now.saturating_add(MAX_QUIET_SECS);
            (fingerprint, recheck_at(world).map_or(cap, |t| t.min(cap)))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minute_seconds() {
        // 1_800_000_000 is second 0 of a minute.
        let m = 1_800_000_000;
        assert_eq!(next_second_of_minute(m, 0), m + 60);
        assert_eq!(next_second_of_minute(m - 1, 0), m);
        assert_eq!(next_second_of_minute(m + 10, 30), m + 30);
        assert_eq!(next_second_of_minute(m + 30, 30), m + 90);
    }

    #[test]
    fn a_quiet_pass_holds_until_its_recheck_or_a_change() {
        let world = World {
            now: 1_000,
            ..Default::default()
        };
        let mut q = Quiet::default();
        assert!(!q.holds(7, 1_000), "nothing recorded yet");
        q.record(&world, 7, false);
        assert!(q.holds(7, 1_000));
        assert!(q.holds(7, 1_000 + MAX_QUIET_SECS - 1));
        assert!(!q.holds(7, 1_000 + MAX_QUIET_SECS), "the cap");
        assert!(!q.holds(8, 1_001), "another world");
        q.record(&world, 7, true);
        assert!(!q.holds(7, 1_001), "a pass that decided stands for nothing");
    }

    #[test]
    fn the_fingerprint_sees_every_field_of_a_pod_that_would_move() {
        use crate::scheduler::{MovablePod, Pod};
        let world = |p: &Pod| World {
            candidates: vec![crate::disruption::decide::Candidate {
                pods: vec![MovablePod::from_pod(p)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let cat = Catalog::default();
        let pod = Pod::new("default", "p", 500, 1 << 30);
        let mut selective = pod.clone();
        selective
            .node_selector
            .insert("disk".to_string(), "ssd".to_string());
        assert_eq!(
            fingerprint(&world(&pod), &cat),
            fingerprint(&world(&pod.clone()), &cat)
        );
        assert_ne!(
            fingerprint(&world(&pod), &cat),
            fingerprint(&world(&selective), &cat),
            "a node selector is not in a bound pod's Debug, but a trial reads it"
        );
    }
}
