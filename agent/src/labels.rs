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

// karpenter.k8s.aws
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";

// joiner.dev
pub const JOINER_NODEPOOL: &str = "joiner.dev/nodepool";
pub const JOINER_NODECLAIM: &str = "joiner.dev/nodeclaim";
pub const JOINER_DO_NOT_DISRUPT: &str = "joiner.dev/do-not-disrupt";
/// Startup taint the agent puts on new nodes until they are initialised.
pub const JOINER_UNREGISTERED_TAINT: &str = "joiner.dev/unregistered";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";

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
    JOINER_NODEPOOL,
];

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
    is_well_known(key) && key != KARPENTER_NODEPOOL && key != JOINER_NODEPOOL
}

/// True for annotations that block voluntary disruption, Karpenter's and joiner's.
pub fn is_do_not_disrupt(key: &str) -> bool {
    key == KARPENTER_DO_NOT_DISRUPT || key == JOINER_DO_NOT_DISRUPT
}
