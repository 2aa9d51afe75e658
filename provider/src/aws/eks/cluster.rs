//! The EKS control plane: create, describe, wait, update in place, tag, delete.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_eks::types::{
    AuthenticationMode, ClusterStatus, CreateAccessConfigRequest, EncryptionConfig, LogSetup,
    LogType, Logging, Provider, Update, UpdateAccessConfigRequest, UpdateStatus, VpcConfigRequest,
};
use aws_sdk_eks::Client;
use tokio::time::Instant;

use super::wait::{self, Observed, PollInterval};
use super::{request_token, EksError};
use crate::aws::error::AwsResultExt;
use crate::aws::iam::{CREATED_BY, CREATED_BY_TAG};
use crate::aws::retry::retry;

/// The five control-plane log streams EKS can send to CloudWatch.
pub const LOG_TYPES: [&str; 5] = [
    "api",
    "audit",
    "authenticator",
    "controllerManager",
    "scheduler",
];

/// How EKS authenticates IAM principals, in the only order EKS lets a cluster move:
/// from the `aws-auth` ConfigMap alone, to both, to access entries alone.
pub const AUTHENTICATION_MODES: [&str; 3] = ["CONFIG_MAP", "API_AND_CONFIG_MAP", "API"];

/// The position of `mode` in [`AUTHENTICATION_MODES`]; a change may only go forward.
pub fn mode_rank(mode: &str) -> Option<usize> {
    AUTHENTICATION_MODES.iter().position(|m| *m == mode)
}

/// What we ask EKS for. Everything the resource lets the user set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSpec {
    pub name: String,
    /// `None` lets EKS pick its current default version.
    pub version: Option<String>,
    pub role_arn: String,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub endpoint_public_access: bool,
    pub endpoint_private_access: bool,
    pub public_access_cidrs: Vec<String>,
    /// KMS key for envelope encryption of Kubernetes secrets.
    pub kms_key_arn: Option<String>,
    pub log_types: BTreeSet<String>,
    pub tags: BTreeMap<String, String>,
    /// `accessConfig.authenticationMode`; `None` leaves EKS's default (CONFIG_MAP).
    pub authentication_mode: Option<String>,
    /// `accessConfig.bootstrapClusterCreatorAdminPermissions`; `None` leaves EKS's default
    /// (true).
    pub bootstrap_creator_admin: Option<bool>,
}

/// What EKS reports about a cluster, flattened for the resource's state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterInfo {
    pub name: String,
    pub arn: String,
    pub status: String,
    pub version: Option<String>,
    pub platform_version: Option<String>,
    pub endpoint: Option<String>,
    /// Base64 PEM of the cluster CA, as kubeconfig wants it.
    pub certificate_authority: Option<String>,
    pub oidc_issuer: Option<String>,
    pub cluster_security_group_id: Option<String>,
    pub vpc_id: Option<String>,
    pub role_arn: Option<String>,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub endpoint_public_access: Option<bool>,
    pub endpoint_private_access: Option<bool>,
    pub public_access_cidrs: Vec<String>,
    pub kms_key_arn: Option<String>,
    pub log_types: BTreeSet<String>,
    pub tags: BTreeMap<String, String>,
    pub authentication_mode: Option<String>,
    pub bootstrap_creator_admin: Option<bool>,
}

impl ClusterInfo {
    fn from_sdk(c: &aws_sdk_eks::types::Cluster) -> ClusterInfo {
        let vpc = c.resources_vpc_config();
        let log_types = c
            .logging()
            .map(|l| {
                l.cluster_logging()
                    .iter()
                    .filter(|s| s.enabled() == Some(true))
                    .flat_map(|s| s.types().iter().map(|t| t.as_str().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        // joiner only ever configures envelope encryption of secrets, so any key is that one.
        let kms_key_arn = c
            .encryption_config()
            .iter()
            .find_map(|e| e.provider().and_then(|p| p.key_arn()).map(str::to_string));
        ClusterInfo {
            name: c.name().unwrap_or_default().to_string(),
            arn: c.arn().unwrap_or_default().to_string(),
            status: c
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            version: c.version().map(str::to_string),
            platform_version: c.platform_version().map(str::to_string),
            endpoint: c.endpoint().map(str::to_string),
            certificate_authority: c
                .certificate_authority()
                .and_then(|ca| ca.data())
                .map(str::to_string),
            oidc_issuer: c
                .identity()
                .and_then(|i| i.oidc())
                .and_then(|o| o.issuer())
                .map(str::to_string),
            cluster_security_group_id: vpc
                .and_then(|v| v.cluster_security_group_id())
                .map(str::to_string),
            vpc_id: vpc.and_then(|v| v.vpc_id()).map(str::to_string),
            role_arn: c.role_arn().map(str::to_string),
            subnet_ids: vpc.map(|v| v.subnet_ids().to_vec()).unwrap_or_default(),
            security_group_ids: vpc
                .map(|v| v.security_group_ids().to_vec())
                .unwrap_or_default(),
            endpoint_public_access: vpc.map(|v| v.endpoint_public_access()),
            endpoint_private_access: vpc.map(|v| v.endpoint_private_access()),
            public_access_cidrs: vpc
                .map(|v| v.public_access_cidrs().to_vec())
                .unwrap_or_default(),
            kms_key_arn,
            log_types,
            tags: c
                .tags()
                .map(|t| {
                    t.iter()
                        .filter(|(k, _)| k.as_str() != CREATED_BY_TAG)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            authentication_mode: c
                .access_config()
                .and_then(|a| a.authentication_mode())
                .map(|m| m.as_str().to_string()),
            bootstrap_creator_admin: c
                .access_config()
                .and_then(|a| a.bootstrap_cluster_creator_admin_permissions()),
        }
    }
}

/// The `logging` block: enabled types in one entry, the rest explicitly disabled, so that
/// an update also turns off what was removed from the configuration.
fn logging(enabled: &BTreeSet<String>) -> Logging {
    let on: Vec<LogType> = enabled.iter().map(|t| LogType::from(t.as_str())).collect();
    let off: Vec<LogType> = LOG_TYPES
        .iter()
        .filter(|t| !enabled.contains(**t))
        .map(|t| LogType::from(*t))
        .collect();
    let mut b = Logging::builder();
    if !on.is_empty() {
        b = b.cluster_logging(
            LogSetup::builder()
                .set_types(Some(on))
                .enabled(true)
                .build(),
        );
    }
    if !off.is_empty() {
        b = b.cluster_logging(
            LogSetup::builder()
                .set_types(Some(off))
                .enabled(false)
                .build(),
        );
    }
    b.build()
}

fn endpoint_access(public: bool, private: bool, cidrs: &[String]) -> VpcConfigRequest {
    let mut b = VpcConfigRequest::builder()
        .endpoint_public_access(public)
        .endpoint_private_access(private);
    // CIDRs are only meaningful (and only accepted) with a public endpoint.
    if public && !cidrs.is_empty() {
        b = b.set_public_access_cidrs(Some(cidrs.to_vec()));
    }
    b.build()
}

fn hash_tags(tags: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    if tags.is_empty() {
        None
    } else {
        Some(tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}

/// Sends CreateCluster and returns what EKS answered (status CREATING on real AWS).
/// IAM propagation ("role ... could not be assumed") is retried until `deadline`.
pub async fn create(
    client: &Client,
    spec: &ClusterSpec,
    deadline: Instant,
) -> Result<ClusterInfo, EksError> {
    let token = request_token();
    let mut vpc = VpcConfigRequest::builder()
        .set_subnet_ids(Some(spec.subnet_ids.clone()))
        .set_security_group_ids(Some(spec.security_group_ids.clone()))
        .endpoint_public_access(spec.endpoint_public_access)
        .endpoint_private_access(spec.endpoint_private_access);
    if spec.endpoint_public_access && !spec.public_access_cidrs.is_empty() {
        vpc = vpc.set_public_access_cidrs(Some(spec.public_access_cidrs.clone()));
    }
    let vpc = vpc.build();
    // `resources` is deprecated in the model (EKS now encrypts all API data), but the API
    // still accepts it and older partitions require it to enable envelope encryption.
    #[allow(deprecated)]
    let encryption = spec.kms_key_arn.as_ref().map(|key| {
        vec![EncryptionConfig::builder()
            .resources("secrets")
            .provider(Provider::builder().key_arn(key).build())
            .build()]
    });
    let access = (spec.authentication_mode.is_some() || spec.bootstrap_creator_admin.is_some())
        .then(|| {
            CreateAccessConfigRequest::builder()
                .set_authentication_mode(
                    spec.authentication_mode
                        .as_deref()
                        .map(AuthenticationMode::from),
                )
                .set_bootstrap_cluster_creator_admin_permissions(spec.bootstrap_creator_admin)
                .build()
        });
    let mut tags = spec.tags.clone();
    tags.insert(CREATED_BY_TAG.into(), CREATED_BY.into());
    let created = retry(deadline, || async {
        client
            .create_cluster()
            .set_access_config(access.clone())
            .name(&spec.name)
            .set_version(spec.version.clone())
            .role_arn(&spec.role_arn)
            .resources_vpc_config(vpc.clone())
            .logging(logging(&spec.log_types))
            .set_encryption_config(encryption.clone())
            .set_tags(hash_tags(&tags))
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:CreateCluster")
    })
    .await;
    let out = match created {
        Ok(out) => out,
        Err(e) if e.is_already_exists() => {
            // A cluster of this name exists. Ours from a create that did not finish (the
            // provider killed while EKS spent its minutes creating it) carries the tag and
            // the role asked for: adopted, and the caller waits for it as for a new one.
            return match describe_marked(client, &spec.name, deadline).await? {
                Some((info, true)) if info.role_arn.as_deref() == Some(spec.role_arn.as_str()) => {
                    tracing::warn!(cluster = %spec.name, "adopting a cluster this provider created in an apply that did not finish");
                    Ok(info)
                }
                _ => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let cluster = out.cluster().ok_or_else(|| EksError::Failed {
        what: format!("cluster {:?}", spec.name),
        status: "missing".into(),
        detail: Some("CreateCluster answered without a cluster".into()),
    })?;
    Ok(ClusterInfo::from_sdk(cluster))
}

/// [`describe`], and whether the cluster carries [`CREATED_BY_TAG`] (which `describe`
/// leaves out of `tags`: it is the provider's, not part of the `tags` attribute).
async fn describe_marked(
    client: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<(ClusterInfo, bool)>, EksError> {
    let res = retry(deadline, || async {
        client
            .describe_cluster()
            .name(name)
            .send()
            .await
            .aws("eks:DescribeCluster")
    })
    .await;
    match res {
        Ok(out) => Ok(out.cluster().map(|c| {
            let ours = c
                .tags()
                .and_then(|t| t.get(CREATED_BY_TAG))
                .is_some_and(|v| v == CREATED_BY);
            (ClusterInfo::from_sdk(c), ours)
        })),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// DescribeCluster; `None` when the cluster does not exist (drift or already deleted).
pub async fn describe(
    client: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<ClusterInfo>, EksError> {
    Ok(describe_marked(client, name, deadline)
        .await?
        .map(|(info, _)| info))
}

/// One Kubernetes version on EKS's calendar, as DescribeClusterVersions reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KubernetesVersion {
    /// `<major>.<minor>`, e.g. "1.35".
    pub version: String,
    /// The version EKS gives a cluster created without one.
    pub default: bool,
    /// `versionStatus` as EKS reported it when asked (`STANDARD_SUPPORT`,
    /// `EXTENDED_SUPPORT`, `UNSUPPORTED`); the dates below decide when they are known.
    pub status: Option<String>,
    /// Start of the day (UTC) standard support ends, in seconds since the epoch.
    pub end_of_standard_support: Option<i64>,
    /// Start of the day (UTC) extended support ends: from then EKS refuses new clusters on
    /// the version and upgrades the ones left on it.
    pub end_of_extended_support: Option<i64>,
}

/// EKS's version calendar (DescribeClusterVersions with `includeAll`, so that versions past
/// their end of support are named as such rather than unknown), every page.
pub async fn versions(
    client: &Client,
    deadline: Instant,
) -> Result<Vec<KubernetesVersion>, EksError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = retry(deadline, || async {
            client
                .describe_cluster_versions()
                .include_all(true)
                .set_next_token(token.clone())
                .send()
                .await
                .aws("eks:DescribeClusterVersions")
        })
        .await?;
        out.extend(page.cluster_versions().iter().map(|v| KubernetesVersion {
            version: v.cluster_version().unwrap_or_default().to_string(),
            default: v.default_version(),
            status: v.version_status().map(|s| s.as_str().to_string()),
            end_of_standard_support: v.end_of_standard_support_date().map(|d| d.secs()),
            end_of_extended_support: v.end_of_extended_support_date().map(|d| d.secs()),
        }));
        match page.next_token() {
            Some(next) if !next.is_empty() && token.as_deref() != Some(next) => {
                token = Some(next.to_string());
            }
            _ => return Ok(out),
        }
    }
}

/// Polls until the cluster is ACTIVE (creating or updating takes minutes on AWS).
pub async fn wait_active(
    client: &Client,
    name: &str,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    let what = format!("EKS cluster {name:?}");
    wait::until(&what, "ACTIVE", deadline, poll, || async {
        let Some(info) = describe(client, name, deadline).await? else {
            return Ok(Observed::Failed {
                status: "gone".into(),
                detail: Some("the cluster disappeared while we waited for it".into()),
            });
        };
        Ok(match ClusterStatus::from(info.status.as_str()) {
            ClusterStatus::Active => Observed::Done(info),
            ClusterStatus::Failed | ClusterStatus::Deleting => Observed::Failed {
                status: info.status.clone(),
                detail: None,
            },
            _ => Observed::Pending(info.status.clone()),
        })
    })
    .await
}

/// Waits for one EKS update (version, logging, endpoint access) to finish. Emulators that
/// answer without an update ID leave nothing to wait on but the cluster status.
async fn wait_update(
    client: &Client,
    name: &str,
    update: Option<&Update>,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    if let Some(id) = update.and_then(|u| u.id()) {
        let what = format!("EKS cluster {name:?} update {id}");
        wait::until(&what, "Successful", deadline, poll, || async {
            let out = retry(deadline, || async {
                client
                    .describe_update()
                    .name(name)
                    .update_id(id)
                    .send()
                    .await
                    .aws("eks:DescribeUpdate")
            })
            .await?;
            let Some(u) = out.update() else {
                return Ok(Observed::Done(()));
            };
            Ok(match u.status() {
                Some(UpdateStatus::Successful) | None => Observed::Done(()),
                Some(UpdateStatus::Failed) | Some(UpdateStatus::Cancelled) => Observed::Failed {
                    status: u
                        .status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    detail: Some(
                        u.errors()
                            .iter()
                            .map(|e| {
                                format!(
                                    "{}: {}",
                                    e.error_code().map(|c| c.as_str()).unwrap_or("Error"),
                                    e.error_message().unwrap_or("")
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                    .filter(|d| !d.is_empty()),
                },
                Some(other) => Observed::Pending(other.as_str().to_string()),
            })
        })
        .await?;
    }
    wait_active(client, name, deadline, poll).await
}

/// In-place Kubernetes version upgrade (one minor version at a time on AWS).
pub async fn update_version(
    client: &Client,
    name: &str,
    version: &str,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    let token = request_token();
    let out = retry(deadline, || async {
        client
            .update_cluster_version()
            .name(name)
            .version(version)
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:UpdateClusterVersion")
    })
    .await?;
    wait_update(client, name, out.update(), deadline, poll).await
}

/// Turns control-plane log types on and off.
pub async fn update_logging(
    client: &Client,
    name: &str,
    log_types: &BTreeSet<String>,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    let token = request_token();
    let out = retry(deadline, || async {
        client
            .update_cluster_config()
            .name(name)
            .logging(logging(log_types))
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:UpdateClusterConfig")
    })
    .await?;
    wait_update(client, name, out.update(), deadline, poll).await
}

/// Changes endpoint access (public/private, public CIDRs). EKS takes one kind of update
/// per call, so this is separate from logging. The unchanged subnets and security groups
/// are sent along: EKS accepts them as they are, and emulators that replace the whole VPC
/// configuration on update then keep them.
pub async fn update_endpoint_access(
    client: &Client,
    spec: &ClusterSpec,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    let name = spec.name.as_str();
    let access = endpoint_access(
        spec.endpoint_public_access,
        spec.endpoint_private_access,
        &spec.public_access_cidrs,
    );
    let vpc = VpcConfigRequest::builder()
        .set_subnet_ids(Some(spec.subnet_ids.clone()))
        .set_security_group_ids(Some(spec.security_group_ids.clone()))
        .set_endpoint_public_access(access.endpoint_public_access())
        .set_endpoint_private_access(access.endpoint_private_access())
        .set_public_access_cidrs(if access.public_access_cidrs().is_empty() {
            None
        } else {
            Some(access.public_access_cidrs().to_vec())
        })
        .build();
    let token = request_token();
    let out = retry(deadline, || async {
        client
            .update_cluster_config()
            .name(name)
            .resources_vpc_config(vpc.clone())
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:UpdateClusterConfig")
    })
    .await?;
    wait_update(client, name, out.update(), deadline, poll).await
}

/// Moves the cluster's authentication mode forward (EKS refuses to go back). Like every
/// cluster-config update, one kind per call.
pub async fn update_authentication_mode(
    client: &Client,
    name: &str,
    mode: &str,
    deadline: Instant,
    poll: PollInterval,
) -> Result<ClusterInfo, EksError> {
    let token = request_token();
    let access = UpdateAccessConfigRequest::builder()
        .authentication_mode(AuthenticationMode::from(mode))
        .build();
    let out = retry(deadline, || async {
        client
            .update_cluster_config()
            .name(name)
            .access_config(access.clone())
            .client_request_token(&token)
            .send()
            .await
            .aws("eks:UpdateClusterConfig")
    })
    .await?;
    wait_update(client, name, out.update(), deadline, poll).await
}

/// Makes the tags on `arn` equal to `want`, touching only what differs.
pub async fn sync_tags(
    client: &Client,
    arn: &str,
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<(), EksError> {
    let removed: Vec<String> = have
        .keys()
        .filter(|k| !want.contains_key(*k))
        .cloned()
        .collect();
    let changed: BTreeMap<String, String> = want
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !removed.is_empty() {
        retry(deadline, || async {
            client
                .untag_resource()
                .resource_arn(arn)
                .set_tag_keys(Some(removed.clone()))
                .send()
                .await
                .aws("eks:UntagResource")
        })
        .await?;
    }
    if !changed.is_empty() {
        retry(deadline, || async {
            client
                .tag_resource()
                .resource_arn(arn)
                .set_tags(hash_tags(&changed))
                .send()
                .await
                .aws("eks:TagResource")
        })
        .await?;
    }
    Ok(())
}

/// DeleteCluster and wait until DescribeCluster says it is gone. Deleting a cluster that
/// is already gone succeeds, so a destroy after out-of-band deletion is clean.
pub async fn delete(
    client: &Client,
    name: &str,
    deadline: Instant,
    poll: PollInterval,
) -> Result<(), EksError> {
    let res = retry(deadline, || async {
        client
            .delete_cluster()
            .name(name)
            .send()
            .await
            .aws("eks:DeleteCluster")
    })
    .await;
    match res {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let what = format!("EKS cluster {name:?}");
    wait::until(&what, "deleted", deadline, poll, || async {
        Ok(match describe(client, name, deadline).await? {
            None => Observed::Done(()),
            Some(info) if info.status == "FAILED" => Observed::Failed {
                status: info.status,
                detail: Some("deletion failed".into()),
            },
            Some(info) => Observed::Pending(info.status),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logging_enables_chosen_types_and_disables_the_rest() {
        let chosen: BTreeSet<String> = ["api", "audit"].iter().map(|s| s.to_string()).collect();
        let l = logging(&chosen);
        let setups = l.cluster_logging();
        assert_eq!(setups.len(), 2);
        assert_eq!(setups[0].enabled(), Some(true));
        assert_eq!(
            setups[0]
                .types()
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>(),
            ["api", "audit"]
        );
        assert_eq!(setups[1].enabled(), Some(false));
        assert_eq!(setups[1].types().len(), 3);
        // Nothing chosen: a single "all disabled" entry.
        let none = logging(&BTreeSet::new());
        assert_eq!(none.cluster_logging().len(), 1);
        assert_eq!(none.cluster_logging()[0].enabled(), Some(false));
    }

    #[test]
    fn public_cidrs_are_only_sent_with_a_public_endpoint() {
        let cidrs = vec!["10.0.0.0/8".to_string()];
        assert_eq!(
            endpoint_access(true, false, &cidrs).public_access_cidrs(),
            ["10.0.0.0/8"]
        );
        assert!(endpoint_access(false, true, &cidrs)
            .public_access_cidrs()
            .is_empty());
    }
}
