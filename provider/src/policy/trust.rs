//! Trust policies: who may assume each of joiner's roles.
//!
//! Each role is assumable by exactly one principal, and where AWS offers a condition that
//! narrows the principal to *this* cluster, it is used (the Fargate role is limited to this
//! cluster's Fargate profiles; the agent role to one service account of this cluster's
//! OIDC issuer), so that a role leaked to another cluster in the account is useless there.

use super::arn::dns_suffix;
use super::document::{PolicyDocument, Principal, Statement};

/// The service principal of `service` in a partition. EC2 is the one principal that
/// carries the partition's DNS suffix in China (`ec2.amazonaws.com.cn`); the EKS principals
/// are `*.amazonaws.com` in every partition.
pub fn service_principal(service: &str, partition: &str) -> String {
    match service {
        "ec2" => format!("ec2.{}", dns_suffix(partition)),
        other => format!("{other}.amazonaws.com"),
    }
}

fn assumable_by_service(service: String) -> Statement {
    Statement::allow("AssumeRole")
        .principal(Principal::Service(service))
        .actions(["sts:AssumeRole"])
}

/// The EKS control plane (`joiner_cluster_role`).
pub fn cluster_trust(partition: &str) -> PolicyDocument {
    PolicyDocument::new(vec![assumable_by_service(service_principal(
        "eks", partition,
    ))])
}

/// EC2 instances, through the instance profile (`joiner_node_role`).
pub fn node_trust(partition: &str) -> PolicyDocument {
    PolicyDocument::new(vec![assumable_by_service(service_principal(
        "ec2", partition,
    ))])
}

/// Fargate's pod execution: only for Fargate profiles of `cluster_name`, using the
/// `aws:SourceArn` condition AWS recommends against the confused-deputy problem.
pub fn fargate_trust(
    partition: &str,
    region: &str,
    account: &str,
    cluster_name: &str,
) -> PolicyDocument {
    let source = format!("arn:{partition}:eks:{region}:{account}:fargateprofile/{cluster_name}/*");
    PolicyDocument::new(vec![assumable_by_service(service_principal(
        "eks-fargate-pods",
        partition,
    ))
    .condition("ArnLike", "aws:SourceArn", [source])])
}

/// How the agent's pods obtain the agent role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTrust {
    /// IAM Roles for Service Accounts: the default, and the only one that works on
    /// Fargate (where the agent runs): Pod Identity needs its agent DaemonSet on EC2 nodes.
    Irsa {
        oidc_provider_arn: String,
        /// The cluster's issuer URL, with or without `https://`.
        issuer_url: String,
    },
    /// EKS Pod Identity (requires the Pod Identity agent add-on and an association).
    PodIdentity,
}

/// The agent role's trust policy for `namespace/service_account`.
pub fn agent_trust(
    trust: &AgentTrust,
    partition: &str,
    namespace: &str,
    service_account: &str,
) -> PolicyDocument {
    match trust {
        AgentTrust::Irsa {
            oidc_provider_arn,
            issuer_url,
        } => {
            let issuer = issuer_host_path(issuer_url);
            PolicyDocument::new(vec![Statement::allow("AssumeRoleWithWebIdentity")
                .principal(Principal::Federated(oidc_provider_arn.clone()))
                .actions(["sts:AssumeRoleWithWebIdentity"])
                .condition(
                    "StringEquals",
                    &format!("{issuer}:sub"),
                    [format!(
                        "system:serviceaccount:{namespace}:{service_account}"
                    )],
                )
                .condition(
                    "StringEquals",
                    &format!("{issuer}:aud"),
                    ["sts.amazonaws.com"],
                )])
        }
        AgentTrust::PodIdentity => PolicyDocument::new(vec![Statement::allow("PodIdentity")
            .principal(Principal::Service(service_principal("pods.eks", partition)))
            .actions(["sts:AssumeRole", "sts:TagSession"])]),
    }
}

/// The issuer as IAM condition keys spell it: host and path, no scheme, no trailing slash.
pub fn issuer_host_path(issuer_url: &str) -> &str {
    issuer_url
        .strip_prefix("https://")
        .unwrap_or(issuer_url)
        .trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cluster_and_node_trust() {
        assert_eq!(
            cluster_trust("aws").to_value(),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"AssumeRole","Effect":"Allow",
                "Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]})
        );
        let cn = node_trust("aws-cn").to_value();
        assert_eq!(
            cn["Statement"][0]["Principal"]["Service"],
            "ec2.amazonaws.com.cn"
        );
    }

    #[test]
    fn fargate_trust_is_scoped_to_this_clusters_profiles() {
        let v = fargate_trust("aws-us-gov", "us-gov-west-1", "123456789012", "prod").to_value();
        let s = &v["Statement"][0];
        assert_eq!(s["Principal"]["Service"], "eks-fargate-pods.amazonaws.com");
        assert_eq!(
            s["Condition"]["ArnLike"]["aws:SourceArn"],
            "arn:aws-us-gov:eks:us-gov-west-1:123456789012:fargateprofile/prod/*"
        );
    }

    #[test]
    fn irsa_trust_pins_service_account_and_audience() {
        let t = AgentTrust::Irsa {
            oidc_provider_arn:
                "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
                    .into(),
            issuer_url: "https://oidc.eks.us-east-1.amazonaws.com/id/ABC/".into(),
        };
        let v = agent_trust(&t, "aws", "joiner", "joiner-agent").to_value();
        let s = &v["Statement"][0];
        assert_eq!(s["Action"], "sts:AssumeRoleWithWebIdentity");
        assert_eq!(
            s["Principal"]["Federated"],
            "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
        let c = &s["Condition"]["StringEquals"];
        assert_eq!(
            c["oidc.eks.us-east-1.amazonaws.com/id/ABC:sub"],
            "system:serviceaccount:joiner:joiner-agent"
        );
        assert_eq!(
            c["oidc.eks.us-east-1.amazonaws.com/id/ABC:aud"],
            "sts.amazonaws.com"
        );
    }

    #[test]
    fn pod_identity_trust_allows_tag_session() {
        let v = agent_trust(&AgentTrust::PodIdentity, "aws", "joiner", "joiner-agent").to_value();
        let s = &v["Statement"][0];
        assert_eq!(s["Principal"]["Service"], "pods.eks.amazonaws.com");
        assert_eq!(s["Action"], json!(["sts:AssumeRole", "sts:TagSession"]));
    }
}
