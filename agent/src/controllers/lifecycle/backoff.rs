//! Registration back-off per NodePool: when a pool's instances do not register (their role
//! may not join the cluster, their AMI cannot bootstrap...), every relaunch costs an
//! instance-TTL of money and fixes nothing. After a registration timeout the pool's further
//! launches wait, doubling with each consecutive failure up to a cap, until one of its
//! claims registers again. Pure: the controller keeps the clock and the map.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The delay before a pool may launch again after `failures` consecutive registration
/// timeouts: `base`, `2·base`, `4·base`… at most `max`; none before the first failure.
pub fn delay(failures: u32, base: Duration, max: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

/// One pool's registration health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolHealth {
    pub failures: u32,
    pub retry_at: Instant,
}

/// Every pool's, keyed by NodePool name. A pool absent is healthy.
#[derive(Debug, Default)]
pub struct RegistrationHealth {
    pools: HashMap<String, PoolHealth>,
}

impl RegistrationHealth {
    /// Records a timeout; returns the pool's new health (when it may launch again).
    pub fn failed(
        &mut self,
        pool: &str,
        now: Instant,
        base: Duration,
        max: Duration,
    ) -> PoolHealth {
        let failures = self.pools.get(pool).map_or(0, |h| h.failures) + 1;
        let h = PoolHealth {
            failures,
            retry_at: now + delay(failures, base, max),
        };
        self.pools.insert(pool.to_string(), h);
        h
    }

    /// A claim of the pool registered: the pool is healthy again. Returns whether it was
    /// not (so that the condition is written once).
    pub fn registered(&mut self, pool: &str) -> bool {
        self.pools.remove(pool).is_some()
    }

    /// How long the pool must still wait before launching, if at all.
    pub fn wait(&self, pool: &str, now: Instant) -> Option<Duration> {
        let h = self.pools.get(pool)?;
        (h.retry_at > now).then(|| h.retry_at - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_up_to_the_cap() {
        let (b, m) = (Duration::from_secs(30), Duration::from_secs(600));
        let d: Vec<u64> = (0..8).map(|f| delay(f, b, m).as_secs()).collect();
        assert_eq!(d, [0, 30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(delay(u32::MAX, b, m), m, "no overflow");
    }

    #[test]
    fn a_registration_clears_the_back_off() {
        let (b, m) = (Duration::from_secs(10), Duration::from_secs(100));
        let t0 = Instant::now();
        let mut h = RegistrationHealth::default();
        assert_eq!(h.wait("p", t0), None);
        assert_eq!(h.failed("p", t0, b, m).failures, 1);
        assert_eq!(h.wait("p", t0), Some(b));
        let second = h.failed("p", t0, b, m);
        assert_eq!(second.retry_at, t0 + 2 * b);
        assert_eq!(h.wait("p", t0 + 2 * b), None, "waited long enough");
        assert_eq!(h.wait("other", t0), None, "per pool");
        assert!(h.registered("p"));
        assert!(!h.registered("p"), "reported once");
        assert_eq!(h.wait("p", t0), None);
    }
}
