//! The insufficient-capacity cache: offerings EC2 just said it has no capacity for are left
//! out of scheduling and launches for a while, as Karpenter does (3 minutes, keyed
//! capacity type × instance type × zone). Without it every round would plan onto the same
//! empty pool and fail the same way; with a TTL the pool is tried again once EC2 may have
//! refilled it.
//!
//! Some refusals are wider than one offering, and are kept as such so that no launch asks
//! again what EC2 would refuse the same way: a vCPU quota (one capacity type, one group of
//! families: [`crate::catalog::vcpu_quota_group`]), a whole capacity type (Spot without
//! its service-linked role), a subnet without free addresses (Karpenter's
//! `UnavailableOfferings` has the same three kinds besides offerings' own entries).

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

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Offering(CapacityType, String, String),
    QuotaGroup(CapacityType, &'static str),
    CapacityType(CapacityType),
    Subnet(String),
}

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
        self.mark(Key::Offering(
            capacity_type,
            instance_type.to_string(),
            zone.to_string(),
        ));
    }

    /// Marks every type of `instance_type`'s vCPU quota group unavailable for
    /// `capacity_type`, in every zone.
    pub fn insert_quota_group(&self, capacity_type: CapacityType, instance_type: &str) {
        self.mark(Key::QuotaGroup(
            capacity_type,
            crate::catalog::vcpu_quota_group(instance_type),
        ));
    }

    /// Marks a whole capacity type unavailable.
    pub fn insert_capacity_type(&self, capacity_type: CapacityType) {
        self.mark(Key::CapacityType(capacity_type));
    }

    /// Marks a subnet as having no free address: launches choose another of its zone.
    pub fn insert_subnet(&self, subnet_id: &str) {
        self.mark(Key::Subnet(subnet_id.to_string()));
    }

    /// Whether the offering is unavailable, by its own entry or a wider one.
    pub fn contains(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) -> bool {
        let now = self.clock.now();
        let entries = self.lock();
        let live = |k: &Key| entries.get(k).is_some_and(|until| *until > now);
        live(&Key::CapacityType(capacity_type))
            || live(&Key::QuotaGroup(
                capacity_type,
                crate::catalog::vcpu_quota_group(instance_type),
            ))
            || live(&Key::Offering(
                capacity_type,
                instance_type.to_string(),
                zone.to_string(),
            ))
    }

    pub fn subnet_unavailable(&self, subnet_id: &str) -> bool {
        let now = self.clock.now();
        self.lock()
            .get(&Key::Subnet(subnet_id.to_string()))
            .is_some_and(|until| *until > now)
    }

    /// The live entries, in the scheduler's form (subnets are the launch's concern, not
    /// the scheduler's: the offering EC2 named is marked as well); expired entries are
    /// dropped on the way.
    pub fn snapshot(&self) -> UnavailableOfferings {
        let now = self.clock.now();
        let mut entries = self.lock();
        entries.retain(|_, until| *until > now);
        let mut out = UnavailableOfferings::default();
        for k in entries.keys() {
            match k {
                Key::Offering(ct, it, zone) => out.insert(*ct, it, zone),
                Key::QuotaGroup(ct, group) => {
                    out.quota_groups.insert((*ct, *group));
                }
                Key::CapacityType(ct) => out.insert_capacity_type(*ct),
                Key::Subnet(_) => {}
            }
        }
        out
    }

    fn mark(&self, key: Key) {
        let until = self.clock.now() + self.ttl;
        self.lock().insert(key, until);
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
        assert_eq!(cache.snapshot().len(), 1);
        clock.advance(Duration::from_secs(1));
        assert!(!cache.contains(CapacityType::Spot, "c5.large", "us-east-1a"));
        assert!(cache.snapshot().is_empty());
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

    #[test]
    fn a_quota_holds_for_its_family_group_and_capacity_type_only() {
        let clock = ManualClock::default();
        let cache = IceCache::new(ICE_TTL, Arc::new(clock.clone()));
        cache.insert_quota_group(CapacityType::Spot, "m5.large");
        for t in ["c5.large", "r6i.xlarge", "t3.nano", "m5.large"] {
            assert!(cache.contains(CapacityType::Spot, t, "us-east-1b"), "{t}");
            assert!(
                !cache.contains(CapacityType::OnDemand, t, "us-east-1b"),
                "{t}"
            );
        }
        assert!(!cache.contains(CapacityType::Spot, "g5.xlarge", "us-east-1a"));
        assert!(!cache.contains(CapacityType::Spot, "p4d.24xlarge", "us-east-1a"));
        let seen = cache.snapshot();
        assert!(seen.contains(CapacityType::Spot, "c6i.large", "us-east-1c"));
        assert!(!seen.contains(CapacityType::Spot, "g5.xlarge", "us-east-1c"));

        cache.insert_capacity_type(CapacityType::Spot);
        assert!(cache.contains(CapacityType::Spot, "g5.xlarge", "us-east-1a"));
        assert!(!cache.contains(CapacityType::OnDemand, "g5.xlarge", "us-east-1a"));
        assert!(cache
            .snapshot()
            .contains(CapacityType::Spot, "inf2.xlarge", "us-east-1a"));

        cache.insert_subnet("subnet-1");
        assert!(cache.subnet_unavailable("subnet-1"));
        assert!(!cache.subnet_unavailable("subnet-2"));
        assert_eq!(cache.snapshot().len(), 2, "subnets are not the scheduler's");
        clock.advance(ICE_TTL);
        assert!(cache.is_empty());
        assert!(!cache.subnet_unavailable("subnet-1"));
        assert!(!cache.contains(CapacityType::Spot, "m5.large", "us-east-1a"));
    }
}
