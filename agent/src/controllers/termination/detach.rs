//! After the drain, before the instance goes: wait until the node's volumes are detached, as
//! Karpenter's termination controller does (`awaitVolumeDetachment`). A volume the
//! attach-detach controller has not detached yet is still attached to the instance; ending
//! the instance under it leaves EC2 to force the detachment, and the pod that moved to
//! another node waits for its volume meanwhile (Karpenter waits for the same reason).
//!
//! Only attachments of volumes whose pods were drained are waited for: a pod the drain leaves
//! on the node (a DaemonSet's or a static pod's, one abandoned stuck terminating) keeps its
//! volume attached until the node is gone, so waiting for it would wait forever. The wait
//! reads the VolumeAttachment watch ([`crate::controllers::state::VolumeStore`]); each change
//! of an attachment on the node wakes the claim again. It ends at the claim's
//! `terminationGracePeriod` deadline, as Karpenter's does, and never holds a forceful
//! termination (the capacity is going anyway).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::controllers::claim_termination::TerminationReason;
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::operator::metrics::l;
use crate::controllers::state::volumes::AttachmentView;
use crate::scheduler::volumes::VolumeLookup;

/// How long a wait without a deadline sleeps between looks when no attachment changes (the
/// watch wakes it sooner).
const WITHOUT_DEADLINE: Duration = Duration::from_secs(30);

fn start_waiting(ctx: &Context, claim: &str) {
    let mut w = ctx.detach_waits.lock().unwrap_or_else(|p| p.into_inner());
    w.insert(claim.to_string());
}

/// Whether the claim was waiting (and is no longer).
fn stop_waiting(ctx: &Context, claim: &str) -> bool {
    let mut w = ctx.detach_waits.lock().unwrap_or_else(|p| p.into_inner());
    w.remove(claim)
}

/// Forgets a claim's wait when its termination ends another way (forceful, its Node gone).
pub fn forget(ctx: &Context, claim: &str) {
    stop_waiting(ctx, claim);
}

/// The attachments that hold the instance: the node's, less those of volumes a pod still on
/// the node uses (`kept`), and those of no PersistentVolume (an inline volume, which no
/// drained pod moves with), as Karpenter filters them.
pub fn pending<'a>(
    attachments: &'a [Arc<AttachmentView>],
    kept: &BTreeSet<String>,
) -> Vec<&'a AttachmentView> {
    attachments
        .iter()
        .filter(|a| a.volume.as_ref().is_some_and(|v| !kept.contains(v)))
        .map(|a| a.as_ref())
        .collect()
}

/// The PersistentVolumes the pods the drain left on the node use.
fn kept_volumes(ctx: &Context, node: &str) -> BTreeSet<String> {
    ctx.state
        .pods_on(node)
        .iter()
        .filter(|p| !p.finished)
        .flat_map(|p| {
            p.claims
                .iter()
                .filter_map(|c| {
                    ctx.state
                        .volumes
                        .claim(p.namespace(), c)?
                        .volume_name
                        .clone()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits for the drained node's attachments to go. `Err`: when to look again.
pub async fn await_detachment(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    reason: TerminationReason,
) -> Result<(), Duration> {
    let name = claim.name_any();
    if reason.is_forceful() {
        forget(ctx, &name);
        return Ok(());
    }
    let node_name = node.name_any();
    let attachments = ctx.state.volumes.attachments_on(&node_name);
    let kept = kept_volumes(ctx, &node_name);
    let pending = pending(&attachments, &kept);
    let counted = |result: &str| {
        ctx.metrics
            .volume_detach_waits
            .get_or_create(&l(&[("result", result)]))
            .inc();
    };
    if pending.is_empty() {
        if stop_waiting(ctx, &name) {
            counted("detached");
            tracing::info!(nodeclaim = %name, node = %node_name, "volumes detached; terminating the instance");
        }
        return Ok(());
    }
    let names: Vec<&str> = pending.iter().map(|a| a.name.as_str()).collect();
    let now = jiff::Timestamp::now();
    let deadline = super::drain_deadline(claim);
    if let Some(d) = deadline.filter(|d| now >= *d) {
        // Counted once: a retried termination comes back here after the deadline.
        if stop_waiting(ctx, &name) {
            counted("grace_period_elapsed");
        }
        tracing::warn!(nodeclaim = %name, node = %node_name, deadline = %d, attachments = ?names, "terminationGracePeriod elapsed with volumes still attached; terminating the instance");
        return Ok(());
    }
    start_waiting(ctx, &name);
    tracing::info!(nodeclaim = %name, node = %node_name, attachments = ?names, "waiting for the drained node's volumes to detach");
    ctx.events
        .publish(
            &events::reference(node),
            Type::Normal,
            "AwaitingVolumeDetachment",
            &format!(
                "Awaiting deletion of bound volumeattachments ({})",
                names.join(", ")
            ),
        )
        .await;
    Err(deadline.map_or(WITHOUT_DEADLINE, |d| {
        Duration::try_from(now.duration_until(d))
            .unwrap_or_default()
            .clamp(Duration::from_millis(100), WITHOUT_DEADLINE)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(name: &str, volume: Option<&str>) -> Arc<AttachmentView> {
        Arc::new(AttachmentView {
            name: name.into(),
            node: "n".into(),
            attacher: "ebs.csi.aws.com".into(),
            volume: volume.map(Into::into),
        })
    }

    #[test]
    fn attachments_of_pods_left_on_the_node_do_not_hold_it() {
        let all = vec![
            attachment("csi-a", Some("pv-drained")),
            attachment("csi-b", Some("pv-daemon")),
            attachment("csi-c", None),
        ];
        let kept: BTreeSet<String> = ["pv-daemon".to_string()].into();
        let names: Vec<&str> = pending(&all, &kept)
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(names, ["csi-a"]);
        assert!(pending(&all[1..], &kept).is_empty());
    }
}
