//! What the agent reads of Karpenter's objects, by Karpenter v1's names (pure).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::DynamicObject;
use kube::ResourceExt;

/// controller-runtime's leader Lease, as Karpenter names it (`LeaderElectionID`).
pub const LEASE_NAME: &str = "karpenter-leader-election";
/// Karpenter's finalizer on its Nodes and NodeClaims.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// The `karpenter.sh/nodepool` a node carries. joiner's own nodes carry it too (for
/// workloads written for Karpenter): whether the node is Karpenter's is decided by whether
/// a joiner NodeClaim launched it.
pub fn node_pool(node: &Node) -> Option<String> {
    node.labels()
        .get(crate::labels::KARPENTER_NODEPOOL)
        .cloned()
}

/// Whether Karpenter's finalizer is still on the object.
pub fn has_finalizer<K: kube::Resource>(obj: &K) -> bool {
    obj.meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TERMINATION_FINALIZER)
}

/// Who holds the Lease, if it is held and was renewed within its duration at `now`.
/// Karpenter releases the Lease when it stops (controller-runtime's release on cancel
/// empties the holder); one killed stops renewing and the Lease lapses after its duration.
pub fn live_holder(lease: &Lease, now: jiff::Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec
        .renew_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| spec.acquire_time.as_ref().map(|t| t.0))?;
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15).max(1));
    let until = renewed
        .checked_add(jiff::SignedDuration::from_secs(duration))
        .ok()?;
    (now < until).then_some(holder)
}

/// A Karpenter NodeClaim, as much of it as adoption uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub name: String,
    pub node_name: Option<String>,
    pub provider_id: Option<String>,
    pub image_id: Option<String>,
}

impl Claim {
    /// Reads a `karpenter.sh/v1` NodeClaim; `None` for an object without a name.
    pub fn read(obj: &DynamicObject) -> Option<Claim> {
        let name = obj.metadata.name.clone()?;
        let status = obj.data.get("status");
        let field = |k: &str| {
            status
                .and_then(|s| s.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        Some(Claim {
            name,
            node_name: field("nodeName"),
            provider_id: field("providerID"),
            image_id: field("imageID"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: jiff::Timestamp, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_live_while_renewed_within_its_duration() {
        let t: jiff::Timestamp = "2026-11-26T10:00:00Z".parse().unwrap();
        let l = lease(Some("karpenter-6d4f_abc"), t, 15);
        assert_eq!(
            live_holder(&l, t + jiff::SignedDuration::from_secs(10)).as_deref(),
            Some("karpenter-6d4f_abc")
        );
        assert_eq!(
            live_holder(&l, t + jiff::SignedDuration::from_secs(15)),
            None
        );
        // Released on a clean stop: no holder.
        assert_eq!(live_holder(&lease(Some(""), t, 15), t), None);
        assert_eq!(live_holder(&lease(None, t, 15), t), None);
        assert_eq!(live_holder(&Lease::default(), t), None);
    }

    #[test]
    fn the_pool_label_and_the_finalizer_are_read() {
        let mut n = Node::default();
        assert_eq!(node_pool(&n), None);
        assert!(!has_finalizer(&n));
        n.metadata.labels = Some(
            [(
                crate::labels::KARPENTER_NODEPOOL.to_string(),
                "general".to_string(),
            )]
            .into(),
        );
        n.metadata.finalizers = Some(vec![TERMINATION_FINALIZER.into()]);
        assert_eq!(node_pool(&n).as_deref(), Some("general"));
        assert!(has_finalizer(&n));
    }

    #[test]
    fn a_claim_is_read_from_its_status() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "general-x7k2p"},
            "status": {"nodeName": "ip-10-0-1-5.ec2.internal", "providerID": "aws:///us-east-1a/i-0abc", "imageID": "ami-1"}
        }))
        .unwrap();
        assert_eq!(
            Claim::read(&obj),
            Some(Claim {
                name: "general-x7k2p".into(),
                node_name: Some("ip-10-0-1-5.ec2.internal".into()),
                provider_id: Some("aws:///us-east-1a/i-0abc".into()),
                image_id: Some("ami-1".into()),
            })
        );
    }
}
