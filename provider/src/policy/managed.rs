//! The AWS managed policies attached to each role.
//!
//! AWS maintains these as EKS evolves (new permissions for new features), which is why the
//! cluster, node and Fargate roles use them instead of inline copies. The agent role is
//! the exception: no managed policy is scoped to one cluster, so it gets an inline one.

/// AWS managed policy names per role.
pub const CLUSTER_POLICIES: &[&str] = &["AmazonEKSClusterPolicy"];

/// The node role: kubelet (worker node), the VPC CNI, pulling images (pull-only rather
/// than read-only: nodes never need to list repositories), and SSM Session Manager access
/// so that nodes can be reached without SSH keys.
pub const NODE_POLICIES: &[&str] = &[
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
];

pub const FARGATE_POLICIES: &[&str] = &["AmazonEKSFargatePodExecutionRolePolicy"];

/// `arn:<partition>:iam::aws:policy/<name>`.
pub fn managed_policy_arn(partition: &str, name: &str) -> String {
    format!("arn:{partition}:iam::aws:policy/{name}")
}

pub fn arns(partition: &str, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| managed_policy_arn(partition, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_follow_the_partition() {
        assert_eq!(
            arns("aws-cn", FARGATE_POLICIES),
            vec!["arn:aws-cn:iam::aws:policy/AmazonEKSFargatePodExecutionRolePolicy"]
        );
        assert_eq!(arns("aws", NODE_POLICIES).len(), 4);
    }
}
