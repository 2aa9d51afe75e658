//! Asking for a NodeClaim's termination: why ([`TerminationReason`], recorded on the claim
//! as [`TERMINATION_REASON`]) and the delete. The termination controller's finalizer does
//! the rest, reading the reason back to know whether do-not-disrupt holds and whether the
//! drain may be forceful. Every loop that takes a node away ends here, through
//! [`request_termination`] or, with a deadline, [`crate::controllers::disrupted::disrupt`].

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::controllers::context::Context;

/// Annotation recording why a claim is being terminated.
pub const TERMINATION_REASON: &str = "joiner.dev/termination-reason";

/// Why a NodeClaim is terminated. Voluntary reasons respect do-not-disrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminationReason {
    /// Deleted by a user or by its NodePool's deletion.
    Deleted,
    Empty,
    Underutilized,
    Drifted,
    Expired,
    /// Spot interruption, scheduled change, instance stopping.
    Interrupted,
    RegistrationTimeout,
    /// The instance no longer exists.
    InstanceGone,
    /// No capacity could be launched for it.
    LaunchFailed,
    /// Its Node was deleted.
    NodeDeleted,
    /// Node repair: unhealthy past its toleration. Forceful, as Karpenter's repair: no
    /// replacement wait, no do-not-disrupt, pods deleted rather than evicted, and pods
    /// already terminating on the dead node not waited for.
    Unhealthy,
    /// A static pool over its `replicas`.
    Overprovisioned,
}

impl TerminationReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            TerminationReason::Deleted => "Deleted",
            TerminationReason::Empty => "Empty",
            TerminationReason::Underutilized => "Underutilized",
            TerminationReason::Drifted => "Drifted",
            TerminationReason::Expired => "Expired",
            TerminationReason::Interrupted => "Interrupted",
            TerminationReason::RegistrationTimeout => "RegistrationTimeout",
            TerminationReason::InstanceGone => "InstanceGone",
            TerminationReason::LaunchFailed => "LaunchFailed",
            TerminationReason::NodeDeleted => "NodeDeleted",
            TerminationReason::Unhealthy => "Unhealthy",
            TerminationReason::Overprovisioned => "Overprovisioned",
        }
    }

    pub fn parse(s: &str) -> TerminationReason {
        match s {
            "Empty" => TerminationReason::Empty,
            "Underutilized" => TerminationReason::Underutilized,
            "Drifted" => TerminationReason::Drifted,
            "Expired" => TerminationReason::Expired,
            "Interrupted" => TerminationReason::Interrupted,
            "RegistrationTimeout" => TerminationReason::RegistrationTimeout,
            "InstanceGone" => TerminationReason::InstanceGone,
            "LaunchFailed" => TerminationReason::LaunchFailed,
            "NodeDeleted" => TerminationReason::NodeDeleted,
            "Unhealthy" => TerminationReason::Unhealthy,
            "Overprovisioned" => TerminationReason::Overprovisioned,
            _ => TerminationReason::Deleted,
        }
    }

    /// Voluntary terminations wait for do-not-disrupt (up to the grace period).
    pub fn is_voluntary(&self) -> bool {
        matches!(
            self,
            TerminationReason::Deleted
                | TerminationReason::Empty
                | TerminationReason::Underutilized
                | TerminationReason::Drifted
                | TerminationReason::NodeDeleted
                | TerminationReason::Overprovisioned
        )
    }

    /// Terminated at once, whatever the pods: the node is not serving them anyway.
    pub fn is_forceful(&self) -> bool {
        matches!(self, TerminationReason::Unhealthy)
    }
}

/// Asks for a NodeClaim's termination: records the reason, then deletes the claim; the
/// finalizer does the rest. Already-gone claims are not an error. Loops that take a node
/// away with a deadline call [`crate::controllers::disrupted::disrupt`] instead.
pub async fn request_termination(
    ctx: &Context,
    claim: &str,
    reason: TerminationReason,
) -> Result<(), kube::Error> {
    request_termination_with(ctx, claim, reason, Default::default()).await
}

/// [`request_termination`] writing `annotations` with the reason, in the same patch.
async fn request_termination_with(
    ctx: &Context,
    claim: &str,
    reason: TerminationReason,
    mut annotations: serde_json::Map<String, serde_json::Value>,
) -> Result<(), kube::Error> {
    let api = ctx.node_claim_api();
    annotations.insert(TERMINATION_REASON.into(), json!(reason.as_str()));
    let patch = json!({"metadata": {"annotations": annotations}});
    match api
        .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(c) => ctx.state.node_claims.insert(claim, c),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    }
    delete_claim(ctx, claim, reason).await
}

/// Deletes the claim (its reason already recorded); the finalizer does the rest.
pub(crate) async fn delete_claim(
    ctx: &Context,
    claim: &str,
    reason: TerminationReason,
) -> Result<(), kube::Error> {
    let api = ctx.node_claim_api();
    match api.delete(claim, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    }
    tracing::info!(nodeclaim = %claim, reason = reason.as_str(), "termination requested");
    ctx.claims.add(claim);
    Ok(())
}
