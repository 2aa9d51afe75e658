//! A NodeClass's status: what its selectors resolve to, as Karpenter's EC2NodeClass shows
//! it (subnets with zones and zone IDs, security groups, AMIs per architecture, the
//! instance profile) and a `Ready` condition saying why not when something resolves to
//! nothing. A class the validator refuses (one stored before an upgrade, or by a client
//! that bypassed the CRD's rules) is not resolved at all: `Ready=False` with reason
//! `ValidationFailed` and a Warning Event say what is wrong, and its NodePools stay unserved
//! (`pool_status::usable`) while every other class keeps working.
//!
//! The status is read, not only shown: drift compares each node's image with the AMIs here
//! (so a new image behind `al2023@latest` drifts the class's nodes, as in Karpenter), and
//! provisioning turns `topology.k8s.aws/zone-id` requirements into zones with the subnets'
//! zone IDs.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::{NodeClass, NodeClassStatus};
use crate::controllers::conditions::{self, READY};
use crate::controllers::context::Context;
use crate::controllers::events::{self, Type};
use crate::controllers::state::Change;

/// Why a class is not Ready: the condition's reason and message.
#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

/// How often the selectors are resolved again without a change to the class: new AMIs are
/// published behind aliases and new subnets get tagged without the NodeClass changing.
const REFRESH: Duration = Duration::from_secs(300);

/// The status to write, or None when the current one already says it (conditions compared
/// without their times).
pub fn next_status(
    current: Option<&NodeClassStatus>,
    resolved: Result<NodeClassStatus, NotReady>,
) -> Option<NodeClassStatus> {
    let current = current.cloned().unwrap_or_default();
    let mut next = match &resolved {
        Ok(r) => r.clone(),
        // Keep what was last resolved: a failed lookup (throttling, a missing permission)
        // must not make every node look drifted or every zone ID unknown.
        Err(_) => NodeClassStatus {
            conditions: vec![],
            ..current.clone()
        },
    };
    next.conditions = current.conditions.clone();
    let changed = match &resolved {
        Ok(_) => conditions::set(&mut next.conditions, READY, true, "Ready", ""),
        Err(e) => conditions::set(&mut next.conditions, READY, false, e.reason, &e.message),
    };
    (changed || next != current).then_some(next)
}

async fn reconcile(ctx: &Context, class: &NodeClass) {
    let name = class.name_any();
    let invalid = crate::api::validate::node_class(&class.spec, "spec");
    let resolved = if invalid.is_empty() {
        ctx.cloud.resolve(class).await.map_err(|e| {
            ctx.metrics.cloud_error(&e);
            tracing::warn!(nodeclass = %name, error = %e.explained(), "resolving the NodeClass's selectors failed");
            NotReady {
                reason: "ResolutionFailed",
                message: e.explained(),
            }
        })
    } else {
        let message = invalid
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(nodeclass = %name, reason = %message, "NodeClass invalid: not resolved, its NodePools not served");
        Err(NotReady {
            reason: "ValidationFailed",
            message,
        })
    };
    let Some(status) = next_status(class.status.as_ref(), resolved.clone()) else {
        return;
    };
    if let Err(NotReady {
        reason: "ValidationFailed",
        message,
    }) = &resolved
    {
        ctx.events
            .publish(
                &events::reference(class),
                Type::Warning,
                "ValidationFailed",
                message,
            )
            .await;
    }
    let api = ctx.node_class_api();
    match api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
    {
        Ok(c) => ctx.state.node_classes.insert(&name, c),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            ctx.metrics.kube_error("nodeclasses/status patch", &e);
            tracing::warn!(nodeclass = %name, error = %e, "NodeClass status patch failed");
        }
    }
}

/// Resolves every live NodeClass when one is created or its spec changes (a new
/// generation; its own status writes come back as changes too and are ignored), and every
/// [`REFRESH`].
pub async fn run(ctx: Arc<Context>) {
    if kwok_classes(&ctx) {
        return std::future::pending().await;
    }
    let mut rx = ctx.state.subscribe();
    let mut resolved_at: std::collections::HashMap<String, Option<i64>> = Default::default();
    loop {
        for class in ctx.state.node_classes.list() {
            if class.metadata.deletion_timestamp.is_none() {
                reconcile(&ctx, &class).await;
                resolved_at.insert(class.name_any(), class.metadata.generation);
            }
        }
        let wait = async {
            loop {
                match rx.recv().await {
                    Ok(Change::NodeClass(n)) => {
                        let generation = ctx
                            .state
                            .node_classes
                            .get(&n)
                            .map(|c| c.metadata.generation);
                        if generation.is_some_and(|g| resolved_at.get(&n) != Some(&g)) {
                            return true;
                        }
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(_) => return false,
                }
            }
        };
        if let Ok(false) = tokio::time::timeout(REFRESH, wait).await {
            return;
        }
    }
}

/// Karpenter's KWOKNodeClass: nothing to resolve, and its status (a Ready condition) is
/// its own; neither NodeClass loop touches it.
pub(super) fn kwok_classes(ctx: &Context) -> bool {
    ctx.served.is_karpenter() && ctx.served.cloud == crate::api::served::ClassCloud::Kwok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node_class::ResolvedSubnet;

    fn resolved() -> NodeClassStatus {
        NodeClassStatus {
            subnets: vec![ResolvedSubnet {
                id: "subnet-1".into(),
                zone: "us-east-1a".into(),
                zone_id: Some("use1-az6".into()),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn written_once_then_only_on_change() {
        let first = next_status(None, Ok(resolved())).expect("a first status");
        assert_eq!(first.subnets, resolved().subnets);
        assert!(conditions::is_true(&first.conditions, READY));
        assert_eq!(next_status(Some(&first), Ok(resolved())), None);
        let mut moved = resolved();
        moved.subnets[0].id = "subnet-2".into();
        assert_eq!(
            next_status(Some(&first), Ok(moved)).unwrap().subnets[0].id,
            "subnet-2"
        );
    }

    #[test]
    fn a_failed_resolution_keeps_what_was_resolved_and_says_why() {
        let first = next_status(None, Ok(resolved())).unwrap();
        let failed = next_status(
            Some(&first),
            Err(NotReady {
                reason: "ResolutionFailed",
                message: "ec2:DescribeSubnets failed: Throttling".into(),
            }),
        )
        .expect("the condition changes");
        assert_eq!(failed.subnets, first.subnets);
        let ready = conditions::get(&failed.conditions, READY).unwrap();
        assert_eq!(ready.status, "False");
        assert!(ready.message.contains("Throttling"));
    }
}
