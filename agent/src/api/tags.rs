//! The EC2 tags that say whose an instance is, and which of them a NodeClass may not set.
//!
//! Three readers besides the agent look at them, and each needs its own key:
//! - the agent's IAM policy scopes every create and delete to `joiner.dev/cluster` (one key
//!   whose value is the cluster name, which keeps the policy small: `provider/src/policy`);
//! - Kubernetes' AWS cloud provider drops every instance without
//!   `kubernetes.io/cluster/<name>` from what it describes, the backends of a `Service`'s
//!   load balancer included (kubernetes/cloud-provider-aws, `pkg/providers/v1/aws.go`,
//!   `describeInstances`, through `tags.go`'s `hasClusterTag`), so such an instance never
//!   receives traffic from a load balancer the cloud provider manages;
//! - EKS names the cluster in `eks:eks-cluster-name`, which Karpenter also writes
//!   (aws/karpenter-provider-aws, `pkg/utils/utils.go`, `GetTags`).
//!
//! `karpenter.sh/nodepool` is refused too but never written: Karpenter lists the instances it
//! owns by that key, its NodeClass key and `eks:eks-cluster-name`
//! (`pkg/providers/instance/instance.go`, `List`) and garbage-collects those without a
//! NodeClaim, so joiner's instances must not look like Karpenter's while both run during a
//! migration.

/// The key the agent's IAM policy scopes to; the value is the cluster name.
pub const CLUSTER: &str = "joiner.dev/cluster";
/// EKS's cluster-name tag.
pub const EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// The prefix of Kubernetes' cluster ownership tag, `kubernetes.io/cluster/<name>`.
pub const KUBERNETES_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
/// The key by which Karpenter knows its own instances.
pub const KARPENTER_NODEPOOL: &str = "karpenter.sh/nodepool";

/// The tags every EC2 object the agent creates carries, whatever its NodeClass says.
pub fn ownership(cluster: &str) -> [(String, String); 3] {
    [
        (CLUSTER.to_string(), cluster.to_string()),
        (
            format!("{KUBERNETES_CLUSTER_PREFIX}{cluster}"),
            "owned".to_string(),
        ),
        (EKS_CLUSTER_NAME.to_string(), cluster.to_string()),
    ]
}

/// Why a NodeClass may not set a tag key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// The agent writes it on every object it launches.
    SetByAgent,
    /// It would make a Karpenter running beside joiner take the instance for its own.
    Karpenters,
}

impl Reserved {
    /// The reason, as a validation error says it.
    pub fn message(self) -> &'static str {
        match self {
            Reserved::SetByAgent => "tag is set by the agent and may not be set here",
            Reserved::Karpenters => {
                "tag marks Karpenter's own instances (a Karpenter running beside joiner would \
                 take the instance for one of its own) and may not be set here"
            }
        }
    }
}

/// The keys the agent writes on every instance, which a NodeClass may not set: a key, or a
/// prefix when it ends in `/`. A world test holds each to a tag of the launch request.
pub const SET_BY_AGENT: [&str; 3] = [KUBERNETES_CLUSTER_PREFIX, "joiner.dev/", EKS_CLUSTER_NAME];

/// Whether `key` is `pattern`, or starts with it when the pattern is a prefix.
pub fn matches(pattern: &str, key: &str) -> bool {
    if pattern.ends_with('/') {
        key.starts_with(pattern)
    } else {
        key == pattern
    }
}

/// Whether, and why, a NodeClass may not set `key`.
pub fn reserved(key: &str) -> Option<Reserved> {
    if SET_BY_AGENT.iter().any(|p| matches(p, key)) {
        Some(Reserved::SetByAgent)
    } else if key == KARPENTER_NODEPOOL {
        Some(Reserved::Karpenters)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ownership_tag_is_one_a_node_class_may_not_set() {
        for (k, _) in ownership("demo") {
            assert_eq!(reserved(&k), Some(Reserved::SetByAgent), "{k}");
        }
        assert_eq!(reserved("team"), None);
        assert_eq!(reserved(KARPENTER_NODEPOOL), Some(Reserved::Karpenters));
    }
}
