//! Whether an instance's kubelet may join the cluster, decided as EKS decides it.
//!
//! On EKS a kubelet authenticates with the IAM role of its instance profile; the cluster
//! lets it register only if that role has an access entry of a node type (`EC2_LINUX`) or a
//! `mapRoles` entry with the group `system:nodes` in the `kube-system/aws-auth` ConfigMap,
//! whichever the cluster's authentication mode honours (`API` ignores aws-auth, `CONFIG_MAP`
//! ignores entries). Anything else is refused and the instance never becomes a Node; the
//! agent then deletes it at its registration TTL. The bridge asks the same questions of the
//! emulator (EC2's instance profile, IAM, EKS's access entries) and of the cluster it writes
//! Nodes to (aws-auth), so a test whose node role is not authorized sees what a real cluster
//! would show: no Node.

use std::collections::HashMap;

use anyhow::Context;
use serde::Deserialize;

/// The answer for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// May register; how (for the log).
    Authorized(String),
    /// Stays unregistered; why, as an operator would want to read it.
    Refused(String),
}

/// One `mapRoles` item of aws-auth.
#[derive(Debug, Deserialize)]
struct MapRole {
    #[serde(default)]
    rolearn: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// aws-auth wants role ARNs without their path (`role/name`, not `role/path/name`): the
/// comparison is made on that form.
pub fn pathless_role_arn(arn: &str) -> String {
    match arn.split_once(":role/") {
        Some((head, rest)) => format!("{head}:role/{}", rest.rsplit('/').next().unwrap_or(rest)),
        None => arn.to_string(),
    }
}

/// Whether the `mapRoles` YAML maps `role_arn` into `system:nodes`.
pub fn map_roles_authorize(map_roles: &str, role_arn: &str) -> bool {
    let Ok(items) = serde_yaml::from_str::<Vec<MapRole>>(map_roles) else {
        return false;
    };
    let want = pathless_role_arn(role_arn);
    items.iter().any(|m| {
        pathless_role_arn(m.rolearn.trim()) == want && m.groups.iter().any(|g| g == "system:nodes")
    })
}

/// The IAM, EKS and cluster look-ups behind a [`Verdict`]. Instance profiles are resolved
/// once (their role does not change under a running instance); the cluster's mode, entries
/// and aws-auth are read afresh each [`Authorizer::begin_poll`], so adding an entry takes
/// effect at the next poll.
pub struct Authorizer {
    eks: aws_sdk_eks::Client,
    iam: aws_sdk_iam::Client,
    cluster: String,
    roles: HashMap<String, Result<String, String>>,
    this_poll: HashMap<String, Verdict>,
    mode: Option<Result<String, String>>,
    /// The cluster's network, read with the authentication mode (one DescribeCluster a poll).
    network: Option<crate::network::ClusterNetwork>,
    map_roles: Option<Option<String>>,
}

impl Authorizer {
    pub fn new(conf: &aws_config::SdkConfig, cluster: &str) -> Authorizer {
        Authorizer {
            eks: aws_sdk_eks::Client::new(conf),
            iam: aws_sdk_iam::Client::new(conf),
            cluster: cluster.to_string(),
            roles: HashMap::new(),
            this_poll: HashMap::new(),
            mode: None,
            network: None,
            map_roles: None,
        }
    }

    /// Forgets what the cluster said at the last poll.
    pub fn begin_poll(&mut self) {
        self.this_poll.clear();
        self.mode = None;
        self.network = None;
        self.map_roles = None;
    }

    /// The verdict for an instance with this instance-profile ARN. `aws_auth` reads the
    /// `mapRoles` of the cluster's aws-auth ConfigMap (None when there is none).
    pub async fn check<F, Fut>(
        &mut self,
        profile_arn: Option<&str>,
        aws_auth: F,
    ) -> anyhow::Result<Verdict>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Option<String>>>,
    {
        let Some(profile_arn) = profile_arn else {
            return Ok(Verdict::Refused(
                "the instance has no IAM instance profile, so its kubelet has no identity to \
                 authenticate to EKS with"
                    .into(),
            ));
        };
        let role = match self.roles.get(profile_arn) {
            Some(r) => r.clone(),
            None => {
                let r = self.role_of(profile_arn).await?;
                self.roles.insert(profile_arn.to_string(), r.clone());
                r
            }
        };
        let role = match role {
            Ok(role) => role,
            Err(why) => return Ok(Verdict::Refused(why)),
        };
        if let Some(v) = self.this_poll.get(&role) {
            return Ok(v.clone());
        }
        let mode = match self.mode.clone() {
            Some(m) => m,
            None => {
                let m = self.mode().await?;
                self.mode = Some(m.clone());
                m
            }
        };
        let mode = match mode {
            Ok(m) => m,
            Err(why) => return Ok(Verdict::Refused(why)),
        };
        let mut verdict = None;
        if mode != "CONFIG_MAP" {
            if let Some(kind) = self.entry_type(&role).await? {
                if kind == "EC2_LINUX" || kind == "EC2_WINDOWS" {
                    verdict = Some(Verdict::Authorized(format!(
                        "access entry {kind} for {role}"
                    )));
                }
            }
        }
        if verdict.is_none() && mode != "API" {
            if self.map_roles.is_none() {
                self.map_roles = Some(aws_auth().await?);
            }
            if let Some(Some(yaml)) = &self.map_roles {
                if map_roles_authorize(yaml, &role) {
                    verdict = Some(Verdict::Authorized(format!(
                        "aws-auth maps {role} to system:nodes"
                    )));
                }
            }
        }
        let verdict = verdict.unwrap_or_else(|| {
            let honoured = match mode.as_str() {
                "API" => "an access entry of type EC2_LINUX",
                "CONFIG_MAP" => "a mapRoles entry with group system:nodes in kube-system/aws-auth",
                _ => "an access entry of type EC2_LINUX or a mapRoles entry with group system:nodes in kube-system/aws-auth",
            };
            Verdict::Refused(format!(
                "role {role} is not authorized on EKS cluster {} (authentication mode {mode}): \
                 it needs {honoured}",
                self.cluster
            ))
        });
        self.this_poll.insert(role, verdict.clone());
        Ok(verdict)
    }

    /// The role of an instance profile (`Err` is a refusal: no such profile, no role).
    async fn role_of(&self, profile_arn: &str) -> anyhow::Result<Result<String, String>> {
        let name = profile_arn.rsplit('/').next().unwrap_or(profile_arn);
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(
                match out.instance_profile().and_then(|p| p.roles().first()) {
                    Some(r) => Ok(r.arn().to_string()),
                    None => Err(format!("instance profile {profile_arn} has no role")),
                },
            ),
            Err(e) => {
                let svc = e.into_service_error();
                if svc.is_no_such_entity_exception() {
                    Ok(Err(format!(
                        "instance profile {profile_arn} does not exist"
                    )))
                } else {
                    Err(svc).context("IAM GetInstanceProfile")
                }
            }
        }
    }

    /// The EKS cluster's VPC configuration, as read this poll (None: no such cluster).
    pub async fn cluster_network(
        &mut self,
    ) -> anyhow::Result<Option<crate::network::ClusterNetwork>> {
        if self.mode.is_none() {
            let m = self.mode().await?;
            self.mode = Some(m);
        }
        Ok(self.network.clone())
    }

    async fn mode(&mut self) -> anyhow::Result<Result<String, String>> {
        match self.eks.describe_cluster().name(&self.cluster).send().await {
            Ok(out) => Ok(Ok({
                self.network = out
                    .cluster()
                    .map(crate::network::ClusterNetwork::from_cluster);
                out.cluster()
                    .and_then(|c| c.access_config())
                    .and_then(|a| a.authentication_mode())
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_else(|| "CONFIG_MAP".into())
            })),
            Err(e) => {
                let svc = e.into_service_error();
                if svc.is_resource_not_found_exception() {
                    Ok(Err(format!(
                        "there is no EKS cluster {} in the emulator for the kubelet to join",
                        self.cluster
                    )))
                } else {
                    Err(svc).context("EKS DescribeCluster")
                }
            }
        }
    }

    /// The type of `role`'s access entry, if it has one.
    async fn entry_type(&self, role: &str) -> anyhow::Result<Option<String>> {
        match self
            .eks
            .describe_access_entry()
            .cluster_name(&self.cluster)
            .principal_arn(role)
            .send()
            .await
        {
            Ok(out) => Ok(out
                .access_entry()
                .and_then(|e| e.r#type())
                .map(str::to_string)),
            Err(e) => {
                let svc = e.into_service_error();
                if svc.is_resource_not_found_exception() {
                    Ok(None)
                } else {
                    Err(svc).context("EKS DescribeAccessEntry")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_auth_needs_the_role_without_its_path_and_system_nodes() {
        let yaml = r#"
- rolearn: arn:aws:iam::123456789012:role/prod-node
  username: system:node:{{EC2PrivateDNSName}}
  groups: [system:bootstrappers, system:nodes]
- rolearn: arn:aws:iam::123456789012:role/viewer
  username: viewer
  groups: [viewers]
"#;
        assert!(map_roles_authorize(
            yaml,
            "arn:aws:iam::123456789012:role/prod-node"
        ));
        assert!(map_roles_authorize(
            yaml,
            "arn:aws:iam::123456789012:role/team/prod-node"
        ));
        assert!(!map_roles_authorize(
            yaml,
            "arn:aws:iam::123456789012:role/viewer"
        ));
        assert!(!map_roles_authorize(
            yaml,
            "arn:aws:iam::123456789012:role/other"
        ));
        assert!(!map_roles_authorize("not: [yaml", "arn:aws:iam::1:role/x"));
    }
}

/// What a test needs for its nodes to join, as a real cluster needs it.
#[derive(Debug, Clone)]
pub struct NodeRole {
    pub role_arn: String,
    /// The instance profile's name (= the role's name, as `joiner_node_role` makes it).
    pub instance_profile: String,
    pub instance_profile_arn: String,
}

/// Test fixture: makes sure the emulator has the EKS cluster `cluster` (created with
/// `API_AND_CONFIG_MAP` on the default subnets if missing), the IAM role `role` with an
/// instance profile of the same name, and, when `authorize`, the role's `EC2_LINUX` access
/// entry. Idempotent, so fixtures may call it for every role they launch with.
pub async fn node_role(
    conf: &aws_config::SdkConfig,
    cluster: &str,
    role: &str,
    authorize: bool,
) -> anyhow::Result<NodeRole> {
    let iam = aws_sdk_iam::Client::new(conf);
    let eks = aws_sdk_eks::Client::new(conf);
    let ec2 = aws_sdk_ec2::Client::new(conf);
    let trust = |service: &str| {
        format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"Service":"{service}.amazonaws.com"}},"Action":"sts:AssumeRole"}}]}}"#
        )
    };
    let ensure_role = |name: String, service: &'static str| {
        let iam = iam.clone();
        let doc = trust(service);
        async move {
            match iam.get_role().role_name(&name).send().await {
                Ok(out) => Ok::<String, anyhow::Error>(
                    out.role().map(|r| r.arn().to_string()).unwrap_or_default(),
                ),
                Err(_) => Ok(iam
                    .create_role()
                    .role_name(&name)
                    .assume_role_policy_document(doc)
                    .send()
                    .await
                    .context("IAM CreateRole")?
                    .role()
                    .map(|r| r.arn().to_string())
                    .unwrap_or_default()),
            }
        }
    };
    let node = instance_profile(conf, role).await?;
    let role_arn = node.role_arn.clone();
    if eks.describe_cluster().name(cluster).send().await.is_err() {
        let cluster_role = ensure_role(format!("{cluster}-cluster"), "eks").await?;
        let subnets = ec2
            .describe_subnets()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("default-for-az")
                    .values("true")
                    .build(),
            )
            .send()
            .await
            .context("EC2 DescribeSubnets")?;
        let ids: Vec<String> = subnets
            .subnets()
            .iter()
            .filter_map(|s| s.subnet_id().map(str::to_string))
            .take(2)
            .collect();
        eks.create_cluster()
            .name(cluster)
            .role_arn(cluster_role)
            .resources_vpc_config(
                // Both endpoints, as `joiner_cluster` creates them: nodes in the VPC then
                // reach the API server through the private one, so their security groups
                // matter (see crate::network).
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .set_subnet_ids(Some(ids))
                    .endpoint_private_access(true)
                    .endpoint_public_access(true)
                    .build(),
            )
            .access_config(
                aws_sdk_eks::types::CreateAccessConfigRequest::builder()
                    .authentication_mode(aws_sdk_eks::types::AuthenticationMode::ApiAndConfigMap)
                    .bootstrap_cluster_creator_admin_permissions(false)
                    .build(),
            )
            .send()
            .await
            .context("EKS CreateCluster")?;
    }
    if authorize {
        match eks
            .create_access_entry()
            .cluster_name(cluster)
            .principal_arn(&role_arn)
            .r#type("EC2_LINUX")
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) => {
                let svc = e.into_service_error();
                if !svc.is_resource_in_use_exception() {
                    return Err(svc).context("EKS CreateAccessEntry");
                }
            }
        }
    }
    Ok(node)
}

/// Test fixture: the IAM role `role` (trusted by EC2) and an instance profile of the same
/// name holding it, as `joiner_node_role` makes them; idempotent. An instance can only be
/// launched with a profile that exists.
pub async fn instance_profile(
    conf: &aws_config::SdkConfig,
    role: &str,
) -> anyhow::Result<NodeRole> {
    let iam = aws_sdk_iam::Client::new(conf);
    let role_arn = match iam.get_role().role_name(role).send().await {
        Ok(out) => out.role().map(|r| r.arn().to_string()).unwrap_or_default(),
        Err(_) => iam
            .create_role()
            .role_name(role)
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .context("IAM CreateRole")?
            .role()
            .map(|r| r.arn().to_string())
            .unwrap_or_default(),
    };
    let profile_arn = match iam
        .get_instance_profile()
        .instance_profile_name(role)
        .send()
        .await
    {
        Ok(out) => out
            .instance_profile()
            .map(|p| p.arn().to_string())
            .unwrap_or_default(),
        Err(_) => {
            let p = iam
                .create_instance_profile()
                .instance_profile_name(role)
                .send()
                .await
                .context("IAM CreateInstanceProfile")?;
            iam.add_role_to_instance_profile()
                .instance_profile_name(role)
                .role_name(role)
                .send()
                .await
                .context("IAM AddRoleToInstanceProfile")?;
            p.instance_profile()
                .map(|p| p.arn().to_string())
                .unwrap_or_default()
        }
    };
    Ok(NodeRole {
        role_arn,
        instance_profile: role.to_string(),
        instance_profile_arn: profile_arn,
    })
}
