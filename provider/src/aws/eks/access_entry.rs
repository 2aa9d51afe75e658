//! EKS access entries: which IAM principals may reach the cluster's Kubernetes API, as
//! whom, and with which EKS access policies.
//!
//! A node role needs an entry of type `EC2_LINUX` (EKS fills in the username
//! `system:node:{{EC2PrivateDNSName}}` and the group `system:nodes`), or its kubelet is
//! refused and the instance never becomes a Node. People and controllers get `STANDARD`
//! entries with Kubernetes groups and/or access policies such as
//! `AmazonEKSClusterAdminPolicy`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_eks::types::{AccessScope, AccessScopeType};
use aws_sdk_eks::Client;
use tokio::time::Instant;

use super::{request_token, EksError};
use crate::aws::error::AwsResultExt;
use crate::aws::retry::retry;

/// Entry types EKS fills in itself: no Kubernetes groups, no username, no access policy.
pub const NODE_TYPES: [&str; 5] = [
    "EC2_LINUX",
    "EC2_WINDOWS",
    "FARGATE_LINUX",
    "HYBRID_LINUX",
    "HYPERPOD_LINUX",
];
/// Every entry type EKS accepts.
pub const TYPES: [&str; 7] = [
    "STANDARD",
    "EC2_LINUX",
    "EC2_WINDOWS",
    "FARGATE_LINUX",
    "EC2",
    "HYBRID_LINUX",
    "HYPERPOD_LINUX",
];
/// Access scope types of a policy association.
pub const SCOPES: [&str; 2] = ["cluster", "namespace"];

pub fn is_node_type(kind: &str) -> bool {
    NODE_TYPES.contains(&kind)
}

/// One access policy association.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct PolicySpec {
    pub policy_arn: String,
    /// `cluster` or `namespace`.
    pub scope: String,
    pub namespaces: BTreeSet<String>,
}

/// What we ask EKS for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntrySpec {
    pub cluster_name: String,
    pub principal_arn: String,
    pub kind: String,
    pub kubernetes_groups: BTreeSet<String>,
    /// `None` lets EKS choose (the session name pattern for a role, the ARN for a user).
    pub username: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// What EKS reports about an entry, with its policy associations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntryInfo {
    pub cluster_name: String,
    pub principal_arn: String,
    pub kind: String,
    pub kubernetes_groups: BTreeSet<String>,
    pub username: String,
    pub tags: BTreeMap<String, String>,
    pub arn: String,
    pub policies: BTreeSet<PolicySpec>,
}

impl EntryInfo {
    fn from_sdk(e: &aws_sdk_eks::types::AccessEntry) -> EntryInfo {
        EntryInfo {
            cluster_name: e.cluster_name().unwrap_or_default().to_string(),
            principal_arn: e.principal_arn().unwrap_or_default().to_string(),
            kind: e.r#type().unwrap_or("STANDARD").to_string(),
            kubernetes_groups: e.kubernetes_groups().iter().cloned().collect(),
            username: e.username().unwrap_or_default().to_string(),
            tags: e
                .tags()
                .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            arn: e.access_entry_arn().unwrap_or_default().to_string(),
            policies: BTreeSet::new(),
        }
    }
}

fn hash_tags(tags: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    (!tags.is_empty()).then(|| tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn groups(g: &BTreeSet<String>) -> Option<Vec<String>> {
    (!g.is_empty()).then(|| g.iter().cloned().collect())
}

/// CreateAccessEntry. EKS refuses it on a `CONFIG_MAP` cluster, for a principal that does
/// not exist, and with groups or a username on a node type; the error says which.
pub async fn create(
    client: &Client,
    spec: &EntrySpec,
    deadline: Instant,
) -> Result<EntryInfo, EksError> {
    let token = request_token();
    let out = retry(deadline, || async {
        client
            .create_access_entry()
            .cluster_name(&spec.cluster_name)
            .principal_arn(&spec.principal_arn)
            .r#type(&spec.kind)
            .set_kubernetes_groups(groups(&spec.kubernetes_groups))
            .set_username(spec.username.clone())
            .set_tags(hash_tags(&spec.tags))
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:CreateAccessEntry")
    })
    .await?;
    let entry = out.access_entry().ok_or_else(|| EksError::Failed {
        what: format!("access entry for {:?}", spec.principal_arn),
        status: "missing".into(),
        detail: Some("CreateAccessEntry answered without an entry".into()),
    })?;
    Ok(EntryInfo::from_sdk(entry))
}

/// DescribeAccessEntry plus ListAssociatedAccessPolicies; `None` when the entry (or its
/// cluster) is gone.
pub async fn describe(
    client: &Client,
    cluster: &str,
    principal_arn: &str,
    deadline: Instant,
) -> Result<Option<EntryInfo>, EksError> {
    let res = retry(deadline, || async {
        client
            .describe_access_entry()
            .cluster_name(cluster)
            .principal_arn(principal_arn)
            .send()
            .await
            .aws("eks:DescribeAccessEntry")
    })
    .await;
    let mut info = match res {
        Ok(out) => match out.access_entry() {
            Some(e) => EntryInfo::from_sdk(e),
            None => return Ok(None),
        },
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !is_node_type(&info.kind) {
        info.policies = list_policies(client, cluster, principal_arn, deadline).await?;
    }
    Ok(Some(info))
}

async fn list_policies(
    client: &Client,
    cluster: &str,
    principal_arn: &str,
    deadline: Instant,
) -> Result<BTreeSet<PolicySpec>, EksError> {
    let mut out = BTreeSet::new();
    let mut token: Option<String> = None;
    loop {
        let page = retry(deadline, || async {
            client
                .list_associated_access_policies()
                .cluster_name(cluster)
                .principal_arn(principal_arn)
                .set_next_token(token.clone())
                .send()
                .await
                .aws("eks:ListAssociatedAccessPolicies")
        })
        .await?;
        for p in page.associated_access_policies() {
            let scope = p.access_scope();
            out.insert(PolicySpec {
                policy_arn: p.policy_arn().unwrap_or_default().to_string(),
                scope: scope
                    .and_then(|s| s.r#type())
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_else(|| "cluster".into()),
                namespaces: scope
                    .map(|s| s.namespaces().iter().cloned().collect())
                    .unwrap_or_default(),
            });
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// UpdateAccessEntry: the Kubernetes groups and the username (STANDARD entries only).
pub async fn update(client: &Client, spec: &EntrySpec, deadline: Instant) -> Result<(), EksError> {
    let token = request_token();
    retry(deadline, || async {
        client
            .update_access_entry()
            .cluster_name(&spec.cluster_name)
            .principal_arn(&spec.principal_arn)
            .set_kubernetes_groups(Some(spec.kubernetes_groups.iter().cloned().collect()))
            .set_username(spec.username.clone())
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:UpdateAccessEntry")
    })
    .await?;
    Ok(())
}

/// AssociateAccessPolicy; associating a policy again replaces its scope.
pub async fn associate(
    client: &Client,
    cluster: &str,
    principal_arn: &str,
    policy: &PolicySpec,
    deadline: Instant,
) -> Result<(), EksError> {
    let scope = AccessScope::builder()
        .r#type(AccessScopeType::from(policy.scope.as_str()))
        .set_namespaces(
            (!policy.namespaces.is_empty()).then(|| policy.namespaces.iter().cloned().collect()),
        )
        .build();
    retry(deadline, || async {
        client
            .associate_access_policy()
            .cluster_name(cluster)
            .principal_arn(principal_arn)
            .policy_arn(&policy.policy_arn)
            .access_scope(scope.clone())
            .send()
            .await
            .aws("eks:AssociateAccessPolicy")
    })
    .await?;
    Ok(())
}

/// DisassociateAccessPolicy; a policy no longer associated is not an error.
pub async fn disassociate(
    client: &Client,
    cluster: &str,
    principal_arn: &str,
    policy_arn: &str,
    deadline: Instant,
) -> Result<(), EksError> {
    let res = retry(deadline, || async {
        client
            .disassociate_access_policy()
            .cluster_name(cluster)
            .principal_arn(principal_arn)
            .policy_arn(policy_arn)
            .send()
            .await
            .aws("eks:DisassociateAccessPolicy")
    })
    .await;
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// DeleteAccessEntry (its policy associations go with it); already gone is success.
pub async fn delete(
    client: &Client,
    cluster: &str,
    principal_arn: &str,
    deadline: Instant,
) -> Result<(), EksError> {
    let res = retry(deadline, || async {
        client
            .delete_access_entry()
            .cluster_name(cluster)
            .principal_arn(principal_arn)
            .send()
            .await
            .aws("eks:DeleteAccessEntry")
    })
    .await;
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}
