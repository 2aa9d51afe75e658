//! Allocatable = capacity − kube-reserved − system-reserved − eviction threshold, with the
//! reservations the EKS AMIs compute (AL2 bootstrap.sh and AL2023 nodeadm agree):
//!
//! - kube-reserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of cores 3 and 4,
//!   0.25 % of every further core;
//! - kube-reserved memory: 255 MiB + 11 MiB × maxPods;
//! - system-reserved: none;
//! - eviction hard: `memory.available` 100 MiB;
//! - ephemeral storage: kube-reserved 1 GiB and the kubelet's `nodefs.available` 10 %
//!   hard eviction threshold, from the capacity of the disk the kubelet's root directory
//!   is on ([`NodeDisk`]), as Karpenter's `kubeReservedResources` and `evictionThreshold`
//!   (`pkg/providers/instancetype/types.go`) count them.
//!
//! Every figure is overridable from the NodeClass's kubelet settings. The memory capacity
//! the kubelet reports is less than the EC2 nominal size (the kernel and firmware keep
//! some); [`KubeletSettings::vm_memory_overhead_percent`] models that, 7.5 % by default like
//! Karpenter, because packing to the nominal size would plan pods onto nodes that the real
//! kube-scheduler then rejects.

use crate::resources::Resources;

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

/// The disk whose filesystem holds the kubelet's and containerd's data: its size is the
/// node's ephemeral-storage capacity. A NodeClass decides it (its root-volume mapping, its
/// AMI family's data volume, or the instance store with `instanceStorePolicy: RAID0`,
/// see [`crate::api::node_class::NodeClassSpec::node_disk`]); 0 is a disk with no room,
/// never an unknown one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDisk {
    /// The EBS volume's size in bytes, whole GiB as EC2 sizes volumes.
    pub volume_bytes: i64,
    /// The instance store is striped into one RAID0 array and mounted for the kubelet, so
    /// a type that has instance store gets its total instead of the volume.
    pub instance_store_raid0: bool,
}

impl NodeDisk {
    /// Karpenter's `DefaultEBS` (`pkg/providers/amifamily/resolver.go`): 20 GiB, the root
    /// volume of AL2023 and the data volume of Bottlerocket.
    pub const DEFAULT_VOLUME_BYTES: i64 = 20 * GI;

    /// The ephemeral-storage capacity of a node of a type with `local_storage_gb` GB of
    /// instance store (EC2's `InstanceStorageInfo.TotalSizeInGB`, decimal gigabytes).
    pub fn capacity_bytes(&self, local_storage_gb: u64) -> i64 {
        if self.instance_store_raid0 && local_storage_gb > 0 {
            local_storage_gb as i64 * 1_000_000_000
        } else {
            self.volume_bytes
        }
    }
}

impl Default for NodeDisk {
    fn default() -> Self {
        NodeDisk {
            volume_bytes: Self::DEFAULT_VOLUME_BYTES,
            instance_store_raid0: false,
        }
    }
}

/// A hard eviction threshold as the kubelet takes it: a share of capacity or an amount.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Percent(f64),
    Bytes(i64),
}

impl Threshold {
    /// What the threshold keeps back of `capacity` bytes, rounded up.
    pub fn of(&self, capacity: i64) -> i64 {
        match *self {
            Threshold::Percent(p) => (capacity as f64 * p.clamp(0.0, 100.0) / 100.0).ceil() as i64,
            Threshold::Bytes(b) => b.max(0),
        }
    }
}

/// Node-level settings that change what a node can hold.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletSettings {
    pub max_pods: Option<u32>,
    /// The kubelet's `podsPerCore`: max pods is at most this many per vCPU.
    pub pods_per_core: Option<u32>,
    pub kube_reserved_cpu_milli: Option<i64>,
    pub kube_reserved_memory_bytes: Option<i64>,
    /// Whether the default kube-reserved memory counts the type's ENI-limited pods rather
    /// than the max pods the kubelet is given. nodeadm (AL2023) reserves for its own
    /// `CalcMaxPods` figure whatever `maxPods` the NodeConfig sets
    /// (`internal/kubelet/config.go`, `withDefaultReservedResources`), as Karpenter models
    /// it (`UsesENILimitedMemoryOverhead`); Bottlerocket reserves for its `max-pods`.
    pub reserve_memory_for_eni_pods: bool,
    pub system_reserved_cpu_milli: i64,
    pub system_reserved_memory_bytes: i64,
    pub eviction_hard_memory_bytes: i64,
    /// Share of nominal memory that the kubelet does not see, 0.0–1.0.
    pub vm_memory_overhead_percent: f64,
    /// Where the kubelet keeps pods' logs, emptyDirs and writable layers.
    pub disk: NodeDisk,
    pub kube_reserved_ephemeral_bytes: i64,
    pub system_reserved_ephemeral_bytes: i64,
    /// The kubelet's `nodefs.available` hard eviction threshold.
    pub eviction_hard_nodefs: Threshold,
}

impl Default for KubeletSettings {
    fn default() -> Self {
        KubeletSettings {
            max_pods: None,
            pods_per_core: None,
            kube_reserved_cpu_milli: None,
            kube_reserved_memory_bytes: None,
            reserve_memory_for_eni_pods: true,
            system_reserved_cpu_milli: 0,
            system_reserved_memory_bytes: 0,
            eviction_hard_memory_bytes: 100 * MI,
            vm_memory_overhead_percent: 0.075,
            disk: NodeDisk::default(),
            kube_reserved_ephemeral_bytes: GI,
            system_reserved_ephemeral_bytes: 0,
            eviction_hard_nodefs: Threshold::Percent(10.0),
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

/// Capacity as the kubelet will report it: vCPUs, memory after the VM overhead, max pods;
/// ephemeral storage is the disk's ([`NodeDisk::capacity_bytes`]), set by the caller that
/// knows the type's instance store.
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

/// Allocatable from capacity, never negative. `eni_pods` is the type's ENI-limited pod
/// count, which the default memory reservation counts when
/// [`KubeletSettings::reserve_memory_for_eni_pods`].
pub fn allocatable(
    capacity: &Resources,
    vcpus: u32,
    eni_pods: u32,
    settings: &KubeletSettings,
) -> Resources {
    let reserved_for_pods = if settings.reserve_memory_for_eni_pods {
        eni_pods
    } else {
        capacity.pods.max(0) as u32
    };
    let cpu_reserved = settings
        .kube_reserved_cpu_milli
        .unwrap_or_else(|| kube_reserved_cpu_milli(vcpus))
        + settings.system_reserved_cpu_milli;
    let mem_reserved = settings
        .kube_reserved_memory_bytes
        .unwrap_or_else(|| kube_reserved_memory_bytes(reserved_for_pods))
        + settings.system_reserved_memory_bytes
        + settings.eviction_hard_memory_bytes;
    let mut a = capacity.clone();
    a.cpu_milli = (capacity.cpu_milli - cpu_reserved).max(0);
    a.memory_bytes = (capacity.memory_bytes - mem_reserved).max(0);
    a.ephemeral_storage_bytes = ephemeral_allocatable(capacity.ephemeral_storage_bytes, settings);
    a
}

/// Allocatable ephemeral storage of a disk of `capacity` bytes, never negative.
pub fn ephemeral_allocatable(capacity: i64, settings: &KubeletSettings) -> i64 {
    let reserved = settings.kube_reserved_ephemeral_bytes
        + settings.system_reserved_ephemeral_bytes
        + settings.eviction_hard_nodefs.of(capacity);
    (capacity - reserved).max(0)
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
        let a = allocatable(&cap, 2, 29, &s);
        assert_eq!(a.cpu_milli, 1930);
        assert_eq!(a.memory_bytes, (8192 - 574 - 100) * MI);
        assert_eq!(a.pods, 29);
        let with_vm = capacity(2, 8192, 29, &KubeletSettings::default());
        assert_eq!(
            with_vm.memory_bytes,
            8192 * MI - (8192.0 * MI as f64 * 0.075).ceil() as i64
        );
    }

    /// nodeadm reserves memory for the type's ENI pods whatever `maxPods` says; Bottlerocket
    /// for the max pods it is given.
    #[test]
    fn memory_is_reserved_for_the_eni_pods_on_al2023_and_the_max_pods_on_bottlerocket() {
        let al2023 = KubeletSettings {
            vm_memory_overhead_percent: 0.0,
            max_pods: Some(110),
            ..Default::default()
        };
        let cap = capacity(2, 8192, 110, &al2023);
        let a = allocatable(&cap, 2, 29, &al2023);
        assert_eq!(a.memory_bytes, (8192 - 574 - 100) * MI);
        assert_eq!(a.pods, 110);
        let bottlerocket = KubeletSettings {
            reserve_memory_for_eni_pods: false,
            ..al2023
        };
        let b = allocatable(&cap, 2, 29, &bottlerocket);
        assert_eq!(b.memory_bytes, (8192 - 1465 - 100) * MI);
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
            ..Default::default()
        };
        let a = allocatable(&capacity(1, 1024, 10, &s), 1, 10, &s);
        assert_eq!(a.cpu_milli, 400);
        assert_eq!(a.memory_bytes, 1022 * MI);
        let tiny = allocatable(&capacity(1, 1, 10, &s), 1, 10, &s);
        assert_eq!(tiny.memory_bytes, 0);
    }

    #[test]
    fn ephemeral_storage_is_the_disk_less_reserved_and_nodefs_threshold() {
        let s = KubeletSettings::default();
        // 20 GiB root volume: 1 GiB kube-reserved, 10 % (2 GiB) for nodefs.available.
        let mut cap = capacity(2, 8192, 29, &s);
        cap.ephemeral_storage_bytes = s.disk.capacity_bytes(0);
        assert_eq!(cap.ephemeral_storage_bytes, 20 * GI);
        let a = allocatable(&cap, 2, 29, &s);
        assert_eq!(a.ephemeral_storage_bytes, 20 * GI - GI - 2 * GI);
        let absolute = KubeletSettings {
            eviction_hard_nodefs: Threshold::Bytes(GI),
            kube_reserved_ephemeral_bytes: 0,
            system_reserved_ephemeral_bytes: GI / 2,
            ..Default::default()
        };
        assert_eq!(
            ephemeral_allocatable(20 * GI, &absolute),
            20 * GI - GI - GI / 2
        );
        assert_eq!(ephemeral_allocatable(GI / 2, &s), 0, "never negative");
    }

    #[test]
    fn raid0_uses_the_instance_store_only_where_there_is_one() {
        let raid0 = NodeDisk {
            volume_bytes: 40 * GI,
            instance_store_raid0: true,
        };
        assert_eq!(raid0.capacity_bytes(474), 474_000_000_000);
        assert_eq!(
            raid0.capacity_bytes(0),
            40 * GI,
            "EBS-only types keep the volume"
        );
        let plain = NodeDisk {
            volume_bytes: 40 * GI,
            instance_store_raid0: false,
        };
        assert_eq!(
            plain.capacity_bytes(474),
            40 * GI,
            "an unmounted store is not the kubelet's"
        );
    }
}
