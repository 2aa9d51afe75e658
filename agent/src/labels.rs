//! Well-known node labels, taints and annotations.
//!
//! joiner sets Karpenter's labels as well as its own, so that workloads written for
//! Karpenter (nodeSelectors, topology spread on `karpenter.sh/capacity-type`) schedule
//! unchanged.

// Kubernetes
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";

// karpenter.sh
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const KARPENTER_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// On a node once its claim has registered it, and once it is initialized, as Karpenter's
/// lifecycle controller labels its nodes (tools select on them).
pub const KARPENTER_REGISTERED: &str = "karpenter.sh/registered";
pub const KARPENTER_INITIALIZED: &str = "karpenter.sh/initialized";

// karpenter.k8s.aws
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Set only on GPU types, lower case (`a10g`, `nvidia`), as Karpenter sets them.
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Local instance-store size in GB; set only on types that have one.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// Memory of one GPU in MiB; set only on types with one kind of GPU, as Karpenter sets it.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Inference accelerators and Neuron devices (Inferentia, Trainium), lower case.
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// `intel`, `amd` or `aws`.
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_CLOCK_MHZ: &str = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Baseline network bandwidth in Mbps, all network cards together.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// Maximum EBS bandwidth in Mbps; set only on types that are EBS-optimised by default.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// `true` for the flex families (`c7i-flex`, `m7i-flex`, ...), `false` for every other type.
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// The NodeClass a node was launched from (Karpenter's `ec2nodeclass`).
pub const NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The zone's account-independent ID (`use1-az1`), from the NodeClass's subnets: a zone
/// name maps to a different physical zone in each account, the ID does not.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
// Capacity reservations (Karpenter v1.3-v1.10): set only on nodes launched into one, and
// known to the catalogue per offering, not per type (see `is_reservation_label`).
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// `default` or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// `true` or `false`.
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";

// joiner.dev
pub const JOINER_NODEPOOL: &str = "joiner.dev/nodepool";
pub const JOINER_NODECLAIM: &str = "joiner.dev/nodeclaim";
pub const JOINER_DO_NOT_DISRUPT: &str = "joiner.dev/do-not-disrupt";
/// A NodePool's annotation listing the Karpenter NodePools (comma-separated) whose running
/// nodes the agent adopts into it, when their names differ (a pool adopts its namesake's
/// by default).
pub const ADOPTS_KARPENTER_NODEPOOLS: &str = "joiner.dev/adopts-karpenter-nodepools";
/// Startup taint the agent puts on new nodes until they are initialised.
pub const JOINER_UNREGISTERED_TAINT: &str = "joiner.dev/unregistered";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity launched into an EC2 capacity reservation (an ODCR or a capacity block).
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Labels whose values the catalogue knows for every instance type and offering, so a pod
/// may require them even when a NodePool does not mention them.
pub const WELL_KNOWN: &[&str] = &[
    ARCH,
    OS,
    INSTANCE_TYPE,
    ZONE,
    REGION,
    CAPACITY_TYPE,
    KARPENTER_NODEPOOL,
    INSTANCE_FAMILY,
    INSTANCE_SIZE,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_CPU,
    INSTANCE_MEMORY,
    INSTANCE_HYPERVISOR,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_LOCAL_NVME,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_CLOCK_MHZ,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_CAPABILITY_FLEX,
    ZONE_ID,
    NODE_CLASS,
    JOINER_NODEPOOL,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// Well-known labels whose value the instance type alone decides: one value per type,
/// whatever the zone, capacity type or NodePool.
pub const TYPE_LABELS: &[&str] = &[
    ARCH,
    OS,
    INSTANCE_TYPE,
    INSTANCE_FAMILY,
    INSTANCE_SIZE,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_CPU,
    INSTANCE_MEMORY,
    INSTANCE_HYPERVISOR,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_MEMORY,
    INSTANCE_LOCAL_NVME,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_CLOCK_MHZ,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_CAPABILITY_FLEX,
];

pub fn is_type_label(key: &str) -> bool {
    TYPE_LABELS.contains(&key)
}

/// Keys Karpenter v1.14 defines that joiner knows and does not model, with why: refused
/// with that reason rather than the generic "not modelled".
pub const NOT_MODELLED: &[(&str, &str)] = &[
    (
        "karpenter.k8s.aws/placement-group-id",
        "joiner launches into no placement group (Karpenter v1.11's placementGroup is not built)",
    ),
    (
        "karpenter.k8s.aws/placement-group-partition",
        "joiner launches into no placement group (Karpenter v1.11's placementGroup is not built)",
    ),
    (
        "karpenter.k8s.aws/instance-tenancy",
        "joiner launches default-tenancy instances only",
    ),
];

/// Labels an offering has only when it is a capacity reservation: like zone and capacity
/// type they describe the offering, not the instance type, and a requirement on one is
/// met by reserved offerings alone (unless it allows the label's absence).
pub fn is_reservation_label(key: &str) -> bool {
    matches!(
        key,
        CAPACITY_RESERVATION_ID | CAPACITY_RESERVATION_TYPE | CAPACITY_RESERVATION_INTERRUPTIBLE
    )
}

/// joiner's own labels that users put on nodes (the critical pool's), and so may require.
pub const JOINER_USER_LABELS: &[&str] = &["joiner.dev/critical"];

/// Domains whose label keys describe the instance or the agent's bookkeeping (`k8s.aws`
/// covers `karpenter.k8s.aws` and `topology.k8s.aws`): a key there
/// that joiner does not model would otherwise be taken for a custom label, which the
/// NodePool alone decides, so a pool asking for `karpenter.k8s.aws/instance-gpu-memory`
/// would admit every type, GPU or not.
pub const RESERVED_DOMAINS: &[&str] = &["karpenter.sh", "k8s.aws", "joiner.dev"];

/// Whether a requirement may name `key`: any key outside the reserved domains (and their
/// subdomains), and inside them only the labels joiner models.
pub fn is_requirable(key: &str) -> bool {
    !in_reserved_domain(key) || is_well_known(key) || JOINER_USER_LABELS.contains(&key)
}

pub fn in_reserved_domain(key: &str) -> bool {
    key.split_once('/').is_some_and(|(domain, _)| {
        RESERVED_DOMAINS
            .iter()
            .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
    })
}

/// Labels a user may not set in a NodePool template: the agent owns them.
pub const RESTRICTED: &[&str] = &[
    HOSTNAME,
    KARPENTER_NODEPOOL,
    JOINER_NODEPOOL,
    JOINER_NODECLAIM,
];

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// Well-known labels that describe the instance a launch ends up with (type, its
/// attributes, zone, region, capacity type) rather than the NodePool it serves.
pub fn is_offering_label(key: &str) -> bool {
    is_well_known(key) && key != KARPENTER_NODEPOOL && key != JOINER_NODEPOOL && key != NODE_CLASS
}

/// True for annotations that block voluntary disruption, Karpenter's and joiner's.
pub fn is_do_not_disrupt(key: &str) -> bool {
    key == KARPENTER_DO_NOT_DISRUPT || key == JOINER_DO_NOT_DISRUPT
}

/// A DNS-1123 subdomain (Kubernetes object names, label-key prefixes): dot-separated
/// lowercase alphanumerics and `-`, no part empty or starting or ending with `-`, at most
/// 253 characters. One rule for the agent's validator and the provider's plan checks.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}
