//! Allocatable = capacity − kube-reserved − system-reserved − eviction threshold, with the
//! reservations the EKS AMIs compute (AL2 bootstrap.sh and AL2023 nodeadm agree):
//!
//! - kube-reserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of cores 3 and 4,
//!   0.25 % of every further core;
//! - kube-reserved memory: 255 MiB + 11 MiB × maxPods;
//! - system-reserved: none;
//! - eviction hard: `memory.available` 100 MiB.
//!
//! Every figure is overridable from the NodeClass's kubelet settings. The memory capacity
//! the kubelet reports is less than the EC2 nominal size (the kernel and firmware keep
//! some); [`KubeletSettings::vm_memory_overhead_percent`] models that, 7.5 % by default like
//! Karpenter, because packing to the nominal size would plan pods onto nodes that the real
//! kube-scheduler then rejects.

use crate::resources::Resources;

const MI: i64 = 1 << 20;

/// Node-level settings that change what a node can hold.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletSettings {
    pub max_pods: Option<u32>,
    /// The kubelet's `podsPerCore`: max pods is at most this many per vCPU.
    pub pods_per_core: Option<u32>,
    pub kube_reserved_cpu_milli: Option<i64>,
    pub kube_reserved_memory_bytes: Option<i64>,
    pub system_reserved_cpu_milli: i64,
    pub system_reserved_memory_bytes: i64,
    pub eviction_hard_memory_bytes: i64,
    /// Share of nominal memory that the kubelet does not see, 0.0–1.0.
    pub vm_memory_overhead_percent: f64,
}

impl Default for KubeletSettings {
    fn default() -> Self {
        KubeletSettings {
            max_pods: None,
            pods_per_core: None,
            kube_reserved_cpu_milli: None,
            kube_reserved_memory_bytes: None,
            system_reserved_cpu_milli: 0,
            system_reserved_memory_bytes: 0,
            eviction_hard_memory_bytes: 100 * MI,
            vm_memory_overhead_percent: 0.075,
        }
    }
}

/// EKS's tiered kube-reserved CPU for a node with `vcpus` cores, in millicores.
pub fn kube_reserved_cpu_milli(vcpus: u32) -> i64 {
    // In hundredths of a millicore per core, to stay exact: 6 % of 1000m is 60m.
    let mut reserved_centi = 0i64;
    for core in 1..=vcpus as i64 {
        reserved_centi += match core {
            1 => 6000,
            2 => 1000,
            3 | 4 => 500,
            _ => 250,
        };
    }
    (reserved_centi + 99) / 100
}

/// EKS's kube-reserved memory for a node running at most `max_pods` pods, in bytes.
pub fn kube_reserved_memory_bytes(max_pods: u32) -> i64 {
    (255 + 11 * max_pods as i64) * MI
}

/// Capacity as the kubelet will report it: vCPUs, memory after the VM overhead, max pods.
pub fn capacity(
    vcpus: u32,
    memory_mib: u64,
    max_pods: u32,
    settings: &KubeletSettings,
) -> Resources {
    let nominal = memory_mib as i64 * MI;
    let overhead =
        (nominal as f64 * settings.vm_memory_overhead_percent.clamp(0.0, 1.0)).ceil() as i64;
    Resources {
        cpu_milli: vcpus as i64 * 1000,
        memory_bytes: nominal - overhead,
        pods: max_pods as i64,
        ..Default::default()
    }
}

/// Allocatable from capacity, never negative.
pub fn allocatable(capacity: &Resources, vcpus: u32, settings: &KubeletSettings) -> Resources {
    let max_pods = capacity.pods.max(0) as u32;
    let cpu_reserved = settings
        .kube_reserved_cpu_milli
        .unwrap_or_else(|| kube_reserved_cpu_milli(vcpus))
        + settings.system_reserved_cpu_milli;
    let mem_reserved = settings
        .kube_reserved_memory_bytes
        .unwrap_or_else(|| kube_reserved_memory_bytes(max_pods))
        + settings.system_reserved_memory_bytes
        + settings.eviction_hard_memory_bytes;
    let mut a = capacity.clone();
    a.cpu_milli = (capacity.cpu_milli - cpu_reserved).max(0);
    a.memory_bytes = (capacity.memory_bytes - mem_reserved).max(0);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_tiers() {
        assert_eq!(kube_reserved_cpu_milli(1), 60);
        assert_eq!(kube_reserved_cpu_milli(2), 70);
        assert_eq!(kube_reserved_cpu_milli(4), 80);
        assert_eq!(kube_reserved_cpu_milli(8), 90);
        assert_eq!(kube_reserved_cpu_milli(96), 310);
    }

    #[test]
    fn memory_reservation() {
        assert_eq!(kube_reserved_memory_bytes(29), 574 * MI);
        assert_eq!(kube_reserved_memory_bytes(110), 1465 * MI);
    }

    #[test]
    fn m5_large_allocatable() {
        let s = KubeletSettings {
            vm_memory_overhead_percent: 0.0,
            ..Default::default()
        };
        let cap = capacity(2, 8192, 29, &s);
        let a = allocatable(&cap, 2, &s);
        assert_eq!(a.cpu_milli, 1930);
        assert_eq!(a.memory_bytes, (8192 - 574 - 100) * MI);
        assert_eq!(a.pods, 29);
        let with_vm = capacity(2, 8192, 29, &KubeletSettings::default());
        assert_eq!(
            with_vm.memory_bytes,
            8192 * MI - (8192.0 * MI as f64 * 0.075).ceil() as i64
        );
    }

    #[test]
    fn overrides() {
        let s = KubeletSettings {
            kube_reserved_cpu_milli: Some(500),
            kube_reserved_memory_bytes: Some(MI),
            system_reserved_cpu_milli: 100,
            system_reserved_memory_bytes: MI,
            eviction_hard_memory_bytes: 0,
            vm_memory_overhead_percent: 0.0,
            max_pods: Some(10),
            pods_per_core: None,
        };
        let a = allocatable(&capacity(1, 1024, 10, &s), 1, &s);
        assert_eq!(a.cpu_milli, 400);
        assert_eq!(a.memory_bytes, 1022 * MI);
        let tiny = allocatable(&capacity(1, 1, 10, &s), 1, &s);
        assert_eq!(tiny.memory_bytes, 0);
    }
}
