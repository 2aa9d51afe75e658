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
    ArchitectureType, AttachmentLimitType, EbsInfo, EbsOptimizedInfo, EbsOptimizedSupport,
    GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo, InferenceAcceleratorInfo, InferenceDeviceInfo,
    InstanceStorageInfo, InstanceType, InstanceTypeHypervisor, InstanceTypeInfo,
    InstanceTypeOffering, LocationType, MemoryInfo, NetworkCardInfo, NetworkInfo, NeuronDeviceInfo,
    NeuronInfo, ProcessorInfo, UsageClassType, VCpuInfo,
};
use serde::{Deserialize, Serialize};

use crate::labels;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// ENIs of all network cards together.
    pub max_enis: u32,
    /// ENIs of the default network card. The VPC CNI takes pod addresses from that card's
    /// interfaces only, so it is what bounds a node's pods ([`Self::pod_enis`]); 0 where EC2
    /// did not say (synthetic records), and then `max_enis` stands in.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub default_card_enis: u32,
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
    /// Memory of one GPU, when the type has one kind of GPU.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_memory_mib: u64,
    /// Inferentia/Trainium (Neuron) devices, else inference accelerators, when of one kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accelerator_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accelerator_manufacturer: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accelerator_count: u64,
    /// As EC2 names it (`Intel`, `AMD`, `AWS`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu_manufacturer: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_clock_mhz: u64,
    /// Baseline bandwidth of all network cards together.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub network_bandwidth_mbps: u64,
    /// Maximum EBS bandwidth, for types EBS-optimised by default (0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ebs_bandwidth_mbps: u64,
    #[serde(default)]
    pub encryption_in_transit: bool,
    /// EC2 does not sell the type as Spot (`spot` is not among its SupportedUsageClasses):
    /// Karpenter derives a type's capacity types from that list, so no Spot offering is
    /// made for it, whatever a price history or a model says. Stored negated so that the
    /// committed dump names only the few such types.
    #[serde(default, skip_serializing_if = "is_false")]
    pub spot_unsupported: bool,
    /// EBS volumes the type attaches (`EbsInfo.MaximumEbsAttachments`; 0 where EC2 did not
    /// say): see [`super::volume_limits`].
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_ebs_attachments: u32,
    /// The limit is the type's own (`AttachmentLimitType: dedicated`), not shared with
    /// network interfaces.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ebs_attachment_dedicated: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Karpenter's value style for names EC2 gives in any case (`A10G`, `Inferentia2`).
fn lower_kebab(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace([' ', '_'], "-")
}

/// One (instance type, zone) pair where EC2 offers the type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingRecord {
    pub instance_type: String,
    pub zone: String,
}

impl InstanceTypeRecord {
    /// The interfaces whose addresses pods get: the default network card's.
    pub fn pod_enis(&self) -> u32 {
        if self.default_card_enis > 0 {
            self.default_card_enis
        } else {
            self.max_enis
        }
    }

    /// The type's pods as its network limits them (the published figure when the record
    /// carries one): what nodeadm reserves kube-reserved memory for.
    pub fn eni_max_pods(&self) -> u32 {
        self.max_pods
            .unwrap_or_else(|| super::max_pods::from_eni_limits(self.pod_enis(), self.ipv4_per_eni))
    }

    /// The kubelet's max pods on this type under `settings`, as Karpenter computes it
    /// (`instancetype/types.go::pods`): the record's published figure, else the NodeClass's
    /// `maxPods`, else the ENI formula nodeadm uses; then at most `podsPerCore` × vCPUs. The
    /// agent writes this figure into every node's user data, so the scheduler's pod capacity
    /// and the kubelet's are one number.
    pub fn kubelet_max_pods(&self, settings: &super::KubeletSettings) -> u32 {
        let count = self
            .max_pods
            .or(settings.max_pods)
            .unwrap_or_else(|| self.eni_max_pods());
        match settings.pods_per_core {
            Some(per_core) => count.min(per_core.saturating_mul(self.vcpus)),
            None => count,
        }
    }

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
        let (gpu_count, gpu_manufacturer, gpu_name) = gpu_summary(gpus);
        let (accelerator_name, accelerator_manufacturer, accelerator_count) = accelerators(info);
        let processor = info.processor_info();
        Some(InstanceTypeRecord {
            name,
            vcpus: vcpus as u32,
            memory_mib: memory_mib as u64,
            architectures: processor
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
            default_card_enis: net.map(default_card_enis).unwrap_or(0),
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
            gpu_memory_mib: single_gpu_memory_mib(gpus),
            accelerator_name,
            accelerator_manufacturer,
            accelerator_count,
            cpu_manufacturer: processor
                .and_then(|p| p.manufacturer())
                .unwrap_or_default()
                .to_string(),
            cpu_clock_mhz: processor
                .and_then(|p| p.sustained_clock_speed_in_ghz())
                .map(|g| (g * 1000.0).round().max(0.0) as u64)
                .unwrap_or(0),
            network_bandwidth_mbps: net.map(network_bandwidth_mbps).unwrap_or(0),
            ebs_bandwidth_mbps: ebs_bandwidth_mbps(info.ebs_info()),
            encryption_in_transit: net
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or(false),
            spot_unsupported: !info
                .supported_usage_classes()
                .contains(&UsageClassType::Spot),
            max_ebs_attachments: info
                .ebs_info()
                .and_then(|e| e.maximum_ebs_attachments())
                .unwrap_or(0)
                .max(0) as u32,
            ebs_attachment_dedicated: info
                .ebs_info()
                .and_then(|e| e.attachment_limit_type())
                .is_some_and(|t| *t == AttachmentLimitType::Dedicated),
        })
    }

    /// Rebuilds the SDK value, for feeding a fixture through [`crate::catalog::Catalog::from_ec2`].
    pub fn to_ec2(&self) -> InstanceTypeInfo {
        let mut b = InstanceTypeInfo::builder()
            .instance_type(InstanceType::from(self.name.as_str()))
            .supported_usage_classes(UsageClassType::OnDemand)
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
            .processor_info(self.processor_to_ec2())
            .network_info(self.network_to_ec2());
        if self.ebs_bandwidth_mbps > 0 || self.max_ebs_attachments > 0 {
            b = b.ebs_info(self.ebs_to_ec2());
        }
        if self.accelerator_count > 0 {
            b = self.accelerators_to_ec2(b);
        }
        if !self.spot_unsupported {
            b = b.supported_usage_classes(UsageClassType::Spot);
        }
        if !self.hypervisor.is_empty() {
            b = b.hypervisor(InstanceTypeHypervisor::from(self.hypervisor.as_str()));
        }
        if self.gpu_count > 0 {
            b = b.gpu_info(self.gpus_to_ec2());
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

    fn ebs_to_ec2(&self) -> EbsInfo {
        let mut ebs = EbsInfo::builder();
        if self.ebs_bandwidth_mbps > 0 {
            ebs = ebs
                .ebs_optimized_support(EbsOptimizedSupport::Default)
                .ebs_optimized_info(
                    EbsOptimizedInfo::builder()
                        .maximum_bandwidth_in_mbps(self.ebs_bandwidth_mbps as i32)
                        .build(),
                );
        }
        if self.max_ebs_attachments > 0 {
            ebs = ebs
                .maximum_ebs_attachments(self.max_ebs_attachments as i32)
                .attachment_limit_type(if self.ebs_attachment_dedicated {
                    AttachmentLimitType::Dedicated
                } else {
                    AttachmentLimitType::Shared
                });
        }
        ebs.build()
    }

    fn processor_to_ec2(&self) -> ProcessorInfo {
        let mut proc = ProcessorInfo::builder();
        for a in &self.architectures {
            proc = proc.supported_architectures(ArchitectureType::from(a.as_str()));
        }
        if !self.cpu_manufacturer.is_empty() {
            proc = proc.manufacturer(&self.cpu_manufacturer);
        }
        if self.cpu_clock_mhz > 0 {
            proc = proc.sustained_clock_speed_in_ghz(self.cpu_clock_mhz as f64 / 1000.0);
        }
        proc.build()
    }

    /// The network info, with one (default) network card when the record knows the card's
    /// bandwidth or interface count.
    fn network_to_ec2(&self) -> NetworkInfo {
        let mut net = NetworkInfo::builder()
            .maximum_network_interfaces(self.max_enis as i32)
            .ipv4_addresses_per_interface(self.ipv4_per_eni as i32)
            .encryption_in_transit_supported(self.encryption_in_transit);
        if self.network_bandwidth_mbps > 0 || self.default_card_enis > 0 {
            let mut card = NetworkCardInfo::builder().network_card_index(0);
            if self.network_bandwidth_mbps > 0 {
                card = card.baseline_bandwidth_in_gbps(self.network_bandwidth_mbps as f64 / 1000.0);
            }
            if self.default_card_enis > 0 {
                card = card.maximum_network_interfaces(self.default_card_enis as i32);
            }
            net = net
                .default_network_card_index(0)
                .network_cards(card.build());
        }
        net.build()
    }

    /// Written back as Neuron devices when AWS makes them (Inferentia, Trainium), which is
    /// how [`Self::from_ec2`] reads them first; as inference accelerators otherwise.
    fn accelerators_to_ec2(
        &self,
        b: aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder,
    ) -> aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder {
        if self.accelerator_manufacturer == "AWS" {
            b.neuron_info(
                NeuronInfo::builder()
                    .neuron_devices(
                        NeuronDeviceInfo::builder()
                            .name(&self.accelerator_name)
                            .count(self.accelerator_count as i32)
                            .build(),
                    )
                    .build(),
            )
        } else {
            b.inference_accelerator_info(
                InferenceAcceleratorInfo::builder()
                    .accelerators(
                        InferenceDeviceInfo::builder()
                            .name(self.accelerator_name.as_str())
                            .manufacturer(&self.accelerator_manufacturer)
                            .count(self.accelerator_count as i32)
                            .build(),
                    )
                    .build(),
            )
        }
    }

    fn gpus_to_ec2(&self) -> GpuInfo {
        GpuInfo::builder()
            .gpus(
                GpuDeviceInfo::builder()
                    .count(self.gpu_count as i32)
                    .manufacturer(&self.gpu_manufacturer)
                    .name(&self.gpu_name)
                    .set_memory_info((self.gpu_memory_mib > 0).then(|| {
                        GpuDeviceMemoryInfo::builder()
                            .size_in_mib(self.gpu_memory_mib as i32)
                            .build()
                    }))
                    .build(),
            )
            .build()
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
        let mut l = BTreeMap::new();
        self.name_labels(&mut l);
        self.device_labels(&mut l);
        self.performance_labels(&mut l);
        l
    }

    /// What the name and the size say: architecture, family, size, category, generation,
    /// vCPUs, memory and hypervisor.
    fn name_labels(&self, l: &mut BTreeMap<String, String>) {
        let (family, size) = self.family_and_size();
        let category_end = family
            .find(|c: char| c.is_ascii_digit() || c == '-')
            .unwrap_or(family.len());
        let category = &family[..category_end];
        let generation: String = family[category_end..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
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
    }

    /// GPUs, local NVMe and accelerators: each only on the types that have them.
    fn device_labels(&self, l: &mut BTreeMap<String, String>) {
        let mut put = |k: &str, v: String| {
            l.insert(k.to_string(), v);
        };
        // Only GPU types carry the GPU labels, as with Karpenter: `instance-gpu-count
        // DoesNotExist` is how its users exclude GPUs, and a "0" would defeat it.
        if self.gpu_count > 0 {
            put(labels::INSTANCE_GPU_COUNT, self.gpu_count.to_string());
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
        if self.gpu_memory_mib > 0 {
            put(labels::INSTANCE_GPU_MEMORY, self.gpu_memory_mib.to_string());
        }
        if self.accelerator_count > 0 {
            put(
                labels::INSTANCE_ACCELERATOR_NAME,
                lower_kebab(&self.accelerator_name),
            );
            put(
                labels::INSTANCE_ACCELERATOR_MANUFACTURER,
                lower_kebab(&self.accelerator_manufacturer),
            );
            put(
                labels::INSTANCE_ACCELERATOR_COUNT,
                self.accelerator_count.to_string(),
            );
        }
    }

    /// The processor, the network and EBS bandwidth, encryption in transit and flex.
    fn performance_labels(&self, l: &mut BTreeMap<String, String>) {
        let (family, _) = self.family_and_size();
        let mut put = |k: &str, v: String| {
            l.insert(k.to_string(), v);
        };
        if !self.cpu_manufacturer.is_empty() {
            put(
                labels::INSTANCE_CPU_MANUFACTURER,
                lower_kebab(&self.cpu_manufacturer),
            );
        }
        if self.cpu_clock_mhz > 0 {
            put(
                labels::INSTANCE_CPU_CLOCK_MHZ,
                self.cpu_clock_mhz.to_string(),
            );
        }
        if self.network_bandwidth_mbps > 0 {
            put(
                labels::INSTANCE_NETWORK_BANDWIDTH,
                self.network_bandwidth_mbps.to_string(),
            );
        }
        if self.ebs_bandwidth_mbps > 0 {
            put(
                labels::INSTANCE_EBS_BANDWIDTH,
                self.ebs_bandwidth_mbps.to_string(),
            );
        }
        put(
            labels::INSTANCE_ENCRYPTION_IN_TRANSIT,
            self.encryption_in_transit.to_string(),
        );
        put(
            labels::INSTANCE_CAPABILITY_FLEX,
            family.contains("-flex").to_string(),
        );
    }
}

/// GPUs of all kinds together, named by the first that gives a manufacturer and a name.
fn gpu_summary(gpus: &[GpuDeviceInfo]) -> (u32, String, String) {
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
        })
}

/// Karpenter labels GPU memory only for a single kind of GPU; so does joiner.
fn single_gpu_memory_mib(gpus: &[GpuDeviceInfo]) -> u64 {
    match gpus {
        [one] => one
            .memory_info()
            .and_then(|m| m.size_in_mib())
            .unwrap_or(0)
            .max(0) as u64,
        _ => 0,
    }
}

/// Name, manufacturer and count of the type's accelerators, when of one kind: Neuron
/// devices (Inferentia, Trainium) first, else inference accelerators.
fn accelerators(info: &InstanceTypeInfo) -> (String, String, u64) {
    let neuron = info
        .neuron_info()
        .map(|n| n.neuron_devices())
        .unwrap_or_default();
    let inference = info
        .inference_accelerator_info()
        .map(|a| a.accelerators())
        .unwrap_or_default();
    match (neuron, inference) {
        ([d], _) => (
            d.name().unwrap_or_default().to_string(),
            "AWS".to_string(),
            d.count().unwrap_or(0).max(0) as u64,
        ),
        ([], [a]) => (
            a.name().unwrap_or_default().to_string(),
            a.manufacturer().unwrap_or_default().to_string(),
            a.count().unwrap_or(0).max(0) as u64,
        ),
        _ => (String::new(), String::new(), 0),
    }
}

/// The maximum EBS bandwidth of a type EBS-optimised by default; 0 for the others.
fn ebs_bandwidth_mbps(ebs: Option<&EbsInfo>) -> u64 {
    match ebs.and_then(|e| e.ebs_optimized_support()) {
        Some(EbsOptimizedSupport::Default) => ebs
            .and_then(|e| e.ebs_optimized_info())
            .and_then(|o| o.maximum_bandwidth_in_mbps())
            .unwrap_or(0)
            .max(0) as u64,
        _ => 0,
    }
}

/// Baseline bandwidth of all network cards together.
fn network_bandwidth_mbps(net: &NetworkInfo) -> u64 {
    net.network_cards()
        .iter()
        .filter_map(|c| c.baseline_bandwidth_in_gbps())
        .map(|g| (g * 1000.0).round().max(0.0) as u64)
        .sum::<u64>()
}

/// The interfaces of the default network card (the one pods get addresses from).
fn default_card_enis(net: &NetworkInfo) -> u32 {
    let default = net.default_network_card_index().unwrap_or(0);
    net.network_cards()
        .iter()
        .find(|c| c.network_card_index().unwrap_or(0) == default)
        .and_then(|c| c.maximum_network_interfaces())
        .unwrap_or(0)
        .max(0) as u32
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
            ..Default::default()
        }
    }

    /// The ENI formula, the NodeClass's `maxPods` over it, and `podsPerCore` capping either.
    #[test]
    fn kubelet_max_pods_as_karpenter_counts_them() {
        use crate::catalog::KubeletSettings;
        let r = m5_large();
        let with = |max_pods, pods_per_core| KubeletSettings {
            max_pods,
            pods_per_core,
            ..Default::default()
        };
        assert_eq!(r.kubelet_max_pods(&with(None, None)), 29);
        assert_eq!(r.kubelet_max_pods(&with(Some(110), None)), 110);
        assert_eq!(r.kubelet_max_pods(&with(None, Some(10))), 20);
        assert_eq!(r.kubelet_max_pods(&with(Some(110), Some(100))), 110);
        assert_eq!(r.kubelet_max_pods(&with(Some(15), Some(10))), 15);
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
        assert_eq!(g.labels()[labels::INSTANCE_CAPABILITY_FLEX], "true");
        assert_eq!(l[labels::INSTANCE_CAPABILITY_FLEX], "false");
        g.architectures = vec!["arm64".into()];
        assert_eq!(g.labels()[labels::ARCH], "arm64");
        assert!(
            !l.contains_key(labels::INSTANCE_GPU_COUNT),
            "no GPU, no GPU labels"
        );
        assert_eq!(l[labels::INSTANCE_ENCRYPTION_IN_TRANSIT], "false");
    }

    /// The labels Karpenter v1.14 derives from DescribeInstanceTypes, read from answers
    /// shaped as EC2's (values as the emulator's data gives them for these types).
    #[test]
    fn karpenter_aws_labels_from_the_sdk_answer() {
        let g5 = InstanceTypeInfo::builder()
            .instance_type(InstanceType::from("g5.xlarge"))
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .manufacturer("AMD")
                    .sustained_clock_speed_in_ghz(3.3)
                    .build(),
            )
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .count(1)
                            .manufacturer("NVIDIA")
                            .name("A10G")
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(22888).build())
                            .build(),
                    )
                    .build(),
            )
            .network_info(
                NetworkInfo::builder()
                    .encryption_in_transit_supported(true)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .baseline_bandwidth_in_gbps(2.5)
                            .build(),
                    )
                    .build(),
            )
            .ebs_info(
                EbsInfo::builder()
                    .ebs_optimized_support(EbsOptimizedSupport::Default)
                    .ebs_optimized_info(
                        EbsOptimizedInfo::builder()
                            .maximum_bandwidth_in_mbps(3500)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let r = InstanceTypeRecord::from_ec2(&g5).unwrap();
        let l = r.labels();
        assert_eq!(l[labels::INSTANCE_GPU_NAME], "a10g");
        assert_eq!(l[labels::INSTANCE_GPU_MANUFACTURER], "nvidia");
        assert_eq!(l[labels::INSTANCE_GPU_COUNT], "1");
        assert_eq!(l[labels::INSTANCE_GPU_MEMORY], "22888");
        assert_eq!(l[labels::INSTANCE_CPU_MANUFACTURER], "amd");
        assert_eq!(l[labels::INSTANCE_CPU_CLOCK_MHZ], "3300");
        assert_eq!(l[labels::INSTANCE_NETWORK_BANDWIDTH], "2500");
        assert_eq!(l[labels::INSTANCE_EBS_BANDWIDTH], "3500");
        assert_eq!(l[labels::INSTANCE_ENCRYPTION_IN_TRANSIT], "true");
        assert_eq!(l[labels::INSTANCE_CAPABILITY_FLEX], "false");
        assert!(!l.contains_key(labels::INSTANCE_ACCELERATOR_NAME));
        assert_eq!(InstanceTypeRecord::from_ec2(&r.to_ec2()).unwrap(), r);

        // Inferentia 2: a Neuron device (manufacturer AWS) wins over its inference
        // accelerator entry, as in Karpenter.
        let inf2 = InstanceTypeInfo::builder()
            .instance_type(InstanceType::from("inf2.xlarge"))
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .neuron_info(
                NeuronInfo::builder()
                    .neuron_devices(
                        NeuronDeviceInfo::builder()
                            .name("Inferentia2")
                            .count(1)
                            .build(),
                    )
                    .build(),
            )
            .inference_accelerator_info(
                InferenceAcceleratorInfo::builder()
                    .accelerators(
                        InferenceDeviceInfo::builder()
                            .name("Inferentia2")
                            .manufacturer("AWS")
                            .count(1)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let r = InstanceTypeRecord::from_ec2(&inf2).unwrap();
        let l = r.labels();
        assert_eq!(l[labels::INSTANCE_ACCELERATOR_NAME], "inferentia2");
        assert_eq!(l[labels::INSTANCE_ACCELERATOR_MANUFACTURER], "aws");
        assert_eq!(l[labels::INSTANCE_ACCELERATOR_COUNT], "1");
        assert_eq!(InstanceTypeRecord::from_ec2(&r.to_ec2()).unwrap(), r);
        // Every key the catalogue writes is one a NodePool may require.
        for k in l.keys() {
            assert!(labels::is_type_label(k), "{k} is a type label");
        }
    }
}
