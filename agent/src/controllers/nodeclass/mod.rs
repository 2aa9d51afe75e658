//! NodeClass termination: the agent's finalizer on every NodeClass, released only once no
//! NodeClaim uses the class and the class's launch templates are deleted.
//!
//! Without it, deleting a NodeClass (a `terraform destroy`, which removes the agent a
//! second later) left its launch templates in the account: garbage collection prunes them
//! only every few minutes, and by then no agent is running. The provider's NodeClass delete
//! waits for the object to be gone, so it waits for this release too (as Karpenter's
//! EC2NodeClass termination does for its templates and instance profile).

pub mod status;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::events::Type;
use super::state::Change;
use crate::api::NodeClass;

/// How often the loop looks again without a change (a failed prune, a missed event).
const RESYNC: Duration = Duration::from_secs(10);

/// What to do with one NodeClass.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Live and without the finalizer: add it.
    AddFinalizer,
    /// Being deleted, but these NodeClaims still use it: wait.
    WaitForClaims(Vec<String>),
    /// Being deleted and unused: delete its launch templates, then release it.
    Release,
    Nothing,
}

/// The step for a class, given the names of the NodeClaims that reference it.
pub fn step(ours: &str, deleting: bool, finalizers: &[String], claims_using: Vec<String>) -> Step {
    let ours = finalizers.iter().any(|f| f == ours);
    match (deleting, ours) {
        (false, false) => Step::AddFinalizer,
        (false, true) | (true, false) => Step::Nothing,
        (true, true) if !claims_using.is_empty() => Step::WaitForClaims(claims_using),
        (true, true) => Step::Release,
    }
}

fn api(ctx: &Context) -> Api<DynamicObject> {
    Api::all_with(ctx.client.clone(), &ctx.served.node_classes())
}

/// Sets the finalizer list, guarded by the resourceVersion read so a concurrent writer's
/// finalizer is never dropped (a conflict is retried at the next pass).
async fn set_finalizers(
    ctx: &Context,
    name: &str,
    resource_version: Option<String>,
    finalizers: Vec<String>,
) {
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}});
    match api(ctx)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => {
            ctx.metrics.kube_error("nodeclasses patch", &e);
            tracing::warn!(nodeclass = %name, error = %e, "updating the NodeClass finalizers failed; retrying");
        }
    }
}

/// One NodeClass, read untyped so a class whose spec does not parse is released too.
async fn reconcile(ctx: &Context, obj: &DynamicObject, live_classes: &[NodeClass]) {
    let name = obj.name_any();
    let claims_using: Vec<String> = ctx
        .state
        .node_claims
        .list()
        .iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .map(|c| c.name_any())
        .collect();
    let finalizers = obj.finalizers().to_vec();
    let deleting = obj.metadata.deletion_timestamp.is_some();
    match step(ctx.finalizer(), deleting, &finalizers, claims_using) {
        Step::Nothing => {}
        Step::AddFinalizer => {
            let mut f = finalizers;
            f.push(ctx.finalizer().into());
            set_finalizers(ctx, &name, obj.metadata.resource_version.clone(), f).await;
        }
        Step::WaitForClaims(claims) => {
            let msg = format!(
                "waiting for {} NodeClaim(s) using this NodeClass to terminate: {}",
                claims.len(),
                claims.join(", ")
            );
            ctx.events
                .publish(
                    &reference(ctx, obj),
                    Type::Normal,
                    "WaitingOnNodeClaimTermination",
                    &msg,
                )
                .await;
        }
        Step::Release => {
            // This class's templates are deleted (the others' only once idle).
            if let Err(e) = ctx.cloud.prune_launch_templates(live_classes).await {
                ctx.metrics.cloud_error(&e);
                tracing::warn!(nodeclass = %name, error = %e, "deleting the NodeClass's launch templates failed; retrying");
                return;
            }
            tracing::info!(nodeclass = %name, "launch templates deleted; releasing the NodeClass");
            let f = finalizers
                .into_iter()
                .filter(|f| f != ctx.finalizer())
                .collect();
            set_finalizers(ctx, &name, obj.metadata.resource_version.clone(), f).await;
        }
    }
}

fn reference(ctx: &Context, obj: &DynamicObject) -> k8s_openapi::api::core::v1::ObjectReference {
    let class = ctx.served.node_classes();
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(class.api_version),
        kind: Some(class.kind),
        name: Some(obj.name_any()),
        uid: obj.metadata.uid.clone(),
        ..Default::default()
    }
}

/// Adds the finalizer to new classes and releases deleted ones, on every NodeClass change,
/// every NodeClaim change while a class is being deleted, and every [`RESYNC`].
pub async fn run(ctx: Arc<Context>) {
    if status::kwok_classes(&ctx) {
        return std::future::pending().await;
    }
    let mut rx = ctx.state.subscribe();
    loop {
        // The typed store knows which classes exist; the untyped list also sees malformed
        // ones and the current finalizers and resourceVersion.
        match api(&ctx).list(&Default::default()).await {
            Ok(list) => {
                let deleting: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|o| o.metadata.deletion_timestamp.is_some())
                    .map(|o| o.name_any())
                    .collect();
                let live: Vec<NodeClass> = ctx
                    .state
                    .node_classes
                    .list()
                    .iter()
                    .filter(|c| !deleting.contains(&c.name_any()))
                    .map(|c| (**c).clone())
                    .collect();
                for obj in &list.items {
                    reconcile(&ctx, obj, &live).await;
                }
            }
            Err(e) => {
                ctx.metrics.kube_error("nodeclasses list", &e);
                tracing::warn!(error = %e, "listing NodeClasses failed; retrying");
            }
        }
        let wait = async {
            loop {
                match rx.recv().await {
                    Ok(Change::NodeClass(_)) => return true,
                    // A claim's change matters only to a class waiting for its claims to
                    // go. Listing on every claim change was 1,152 LISTs of NodeClasses in
                    // the 1,000-node run (kwok_scale); a malformed class being deleted is
                    // not in the typed store and waits for the resync.
                    Ok(Change::NodeClaim(_))
                        if ctx
                            .state
                            .node_classes
                            .list()
                            .iter()
                            .any(|c| c.metadata.deletion_timestamp.is_some()) =>
                    {
                        return true
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(_) => return false,
                }
            }
        };
        // The change stream closed: the agent is stopping.
        if let Ok(false) = tokio::time::timeout(RESYNC, wait).await {
            return;
        }
        // NodeClaims change often during a scale-out; one list a second is plenty.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "joiner.dev/termination";

    fn ours() -> Vec<String> {
        vec!["other.io/keep".into(), OURS.into()]
    }

    #[test]
    fn a_live_class_gets_the_finalizer_once() {
        assert_eq!(
            step(OURS, false, &["other.io/keep".into()], vec![]),
            Step::AddFinalizer
        );
        assert_eq!(
            step(OURS, false, &ours(), vec!["c-1".into()]),
            Step::Nothing
        );
    }

    #[test]
    fn a_deleted_class_waits_for_its_claims_then_is_released() {
        assert_eq!(
            step(OURS, true, &ours(), vec!["default-abcde".into()]),
            Step::WaitForClaims(vec!["default-abcde".into()])
        );
        assert_eq!(step(OURS, true, &ours(), vec![]), Step::Release);
    }

    #[test]
    fn a_deleted_class_without_our_finalizer_is_left_alone() {
        assert_eq!(
            step(OURS, true, &["other.io/keep".into()], vec![]),
            Step::Nothing
        );
    }
}
