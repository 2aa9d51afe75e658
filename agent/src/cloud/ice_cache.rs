//! The insufficient-capacity cache: offerings EC2 just said it has no capacity for are left
//! out of scheduling and launches for a while, as Karpenter does (3 minutes, keyed
//! capacity type × instance type × zone). Without it every round would plan onto the same
//! empty pool and fail the same way; with a TTL the pool is tried again once EC2 may have
//! refilled it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::catalog::CapacityType;
use crate::scheduler::UnavailableOfferings;

/// Karpenter's TTL for insufficient-capacity entries.
pub const ICE_TTL: Duration = Duration::from_secs(180);

/// Where "now" comes from; tests move it by hand.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Instant>>);

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock(Arc::new(Mutex::new(Instant::now())))
    }
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Key = (CapacityType, String, String);

/// Offerings without capacity, each until its expiry.
pub struct IceCache {
    ttl: Duration,
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<Key, Instant>>,
}

impl std::fmt::Debug for IceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IceCache")
            .field("ttl", &self.ttl)
            .field("len", &self.len())
            .finish()
    }
}

impl Default for IceCache {
    fn default() -> Self {
        IceCache::new(ICE_TTL, Arc::new(SystemClock))
    }
}

impl IceCache {
    pub fn new(ttl: Duration, clock: Arc<dyn Clock>) -> IceCache {
        IceCache {
            ttl,
            clock,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Marks an offering unavailable for the TTL from now (a repeat extends it).
    pub fn insert(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) {
        let until = self.clock.now() + self.ttl;
        self.lock().insert(
            (capacity_type, instance_type.to_string(), zone.to_string()),
            until,
        );
    }

    pub fn contains(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) -> bool {
        let now = self.clock.now();
        self.lock()
            .get(&(capacity_type, instance_type.to_string(), zone.to_string()))
            .is_some_and(|until| *until > now)
    }

    /// The live entries, in the scheduler's form; expired entries are dropped on the way.
    pub fn snapshot(&self) -> UnavailableOfferings {
        let now = self.clock.now();
        let mut entries = self.lock();
        entries.retain(|_, until| *until > now);
        let mut out = UnavailableOfferings::default();
        for (ct, it, zone) in entries.keys() {
            out.insert(*ct, it, zone);
        }
        out
    }

    /// Live entries (the ICE cache size metric).
    pub fn len(&self) -> usize {
        let now = self.clock.now();
        self.lock().values().filter(|u| **u > now).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Instant>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl() {
        let clock = ManualClock::default();
        let cache = IceCache::new(ICE_TTL, Arc::new(clock.clone()));
        cache.insert(CapacityType::Spot, "c5.large", "us-east-1a");
        assert!(cache.contains(CapacityType::Spot, "c5.large", "us-east-1a"));
        assert!(!cache.contains(CapacityType::OnDemand, "c5.large", "us-east-1a"));
        assert!(!cache.contains(CapacityType::Spot, "c5.large", "us-east-1b"));
        clock.advance(Duration::from_secs(179));
        assert!(cache.contains(CapacityType::Spot, "c5.large", "us-east-1a"));
        assert_eq!(cache.snapshot().0.len(), 1);
        clock.advance(Duration::from_secs(1));
        assert!(!cache.contains(CapacityType::Spot, "c5.large", "us-east-1a"));
        assert!(cache.snapshot().0.is_empty());
        assert!(cache.is_empty());
    }

    #[test]
    fn a_repeat_extends_the_entry() {
        let clock = ManualClock::default();
        let cache = IceCache::new(ICE_TTL, Arc::new(clock.clone()));
        cache.insert(CapacityType::Spot, "m5.large", "us-east-1a");
        clock.advance(Duration::from_secs(120));
        cache.insert(CapacityType::Spot, "m5.large", "us-east-1a");
        clock.advance(Duration::from_secs(120));
        assert!(cache.contains(CapacityType::Spot, "m5.large", "us-east-1a"));
        assert_eq!(cache.len(), 1);
    }
}
