//! What the catalogue needs to know about an instance type, read from EC2's
//! DescribeInstanceTypes / DescribeInstanceTypeOfferings answers (the SDK's types), and
//! the well-known labels derived from it.
//!
//! [`InstanceTypeRecord`] is a plain serialisable copy of the fields used, so that a dump of
//! the emulator's answer can be committed as a fixture (`agent/fixtures/`) and turned back
//! into SDK values ([`InstanceTypeRecord::to_ec2`]) to exercise the same conversion path as
//! live data.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    ArchitectureType, GpuDeviceInfo, GpuInfo, InstanceStorageInfo, InstanceType,
    InstanceTypeHypervisor, InstanceTypeInfo, InstanceTypeOffering, LocationType, MemoryInfo,
    NetworkInfo, ProcessorInfo, VCpuInfo,
};
use serde::{Deserialize, Serialize};

use crate::labels;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceTypeRecord {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// EC2 architecture names (`x86_64`, `arm64`, `i386`, `x86_64_mac`, `arm64_mac`).
    pub architectures: Vec<String>,
    /// `nitro`, `xen`, or empty for bare metal.
    #[serde(default)]
    pub hypervisor: String,
    #[serde(default)]
    pub bare_metal: bool,
    #[serde(default)]
    pub current_generation: bool,
    #[serde(default)]
    pub burstable: bool,
    pub max_enis: u32,
    pub ipv4_per_eni: u32,
    #[serde(default)]
    pub gpu_count: u32,
    #[serde(default)]
    pub gpu_manufacturer: String,
    #[serde(default)]
    pub gpu_name: String,
    #[serde(default)]
    pub local_storage_gb: u64,
    /// A published max-pods figure that replaces the ENI formula (synthetic catalogues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
}

/// One (instance type, zone) pair where EC2 offers the type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingRecord {
    pub instance_type: String,
    pub zone: String,
}

impl InstanceTypeRecord {
    /// Reads the fields the catalogue uses. Types without a name, vCPU count or memory size
    /// are skipped (None): nothing sensible can be planned on them.
    pub fn from_ec2(info: &InstanceTypeInfo) -> Option<InstanceTypeRecord> {
        let name = info.instance_type()?.as_str().to_string();
        let vcpus = info.v_cpu_info()?.default_v_cpus()?;
        let memory_mib = info.memory_info()?.size_in_mib()?;
        if vcpus <= 0 || memory_mib <= 0 {
            return None;
        }
        let net = info.network_info();
        let gpus = info.gpu_info().map(|g| g.gpus()).unwrap_or_default();
        let (gpu_count, gpu_manufacturer, gpu_name) =
            gpus.iter()
                .fold((0u32, String::new(), String::new()), |(n, m, nm), g| {
                    let m = if m.is_empty() {
                        g.manufacturer().unwrap_or_default().to_string()
                    } else {
                        m
                    };
                    let nm = if nm.is_empty() {
                        g.name().unwrap_or_default().to_string()
                    } else {
                        nm
                    };
                    (n + g.count().unwrap_or(0).max(0) as u32, m, nm)
                });
        Some(InstanceTypeRecord {
            name,
            vcpus: vcpus as u32,
            memory_mib: memory_mib as u64,
            architectures: info
                .processor_info()
                .map(|p| {
                    p.supported_architectures()
                        .iter()
                        .map(|a| a.as_str().to_string())
                        .collect()
                })
                .unwrap_or_default(),
            hypervisor: info
                .hypervisor()
                .map(|h| h.as_str().to_string())
                .unwrap_or_default(),
            bare_metal: info.bare_metal().unwrap_or(false),
            current_generation: info.current_generation().unwrap_or(false),
            burstable: info.burstable_performance_supported().unwrap_or(false),
            max_enis: net
                .and_then(|n| n.maximum_network_interfaces())
                .unwrap_or(0)
                .max(0) as u32,
            ipv4_per_eni: net
                .and_then(|n| n.ipv4_addresses_per_interface())
                .unwrap_or(0)
                .max(0) as u32,
            gpu_count,
            gpu_manufacturer,
            gpu_name,
            local_storage_gb: info
                .instance_storage_info()
                .and_then(|s| s.total_size_in_gb())
                .unwrap_or(0)
                .max(0) as u64,
            max_pods: None,
        })
    }

    /// Rebuilds the SDK value, for feeding a fixture through [`crate::catalog::Catalog::from_ec2`].
    pub fn to_ec2(&self) -> InstanceTypeInfo {
        let mut proc = ProcessorInfo::builder();
        for a in &self.architectures {
            proc = proc.supported_architectures(ArchitectureType::from(a.as_str()));
        }
        let mut b = InstanceTypeInfo::builder()
            .instance_type(InstanceType::from(self.name.as_str()))
            .current_generation(self.current_generation)
            .bare_metal(self.bare_metal)
            .burstable_performance_supported(self.burstable)
            .v_cpu_info(
                VCpuInfo::builder()
                    .default_v_cpus(self.vcpus as i32)
                    .build(),
            )
            .memory_info(
                MemoryInfo::builder()
                    .size_in_mib(self.memory_mib as i64)
                    .build(),
            )
            .processor_info(proc.build())
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(self.max_enis as i32)
                    .ipv4_addresses_per_interface(self.ipv4_per_eni as i32)
                    .build(),
            );
        if !self.hypervisor.is_empty() {
            b = b.hypervisor(InstanceTypeHypervisor::from(self.hypervisor.as_str()));
        }
        if self.gpu_count > 0 {
            b = b.gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .count(self.gpu_count as i32)
                            .manufacturer(&self.gpu_manufacturer)
                            .name(&self.gpu_name)
                            .build(),
                    )
                    .build(),
            );
        }
        if self.local_storage_gb > 0 {
            b = b.instance_storage_info(
                InstanceStorageInfo::builder()
                    .total_size_in_gb(self.local_storage_gb as i64)
                    .build(),
            );
        }
        b.build()
    }

    /// The family (`c5a`) and size (`large`) parts of the name.
    pub fn family_and_size(&self) -> (&str, &str) {
        self.name.split_once('.').unwrap_or((&self.name, ""))
    }

    /// Kubernetes architecture name, or None for architectures EKS nodes do not run.
    pub fn kubernetes_arch(&self) -> Option<&'static str> {
        if self.architectures.iter().any(|a| a == "x86_64") {
            Some("amd64")
        } else if self.architectures.iter().any(|a| a == "arm64") {
            Some("arm64")
        } else {
            None
        }
    }

    /// The well-known labels a node of this type carries (zone and capacity type come from
    /// the offering, so they are not here).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let (family, size) = self.family_and_size();
        let category_end = family
            .find(|c: char| c.is_ascii_digit() || c == '-')
            .unwrap_or(family.len());
        let category = &family[..category_end];
        let generation: String = family[category_end..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let mut l = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            l.insert(k.to_string(), v);
        };
        if let Some(arch) = self.kubernetes_arch() {
            put(labels::ARCH, arch.into());
        }
        put(labels::OS, "linux".into());
        put(labels::INSTANCE_TYPE, self.name.clone());
        put(labels::INSTANCE_FAMILY, family.into());
        put(labels::INSTANCE_SIZE, size.into());
        put(labels::INSTANCE_CATEGORY, category.into());
        if !generation.is_empty() {
            put(labels::INSTANCE_GENERATION, generation);
        }
        put(labels::INSTANCE_CPU, self.vcpus.to_string());
        put(labels::INSTANCE_MEMORY, self.memory_mib.to_string());
        put(labels::INSTANCE_HYPERVISOR, self.hypervisor.clone());
        put(labels::INSTANCE_GPU_COUNT, self.gpu_count.to_string());
        if self.gpu_count > 0 {
            if !self.gpu_name.is_empty() {
                put(
                    labels::INSTANCE_GPU_NAME,
                    self.gpu_name.to_ascii_lowercase(),
                );
            }
            if !self.gpu_manufacturer.is_empty() {
                put(
                    labels::INSTANCE_GPU_MANUFACTURER,
                    self.gpu_manufacturer.to_ascii_lowercase(),
                );
            }
        }
        if self.local_storage_gb > 0 {
            put(
                labels::INSTANCE_LOCAL_NVME,
                self.local_storage_gb.to_string(),
            );
        }
        l
    }
}

impl OfferingRecord {
    /// Reads availability-zone offerings; region- or zone-id-level ones are skipped because
    /// a NodeClaim is placed by zone name.
    pub fn from_ec2(o: &InstanceTypeOffering) -> Option<OfferingRecord> {
        if o.location_type() != Some(&LocationType::AvailabilityZone) {
            return None;
        }
        Some(OfferingRecord {
            instance_type: o.instance_type()?.as_str().to_string(),
            zone: o.location()?.to_string(),
        })
    }

    pub fn to_ec2(&self) -> InstanceTypeOffering {
        InstanceTypeOffering::builder()
            .instance_type(InstanceType::from(self.instance_type.as_str()))
            .location_type(LocationType::AvailabilityZone)
            .location(&self.zone)
            .build()
    }
}

/// The committed fixture's shape: the emulator's DescribeInstanceTypes and
/// DescribeInstanceTypeOfferings (availability-zone) answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ec2Dump {
    pub instance_types: Vec<InstanceTypeRecord>,
    pub offerings: Vec<OfferingRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> InstanceTypeRecord {
        InstanceTypeRecord {
            name: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["x86_64".into()],
            hypervisor: "nitro".into(),
            bare_metal: false,
            current_generation: true,
            burstable: false,
            max_enis: 3,
            ipv4_per_eni: 10,
            gpu_count: 0,
            gpu_manufacturer: String::new(),
            gpu_name: String::new(),
            local_storage_gb: 0,
            max_pods: None,
        }
    }

    #[test]
    fn sdk_round_trip() {
        let r = m5_large();
        assert_eq!(InstanceTypeRecord::from_ec2(&r.to_ec2()).unwrap(), r);
        let o = OfferingRecord {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
        };
        assert_eq!(OfferingRecord::from_ec2(&o.to_ec2()).unwrap(), o);
        let region = InstanceTypeOffering::builder()
            .instance_type(InstanceType::M5Large)
            .location_type(LocationType::Region)
            .location("us-east-1")
            .build();
        assert!(OfferingRecord::from_ec2(&region).is_none());
        assert!(InstanceTypeRecord::from_ec2(&InstanceTypeInfo::builder().build()).is_none());
    }

    #[test]
    fn well_known_labels() {
        let l = m5_large().labels();
        assert_eq!(l[labels::ARCH], "amd64");
        assert_eq!(l[labels::INSTANCE_FAMILY], "m5");
        assert_eq!(l[labels::INSTANCE_SIZE], "large");
        assert_eq!(l[labels::INSTANCE_CATEGORY], "m");
        assert_eq!(l[labels::INSTANCE_GENERATION], "5");
        assert_eq!(l[labels::INSTANCE_CPU], "2");
        assert_eq!(l[labels::INSTANCE_MEMORY], "8192");
        assert_eq!(l[labels::INSTANCE_HYPERVISOR], "nitro");
        let mut g = m5_large();
        g.name = "m7i-flex.large".into();
        assert_eq!(g.labels()[labels::INSTANCE_GENERATION], "7");
        g.architectures = vec!["arm64".into()];
        assert_eq!(g.labels()[labels::ARCH], "arm64");
    }
}
