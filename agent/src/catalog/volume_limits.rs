//! How many EBS volumes a node of a type can attach, as the EBS CSI driver reports it in the
//! node's CSINode (`spec.drivers[].allocatable.count`) and kube-scheduler's NodeVolumeLimits
//! filter enforces it. A node that is not launched yet has no CSINode: the agent plans it
//! with the figure the driver would report for its type, so that it never packs onto one new
//! node more volume pods than kube-scheduler will bind there.
//!
//! The driver's rule (aws-ebs-csi-driver `pkg/driver/node.go`, `getVolumesLimit`, over
//! `pkg/cloud/limits`): a Xen (non-Nitro) type attaches 39; a Nitro type the attachments EC2
//! gives for it (`EbsInfo.MaximumEbsAttachments`, which for a shared limit already leaves out
//! the primary network interface and the type's NVMe instance-store volumes), else 27 shared;
//! less the root volume and any other EBS volume mapped at launch; on a shared limit, less
//! every network interface past the first. Never below 1.
//!
//! The count travels through the scheduler as a resource, `attachable-volumes-csi-<driver>`,
//! the name Kubernetes gave CSI attach limits in a node's allocatable before CSINode carried
//! them: a pod requests one per distinct EBS volume it uses, a node or planned type allows its
//! limit. The name never reaches an object the agent writes ([`without_attach_limits`]).

use crate::resources::Resources;

use super::InstanceTypeRecord;

/// The EBS CSI driver's name, as CSINodes, PersistentVolumes and StorageClasses carry it.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// The in-tree EBS plugin, which CSI migration hands to [`EBS_CSI_DRIVER`].
pub const EBS_IN_TREE_PLUGIN: &str = "kubernetes.io/aws-ebs";

/// The prefix of an attach-limit resource (Kubernetes' `attachable-volumes-csi-`).
const ATTACH_PREFIX: &str = "attachable-volumes-csi-";

/// The scheduler's resource for volumes of the EBS CSI driver.
pub const EBS_ATTACH_RESOURCE: &str = "attachable-volumes-csi-ebs.csi.aws.com";

/// What a Xen type attaches: the driver's figure for every non-Nitro type.
const XEN_LIMIT: i64 = 39;
/// The driver's figure for a Nitro type it has no entry for: the shared limit.
const DEFAULT_SHARED_LIMIT: i64 = 27;

/// What the attaching node carries besides the volumes the cluster attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAttachments {
    /// Network interfaces attached when the driver starts.
    pub enis: i64,
    /// EBS volumes mapped at launch besides the root volume.
    pub extra_volumes: i64,
}

impl Default for NodeAttachments {
    /// A node as the agent launches it: its primary interface and its root volume.
    fn default() -> Self {
        NodeAttachments {
            enis: 1,
            extra_volumes: 0,
        }
    }
}

/// The type's attach limit and whether network interfaces share it.
fn base_limit(record: &InstanceTypeRecord) -> (i64, bool) {
    if record.hypervisor == "xen" {
        return (XEN_LIMIT, false);
    }
    if record.max_ebs_attachments > 0 {
        return (
            i64::from(record.max_ebs_attachments),
            !record.ebs_attachment_dedicated,
        );
    }
    (DEFAULT_SHARED_LIMIT, true)
}

/// The EBS volumes a CSI driver on this node lets the cluster attach.
pub fn ebs_attach_limit(record: &InstanceTypeRecord, node: NodeAttachments) -> i64 {
    let (base, shared) = base_limit(record);
    let mut left = base - (node.extra_volumes + 1);
    if shared {
        left -= node.enis - 1;
    }
    left.max(1)
}

/// `allocatable` with the type's EBS attach limit (for a node launched as the agent launches
/// one), as the scheduler plans a node of the type.
pub fn with_ebs_limit(allocatable: &Resources, record: &InstanceTypeRecord) -> Resources {
    let mut r = allocatable.clone();
    r.extended.insert(
        EBS_ATTACH_RESOURCE.to_string(),
        ebs_attach_limit(record, NodeAttachments::default()),
    );
    r
}

/// Whether a resource name is an attach limit (the scheduler's, never an object's).
pub fn is_attach_limit(name: &str) -> bool {
    name.starts_with(ATTACH_PREFIX)
}

/// `r` without attach limits: what a NodeClaim's requests may say.
pub fn without_attach_limits(r: &Resources) -> Resources {
    let mut out = r.clone();
    out.extended.retain(|k, _| !is_attach_limit(k));
    out
}

/// The CSI driver a provisioner or plugin name stands for: in-tree EBS is the EBS CSI
/// driver under CSI migration, as Karpenter's volume usage translates it.
pub fn csi_driver(name: &str) -> &str {
    if name == EBS_IN_TREE_PLUGIN {
        EBS_CSI_DRIVER
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(hypervisor: &str, max: u32, dedicated: bool) -> InstanceTypeRecord {
        InstanceTypeRecord {
            name: "t".into(),
            hypervisor: hypervisor.into(),
            max_ebs_attachments: max,
            ebs_attachment_dedicated: dedicated,
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_node_loses_its_root_volume_only() {
        // m5.large: 27 shared; c5d.large: 26 (one NVMe instance-store volume);
        // m7i.large: 32 dedicated; m4.large: Xen.
        let fresh = NodeAttachments::default();
        assert_eq!(ebs_attach_limit(&record("nitro", 27, false), fresh), 26);
        assert_eq!(ebs_attach_limit(&record("nitro", 26, false), fresh), 25);
        assert_eq!(ebs_attach_limit(&record("nitro", 32, true), fresh), 31);
        assert_eq!(ebs_attach_limit(&record("xen", 40, false), fresh), 38);
        // No figure from EC2: the driver's shared default.
        assert_eq!(ebs_attach_limit(&record("nitro", 0, false), fresh), 26);
    }

    #[test]
    fn interfaces_count_against_a_shared_limit_only() {
        let busy = NodeAttachments {
            enis: 3,
            extra_volumes: 1,
        };
        assert_eq!(ebs_attach_limit(&record("nitro", 27, false), busy), 23);
        assert_eq!(ebs_attach_limit(&record("nitro", 32, true), busy), 30);
        let crowded = NodeAttachments {
            enis: 40,
            extra_volumes: 0,
        };
        assert_eq!(
            ebs_attach_limit(&record("nitro", 27, false), crowded),
            1,
            "never below 1: Kubernetes reads 0 as no limit"
        );
    }

    #[test]
    fn attach_limits_stay_out_of_what_is_written() {
        let r = with_ebs_limit(&Resources::pod(100, 1), &record("nitro", 27, false));
        assert_eq!(r.extended[EBS_ATTACH_RESOURCE], 26);
        assert!(without_attach_limits(&r).extended.is_empty());
        assert_eq!(csi_driver("kubernetes.io/aws-ebs"), EBS_CSI_DRIVER);
        assert_eq!(csi_driver("efs.csi.aws.com"), "efs.csi.aws.com");
    }
}
