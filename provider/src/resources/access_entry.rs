//! `joiner_access_entry`: an IAM principal allowed into the cluster's Kubernetes API.
//!
//! EKS authenticates a caller by its IAM identity, then looks for an access entry for it
//! (unless the cluster is `CONFIG_MAP`-only, where only the `aws-auth` ConfigMap counts).
//! Nodes need one too: an `EC2_LINUX` entry for the node role is what lets a kubelet
//! register; without it every launched instance stays a stranger to the cluster.
//!
//! The cluster, the principal and the type identify the entry and replace it when they
//! change; the Kubernetes groups, the username, the tags and the access policy
//! associations change in place.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eks::access_entry::{self, EntryInfo, EntrySpec, PolicySpec};
use crate::aws::eks::cluster as eks_cluster;
use crate::context::ProviderContext;
use crate::model::access_entry::{AccessEntryModel, AccessPolicyModel};
use crate::model::Model;
use crate::policy::arn::Arn;
use crate::protocol::prelude::*;
use crate::validators;

const TIMEOUT: Duration = Duration::from_secs(5 * 60);
pub const DEFAULT_TYPE: &str = "STANDARD";

pub struct AccessEntry;

fn id(cluster: &str, principal: &str) -> String {
    format!("{cluster}:{principal}")
}

/// An IAM role or user ARN: what EKS takes as an entry's principal. A session ARN
/// (`arn:aws:sts::…:assumed-role/R/s`) names one session, not the role: refused with the
/// role ARN to use instead.
pub fn principal_arn(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    if let Some(a) = Arn::parse(s)
        .ok()
        .filter(|a| a.service == "sts" && a.resource.starts_with("assumed-role/"))
    {
        let role = a.resource.trim_start_matches("assumed-role/");
        let role = role.split('/').next().unwrap_or(role);
        return Err(format!(
            "{s:?} is an assumed-role session, not a principal EKS can grant; use the role's ARN, \
             arn:{}:iam::{}:role/{role} (with its path, if it has one)",
            a.partition, a.account
        ));
    }
    Arn::expect(s, "iam", "role/")
        .or_else(|_| Arn::expect(s, "iam", "user/"))
        .map(|_| ())
        .map_err(|e| {
            format!(
                "must be an IAM role or user ARN, like arn:aws:iam::123456789012:role/nodes: {e}"
            )
        })
}

fn entry_type(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    if access_entry::TYPES.contains(&s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not an access entry type; allowed: {}",
            access_entry::TYPES.join(", ")
        ))
    }
}

/// An EKS access policy ARN, `arn:<partition>:eks::aws:cluster-access-policy/<Name>`.
fn policy_arn(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let ok = s.starts_with("arn:")
        && s.split(':').nth(2) == Some("eks")
        && s.split(':').nth(4) == Some("aws")
        && s.rsplit_once(":cluster-access-policy/")
            .is_some_and(|(_, n)| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not an EKS access policy ARN; expected \
             arn:aws:eks::aws:cluster-access-policy/<Name>, e.g. AmazonEKSClusterAdminPolicy"
        ))
    }
}

fn scope(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    if access_entry::SCOPES.contains(&s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not an access scope; allowed: cluster, namespace"
        ))
    }
}

fn groups(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    match v
        .as_string_list()
        .into_iter()
        .find(|g| g.starts_with("system:"))
    {
        Some(g) => Err(format!(
            "{g:?}: groups starting with \"system:\" are reserved by EKS (nodes get system:nodes \
             from their entry type)"
        )),
        None => Ok(()),
    }
}

fn spec_from(m: &AccessEntryModel) -> EntrySpec {
    EntrySpec {
        cluster_name: m.cluster_name.clone().unwrap_or_default(),
        principal_arn: m.principal_arn.clone().unwrap_or_default(),
        kind: m.kind.as_deref().unwrap_or(DEFAULT_TYPE).to_string(),
        kubernetes_groups: m.kubernetes_groups.clone().unwrap_or_default(),
        username: (*m.username).clone(),
        tags: m.tags.clone().unwrap_or_default(),
    }
}

fn policy_of(m: &AccessPolicyModel) -> PolicySpec {
    PolicySpec {
        policy_arn: m.policy_arn.clone().unwrap_or_default(),
        scope: m.scope.clone().unwrap_or_else(|| "cluster".into()),
        namespaces: m.namespaces.clone().unwrap_or_default(),
    }
}

fn policies_of(m: &AccessEntryModel) -> BTreeMap<String, PolicySpec> {
    m.access_policies
        .iter()
        .map(policy_of)
        .map(|p| (p.policy_arn.clone(), p))
        .collect()
}

/// Writes what EKS reports into `state`.
fn apply_remote(state: &mut AccessEntryModel, info: &EntryInfo) {
    state.id = Some(id(&info.cluster_name, &info.principal_arn));
    state.cluster_name = Some(info.cluster_name.clone());
    state.principal_arn = Some(info.principal_arn.clone());
    state.kind = Some(info.kind.clone()).into();
    state.kubernetes_groups = Some(info.kubernetes_groups.clone());
    // Node entries report the group EKS gives them; it is not an input.
    if access_entry::is_node_type(&info.kind) {
        state.kubernetes_groups = Some(BTreeSet::new());
    }
    state.username = Some(info.username.clone()).into();
    state.tags = if info.tags.is_empty() && state.tags.is_none() {
        None
    } else {
        Some(info.tags.clone())
    };
    state.arn = Some(info.arn.clone());
    state.access_policies = info
        .policies
        .iter()
        .map(|p| AccessPolicyModel {
            policy_arn: Some(p.policy_arn.clone()),
            scope: Some(p.scope.clone()),
            namespaces: (!p.namespaces.is_empty()).then(|| p.namespaces.clone()),
        })
        .collect();
}

fn gone(what: &str) -> Diagnostics {
    Diagnostic::error(
        "Access entry disappeared",
        format!("the access entry for {what} vanished while it was being applied"),
    )
    .into()
}

#[async_trait]
impl Resource<ProviderContext> for AccessEntry {
    fn type_name(&self) -> &'static str {
        "joiner_access_entry"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description(
                "An EKS access entry: an IAM role or user allowed into the cluster's Kubernetes API, \
                 as a node (`EC2_LINUX`) or with Kubernetes groups and EKS access policies (`STANDARD`).",
            )
            .attribute(
                Attribute::string("id")
                    .computed()
                    .description("`<cluster_name>:<principal_arn>`, also the import ID."),
            )
            .attribute(
                Attribute::string("cluster_name")
                    .required()
                    .force_new()
                    .validate(validators::cluster_name)
                    .description("The EKS cluster (e.g. `joiner_cluster.x.name`). Its `authentication_mode` must not be `CONFIG_MAP`."),
            )
            .attribute(
                Attribute::string("principal_arn")
                    .required()
                    .force_new()
                    .validate(principal_arn)
                    .description("ARN of the IAM role or user (not an assumed-role session)."),
            )
            .attribute(
                Attribute::string("type")
                    .default(Value::string(DEFAULT_TYPE))
                    .force_new()
                    .validate(entry_type)
                    .description(
                        "`STANDARD` (default) for people and controllers; `EC2_LINUX` for a node role \
                         (EKS maps it to `system:node:{{EC2PrivateDNSName}}` in `system:nodes`); also \
                         `EC2_WINDOWS`, `FARGATE_LINUX`, `EC2`, `HYBRID_LINUX`, `HYPERPOD_LINUX`.",
                    ),
            )
            .attribute(
                Attribute::string_set("kubernetes_groups")
                    .default(Value::Set(vec![]))
                    .validate(groups)
                    .description("Kubernetes groups for RBAC bindings (`STANDARD` only; none may start with `system:`)."),
            )
            .attribute(
                Attribute::string("username")
                    .optional_computed()
                    .description("Kubernetes username (`STANDARD` only). EKS chooses one when unset: the role's session pattern or the user's ARN."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(validators::tags)
                    .description("Tags for the entry."),
            )
            .attribute(Attribute::string("arn").computed().description("Access entry ARN."))
            .block(
                NestedBlock::set(
                    "access_policy",
                    Block::new()
                        .description("An EKS access policy associated with the entry (`STANDARD` only).")
                        .attribute(
                            Attribute::string("policy_arn")
                                .required()
                                .validate(policy_arn)
                                .description("e.g. `arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy`."),
                        )
                        .attribute(
                            Attribute::string("scope")
                                .required()
                                .validate(scope)
                                .description("`cluster` or `namespace`."),
                        )
                        .attribute(
                            Attribute::string_set("namespaces")
                                .optional()
                                .description("The namespaces of a `namespace` scope (required there, not allowed with `cluster`)."),
                        ),
                ),
            )
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(TIMEOUT),
            read: None,
            update: Some(TIMEOUT),
            delete: Some(TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let m = AccessEntryModel::from_value(config);
        let kind = m.kind.as_deref().unwrap_or(DEFAULT_TYPE).to_string();
        if m.kind.is_known() && access_entry::is_node_type(&kind) {
            let why = format!(
                "EKS fills in the identity of a {kind} entry itself (user system:node:…, group \
                 system:nodes) and takes no access policy on it"
            );
            if m.kubernetes_groups.as_ref().is_some_and(|g| !g.is_empty()) {
                d.error_at(
                    "kubernetes_groups",
                    "No Kubernetes groups on a node entry",
                    format!("remove kubernetes_groups: {why}"),
                );
            }
            if m.username.is_set() {
                d.error_at(
                    "username",
                    "No username on a node entry",
                    format!("remove username: {why}"),
                );
            }
            if !m.access_policies.is_empty() {
                d.error_at(
                    "access_policy",
                    "No access policy on a node entry",
                    format!("remove the access_policy blocks: {why}"),
                );
            }
            if let Some(p) = &m.principal_arn {
                if Arn::expect(p, "iam", "role/").is_err() {
                    d.error_at(
                        "principal_arn",
                        "A node entry needs a role",
                        format!("a {kind} entry is for the IAM role the instances run as; {p:?} is not a role ARN"),
                    );
                }
            }
        }
        for p in &m.access_policies {
            let ns = p.namespaces.clone().unwrap_or_default();
            match p.scope.as_deref() {
                Some("namespace") if ns.is_empty() => d.error_at(
                    "access_policy",
                    "A namespace scope needs namespaces",
                    format!(
                        "access_policy {:?}: scope = \"namespace\" needs at least one entry in namespaces",
                        p.policy_arn.as_deref().unwrap_or("")
                    ),
                ),
                Some("cluster") if !ns.is_empty() => d.error_at(
                    "access_policy",
                    "Namespaces with a cluster scope",
                    format!(
                        "access_policy {:?}: namespaces only apply to scope = \"namespace\"; remove them or change the scope",
                        p.policy_arn.as_deref().unwrap_or("")
                    ),
                ),
                _ => {}
            }
        }
        let arns: Vec<_> = m
            .access_policies
            .iter()
            .filter_map(|p| p.policy_arn.clone())
            .collect();
        let unique: BTreeSet<_> = arns.iter().collect();
        if unique.len() < arns.len() {
            d.error_at(
                "access_policy",
                "A policy associated twice",
                "each policy_arn may appear in one access_policy block only (EKS keeps one scope per policy)",
            );
        }
        d
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(TIMEOUT);
        let planned = AccessEntryModel::from_value(&change.planned);
        let spec = spec_from(&planned);
        let eks = ctx.aws.eks();
        let created = access_entry::create(&eks, &spec, deadline).await?;
        let mut state = planned.clone();
        apply_remote(&mut state, &created);
        state.access_policies.clear();
        for p in policies_of(&planned).values() {
            // The entry exists: keep it in state with what is associated so far.
            access_entry::associate(&eks, &spec.cluster_name, &spec.principal_arn, p, deadline)
                .await
                .map_err(|e| Diagnostics::from(e).with_partial_state(state.to_value()))?;
            state
                .access_policies
                .insert(planned_policy(&planned, &p.policy_arn));
        }
        let info = access_entry::describe(&eks, &spec.cluster_name, &spec.principal_arn, deadline)
            .await?
            .ok_or_else(|| gone(&spec.principal_arn))?;
        let mut state = planned;
        apply_remote(&mut state, &info);
        Ok(Applied::new(state.to_value()))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = Instant::now() + TIMEOUT;
        let mut state = AccessEntryModel::from_value(&req.state);
        let cluster = state.cluster_name.clone().unwrap_or_default();
        let principal = state.principal_arn.clone().unwrap_or_default();
        match access_entry::describe(&ctx.aws.eks(), &cluster, &principal, deadline).await {
            Ok(None) => Ok(None),
            Ok(Some(info)) => {
                apply_remote(&mut state, &info);
                Ok(Some(
                    Applied::new(state.to_value()).with_private(req.private),
                ))
            }
            // The cluster itself is gone: so is the entry.
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(TIMEOUT);
        let prior = AccessEntryModel::from_value(&change.prior);
        let planned = AccessEntryModel::from_value(&change.planned);
        let spec = spec_from(&planned);
        let (cluster, principal) = (&spec.cluster_name, &spec.principal_arn);
        let eks = ctx.aws.eks();
        let mut state = prior.clone();
        let progress = |e: crate::aws::eks::EksError, state: &AccessEntryModel| {
            Diagnostics::from(e).with_partial_state(state.to_value())
        };

        if planned.kubernetes_groups != prior.kubernetes_groups
            || (planned.username.is_some() && planned.username != prior.username)
        {
            access_entry::update(&eks, &spec, deadline)
                .await
                .map_err(|e| progress(e, &state))?;
            state.kubernetes_groups = planned.kubernetes_groups.clone();
            state.username = (*planned.username)
                .clone()
                .or((*prior.username).clone())
                .into();
        }
        let have_tags = prior.tags.clone().unwrap_or_default();
        if spec.tags != have_tags {
            let arn = prior.arn.clone().unwrap_or_default();
            eks_cluster::sync_tags(&eks, &arn, &have_tags, &spec.tags, deadline)
                .await
                .map_err(|e| progress(e, &state))?;
            state.tags = planned.tags.clone();
        }
        let want = policies_of(&planned);
        let have = policies_of(&prior);
        for arn in have.keys().filter(|a| !want.contains_key(*a)) {
            access_entry::disassociate(&eks, cluster, principal, arn, deadline)
                .await
                .map_err(|e| progress(e, &state))?;
            state
                .access_policies
                .retain(|p| p.policy_arn.as_deref() != Some(arn));
        }
        for (arn, p) in &want {
            if have.get(arn) != Some(p) {
                access_entry::associate(&eks, cluster, principal, p, deadline)
                    .await
                    .map_err(|e| progress(e, &state))?;
                state
                    .access_policies
                    .retain(|q| q.policy_arn.as_deref() != Some(arn));
                state.access_policies.insert(planned_policy(&planned, arn));
            }
        }

        let info = access_entry::describe(&eks, cluster, principal, deadline)
            .await?
            .ok_or_else(|| gone(principal))?;
        let mut state = planned;
        apply_remote(&mut state, &info);
        Ok(Applied::new(state.to_value()))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = Instant::now() + change.timeout.unwrap_or(TIMEOUT);
        let prior = AccessEntryModel::from_value(&change.prior);
        let cluster = prior.cluster_name.unwrap_or_default();
        let principal = prior.principal_arn.unwrap_or_default();
        match access_entry::delete(&ctx.aws.eks(), &cluster, &principal, deadline).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn import(
        &self,
        _ctx: &ProviderContext,
        import_id: &str,
    ) -> Result<Applied, Diagnostics> {
        let invalid = |why: String| -> Diagnostics {
            Diagnostic::error(
                "Invalid import ID",
                format!(
                    "expected <cluster_name>:<principal_arn>, e.g. \
                     prod:arn:aws:iam::123456789012:role/prod-node; got {import_id:?}: {why}"
                ),
            )
            .into()
        };
        let Some((cluster, principal)) = import_id.split_once(':') else {
            return Err(invalid("no \":\" after the cluster name".into()));
        };
        validators::cluster_name(&Value::string(cluster))
            .map_err(|e| invalid(format!("the cluster name {e}")))?;
        principal_arn(&Value::string(principal))
            .map_err(|e| invalid(format!("the principal ARN {e}")))?;
        Ok(Applied::new(
            AccessEntryModel {
                id: Some(id(cluster, principal)),
                cluster_name: Some(cluster.to_string()),
                principal_arn: Some(principal.to_string()),
                ..Default::default()
            }
            .to_value(),
        ))
    }
}

/// The planned block for `arn`, as the partial state records it.
fn planned_policy(planned: &AccessEntryModel, arn: &str) -> AccessPolicyModel {
    planned
        .access_policies
        .iter()
        .find(|p| p.policy_arn.as_deref() == Some(arn))
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;

    fn full() -> AccessEntryModel {
        AccessEntryModel {
            id: Some("prod:arn:aws:iam::123456789012:role/admin".into()),
            cluster_name: Some("prod".into()),
            principal_arn: Some("arn:aws:iam::123456789012:role/admin".into()),
            kind: Some("STANDARD".into()).into(),
            kubernetes_groups: Some(["viewers".to_string()].into()),
            username: Some("admin".into()).into(),
            tags: Some([("team".to_string(), "platform".to_string())].into()),
            arn: Some("arn:aws:eks:us-east-1:123456789012:access-entry/prod/role/x".into()),
            access_policies: [
                AccessPolicyModel {
                    policy_arn: Some(
                        "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy".into(),
                    ),
                    scope: Some("cluster".into()),
                    namespaces: None,
                },
                AccessPolicyModel {
                    policy_arn: Some(
                        "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy".into(),
                    ),
                    scope: Some("namespace".into()),
                    namespaces: Some(["apps".to_string()].into()),
                },
            ]
            .into(),
            timeouts: Value::object([
                ("create", Value::string("5m")),
                ("update", Value::string("5m")),
                ("delete", Value::string("5m")),
            ]),
        }
    }

    #[test]
    fn model_matches_schema() {
        let r = AccessEntry;
        let schema = r.schema().block(r.timeouts().unwrap().block());
        conforms(&full().to_value(), &schema.implied_type()).unwrap();
        assert_eq!(AccessEntryModel::from_value(&full().to_value()), full());
        let empty = AccessEntryModel {
            kubernetes_groups: Some(BTreeSet::new()),
            tags: Some(BTreeMap::new()),
            ..Default::default()
        };
        for m in [AccessEntryModel::default(), empty] {
            conforms(&m.to_value(), &schema.implied_type()).unwrap();
            assert_eq!(AccessEntryModel::from_value(&m.to_value()), m);
        }
    }

    #[test]
    fn principal_arns() {
        assert!(principal_arn(&Value::string("arn:aws:iam::123456789012:role/nodes")).is_ok());
        assert!(
            principal_arn(&Value::string("arn:aws:iam::123456789012:user/local-admin")).is_ok()
        );
        let session = principal_arn(&Value::string(
            "arn:aws:sts::123456789012:assumed-role/deployer/ci-42",
        ))
        .unwrap_err();
        assert!(
            session.contains("arn:aws:iam::123456789012:role/deployer"),
            "{session}"
        );
        assert!(principal_arn(&Value::string("nodes")).is_err());
        assert!(policy_arn(&Value::string(
            "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        ))
        .is_ok());
        assert!(policy_arn(&Value::string(
            "arn:aws:iam::aws:policy/AdministratorAccess"
        ))
        .is_err());
        assert!(entry_type(&Value::string("ec2_linux"))
            .unwrap_err()
            .contains("EC2_LINUX"));
    }

    /// A node entry takes no groups, username or policy; each error names its attribute.
    #[test]
    fn node_entries_refuse_identity_inputs() {
        let config = Value::object([
            ("cluster_name", Value::string("prod")),
            (
                "principal_arn",
                Value::string("arn:aws:iam::123456789012:user/u"),
            ),
            ("type", Value::string("EC2_LINUX")),
            ("kubernetes_groups", Value::Set(vec![Value::string("ops")])),
            ("username", Value::string("me")),
            (
                "access_policy",
                Value::Set(vec![AccessPolicyModel {
                    policy_arn: Some(
                        "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy".into(),
                    ),
                    scope: Some("cluster".into()),
                    namespaces: None,
                }
                .to_value()]),
            ),
        ]);
        let d = AccessEntry.validate(&config);
        let text = format!("{d:?}");
        for attr in [
            "kubernetes_groups",
            "username",
            "access_policy",
            "principal_arn",
        ] {
            assert!(text.contains(attr), "{attr} not named: {text}");
        }
    }

    #[test]
    fn remote_node_entry_reads_back_without_the_implied_group() {
        let info = EntryInfo {
            cluster_name: "prod".into(),
            principal_arn: "arn:aws:iam::123456789012:role/nodes".into(),
            kind: "EC2_LINUX".into(),
            kubernetes_groups: ["system:nodes".to_string()].into(),
            username: "system:node:{{EC2PrivateDNSName}}".into(),
            arn: "arn".into(),
            ..Default::default()
        };
        let mut state = AccessEntryModel::default();
        apply_remote(&mut state, &info);
        assert_eq!(state.kubernetes_groups, Some(BTreeSet::new()));
        assert_eq!(
            state.id.as_deref(),
            Some("prod:arn:aws:iam::123456789012:role/nodes")
        );
        assert_eq!(state.tags, None);
    }
}
