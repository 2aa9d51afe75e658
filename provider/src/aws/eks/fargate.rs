//! Fargate profiles: which pods (namespace + labels) run on Fargate, in which subnets,
//! under which pod execution role.
//!
//! EKS processes one profile change per cluster at a time and refuses a second concurrent
//! create or delete with `ResourceInUseException`. Terraform creates the kube-system and
//! agent profiles in parallel, so changes to profiles of the same cluster are serialised
//! here with a per-cluster lock, held until the change has finished (ACTIVE or gone).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use aws_sdk_eks::types::{FargateProfileSelector, FargateProfileStatus};
use aws_sdk_eks::Client;
use tokio::time::Instant;

use super::wait::{self, Observed, PollInterval};
use super::{request_token, EksError};
use crate::aws::error::AwsResultExt;
use crate::aws::retry::retry;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProfileSpec {
    pub cluster_name: String,
    pub profile_name: String,
    pub pod_execution_role_arn: String,
    pub subnet_ids: Vec<String>,
    pub selectors: Vec<Selector>,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProfileInfo {
    pub spec: ProfileSpec,
    pub arn: String,
    pub status: String,
}

impl ProfileInfo {
    fn from_sdk(p: &aws_sdk_eks::types::FargateProfile) -> ProfileInfo {
        ProfileInfo {
            spec: ProfileSpec {
                cluster_name: p.cluster_name().unwrap_or_default().to_string(),
                profile_name: p.fargate_profile_name().unwrap_or_default().to_string(),
                pod_execution_role_arn: p.pod_execution_role_arn().unwrap_or_default().to_string(),
                subnet_ids: p.subnets().to_vec(),
                selectors: p
                    .selectors()
                    .iter()
                    .map(|s| Selector {
                        namespace: s.namespace().unwrap_or_default().to_string(),
                        labels: s
                            .labels()
                            .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                            .unwrap_or_default(),
                    })
                    .collect(),
                tags: p
                    .tags()
                    .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default(),
            },
            arn: p.fargate_profile_arn().unwrap_or_default().to_string(),
            status: p
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
        }
    }
}

/// One lock per cluster name, created on first use and kept for the process lifetime
/// (a provider process lives for one Terraform command).
fn cluster_lock(cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Default::default);
    LOCKS
        .lock()
        .expect("fargate lock table poisoned")
        .entry(cluster.to_string())
        .or_default()
        .clone()
}

fn sdk_selectors(selectors: &[Selector]) -> Vec<FargateProfileSelector> {
    selectors
        .iter()
        .map(|s| {
            FargateProfileSelector::builder()
                .namespace(&s.namespace)
                .set_labels(if s.labels.is_empty() {
                    None
                } else {
                    Some(
                        s.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    )
                })
                .build()
        })
        .collect()
}

/// DescribeFargateProfile; `None` when the profile (or its cluster) does not exist.
pub async fn describe(
    client: &Client,
    cluster: &str,
    profile: &str,
    deadline: Instant,
) -> Result<Option<ProfileInfo>, EksError> {
    let res = retry(deadline, || async {
        client
            .describe_fargate_profile()
            .cluster_name(cluster)
            .fargate_profile_name(profile)
            .send()
            .await
            .aws("eks:DescribeFargateProfile")
    })
    .await;
    match res {
        Ok(out) => Ok(out.fargate_profile().map(ProfileInfo::from_sdk)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn describe_what(cluster: &str, profile: &str) -> String {
    format!("Fargate profile {profile:?} of cluster {cluster:?}")
}

/// Creates the profile and waits until it is ACTIVE. A new pod execution role is often
/// not yet visible to EKS; that is retried as IAM propagation.
pub async fn create(
    client: &Client,
    spec: &ProfileSpec,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ProfileInfo, EksError> {
    let lock = cluster_lock(&spec.cluster_name);
    let _held = lock.lock().await;
    let token = request_token();
    let tags: Option<HashMap<String, String>> = if spec.tags.is_empty() {
        None
    } else {
        Some(spec.tags.clone().into_iter().collect())
    };
    retry(deadline, || async {
        client
            .create_fargate_profile()
            .cluster_name(&spec.cluster_name)
            .fargate_profile_name(&spec.profile_name)
            .pod_execution_role_arn(&spec.pod_execution_role_arn)
            .set_subnets(Some(spec.subnet_ids.clone()))
            .set_selectors(Some(sdk_selectors(&spec.selectors)))
            .set_tags(tags.clone())
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:CreateFargateProfile")
    })
    .await?;
    let what = describe_what(&spec.cluster_name, &spec.profile_name);
    wait::until(&what, "ACTIVE", deadline, poll, || async {
        let Some(info) = describe(client, &spec.cluster_name, &spec.profile_name, deadline).await?
        else {
            return Ok(Observed::Pending("not yet visible".into()));
        };
        Ok(match FargateProfileStatus::from(info.status.as_str()) {
            FargateProfileStatus::Active => Observed::Done(info),
            FargateProfileStatus::CreateFailed | FargateProfileStatus::DeleteFailed => {
                Observed::Failed {
                    status: info.status.clone(),
                    detail: None,
                }
            }
            _ => Observed::Pending(info.status.clone()),
        })
    })
    .await
}

/// Deletes the profile and waits until it is gone; already gone is success.
pub async fn delete(
    client: &Client,
    cluster: &str,
    profile: &str,
    deadline: Instant,
    poll: PollInterval,
) -> Result<(), EksError> {
    let lock = cluster_lock(cluster);
    let _held = lock.lock().await;
    let res = retry(deadline, || async {
        client
            .delete_fargate_profile()
            .cluster_name(cluster)
            .fargate_profile_name(profile)
            .send()
            .await
            .aws("eks:DeleteFargateProfile")
    })
    .await;
    match res {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let what = describe_what(cluster, profile);
    wait::until(&what, "deleted", deadline, poll, || async {
        Ok(match describe(client, cluster, profile, deadline).await? {
            None => Observed::Done(()),
            Some(info) if info.status == "DELETE_FAILED" => Observed::Failed {
                status: info.status,
                detail: None,
            },
            Some(info) => Observed::Pending(info.status),
        })
    })
    .await
}

/// Makes the profile's tags equal to `want` (the only in-place change EKS allows).
pub async fn sync_tags(
    client: &Client,
    arn: &str,
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<(), EksError> {
    super::cluster::sync_tags(client, arn, have, want, deadline).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_labels_are_omitted_from_the_request() {
        let s = sdk_selectors(&[
            Selector {
                namespace: "kube-system".into(),
                labels: BTreeMap::new(),
            },
            Selector {
                namespace: "joiner".into(),
                labels: [("app".to_string(), "agent".to_string())].into(),
            },
        ]);
        assert_eq!(s[0].namespace(), Some("kube-system"));
        assert!(s[0].labels().is_none());
        assert_eq!(
            s[1].labels().unwrap().get("app").map(String::as_str),
            Some("agent")
        );
    }

    #[test]
    fn one_lock_per_cluster() {
        assert!(Arc::ptr_eq(&cluster_lock("a"), &cluster_lock("a")));
        assert!(!Arc::ptr_eq(&cluster_lock("a"), &cluster_lock("b")));
    }
}
