//! IAM roles as whole objects: the role, its trust policy, managed policy attachments,
//! inline policies, tags and (for nodes) an instance profile.
//!
//! IAM spreads one logical role over many API objects. Resources want to think of "the
//! role" as one thing: create all of it or none of it, read all of it to detect drift,
//! and delete all of it (a role with anything still attached cannot be deleted). Every
//! call goes through the retry layer, since IAM throttles hard and is eventually
//! consistent.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_iam::types::Tag;
use aws_sdk_iam::Client;
use tokio::time::Instant;

use super::error::{AwsError, AwsResultExt};
use super::retry::retry;

/// The desired role.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoleSpec {
    pub name: String,
    pub path: String,
    pub description: Option<String>,
    pub trust_policy: String,
    pub permissions_boundary: Option<String>,
    pub managed_policy_arns: BTreeSet<String>,
    /// Inline policy name → JSON document.
    pub inline_policies: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// The role as IAM has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoteRole {
    pub arn: String,
    pub unique_id: String,
    pub name: String,
    pub path: String,
    pub description: Option<String>,
    /// Decoded JSON, as IAM returns it (not necessarily byte-equal to what we sent).
    pub trust_policy: String,
    pub permissions_boundary: Option<String>,
    pub managed_policy_arns: BTreeSet<String>,
    pub inline_policies: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// A create that failed part-way. `left_behind` is the ARN of a role that exists but
/// could not be cleaned up; the resource records it in state (tainted) so it is not
/// orphaned.
#[derive(Debug)]
pub struct CreateFailure {
    pub error: AwsError,
    pub left_behind: Option<RemoteRole>,
}

/// The tag every role (and EKS cluster, `aws::eks::cluster`) this provider creates carries. Terraform records a role only when
/// the create call returns: a provider killed after CreateRole (or its process lost) leaves
/// a role that no state knows, and the next apply's CreateRole meets EntityAlreadyExists.
/// A role found that way is adopted when it carries this tag and the trust policy and path
/// asked for (a role of this name the provider made for the same purpose); any other role
/// of that name is still refused, as AWS refuses it. The tag is the provider's own: read
/// never reports it and update never removes it, so it is not part of the `tags` attribute.
pub const CREATED_BY_TAG: &str = "joiner.dev/created-by";
pub const CREATED_BY: &str = "terraform-provider-joiner";

fn iam_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
        .collect()
}

/// IAM returns policy documents URL-encoded (RFC 3986); some emulators return them raw.
pub fn decode_policy(doc: &str) -> String {
    if doc.trim_start().starts_with('{') {
        return doc.to_string();
    }
    let bytes = doc.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| doc.to_string())
}

/// Creates the role with everything attached. On a failure after CreateRole, the role is
/// deleted again so that a failed apply leaves nothing behind; only if that also fails is
/// it reported as `left_behind`.
pub async fn create_role(
    iam: &Client,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<RemoteRole, CreateFailure> {
    // The trust policy may name an OIDC provider or role created moments ago; the retry
    // layer rides out "Invalid principal" while IAM propagates it.
    let mut tags = spec.tags.clone();
    tags.insert(CREATED_BY_TAG.into(), CREATED_BY.into());
    let created = retry(deadline, || async {
        iam.create_role()
            .role_name(&spec.name)
            .path(&spec.path)
            .assume_role_policy_document(&spec.trust_policy)
            .set_description(spec.description.clone())
            .set_permissions_boundary(spec.permissions_boundary.clone())
            .set_tags(Some(iam_tags(&tags)))
            .send()
            .await
            .aws("iam:CreateRole")
    })
    .await;
    let created = match created {
        Ok(out) => out,
        Err(error) if error.is_already_exists() => {
            return adopt_role(iam, spec, deadline)
                .await
                .map_err(|e| CreateFailure {
                    error: e.unwrap_or(error),
                    left_behind: None,
                })
        }
        Err(error) => {
            return Err(CreateFailure {
                error,
                left_behind: None,
            })
        }
    };
    let role = created.role();
    let arn = role.map(|r| r.arn().to_string()).unwrap_or_default();
    let unique_id = role.map(|r| r.role_id().to_string()).unwrap_or_default();

    let attach = async {
        for policy in &spec.managed_policy_arns {
            attach_policy(iam, &spec.name, policy, deadline).await?;
        }
        for (name, doc) in &spec.inline_policies {
            put_inline_policy(iam, &spec.name, name, doc, deadline).await?;
        }
        Ok::<(), AwsError>(())
    }
    .await;
    if let Err(error) = attach {
        let left_behind = match delete_role(iam, &spec.name, deadline).await {
            Ok(()) => None,
            Err(cleanup) => {
                tracing::error!(role = %spec.name, error = %cleanup, "could not delete a half-created role");
                Some(RemoteRole {
                    arn: arn.clone(),
                    unique_id: unique_id.clone(),
                    name: spec.name.clone(),
                    path: spec.path.clone(),
                    ..RemoteRole::default()
                })
            }
        };
        return Err(CreateFailure { error, left_behind });
    }
    match read_role(iam, &spec.name, deadline).await {
        Ok(Some(r)) => Ok(r),
        // Read-after-create may miss the role for a moment; what we sent is what exists.
        Ok(None) | Err(_) => Ok(RemoteRole {
            arn,
            unique_id,
            name: spec.name.clone(),
            path: spec.path.clone(),
            description: spec.description.clone(),
            trust_policy: spec.trust_policy.clone(),
            permissions_boundary: spec.permissions_boundary.clone(),
            managed_policy_arns: spec.managed_policy_arns.clone(),
            inline_policies: spec.inline_policies.clone(),
            tags: spec.tags.clone(),
        }),
    }
}

async fn attach_policy(
    iam: &Client,
    role: &str,
    policy: &str,
    deadline: Instant,
) -> Result<(), AwsError> {
    retry(deadline, || async {
        iam.attach_role_policy()
            .role_name(role)
            .policy_arn(policy)
            .send()
            .await
            .aws("iam:AttachRolePolicy")
    })
    .await
    .map(|_| ())
}

async fn put_inline_policy(
    iam: &Client,
    role: &str,
    name: &str,
    doc: &str,
    deadline: Instant,
) -> Result<(), AwsError> {
    retry(deadline, || async {
        iam.put_role_policy()
            .role_name(role)
            .policy_name(name)
            .policy_document(doc)
            .send()
            .await
            .aws("iam:PutRolePolicy")
    })
    .await
    .map(|_| ())
}

/// Whether an existing role that CreateRole refused may be taken over as this create's
/// result: it carries [`CREATED_BY_TAG`] and the path and trust policy asked for.
pub fn adoptable(existing: &RemoteRole, created_by_us: bool, spec: &RoleSpec) -> bool {
    created_by_us
        && existing.path == spec.path
        && same_policy(&existing.trust_policy, &spec.trust_policy)
}

/// The create found the role already there: adopts it when [`adoptable`] (brought in line
/// with `spec` and read back), else `Err(None)`: the caller reports CreateRole's refusal.
async fn adopt_role(
    iam: &Client,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<RemoteRole, Option<AwsError>> {
    let Some((existing, ours)) = read_role_marked(iam, &spec.name, deadline)
        .await
        .map_err(Some)?
    else {
        return Err(None);
    };
    if !adoptable(&existing, ours, spec) {
        return Err(None);
    }
    tracing::warn!(role = %spec.name, "adopting a role this provider created in an apply that did not finish");
    update_role(iam, &existing, spec, deadline)
        .await
        .map_err(Some)?;
    match read_role(iam, &spec.name, deadline).await.map_err(Some)? {
        Some(r) => Ok(r),
        None => Err(None),
    }
}

/// Reads the whole role as IAM has it, without the provider's own [`CREATED_BY_TAG`];
/// `None` when there is no such role.
pub async fn read_role(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<RemoteRole>, AwsError> {
    Ok(read_role_marked(iam, name, deadline)
        .await?
        .map(|(role, _)| role))
}

/// [`read_role`], and whether the role carries [`CREATED_BY_TAG`].
async fn read_role_marked(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<(RemoteRole, bool)>, AwsError> {
    let got = retry(deadline, || async {
        iam.get_role()
            .role_name(name)
            .send()
            .await
            .aws("iam:GetRole")
    })
    .await;
    let got = match got {
        Ok(g) => g,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(role) = got.role() else {
        return Ok(None);
    };
    let mut remote = RemoteRole {
        arn: role.arn().to_string(),
        unique_id: role.role_id().to_string(),
        name: role.role_name().to_string(),
        path: role.path().to_string(),
        description: role
            .description()
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        trust_policy: role
            .assume_role_policy_document()
            .map(decode_policy)
            .unwrap_or_default(),
        permissions_boundary: role
            .permissions_boundary()
            .and_then(|b| b.permissions_boundary_arn())
            .map(str::to_string),
        ..RemoteRole::default()
    };

    remote.managed_policy_arns = attached_policies(iam, name, deadline).await?;
    remote.inline_policies = inline_policies(iam, name, deadline).await?;
    remote.tags = role_tags(iam, name, deadline).await?;
    let ours = remote.tags.remove(CREATED_BY_TAG).as_deref() == Some(CREATED_BY);
    Ok(Some((remote, ours)))
}

/// The ARNs of the managed policies attached to the role, every page.
async fn attached_policies(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<BTreeSet<String>, AwsError> {
    let mut arns = BTreeSet::new();
    let mut marker: Option<String> = None;
    loop {
        let page = retry(deadline, || async {
            iam.list_attached_role_policies()
                .role_name(name)
                .set_marker(marker.clone())
                .send()
                .await
                .aws("iam:ListAttachedRolePolicies")
        })
        .await?;
        arns.extend(
            page.attached_policies()
                .iter()
                .filter_map(|p| p.policy_arn())
                .map(str::to_string),
        );
        marker = page.marker().map(str::to_string);
        if !page.is_truncated() || marker.is_none() {
            break;
        }
    }
    Ok(arns)
}

/// The role's inline policies by name, each document decoded.
async fn inline_policies(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<BTreeMap<String, String>, AwsError> {
    let names = retry(deadline, || async {
        iam.list_role_policies()
            .role_name(name)
            .send()
            .await
            .aws("iam:ListRolePolicies")
    })
    .await?;
    let mut policies = BTreeMap::new();
    for policy in names.policy_names() {
        let doc = retry(deadline, || async {
            iam.get_role_policy()
                .role_name(name)
                .policy_name(policy)
                .send()
                .await
                .aws("iam:GetRolePolicy")
        })
        .await?;
        policies.insert(policy.clone(), decode_policy(doc.policy_document()));
    }
    Ok(policies)
}

async fn role_tags(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<BTreeMap<String, String>, AwsError> {
    let tags = retry(deadline, || async {
        iam.list_role_tags()
            .role_name(name)
            .send()
            .await
            .aws("iam:ListRoleTags")
    })
    .await?;
    Ok(tags
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect())
}

/// Brings an existing role in line with `spec`: trust policy, description, boundary,
/// attachments, inline policies and tags. Name and path cannot change in place.
pub async fn update_role(
    iam: &Client,
    current: &RemoteRole,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<(), AwsError> {
    update_role_settings(iam, current, spec, deadline).await?;
    update_role_policies(iam, current, spec, deadline).await?;
    update_role_tags(iam, current, spec, deadline).await
}

/// The trust policy, description and permissions boundary, each written only if changed.
async fn update_role_settings(
    iam: &Client,
    current: &RemoteRole,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<(), AwsError> {
    let name = spec.name.as_str();
    if !same_policy(&current.trust_policy, &spec.trust_policy) {
        retry(deadline, || async {
            iam.update_assume_role_policy()
                .role_name(name)
                .policy_document(&spec.trust_policy)
                .send()
                .await
                .aws("iam:UpdateAssumeRolePolicy")
        })
        .await?;
    }
    if current.description != spec.description {
        retry(deadline, || async {
            iam.update_role()
                .role_name(name)
                .description(spec.description.clone().unwrap_or_default())
                .send()
                .await
                .aws("iam:UpdateRole")
        })
        .await?;
    }
    if current.permissions_boundary != spec.permissions_boundary {
        match &spec.permissions_boundary {
            Some(b) => {
                retry(deadline, || async {
                    iam.put_role_permissions_boundary()
                        .role_name(name)
                        .permissions_boundary(b)
                        .send()
                        .await
                        .aws("iam:PutRolePermissionsBoundary")
                })
                .await?;
            }
            None => {
                retry(deadline, || async {
                    iam.delete_role_permissions_boundary()
                        .role_name(name)
                        .send()
                        .await
                        .aws("iam:DeleteRolePermissionsBoundary")
                })
                .await?;
            }
        }
    }
    Ok(())
}

/// Managed policy attachments and inline policies. Attach before detaching so the role
/// never lacks a permission it keeps.
async fn update_role_policies(
    iam: &Client,
    current: &RemoteRole,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<(), AwsError> {
    let name = spec.name.as_str();
    for p in spec
        .managed_policy_arns
        .difference(&current.managed_policy_arns)
    {
        attach_policy(iam, name, p, deadline).await?;
    }
    for p in current
        .managed_policy_arns
        .difference(&spec.managed_policy_arns)
    {
        detach_policy(iam, name, p, deadline).await?;
    }
    for (pname, doc) in &spec.inline_policies {
        let unchanged = current
            .inline_policies
            .get(pname)
            .is_some_and(|d| same_policy(d, doc));
        if !unchanged {
            put_inline_policy(iam, name, pname, doc, deadline).await?;
        }
    }
    for pname in current.inline_policies.keys() {
        if !spec.inline_policies.contains_key(pname) {
            delete_inline_policy(iam, name, pname, deadline).await?;
        }
    }
    Ok(())
}

/// Removes the tags `spec` no longer has, then writes those it adds or changes.
async fn update_role_tags(
    iam: &Client,
    current: &RemoteRole,
    spec: &RoleSpec,
    deadline: Instant,
) -> Result<(), AwsError> {
    let name = spec.name.as_str();
    let stale: Vec<String> = current
        .tags
        .keys()
        .filter(|k| !spec.tags.contains_key(*k))
        .cloned()
        .collect();
    if !stale.is_empty() {
        retry(deadline, || async {
            iam.untag_role()
                .role_name(name)
                .set_tag_keys(Some(stale.clone()))
                .send()
                .await
                .aws("iam:UntagRole")
        })
        .await?;
    }
    let changed: BTreeMap<String, String> = spec
        .tags
        .iter()
        .filter(|(k, v)| current.tags.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !changed.is_empty() {
        retry(deadline, || async {
            iam.tag_role()
                .role_name(name)
                .set_tags(Some(iam_tags(&changed)))
                .send()
                .await
                .aws("iam:TagRole")
        })
        .await?;
    }
    Ok(())
}

/// True when two policy documents mean the same to IAM (whitespace, key order and
/// single-value-vs-list differences ignored).
pub fn same_policy(a: &str, b: &str) -> bool {
    use crate::policy::document::normalize;
    match (normalize(a), normalize(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

async fn detach_policy(
    iam: &Client,
    role: &str,
    policy: &str,
    deadline: Instant,
) -> Result<(), AwsError> {
    let r = retry(deadline, || async {
        iam.detach_role_policy()
            .role_name(role)
            .policy_arn(policy)
            .send()
            .await
            .aws("iam:DetachRolePolicy")
    })
    .await;
    ignore_not_found(r.map(|_| ()))
}

async fn delete_inline_policy(
    iam: &Client,
    role: &str,
    policy: &str,
    deadline: Instant,
) -> Result<(), AwsError> {
    let r = retry(deadline, || async {
        iam.delete_role_policy()
            .role_name(role)
            .policy_name(policy)
            .send()
            .await
            .aws("iam:DeleteRolePolicy")
    })
    .await;
    ignore_not_found(r.map(|_| ()))
}

fn ignore_not_found(r: Result<(), AwsError>) -> Result<(), AwsError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Deletes the role and everything that would block it: its instance profiles'
/// membership, attached policies and inline policies. A role already gone is success.
pub async fn delete_role(iam: &Client, name: &str, deadline: Instant) -> Result<(), AwsError> {
    let profiles = retry(deadline, || async {
        iam.list_instance_profiles_for_role()
            .role_name(name)
            .send()
            .await
            .aws("iam:ListInstanceProfilesForRole")
    })
    .await;
    let profiles = match profiles {
        Ok(p) => p,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    for profile in profiles.instance_profiles() {
        let r = retry(deadline, || async {
            iam.remove_role_from_instance_profile()
                .instance_profile_name(profile.instance_profile_name())
                .role_name(name)
                .send()
                .await
                .aws("iam:RemoveRoleFromInstanceProfile")
        })
        .await;
        ignore_not_found(r.map(|_| ()))?;
    }
    let attached = retry(deadline, || async {
        iam.list_attached_role_policies()
            .role_name(name)
            .send()
            .await
            .aws("iam:ListAttachedRolePolicies")
    })
    .await;
    match attached {
        Ok(a) => {
            for p in a.attached_policies().iter().filter_map(|p| p.policy_arn()) {
                detach_policy(iam, name, p, deadline).await?;
            }
        }
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    }
    let inline = retry(deadline, || async {
        iam.list_role_policies()
            .role_name(name)
            .send()
            .await
            .aws("iam:ListRolePolicies")
    })
    .await;
    match inline {
        Ok(i) => {
            for p in i.policy_names() {
                delete_inline_policy(iam, name, p, deadline).await?;
            }
        }
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    }
    let r = retry(deadline, || async {
        iam.delete_role()
            .role_name(name)
            .send()
            .await
            .aws("iam:DeleteRole")
    })
    .await;
    ignore_not_found(r.map(|_| ()))
}

/// An instance profile as IAM has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoteInstanceProfile {
    pub name: String,
    pub arn: String,
    pub roles: Vec<String>,
}

/// Creates an instance profile holding `role` (an EC2 instance can only carry a role
/// through one). An existing profile of that name is adopted if it is empty or already
/// holds the role, so a retried apply after a partial failure converges.
pub async fn ensure_instance_profile(
    iam: &Client,
    name: &str,
    path: &str,
    role: &str,
    tags: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<RemoteInstanceProfile, AwsError> {
    let created = retry(deadline, || async {
        iam.create_instance_profile()
            .instance_profile_name(name)
            .path(path)
            .set_tags(Some(iam_tags(tags)).filter(|t| !t.is_empty()))
            .send()
            .await
            .aws("iam:CreateInstanceProfile")
    })
    .await;
    match created {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {}
        Err(e) => return Err(e),
    }
    let current = read_instance_profile(iam, name, deadline)
        .await?
        .unwrap_or_default();
    if !current.roles.iter().any(|r| r == role) {
        retry(deadline, || async {
            iam.add_role_to_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
                .await
                .aws("iam:AddRoleToInstanceProfile")
        })
        .await?;
    }
    Ok(read_instance_profile(iam, name, deadline)
        .await?
        .unwrap_or(RemoteInstanceProfile {
            name: name.to_string(),
            arn: current.arn,
            roles: vec![role.to_string()],
        }))
}

pub async fn read_instance_profile(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<RemoteInstanceProfile>, AwsError> {
    let got = retry(deadline, || async {
        iam.get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .aws("iam:GetInstanceProfile")
    })
    .await;
    match got {
        Ok(out) => Ok(out.instance_profile().map(|p| RemoteInstanceProfile {
            name: p.instance_profile_name().to_string(),
            arn: p.arn().to_string(),
            roles: p
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect(),
        })),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Empties and deletes an instance profile; already gone is success.
pub async fn delete_instance_profile(
    iam: &Client,
    name: &str,
    deadline: Instant,
) -> Result<(), AwsError> {
    let Some(profile) = read_instance_profile(iam, name, deadline).await? else {
        return Ok(());
    };
    for role in &profile.roles {
        let r = retry(deadline, || async {
            iam.remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
                .await
                .aws("iam:RemoveRoleFromInstanceProfile")
        })
        .await;
        ignore_not_found(r.map(|_| ()))?;
    }
    let r = retry(deadline, || async {
        iam.delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .aws("iam:DeleteInstanceProfile")
    })
    .await;
    ignore_not_found(r.map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a role this provider made, with the path and trust asked for, is taken over
    /// when CreateRole finds the name taken; anyone else's role is still refused.
    #[test]
    fn adopts_only_its_own_role_with_the_same_trust() {
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let spec = RoleSpec {
            name: "n".into(),
            path: "/".into(),
            trust_policy: trust.into(),
            ..RoleSpec::default()
        };
        let existing = RemoteRole {
            name: "n".into(),
            path: "/".into(),
            // Reformatted as IAM returns it: still the same policy.
            trust_policy: trust.replace(',', ", "),
            ..RemoteRole::default()
        };
        assert!(adoptable(&existing, true, &spec));
        assert!(
            !adoptable(&existing, false, &spec),
            "not made by this provider"
        );
        let other_path = RemoteRole {
            path: "/team/".into(),
            ..existing.clone()
        };
        assert!(!adoptable(&other_path, true, &spec));
        let other_trust = RemoteRole {
            trust_policy: trust.replace("ec2.amazonaws.com", "eks.amazonaws.com"),
            ..existing
        };
        assert!(!adoptable(&other_trust, true, &spec));
    }

    #[test]
    fn decodes_url_encoded_policies() {
        assert_eq!(
            decode_policy("%7B%22Version%22%3A%222012-10-17%22%7D"),
            r#"{"Version":"2012-10-17"}"#
        );
        assert_eq!(decode_policy(r#"{"a":"b c"}"#), r#"{"a":"b c"}"#);
        assert_eq!(decode_policy("%7B%zz"), "{%zz");
    }

    #[test]
    fn same_policy_ignores_formatting() {
        assert!(same_policy(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"a:B","Resource":"*"}]}"#,
            r#"{"Statement": [{"Resource": ["*"], "Action": ["a:B"], "Effect": "Allow"}], "Version": "2012-10-17"}"#,
        ));
        assert!(!same_policy(
            r#"{"Statement":[{"Action":"a:B"}]}"#,
            r#"{"Statement":[{"Action":"a:C"}]}"#
        ));
    }
}
