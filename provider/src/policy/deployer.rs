//! The policy of whoever runs `terraform apply` with this provider (the deployer): what
//! applying, updating and destroying one groupless cluster takes, and nothing wider.
//!
//! Most teams apply with an administrator role and never read such a document; the teams
//! that run Terraform from CI under a scoped role need it written down, and a written policy
//! is only worth something if it is proven. The sandbox and the e2e suite apply and destroy
//! `examples/quickstart` as an IAM user holding exactly this document, under the local
//! world's enforced IAM, and fail on the first refused call.
//!
//! Scoping is by name, because the deployer creates the objects and so cannot rely on tags
//! that do not exist yet: everything `terraform-modules/groupless-eks` creates is named after
//! the cluster (`<name>-cluster`, `<name>-node`, `<name>-agent`, `<name>-fargate`,
//! `<name>-interruptions`, the rules' `joiner-<name>-…`). Calls that IAM cannot scope (EC2
//! Describe*, listing OIDC providers) get `*`. Roles are passed only to the services that
//! use them: the cluster role to EKS, the Fargate role to EKS Fargate.

use super::arn::Arn;
use super::document::{PolicyDocument, Statement};
use super::managed::{arns, CLUSTER_POLICIES, FARGATE_POLICIES, NODE_POLICIES};
use super::trust::service_principal;

/// Every IAM action on the cluster's roles that the role resources call. Creating with tags
/// is tagging too (`iam:TagRole`, and likewise for the other services below).
const ROLE_ACTIONS: &[&str] = &[
    "iam:CreateRole",
    "iam:GetRole",
    "iam:UpdateRole",
    "iam:DeleteRole",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:ListRoleTags",
    "iam:UpdateAssumeRolePolicy",
    "iam:PutRolePolicy",
    "iam:GetRolePolicy",
    "iam:DeleteRolePolicy",
    "iam:ListRolePolicies",
    "iam:ListAttachedRolePolicies",
    "iam:PutRolePermissionsBoundary",
    "iam:DeleteRolePermissionsBoundary",
    "iam:ListInstanceProfilesForRole",
];

/// The node role's instance profile (named after the role).
const PROFILE_ACTIONS: &[&str] = &[
    "iam:CreateInstanceProfile",
    "iam:GetInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:TagInstanceProfile",
];

const OIDC_ACTIONS: &[&str] = &[
    "iam:CreateOpenIDConnectProvider",
    "iam:GetOpenIDConnectProvider",
    "iam:DeleteOpenIDConnectProvider",
    "iam:TagOpenIDConnectProvider",
    "iam:UpdateOpenIDConnectProviderThumbprint",
];

/// The cluster itself (and what EKS authorizes on the cluster ARN: creating its access
/// entries, add-ons and Fargate profiles, reading its updates). Not `eks:CreateCluster`:
/// see the `CreateCluster` statement.
const CLUSTER_ACTIONS: &[&str] = &[
    "eks:DescribeCluster",
    "eks:DeleteCluster",
    "eks:UpdateClusterConfig",
    "eks:UpdateClusterVersion",
    "eks:DescribeUpdate",
    "eks:TagResource",
    "eks:UntagResource",
    "eks:CreateAccessEntry",
    "eks:CreateAddon",
    "eks:CreateFargateProfile",
];

/// Access entries, add-ons and Fargate profiles of the cluster, on their own ARNs.
const CLUSTER_CHILD_ACTIONS: &[&str] = &[
    "eks:DescribeAccessEntry",
    "eks:UpdateAccessEntry",
    "eks:DeleteAccessEntry",
    "eks:AssociateAccessPolicy",
    "eks:DisassociateAccessPolicy",
    "eks:ListAssociatedAccessPolicies",
    "eks:DescribeAddon",
    "eks:UpdateAddon",
    "eks:DeleteAddon",
    "eks:DescribeFargateProfile",
    "eks:DeleteFargateProfile",
    "eks:DescribeUpdate",
    "eks:TagResource",
    "eks:UntagResource",
];

const QUEUE_ACTIONS: &[&str] = &[
    "sqs:CreateQueue",
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
    "sqs:SetQueueAttributes",
    "sqs:DeleteQueue",
    "sqs:TagQueue",
    "sqs:UntagQueue",
    "sqs:ListQueueTags",
];

const RULE_ACTIONS: &[&str] = &[
    "events:PutRule",
    "events:DescribeRule",
    "events:DeleteRule",
    "events:PutTargets",
    "events:RemoveTargets",
    "events:ListTargetsByRule",
    "events:TagResource",
    "events:UntagResource",
    "events:ListTagsForResource",
];

/// The deployer's policy for the cluster `cluster` (an EKS cluster ARN, which need not
/// exist yet: it gives the partition, region, account and name); `rule_prefix` is the
/// interruption rules' shared name part for that cluster (`naming::rule_prefix`), passed in
/// so that this module stays free of the resources.
pub fn deployer_policy(cluster: &Arn, rule_prefix: &str) -> PolicyDocument {
    let (p, r, a) = (&cluster.partition, &cluster.region, &cluster.account);
    let name = cluster.resource_name();
    let iam = |res: &str| format!("arn:{p}:iam::{a}:{res}");
    let eks = |res: &str| format!("arn:{p}:eks:{r}:{a}:{res}");
    let roles = iam(&format!("role/{name}-*"));
    let managed: Vec<String> = [CLUSTER_POLICIES, NODE_POLICIES, FARGATE_POLICIES]
        .iter()
        .flat_map(|names| arns(p, names))
        .collect();
    let statements = vec![
        Statement::allow("ClusterRoles")
            .actions(ROLE_ACTIONS.iter().copied())
            .resources([roles.clone()]),
        // Only the AWS managed policies the roles are documented to carry.
        Statement::allow("AttachManagedPolicies")
            .actions(["iam:AttachRolePolicy", "iam:DetachRolePolicy"])
            .resources([roles.clone()])
            .condition("ArnEquals", "iam:PolicyARN", managed),
        Statement::allow("NodeInstanceProfile")
            .actions(PROFILE_ACTIONS.iter().copied())
            .resources([iam(&format!("instance-profile/{name}-*"))]),
        Statement::allow("PassRolesToEks")
            .actions(["iam:PassRole"])
            .resources([roles])
            .condition(
                "StringEquals",
                "iam:PassedToService",
                [
                    service_principal("eks", p),
                    service_principal("eks-fargate-pods", p),
                ],
            ),
        // The cluster's IRSA issuer; its ID is EKS's choice, known only after creation.
        Statement::allow("ClusterOidcProvider")
            .actions(OIDC_ACTIONS.iter().copied())
            .resources([iam(&format!(
                "oidc-provider/oidc.eks.{r}.amazonaws.com/id/*"
            ))]),
        // EKS creates its service-linked roles on an account's first cluster and Fargate
        // profile, as the caller.
        Statement::allow("EksServiceLinkedRoles")
            .actions(["iam:CreateServiceLinkedRole"])
            .resources([iam("role/aws-service-role/*")])
            .condition(
                "StringEquals",
                "iam:AWSServiceName",
                ["eks.amazonaws.com", "eks-fargate.amazonaws.com"],
            ),
        // The Service Authorization Reference gives CreateCluster no resource type, so a
        // grant on the cluster's ARN never matches and only `*` does. The request tag the
        // module puts on the cluster keeps it to this cluster's name.
        Statement::allow("CreateCluster")
            .actions(["eks:CreateCluster"])
            .resources(["*"])
            .condition("StringEquals", "aws:RequestTag/joiner.dev/cluster", [name]),
        Statement::allow("Cluster")
            .actions(CLUSTER_ACTIONS.iter().copied())
            .resources([eks(&format!("cluster/{name}"))]),
        Statement::allow("ClusterParts")
            .actions(CLUSTER_CHILD_ACTIONS.iter().copied())
            .resources([
                eks(&format!("access-entry/{name}/*")),
                eks(&format!("addon/{name}/*")),
                eks(&format!("fargateprofile/{name}/*")),
            ]),
        Statement::allow("InterruptionQueue")
            .actions(QUEUE_ACTIONS.iter().copied())
            .resources([format!("arn:{p}:sqs:{r}:{a}:{name}-*")]),
        Statement::allow("InterruptionRules")
            .actions(RULE_ACTIONS.iter().copied())
            .resources([format!("arn:{p}:events:{r}:{a}:rule/{rule_prefix}-*")]),
        // Neither supports resource-level permissions: the data sources' and the NodePool
        // admission's reads, finding an OIDC provider the cluster's issuer already has, and
        // the plan-time check of the cluster's Kubernetes version against EKS's calendar.
        Statement::allow("ReadOnly")
            .actions([
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeInstanceTypeOfferings",
                "iam:ListOpenIDConnectProviders",
                "eks:DescribeClusterVersions",
            ])
            .resources(["*"]),
    ];
    PolicyDocument::new(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str) -> Arn {
        Arn::expect(
            &format!("arn:aws:eks:us-east-1:123456789012:cluster/{name}"),
            "eks",
            "cluster/",
        )
        .expect("a cluster ARN")
    }

    #[test]
    fn everything_is_scoped_to_the_clusters_names() {
        let doc = deployer_policy(&cluster("quickstart"), "joiner-quickstart").to_json();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        for st in v["Statement"].as_array().unwrap() {
            let resources: Vec<String> = match &st["Resource"] {
                serde_json::Value::String(s) => vec![s.clone()],
                other => other
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap().to_string())
                    .collect(),
            };
            for r in resources {
                let scoped = r.contains("quickstart")
                    || r.contains("oidc.eks.us-east-1.amazonaws.com")
                    || r.ends_with("aws-service-role/*");
                let by_tag = st["Condition"]["StringEquals"]["aws:RequestTag/joiner.dev/cluster"]
                    .to_string()
                    .contains("\"quickstart\"");
                assert!(
                    scoped || st["Sid"] == "ReadOnly" || by_tag,
                    "{} grants {r}",
                    st["Sid"]
                );
            }
        }
        assert!(doc.contains("arn:aws:events:us-east-1:123456789012:rule/joiner-quickstart-*"));
        assert!(doc.contains("AmazonEKSFargatePodExecutionRolePolicy"));
    }

    #[test]
    fn fits_a_managed_policy_even_for_a_100_character_name() {
        let size = deployer_policy(&cluster(&"c".repeat(100)), &"j".repeat(45)).quota_size();
        assert!(size <= 6_144, "{size} characters");
    }

    #[test]
    fn follows_the_partition() {
        let arn = Arn::expect(
            "arn:aws-cn:eks:cn-north-1:123456789012:cluster/q",
            "eks",
            "cluster/",
        )
        .unwrap();
        let doc = deployer_policy(&arn, "joiner-q").to_json();
        assert!(!doc.contains("arn:aws:"), "{doc}");
        assert!(doc.contains("eks.amazonaws.com"), "{doc}");
    }
}
