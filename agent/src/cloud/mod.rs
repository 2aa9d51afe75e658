//! The agent's view of EC2: what it can launch in this cluster, launching it, and finding and
//! terminating what it launched. Controllers talk to the cloud only through [`Cloud`], so the
//! provisioning, lifecycle, termination and garbage-collection loops never build an SDK
//! request themselves and tests can put a fault-injecting HTTP layer in front of the emulator
//! without the controllers knowing.
//!
//! The interruption queue sits behind its own trait, [`sqs::Queue`], for the same reason.
//!
//! Everything the agent creates carries `joiner.dev/cluster`, `joiner.dev/nodepool` and
//! `joiner.dev/nodeclaim` tags: the agent role's IAM policy denies untagged creates, and
//! garbage collection finds orphans by these tags.

pub mod ami;
pub mod aws;
pub mod capacity_reservations;
pub mod catalog;
pub mod discovery;
pub mod ec2;
pub mod fargate_profiles;
pub mod fleet;
pub mod ice_cache;
pub mod instances;
#[cfg(feature = "kwok")]
pub mod kwok;
pub mod launch_template;
pub mod price_list;
pub mod records;
pub mod sqs;
pub mod user_data;

pub use ec2::{Ec2Cloud, Ec2Options};

use std::collections::BTreeMap;

use crate::api::{NodeClass, NodeClassStatus};
use crate::catalog::{CapacityType, Catalog};
use crate::scheduler::{Candidate, UnavailableOfferings};
use crate::taints::Taint;

/// Tag keys on every instance, launch template and volume the agent creates (with the
/// ownership tags of [`crate::api::tags::ownership`]).
pub const TAG_CLUSTER: &str = crate::api::tags::CLUSTER;
pub const TAG_NODEPOOL: &str = "joiner.dev/nodepool";
pub const TAG_NODECLAIM: &str = "joiner.dev/nodeclaim";
pub const TAG_NODECLASS: &str = "joiner.dev/nodeclass";

/// One NodeClaim's launch: the scheduler's candidates plus what the node must look like.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    /// The NodeClaim's name: the client token and the `joiner.dev/nodeclaim` tag derive from it,
    /// so a retried or restarted launch never creates a second instance.
    pub nodeclaim: String,
    pub nodepool: String,
    pub node_class: NodeClass,
    /// Cheapest first, at most 60 (the scheduler's order).
    pub candidates: Vec<Candidate>,
    /// Spot first when both are allowed.
    pub capacity_types: Vec<CapacityType>,
    pub zones: Vec<String>,
    /// Node labels and taints passed to the kubelet through user data.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// The capacity reservation a `reserved` launch targets (the claim's
    /// `karpenter.k8s.aws/capacity-reservation-id`).
    pub reservation: Option<ReservedLaunch>,
    /// NodeOverlays changed the candidates' prices: CreateFleet is told to follow the
    /// candidates' order (`prioritized`) instead of EC2's own prices...
    pub prioritized: bool,
    /// ...and the on-demand fallback is ordered by these on-demand prices: the candidates'
    /// in the catalogue (the Region's list, in its currency), overlaid when `prioritized`.
    pub on_demand_prices: BTreeMap<String, f64>,
}

/// A launch into one capacity reservation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReservedLaunch {
    pub id: String,
    pub kind: crate::catalog::reservations::ReservationKind,
    pub interruptible: bool,
}

/// What CreateFleet gave us.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance_id: String,
    /// `aws:///<zone>/<instance-id>`, what the kubelet sets as the Node's providerID.
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: String,
}

/// An instance this cluster's agent launched, as DescribeInstances reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub instance_id: String,
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: String,
    /// pending, running, shutting-down, terminated, stopping, stopped.
    pub state: String,
    pub tags: BTreeMap<String, String>,
    /// Launch time as seconds since the Unix epoch.
    pub launch_time: i64,
}

/// EC2's reason for an instance's last state change (`StateReason`), e.g.
/// `Client.InternalError` / "Client.InternalError: Client error on launch".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateReason {
    pub code: String,
    pub message: String,
}

/// A cloud error that names the operation and the AWS error code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{operation} failed: {code}: {message}")]
pub struct CloudError {
    /// e.g. `ec2:CreateFleet`.
    pub operation: String,
    /// The AWS error code, e.g. `InsufficientInstanceCapacity`, or `Unknown`.
    pub code: String,
    pub message: String,
}

impl CloudError {
    /// What to do about the error, when the error alone does not say it. EC2 names a missing
    /// instance profile but not where it should have come from: the agent does not create
    /// profiles (it has no IAM client), Terraform does.
    pub fn hint(&self) -> Option<&'static str> {
        (self.code == "InvalidParameterValue" && self.message.contains("iamInstanceProfile"))
            .then_some(
                "the NodeClass's instance profile does not exist: a NodeClass `role` uses the profile of the same name, which joiner_node_role creates; otherwise set `instanceProfile` (Terraform: instance_profile) to an existing profile",
            )
    }

    /// The error with its hint, for logs and Events.
    pub fn explained(&self) -> String {
        match self.hint() {
            Some(h) => format!("{self} ({h})"),
            None => self.to_string(),
        }
    }

    /// No offering of the request was left (every candidate is insufficient or excluded).
    pub fn is_insufficient_capacity(&self) -> bool {
        self.code == "NoCandidatesLeft" || fleet_error_scope(&self.code) != FleetErrorScope::Other
    }
}

/// How far a CreateFleet error item reaches: what the launch loop puts in the
/// insufficient-capacity cache before it tries what is left (Karpenter: `pkg/errors/errors.go`
/// `unfulfillableCapacityErrorCodes`, and `pkg/providers/instance/instance.go`
/// `updateUnavailableOfferingsCache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetErrorScope {
    /// The offering the item names (instance type, zone, capacity type) is out for now.
    Offering,
    /// As [`FleetErrorScope::Offering`], and the subnet it names has no free address left.
    Subnet,
    /// A vCPU quota: every type of the named type's family group, for the capacity type
    /// (EC2's quotas are per group and per capacity type; Karpenter marks only the
    /// offerings EC2 names, which a quota refuses all the same on the next attempt).
    QuotaGroup,
    /// Spot as a whole: EC2 could not create the Spot service-linked role for the caller.
    CapacityType,
    /// Not about capacity (authorization, a bad parameter...): the launch fails with it.
    Other,
}

/// The scope of a CreateFleet error code (see [`FleetErrorScope`]). Karpenter's list of
/// "unfulfillable capacity" codes, plus three that say the same of one offering
/// (`InsufficientCapacity`, `SpotMaxPriceTooLow`) or of a reservation
/// (`ReservationCapacityExceeded`, whose offering is the reservation's).
pub fn fleet_error_scope(code: &str) -> FleetErrorScope {
    match code {
        "InsufficientInstanceCapacity"
        | "InsufficientCapacity"
        | "UnfulfillableCapacity"
        | "Unsupported"
        | "MaxFleetCountExceeded"
        | "SpotMaxPriceTooLow"
        | "ReservationCapacityExceeded" => FleetErrorScope::Offering,
        "InsufficientFreeAddressesInSubnet" => FleetErrorScope::Subnet,
        // MaxSpotInstanceCountExceeded is Spot's vCPU quota ("Max spot instance count
        // exceeded": the EC2 user guide's Spot Instance quotas page), VcpuLimitExceeded
        // on-demand's.
        "VcpuLimitExceeded" | "MaxSpotInstanceCountExceeded" => FleetErrorScope::QuotaGroup,
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted" => FleetErrorScope::CapacityType,
        _ => FleetErrorScope::Other,
    }
}

/// The agent's cloud. Implemented for EC2 by `ec2::Ec2Cloud`, and for a cluster whose
/// kubelets KWOK plays by `kwok::KwokCloud` (feature `kwok`: benchmarks beside Karpenter's
/// KWOK provider).
#[async_trait::async_trait]
pub trait Cloud: Send + Sync + 'static {
    /// The catalogue the scheduler sees for this NodeClass: offerings only in the zones of
    /// its subnets (that still have free addresses), Spot prices where the API answers,
    /// the NodeClass's kubelet settings. Cached; cheap to call every round.
    async fn catalog(&self, node_class: &NodeClass) -> Result<Catalog, CloudError>;
    /// Launches one instance for a NodeClaim with CreateFleet type `instant`. When EC2 says
    /// capacity is unavailable ([`fleet_error_scope`]) what it refused goes into the cache
    /// and the rest is tried; `NoCandidatesLeft` when nothing is left.
    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError>;
    /// Instances tagged for this cluster, not yet terminated.
    async fn instances(&self) -> Result<Vec<Instance>, CloudError>;
    /// The instance a NodeClaim launched, if any (found by its `joiner.dev/nodeclaim` tag).
    async fn instance_for(&self, nodeclaim: &str) -> Result<Option<Instance>, CloudError>;
    /// Terminates instances; already-gone instances are not an error.
    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError>;
    /// Why EC2 ended an instance (its state reason), for one that is gone; None when EC2
    /// gives none or no longer knows the instance. A cloud whose instances never fail on
    /// their own has none.
    async fn state_reason(&self, _instance_id: &str) -> Result<Option<StateReason>, CloudError> {
        Ok(None)
    }
    /// Offerings currently in the insufficient-capacity cache (TTL 3 minutes).
    fn unavailable(&self) -> UnavailableOfferings;
    /// Puts an offering into the insufficient-capacity cache (used on Spot interruption too).
    fn mark_unavailable(&self, capacity_type: CapacityType, instance_type: &str, zone: &str);
    /// Deletes launch templates no NodeClass uses any more.
    async fn prune_launch_templates(&self, in_use: &[NodeClass]) -> Result<(), CloudError>;
    /// The cluster's ACTIVE Fargate profiles: the pods they select are never given EC2
    /// capacity (see [`crate::fargate`]).
    async fn fargate_profiles(&self) -> Result<Vec<crate::fargate::FargateProfile>, CloudError>;
    /// What the NodeClass's selectors resolve to now (subnets with their zones and zone IDs,
    /// security groups, AMIs per architecture, the instance profile), for its status:
    /// where `kubectl get nodeclass -o yaml` shows them, drift compares a node's image
    /// with them and provisioning reads the zone IDs.
    async fn resolve(&self, node_class: &NodeClass) -> Result<NodeClassStatus, CloudError>;
    /// Tags an instance another controller launched (Karpenter's, being adopted) as this
    /// cluster's, for `nodeclaim` of `nodepool`: from then on the agent's tag-scoped rights,
    /// terminating it among them, apply to it.
    async fn tag_adopted(
        &self,
        instance_id: &str,
        nodeclaim: &str,
        nodepool: &str,
    ) -> Result<(), CloudError>;
    /// Capacity reservations by ID as EC2 reports them now (the ones it no longer knows
    /// are left out): for the reserved nodes' end of life.
    async fn capacity_reservations(
        &self,
        ids: &[String],
    ) -> Result<Vec<crate::catalog::reservations::ReservationRecord>, CloudError>;
}

#[cfg(test)]
mod tests {
    use super::CloudError;

    #[test]
    fn a_missing_instance_profile_says_where_profiles_come_from() {
        let e = CloudError::new(
            "ec2:CreateFleet",
            "InvalidParameterValue",
            "Value (nodes) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
        );
        let text = e.explained();
        assert!(text.starts_with("ec2:CreateFleet failed: InvalidParameterValue: Value (nodes)"));
        assert!(text.contains("joiner_node_role creates"), "{text}");
        let other = CloudError::new("ec2:CreateFleet", "InvalidParameterValue", "bad subnet");
        assert_eq!(other.explained(), other.to_string());
    }

    #[test]
    fn fleet_error_codes_reach_as_far_as_karpenter_says() {
        use super::{fleet_error_scope, FleetErrorScope::*};
        let table = [
            ("InsufficientInstanceCapacity", Offering),
            ("InsufficientCapacity", Offering),
            ("UnfulfillableCapacity", Offering),
            ("Unsupported", Offering),
            ("MaxFleetCountExceeded", Offering),
            ("SpotMaxPriceTooLow", Offering),
            ("ReservationCapacityExceeded", Offering),
            ("InsufficientFreeAddressesInSubnet", Subnet),
            ("VcpuLimitExceeded", QuotaGroup),
            ("MaxSpotInstanceCountExceeded", QuotaGroup),
            (
                "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
                CapacityType,
            ),
            // Authorization is not capacity: the launch fails with it, as before.
            ("UnauthorizedOperation", Other),
            ("AuthFailure", Other),
            ("InvalidParameterValue", Other),
            ("InvalidLaunchTemplateId.NotFound", Other),
            ("Unknown", Other),
        ];
        for (code, scope) in table {
            assert_eq!(fleet_error_scope(code), scope, "{code}");
            let e = CloudError::new("ec2:CreateFleet", code, "");
            assert_eq!(e.is_insufficient_capacity(), scope != Other, "{code}");
        }
        assert!(
            CloudError::new("ec2:CreateFleet", "NoCandidatesLeft", "").is_insufficient_capacity()
        );
    }
}
