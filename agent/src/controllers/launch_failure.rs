//! A NodeClaim's instance that ended before its Node registered: EC2's state reason says
//! why, and the agent says it too. EC2 accepts some launches it cannot carry out and ends
//! the instance moments later: an encrypted EBS volume whose KMS key the launching role may
//! not use through EC2 (or a key disabled or missing) makes the instance go from `pending`
//! to `terminated` with the state reason `Client.InternalError` (Karpenter's
//! troubleshooting guide, "Node terminates before ready on failed encrypted EBS volume").
//! Without this the claim is replaced as if the instance had merely gone, and every
//! replacement fails alike: a relaunch loop nobody is told about. Garbage collection (the
//! instance is gone) and interruption (its state-change notice) both ask here, so the
//! NodeClaim's `LaunchFailed` Event and `joiner_nodeclaims_launch_failures_total` (by
//! the state reason's code, which the launch-failure alert watches) say it either way.

use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::cloud::StateReason;
use crate::controllers::conditions::{self, REGISTERED};
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::labels;

/// EC2's state reason for a launch that failed on an encrypted volume (among others).
pub const CLIENT_INTERNAL_ERROR: &str = "Client.InternalError";

/// The state reasons EC2 gives an instance that ended *during launch* (EC2 API Reference,
/// `StateReason`: "caused the instance to terminate during launch", a snapshot not found,
/// the EBS volume limit, no capacity). Any other reason (a Spot reclaim while it booted,
/// someone terminating it) is not a failed launch and is not reported as one.
const LAUNCH_FAILURES: &[&str] = &[
    CLIENT_INTERNAL_ERROR,
    "Client.InvalidSnapshot.NotFound",
    "Client.VolumeLimitExceeded",
    "Server.InternalError",
    "Server.InsufficientInstanceCapacity",
];

/// Whether EC2's state reason `code` says the launch itself failed.
pub fn is_launch_failure(code: &str) -> bool {
    LAUNCH_FAILURES.contains(&code)
}

/// Whether the claim's Node never registered: its instance ending now is a failed launch,
/// not the end of a node.
pub fn never_registered(claim: &NodeClaim) -> bool {
    !claim
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, REGISTERED))
}

/// What the operator reads: the instance, EC2's reason, and for `Client.InternalError` the
/// usual cause and where to fix it.
pub fn message(claim: &str, instance_id: &str, reason: &StateReason) -> String {
    let mut m = format!(
        "instance {instance_id} of NodeClaim {claim} ended before its Node registered: EC2 state reason {}: {}",
        reason.code, reason.message
    );
    if reason.code == CLIENT_INTERNAL_ERROR {
        m.push_str(
            ". EC2 ends a launch so when it cannot create an encrypted EBS volume: usually the \
             agent's role may not use the volume's customer managed KMS key through EC2 \
             (kms:CreateGrant, kms:GenerateDataKeyWithoutPlaintext, kms:Decrypt, \
             kms:DescribeKey with kms:ViaService ec2.<region>.amazonaws.com, which \
             joiner_agent_role grants; the key's policy must also delegate to IAM or name the \
             role), or the key is disabled or missing. The key is the NodeClass's \
             blockDeviceMappings kmsKeyID, else the account's EBS default key when encryption \
             by default is on",
        );
    }
    m.push_str("; the claim is deleted and its pods planned again");
    m
}

/// Asks EC2 why the claim's instance ended and, when the reason is a failed launch
/// ([`is_launch_failure`]), reports it (log, Warning Event `LaunchFailed` on the claim,
/// launch-failure metric by the reason's code). Returns the message, or None when EC2 gives
/// no such reason (or cannot be asked).
pub async fn report(ctx: &Context, claim: &NodeClaim, instance_id: &str) -> Option<String> {
    let reason = match ctx.cloud.state_reason(instance_id).await {
        Ok(r) => r?,
        Err(e) => {
            ctx.metrics.cloud_error(&e);
            tracing::warn!(instance = instance_id, error = %e, "asking why an instance ended failed");
            return None;
        }
    };
    if !is_launch_failure(&reason.code) {
        tracing::info!(nodeclaim = %claim.name_any(), instance = instance_id, code = %reason.code, "the instance ended before its Node registered, not at launch");
        return None;
    }
    let name = claim.name_any();
    let msg = message(&name, instance_id, &reason);
    let pool = claim
        .labels()
        .get(labels::JOINER_NODEPOOL)
        .cloned()
        .unwrap_or_default();
    tracing::warn!(nodeclaim = %name, nodepool = %pool, code = %reason.code, "{msg}");
    ctx.metrics
        .launch_failures
        .get_or_create(&l(&[("nodepool", &pool), ("code", &reason.code)]))
        .inc();
    ctx.events
        .publish(
            &events::reference(claim),
            Type::Warning,
            "LaunchFailed",
            &msg,
        )
        .await;
    Some(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_internal_error_names_the_kms_key_grant() {
        let r = StateReason {
            code: CLIENT_INTERNAL_ERROR.into(),
            message: "Client.InternalError: Client error on launch".into(),
        };
        let m = message("general-abc", "i-0123", &r);
        assert!(m.starts_with("instance i-0123 of NodeClaim general-abc ended before its Node registered: EC2 state reason Client.InternalError: Client.InternalError: Client error on launch. "), "{m}");
        assert!(m.contains("KMS key"), "{m}");
        assert!(m.contains("kms:CreateGrant"), "{m}");
        assert!(m.contains("joiner_agent_role"), "{m}");
    }

    #[test]
    fn only_launch_reasons_are_launch_failures() {
        assert!(is_launch_failure("Client.InternalError"));
        assert!(is_launch_failure("Client.VolumeLimitExceeded"));
        assert!(!is_launch_failure("Server.SpotInstanceTermination"));
        assert!(!is_launch_failure("Client.UserInitiatedShutdown"));
    }

    #[test]
    fn other_reasons_are_named_without_the_kms_hint() {
        let r = StateReason {
            code: "Server.SpotInstanceTermination".into(),
            message: "Server.SpotInstanceTermination: Spot instance termination".into(),
        };
        let m = message("c", "i-1", &r);
        assert!(m.contains("Server.SpotInstanceTermination"), "{m}");
        assert!(!m.contains("KMS"), "{m}");
    }
}
