//! What the four role resources have in common: an IAM role whose trust policy and
//! permissions are *derived* by joiner from a few inputs, never written by the user.
//!
//! Each flavour (`joiner_cluster_role`, `joiner_node_role`, `joiner_fargate_role`,
//! `joiner_agent_role`) only says which extra inputs it takes and how its documents follow
//! from them ([`RoleFlavor`]); the lifecycle is shared here:
//! - the documents are rendered at plan time (`assume_role_policy`, `policy_arns`, and the
//!   agent's `policy`), so a reviewer sees the exact JSON in `terraform plan`;
//! - create is all-or-nothing (see `aws::iam::create_role`);
//! - read reports drift: a deleted role plans a re-create, and changed documents or
//!   attachments plan an in-place update back to what joiner derives;
//! - import takes the role name; the flavour recovers its inputs from the documents.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::time::Duration;

use tokio::time::Instant;

use crate::aws::error::AwsError;
use crate::aws::iam::{self, RemoteRole, RoleSpec};
use crate::context::ProviderContext;
pub use crate::model::role::{Documents, Env, RoleFlavor, RoleModel};
use crate::model::{Model, Planned};
use crate::policy::arn::{partition_for_region, Arn};
use crate::protocol::prelude::*;
use crate::validators;

/// A string input: `None` while unknown, `Some(None)` when null.
pub fn input(v: &Planned<Option<String>>) -> Option<Option<&str>> {
    v.known().map(Option::as_deref)
}

pub struct RoleResource<F>(PhantomData<F>);

impl<F> RoleResource<F> {
    pub const fn new() -> Self {
        RoleResource(PhantomData)
    }
}

impl<F> Default for RoleResource<F> {
    fn default() -> Self {
        Self::new()
    }
}

/// `additional_policy_arns`: every element must be an IAM policy ARN.
fn validate_policy_arns(v: &Value) -> Result<(), String> {
    for s in v.as_string_list() {
        Arn::expect(&s, "iam", "policy/").map_err(|e| e.to_string())?;
    }
    Ok(())
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

fn deadline(timeout: Option<Duration>) -> Instant {
    Instant::now() + timeout.unwrap_or(DEFAULT_TIMEOUT)
}

/// The provider's partition/region and the caller's account (one STS call per run).
pub async fn env(ctx: &ProviderContext) -> Result<Env, Diagnostics> {
    let account = ctx.caller().await?.account_id.clone();
    Ok(Env {
        partition: partition_for_region(&ctx.region).to_string(),
        region: ctx.region.clone(),
        account,
    })
}

impl<F: RoleFlavor> RoleResource<F> {
    /// The full spec from a planned value whose documents are known.
    fn spec(m: &RoleModel<F>) -> RoleSpec {
        let inline = match (F::INLINE_POLICY_NAME, &*m.policy) {
            (Some(n), Some(p)) => BTreeMap::from([(n.to_string(), p.clone())]),
            _ => BTreeMap::new(),
        };
        RoleSpec {
            name: m.name_or_default(),
            path: m.path.clone().unwrap_or_else(|| "/".to_string()),
            description: m.description.clone().filter(|d| !d.is_empty()),
            trust_policy: (*m.assume_role_policy).clone().unwrap_or_default(),
            permissions_boundary: m.permissions_boundary.clone(),
            managed_policy_arns: (*m.policy_arns).clone().unwrap_or_default(),
            inline_policies: inline,
            tags: m.tags.clone().unwrap_or_default(),
        }
    }

    /// Fills the derived attributes (`assume_role_policy`, `policy_arns`, `policy`) of
    /// `value` from its inputs; unknown where an input is unknown.
    ///
    /// Reads through the model but writes into the raw value: a round trip through the
    /// model would keep the unknowns of its planned fields only.
    fn derive(value: &mut Value, env: &Env) {
        let m = RoleModel::<F>::from_value(value);
        let docs = F::documents(&m.inputs, env);
        value.set_attr(
            "assume_role_policy",
            docs.trust.map(Value::String).unwrap_or(Value::Unknown),
        );
        let arns = match m.additional_policy_arns.known() {
            Some(extra) => {
                let mut arns: BTreeSet<String> = docs.managed_policy_arns.into_iter().collect();
                arns.extend(extra.iter().flatten().cloned());
                Value::Set(arns.into_iter().map(Value::String).collect())
            }
            None => Value::Unknown,
        };
        value.set_attr("policy_arns", arns);
        if F::INLINE_POLICY_NAME.is_some() {
            value.set_attr(
                "policy",
                docs.inline.map(Value::String).unwrap_or(Value::Unknown),
            );
        }
    }

    /// The planned role, its documents derived now if the plan left them unknown (an input
    /// came from a resource created in the same apply).
    async fn planned(ctx: &ProviderContext, planned: &Value) -> Result<RoleModel<F>, Diagnostics> {
        let m = RoleModel::<F>::from_value(planned);
        if m.assume_role_policy.is_known() && m.policy_arns.is_known() && m.policy.is_known() {
            return Ok(m);
        }
        let mut v = planned.clone();
        Self::derive(&mut v, &env(ctx).await?);
        Ok(RoleModel::from_value(&v))
    }

    /// Writes the remote role into `state`, keeping our rendering of a document when IAM's
    /// copy means the same (so an unchanged role refreshes to an empty plan).
    fn apply_remote(state: &mut RoleModel<F>, remote: &RemoteRole) {
        state.id = Some(remote.name.clone());
        state.name = Some(remote.name.clone());
        state.arn = Some(remote.arn.clone());
        state.unique_id = Some(remote.unique_id.clone());
        state.path = Some(remote.path.clone());
        state.description = remote.description.clone();
        state.permissions_boundary = remote.permissions_boundary.clone();
        let keep_or = |ours: &Option<String>, actual: &str| match ours {
            Some(ours) if iam::same_policy(ours, actual) => ours.clone(),
            _ => actual.to_string(),
        };
        state.assume_role_policy =
            Some(keep_or(&state.assume_role_policy, &remote.trust_policy)).into();
        state.policy_arns = Some(remote.managed_policy_arns.clone()).into();
        if let Some(name) = F::INLINE_POLICY_NAME {
            state.policy = remote
                .inline_policies
                .get(name)
                .map(|actual| keep_or(&state.policy, actual))
                .into();
        }
        state.tags = if remote.tags.is_empty() && state.tags.is_none() {
            None
        } else {
            Some(remote.tags.clone())
        };
    }

    async fn ensure_profile(
        ctx: &ProviderContext,
        state: &mut RoleModel<F>,
        deadline: Instant,
    ) -> Result<(), AwsError> {
        let role = state.name_or_default();
        let profile = state.profile_name();
        let path = state.path.clone().unwrap_or_else(|| "/".to_string());
        let tags = state.tags.clone().unwrap_or_default();
        let p =
            iam::ensure_instance_profile(&ctx.aws.iam(), &profile, &path, &role, &tags, deadline)
                .await?;
        state.instance_profile_name = Some(p.name).into();
        state.instance_profile_arn = Some(p.arn);
        Ok(())
    }
}

#[async_trait]
impl<F: RoleFlavor> Resource<ProviderContext> for RoleResource<F> {
    fn type_name(&self) -> &'static str {
        F::TYPE_NAME
    }

    fn schema(&self) -> Schema {
        let mut s = Schema::new(0)
            .description(F::SUMMARY)
            .attribute(Attribute::string("id").computed().description("The role name."))
            .attribute(
                Attribute::string("name")
                    .required()
                    .force_new()
                    .validate(validators::role_name)
                    .description("Role name: 1 to 64 letters, digits and +=,.@_-. Changing it replaces the role."),
            )
            .attribute(
                Attribute::string("path")
                    .default("/")
                    .force_new()
                    .validate(validators::iam_path)
                    .description("IAM path, e.g. \"/eks/\". Changing it replaces the role."),
            )
            .attribute(
                Attribute::string("description")
                    .default(F::DEFAULT_DESCRIPTION)
                    .validate(validators::string_length(0, 1000))
                    .description("Role description; updated in place."),
            )
            .attribute(
                Attribute::string("permissions_boundary")
                    .optional()
                    .validate(validators::arn_of("iam", "policy/"))
                    .description("ARN of a managed policy used as the role's permissions boundary."),
            )
            .attribute(
                Attribute::string_set("additional_policy_arns")
                    .optional()
                    .validate(validate_policy_arns)
                    .description("Managed policies to attach besides joiner's own."),
            )
            .attribute(
                Attribute::string_map("tags")
                    .optional()
                    .validate(validators::aws_tags)
                    .description("Tags on the role (and its instance profile)."),
            )
            .attribute(Attribute::string("arn").computed().description("The role ARN."))
            .attribute(Attribute::string("unique_id").computed().description("IAM's stable unique ID (AROA...)."))
            .attribute(
                Attribute::string("assume_role_policy")
                    .computed()
                    .description("The trust policy joiner derives, as JSON (shown in the plan)."),
            )
            .attribute(
                Attribute::string_set("policy_arns")
                    .computed()
                    .description("Every managed policy attached: joiner's and `additional_policy_arns`."),
            );
        for a in F::attributes() {
            s = s.attribute(a);
        }
        if F::INLINE_POLICY_NAME.is_some() {
            s =
                s.attribute(Attribute::string("policy").computed().description(
                    "The role's inline permissions policy, as JSON (shown in the plan).",
                ));
        }
        if F::INSTANCE_PROFILE {
            s = s
                .attribute(
                    Attribute::string("instance_profile_name")
                        .optional_computed()
                        .force_new()
                        .validate(validators::role_name)
                        .description("Name of the instance profile; defaults to the role name."),
                )
                .attribute(
                    Attribute::string("instance_profile_arn")
                        .computed()
                        .description("ARN of the instance profile EC2 nodes are launched with."),
                );
        }
        s
    }

    fn timeouts(&self) -> Option<Timeouts> {
        Some(Timeouts {
            create: Some(DEFAULT_TIMEOUT),
            read: None,
            update: Some(DEFAULT_TIMEOUT),
            delete: Some(DEFAULT_TIMEOUT),
        })
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        F::validate(config)
    }

    /// Edits `plan.planned` in place (a model round trip would turn planned unknowns into
    /// nulls); reads through models where unknown and null mean the same.
    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(()); // destroy
        }
        let env = env(ctx).await?;
        Self::derive(&mut plan.planned, &env);
        let m = RoleModel::<F>::from_value(&plan.planned);
        if let Some(name) = m.name {
            plan.planned.set_attr("id", Value::string(&name));
            // An instance_profile_name set from another resource's output is unknown here,
            // and must not be replaced by the default.
            if F::INSTANCE_PROFILE && !m.instance_profile_name.is_set() {
                plan.planned
                    .set_attr("instance_profile_name", Value::string(name));
            }
        }
        if F::INSTANCE_PROFILE
            && !plan.is_create()
            && RoleModel::<F>::from_value(&plan.prior)
                .instance_profile_arn
                .is_none()
        {
            // The profile was deleted out of band: update re-creates it.
            plan.set_unknown("instance_profile_arn");
        }
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = Self::planned(ctx, &change.planned).await?;
        let spec = Self::spec(&state);
        let iam_client = ctx.aws.iam();
        let remote = match iam::create_role(&iam_client, &spec, deadline).await {
            Ok(r) => r,
            Err(failure) => {
                let diags: Diagnostics = failure.error.into();
                return Err(match failure.left_behind {
                    Some(left) => {
                        let mut partial = state.clone();
                        Self::apply_remote(&mut partial, &left);
                        diags.with_partial_state(partial.to_value())
                    }
                    None => diags,
                });
            }
        };
        Self::apply_remote(&mut state, &remote);
        if F::INSTANCE_PROFILE {
            if let Err(e) = Self::ensure_profile(ctx, &mut state, deadline).await {
                // Leave nothing behind: the role without its profile is useless.
                let name = spec.name.clone();
                return Err(match iam::delete_role(&iam_client, &name, deadline).await {
                    Ok(()) => e.into(),
                    Err(_) => Diagnostics::from(e).with_partial_state(state.to_value()),
                });
            }
        }
        Ok(Applied::new(state.to_value()))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = deadline(None);
        let mut state = RoleModel::<F>::from_value(&req.state);
        let name = state
            .name
            .clone()
            .or_else(|| state.id.clone())
            .unwrap_or_default();
        let iam_client = ctx.aws.iam();
        let Some(remote) = iam::read_role(&iam_client, &name, deadline).await? else {
            return Ok(None);
        };
        let importing = state.assume_role_policy.is_none();
        if importing {
            F::recover_inputs(&remote, &mut state.inputs);
        }
        Self::apply_remote(&mut state, &remote);
        if importing {
            // Split attached policies into joiner's own and the user's additional ones.
            if let Ok(env) = env(ctx).await {
                let own: BTreeSet<String> = F::documents(&state.inputs, &env)
                    .managed_policy_arns
                    .into_iter()
                    .collect();
                let extra: BTreeSet<String> = remote
                    .managed_policy_arns
                    .difference(&own)
                    .cloned()
                    .collect();
                state.additional_policy_arns = (!extra.is_empty()).then_some(extra).into();
            }
        }
        if F::INSTANCE_PROFILE {
            let profile_name = (*state.instance_profile_name)
                .clone()
                .unwrap_or_else(|| name.clone());
            match iam::read_instance_profile(&iam_client, &profile_name, deadline).await? {
                Some(p) if p.roles.iter().any(|r| r == &name) => {
                    state.instance_profile_name = Some(p.name).into();
                    state.instance_profile_arn = Some(p.arn);
                }
                _ => {
                    state.instance_profile_name = Some(profile_name).into();
                    state.instance_profile_arn = None;
                }
            }
        }
        Ok(Some(Applied::new(state.to_value())))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = Self::planned(ctx, &change.planned).await?;
        let spec = Self::spec(&state);
        let iam_client = ctx.aws.iam();
        let current = iam::read_role(&iam_client, &spec.name, deadline)
            .await?
            .ok_or_else(|| {
                Diagnostic::error(
                    "Role not found",
                    format!("IAM role {:?} disappeared during the update; run terraform apply again to re-create it", spec.name),
                )
            })?;
        iam::update_role(&iam_client, &current, &spec, deadline).await?;
        let remote = iam::read_role(&iam_client, &spec.name, deadline)
            .await?
            .unwrap_or(current);
        // Keeps the planned renderings where IAM's copy means the same.
        Self::apply_remote(&mut state, &remote);
        if F::INSTANCE_PROFILE {
            Self::ensure_profile(ctx, &mut state, deadline).await?;
        }
        Ok(Applied::new(state.to_value()))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = deadline(change.timeout);
        let iam_client = ctx.aws.iam();
        let prior = RoleModel::<F>::from_value(&change.prior);
        if F::INSTANCE_PROFILE {
            iam::delete_instance_profile(&iam_client, &prior.profile_name(), deadline).await?;
        }
        iam::delete_role(&iam_client, &prior.name_or_default(), deadline).await?;
        Ok(())
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        if validators::role_name(&Value::string(id)).is_err() {
            return Err(Diagnostic::error(
                "Invalid import ID",
                format!(
                    "{} is imported by role name (1 to 64 letters, digits and +=,.@_-), got {id:?}",
                    F::TYPE_NAME
                ),
            )
            .into());
        }
        Ok(Applied::new(
            RoleModel::<F> {
                id: Some(id.to_string()),
                name: Some(id.to_string()),
                ..Default::default()
            }
            .to_value(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conforms;
    use crate::model::role::{AgentRoleInputs, FargateRoleInputs, NoInputs};
    use crate::resources::agent_role::AgentRoleFlavor;
    use crate::resources::cluster_role::ClusterRoleFlavor;
    use crate::resources::fargate_role::FargateRoleFlavor;
    use crate::resources::node_role::NodeRoleFlavor;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    /// A role with every attribute of flavour `F` set.
    fn full<F: RoleFlavor>(inputs: F::Inputs) -> RoleModel<F> {
        RoleModel {
            id: some("r"),
            name: some("r"),
            path: some("/eks/"),
            description: some("d"),
            permissions_boundary: some("arn:aws:iam::123456789012:policy/b"),
            additional_policy_arns: Some(["arn:aws:iam::aws:policy/X".to_string()].into()).into(),
            tags: Some([("team".to_string(), "platform".to_string())].into()),
            arn: some("arn:aws:iam::123456789012:role/r"),
            unique_id: some("AROAEXAMPLE"),
            assume_role_policy: some("{}").into(),
            policy_arns: Some(["arn:aws:iam::aws:policy/Y".to_string()].into()).into(),
            policy: F::INLINE_POLICY_NAME.map(|_| "{}".to_string()).into(),
            instance_profile_name: F::INSTANCE_PROFILE.then(|| "r".to_string()).into(),
            instance_profile_arn: F::INSTANCE_PROFILE
                .then(|| "arn:aws:iam::123456789012:instance-profile/r".to_string()),
            inputs,
            timeouts: Value::object([
                ("create", Value::string("40m")),
                ("update", Value::string("1h")),
                ("delete", Value::string("20m")),
            ]),
            flavor: PhantomData,
        }
    }

    /// Checks flavour `F`'s model against its schema: every attribute it writes exists,
    /// every schema attribute (the flavour's own inputs included) is written, and both a
    /// full and an empty role read back unchanged (null and `{}` tags apart).
    fn check_model<F: RoleFlavor>(inputs: F::Inputs) {
        let r = RoleResource::<F>::new();
        let schema = r.schema().block(r.timeouts().unwrap().block());
        let full = full::<F>(inputs);
        conforms(&full.to_value(), &schema.implied_type())
            .unwrap_or_else(|e| panic!("{}: {e}", F::TYPE_NAME));
        assert_eq!(RoleModel::<F>::from_value(&full.to_value()), full);
        let untagged = RoleModel::<F> {
            tags: Some(BTreeMap::new()),
            ..Default::default()
        };
        for m in [RoleModel::<F>::default(), untagged] {
            conforms(&m.to_value(), &schema.implied_type()).unwrap();
            assert_eq!(RoleModel::<F>::from_value(&m.to_value()), m);
        }
    }

    #[test]
    fn models_match_every_flavours_schema() {
        check_model::<ClusterRoleFlavor>(NoInputs);
        check_model::<NodeRoleFlavor>(NoInputs);
        check_model::<FargateRoleFlavor>(FargateRoleInputs {
            cluster_name: some("prod").into(),
        });
        check_model::<AgentRoleFlavor>(AgentRoleInputs {
            cluster_name: some("prod").into(),
            trust: some("irsa").into(),
            oidc_provider_arn: some("arn:aws:iam::123456789012:oidc-provider/x").into(),
            oidc_issuer_url: some("https://x").into(),
            namespace: some("joiner").into(),
            service_account: some("joiner-agent").into(),
            node_role_arn: some("arn:aws:iam::123456789012:role/nodes").into(),
            queue_arn: some("arn:aws:sqs:us-east-1:123456789012:q").into(),
            queue_kms_key_arn: some("arn:aws:kms:us-east-1:123456789012:key/k").into(),
        });
    }

    /// Refresh keeps our rendering of an equivalent document and null tags for an
    /// untagged role, so an unchanged role plans nothing.
    #[test]
    fn remote_role_keeps_equivalent_documents_and_null_tags() {
        let ours = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"a:B","Resource":"*"}]}"#;
        let mut state = RoleModel::<AgentRoleFlavor> {
            assume_role_policy: some(ours).into(),
            policy: some(ours).into(),
            ..Default::default()
        };
        let remote = RemoteRole {
            name: "r".into(),
            path: "/".into(),
            trust_policy: r#"{"Statement": [{"Resource": ["*"], "Action": ["a:B"], "Effect": "Allow"}], "Version": "2012-10-17"}"#.into(),
            inline_policies: [(
                crate::resources::agent_role::INLINE_POLICY.to_string(),
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"a:C","Resource":"*"}]}"#.to_string(),
            )]
            .into(),
            ..RemoteRole::default()
        };
        RoleResource::<AgentRoleFlavor>::apply_remote(&mut state, &remote);
        assert_eq!(state.assume_role_policy.as_deref(), Some(ours));
        assert!(
            state.policy.as_deref().unwrap().contains("a:C"),
            "a changed policy is drift"
        );
        assert_eq!(state.tags, None);
        assert_eq!(state.id, some("r"));
    }

    #[test]
    fn role_names() {
        assert!(validators::role_name(&Value::string("joiner-node_role+=,.@")).is_ok());
        assert!(validators::role_name(&Value::string("")).is_err());
        assert!(validators::role_name(&Value::string("a b")).is_err());
        assert!(validators::role_name(&Value::string("x".repeat(65))).is_err());
    }

    #[test]
    fn paths() {
        assert!(validators::iam_path(&Value::string("/")).is_ok());
        assert!(validators::iam_path(&Value::string("/eks/nodes/")).is_ok());
        assert!(validators::iam_path(&Value::string("eks/")).is_err());
        assert!(validators::iam_path(&Value::string("/eks")).is_err());
        assert!(validators::iam_path(&Value::string("/a b/")).is_err());
    }

    #[test]
    fn tags() {
        assert!(validators::aws_tags(&Value::string_map([("a", "b")])).is_ok());
        assert!(validators::aws_tags(&Value::string_map([("aws:x", "b")])).is_err());
        assert!(
            validators::aws_tags(&Value::string_map([("joiner.dev/created-by", "me")])).is_err()
        );
        assert!(
            validators::aws_tags(&Value::string_map([("k".repeat(129), "b".to_string())])).is_err()
        );
    }
}
