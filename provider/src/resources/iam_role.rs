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
use crate::policy::arn::{partition_for_region, Arn};
use crate::protocol::prelude::*;
use crate::provider::ProviderContext;

/// Where the role lives: derived from the provider's region and the caller's account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub partition: String,
    pub region: String,
    pub account: String,
}

/// The documents a flavour derives from its inputs. `None` means "not known until apply"
/// (an input comes from a resource not created yet): the plan shows it as unknown. Trust and
/// permissions are separate so the agent's permissions are reviewable in the very first plan
/// even though its trust waits for the cluster's OIDC provider.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Documents {
    pub trust: Option<String>,
    pub managed_policy_arns: Vec<String>,
    /// The inline policy (named `INLINE_POLICY_NAME`), exposed as the `policy` attribute.
    pub inline: Option<String>,
}

/// A string input: `None` while unknown, `Some(None)` when null.
pub fn input<'a>(config: &'a Value, name: &str) -> Option<Option<&'a str>> {
    match config.get(name) {
        Value::Unknown => None,
        v => Some(v.as_str()),
    }
}

/// One kind of joiner role.
pub trait RoleFlavor: Send + Sync + 'static {
    const TYPE_NAME: &'static str;
    /// What the resource is, for the schema description.
    const SUMMARY: &'static str;
    const DEFAULT_DESCRIPTION: &'static str;
    /// The inline policy exposed as `policy`, if the flavour has one.
    const INLINE_POLICY_NAME: Option<&'static str> = None;
    /// Whether the role also gets an instance profile (EC2 nodes).
    const INSTANCE_PROFILE: bool = false;

    /// The flavour's own inputs.
    fn attributes() -> Vec<Attribute>;
    /// Cross-attribute checks; `config` may contain unknowns.
    fn validate(_config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    /// The documents for a configuration (which may hold unknowns, see [`Documents`]).
    fn documents(config: &Value, env: &Env) -> Documents;
    /// Inputs recovered from an existing role's documents, for import.
    fn recover_inputs(_role: &RemoteRole) -> Vec<(&'static str, Value)> {
        Vec::new()
    }
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

/// IAM role names: 1-64 characters of letters, digits and `+=,.@_-`.
pub fn is_role_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+=,.@_-".contains(c)
}

pub fn validate_role_name(v: &Value) -> Result<(), String> {
    validators::string_length(1, 64)(v)?;
    validators::string_chars("letters, digits and +=,.@_-", is_role_name_char)(v)
}

/// IAM paths: `/` alone, or `/a/b/`, 1-512 printable ASCII characters.
pub fn validate_path(v: &Value) -> Result<(), String> {
    let Some(p) = v.as_str() else { return Ok(()) };
    if p.is_empty() || p.len() > 512 || !p.starts_with('/') || !p.ends_with('/') {
        return Err(format!(
            "must start and end with \"/\" and be 1 to 512 characters (e.g. \"/\" or \"/eks/\"), got {p:?}"
        ));
    }
    match p.chars().find(|c| !('\u{21}'..='\u{7e}').contains(c)) {
        Some(c) => Err(format!(
            "may contain only printable ASCII characters without spaces; found {c:?}"
        )),
        None => Ok(()),
    }
}

/// A validator for an ARN of `service` with a resource starting with `prefix`.
pub fn arn_of(
    service: &'static str,
    prefix: &'static str,
) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
    move |v| match v.as_str() {
        Some(s) => Arn::expect(s, service, prefix)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// `additional_policy_arns`: every element must be an IAM policy ARN.
fn validate_policy_arns(v: &Value) -> Result<(), String> {
    for s in v.as_string_list() {
        Arn::expect(&s, "iam", "policy/").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// IAM tags: up to 50, keys 1-128 and values 0-256 characters.
pub fn validate_tags(v: &Value) -> Result<(), String> {
    let tags = v.as_string_map();
    if tags.len() > 50 {
        return Err(format!("at most 50 tags are allowed, got {}", tags.len()));
    }
    for (k, val) in &tags {
        if k.is_empty() || k.chars().count() > 128 {
            return Err(format!("tag key {k:?} must be 1 to 128 characters"));
        }
        if k.starts_with("aws:") {
            return Err(format!("tag key {k:?}: the aws: prefix is reserved"));
        }
        if val.chars().count() > 256 {
            return Err(format!(
                "the value of tag {k:?} must be at most 256 characters"
            ));
        }
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
    /// The full spec from a planned/config value whose documents are known.
    fn spec(planned: &Value) -> RoleSpec {
        let docs_inline = match F::INLINE_POLICY_NAME {
            Some(n) => planned
                .get("policy")
                .as_str()
                .map(|p| BTreeMap::from([(n.to_string(), p.to_string())]))
                .unwrap_or_default(),
            None => BTreeMap::new(),
        };
        RoleSpec {
            name: planned.get("name").as_str().unwrap_or_default().to_string(),
            path: planned.get("path").as_str().unwrap_or("/").to_string(),
            description: planned
                .get("description")
                .as_str()
                .filter(|d| !d.is_empty())
                .map(str::to_string),
            trust_policy: planned
                .get("assume_role_policy")
                .as_str()
                .unwrap_or_default()
                .to_string(),
            permissions_boundary: planned
                .get("permissions_boundary")
                .as_str()
                .map(str::to_string),
            managed_policy_arns: planned
                .get("policy_arns")
                .as_string_list()
                .into_iter()
                .collect(),
            inline_policies: docs_inline,
            tags: planned.get("tags").as_string_map(),
        }
    }

    /// Fills the derived attributes (`assume_role_policy`, `policy_arns`, `policy`) of
    /// `value` from its inputs; unknown where an input is unknown.
    fn derive(value: &mut Value, env: &Env) {
        let docs = F::documents(value, env);
        value.set_attr(
            "assume_role_policy",
            docs.trust.map(Value::String).unwrap_or(Value::Unknown),
        );
        let extra = value.get("additional_policy_arns");
        let arns = if extra.is_fully_known() {
            let mut arns: BTreeSet<String> = docs.managed_policy_arns.into_iter().collect();
            arns.extend(extra.as_string_list());
            Value::Set(arns.into_iter().map(Value::String).collect())
        } else {
            Value::Unknown
        };
        value.set_attr("policy_arns", arns);
        if F::INLINE_POLICY_NAME.is_some() {
            value.set_attr(
                "policy",
                docs.inline.map(Value::String).unwrap_or(Value::Unknown),
            );
        }
    }

    /// Writes the remote role into `state`, keeping our rendering of a document when IAM's
    /// copy means the same (so an unchanged role refreshes to an empty plan).
    fn apply_remote(state: &mut Value, remote: &RemoteRole) {
        state.set_attr("id", Value::string(&remote.name));
        state.set_attr("name", Value::string(&remote.name));
        state.set_attr("arn", Value::string(&remote.arn));
        state.set_attr("unique_id", Value::string(&remote.unique_id));
        state.set_attr("path", Value::string(&remote.path));
        state.set_attr("description", Value::opt_string(remote.description.clone()));
        state.set_attr(
            "permissions_boundary",
            Value::opt_string(remote.permissions_boundary.clone()),
        );
        let keep_or = |state: &Value, attr: &str, actual: &str| -> Value {
            match state.get(attr).as_str() {
                Some(ours) if iam::same_policy(ours, actual) => Value::string(ours),
                _ => Value::string(actual),
            }
        };
        let trust = keep_or(state, "assume_role_policy", &remote.trust_policy);
        state.set_attr("assume_role_policy", trust);
        state.set_attr(
            "policy_arns",
            Value::Set(
                remote
                    .managed_policy_arns
                    .iter()
                    .cloned()
                    .map(Value::String)
                    .collect(),
            ),
        );
        if let Some(name) = F::INLINE_POLICY_NAME {
            let v = match remote.inline_policies.get(name) {
                Some(actual) => keep_or(state, "policy", actual),
                None => Value::Null,
            };
            state.set_attr("policy", v);
        }
        let tags = if remote.tags.is_empty() && state.get("tags").is_null() {
            Value::Null
        } else {
            Value::string_map(remote.tags.clone())
        };
        state.set_attr("tags", tags);
    }

    async fn ensure_profile(
        ctx: &ProviderContext,
        state: &mut Value,
        deadline: Instant,
    ) -> Result<(), AwsError> {
        let role = state.get("name").as_str().unwrap_or_default().to_string();
        let profile = state
            .get("instance_profile_name")
            .as_str()
            .unwrap_or(&role)
            .to_string();
        let path = state.get("path").as_str().unwrap_or("/").to_string();
        let tags = state.get("tags").as_string_map();
        let p =
            iam::ensure_instance_profile(&ctx.aws.iam(), &profile, &path, &role, &tags, deadline)
                .await?;
        state.set_attr("instance_profile_name", Value::string(p.name));
        state.set_attr("instance_profile_arn", Value::string(p.arn));
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
                    .validate(validate_role_name)
                    .description("Role name: 1 to 64 letters, digits and +=,.@_-. Changing it replaces the role."),
            )
            .attribute(
                Attribute::string("path")
                    .default("/")
                    .force_new()
                    .validate(validate_path)
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
                    .validate(arn_of("iam", "policy/"))
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
                    .validate(validate_tags)
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
                        .validate(validate_role_name)
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

    async fn modify_plan(&self, ctx: &ProviderContext, plan: &mut Plan) -> Result<(), Diagnostics> {
        if plan.planned.is_null() {
            return Ok(()); // destroy
        }
        let env = env(ctx).await?;
        Self::derive(&mut plan.planned, &env);
        if let Some(name) = plan.planned.get("name").as_str().map(str::to_string) {
            plan.planned.set_attr("id", Value::string(&name));
            if F::INSTANCE_PROFILE && plan.planned.get("instance_profile_name").is_null() {
                plan.planned
                    .set_attr("instance_profile_name", Value::string(name));
            }
        }
        if F::INSTANCE_PROFILE
            && !plan.is_create()
            && plan.prior.get("instance_profile_arn").is_null()
        {
            // The profile was deleted out of band: update re-creates it.
            plan.set_unknown("instance_profile_arn");
        }
        Ok(())
    }

    async fn create(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = change.planned.clone();
        if !state.get("assume_role_policy").is_known()
            || !state.get("policy_arns").is_known()
            || !state.get("policy").is_known()
        {
            let env = env(ctx).await?;
            Self::derive(&mut state, &env);
        }
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
                        diags.with_partial_state(partial)
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
                    Err(_) => Diagnostics::from(e).with_partial_state(state),
                });
            }
        }
        Ok(Applied::new(state))
    }

    async fn read(
        &self,
        ctx: &ProviderContext,
        req: ReadRequest,
    ) -> Result<Option<Applied>, Diagnostics> {
        let deadline = deadline(None);
        let name = req
            .state
            .get("name")
            .as_str()
            .or(req.state.get("id").as_str())
            .unwrap_or_default()
            .to_string();
        let iam_client = ctx.aws.iam();
        let Some(remote) = iam::read_role(&iam_client, &name, deadline).await? else {
            return Ok(None);
        };
        let mut state = req.state.clone();
        let importing = state.get("assume_role_policy").is_null();
        if importing {
            for (attr, v) in F::recover_inputs(&remote) {
                state.set_attr(attr, v);
            }
        }
        Self::apply_remote(&mut state, &remote);
        if importing {
            // Split attached policies into joiner's own and the user's additional ones.
            if let Ok(env) = env(ctx).await {
                let mut derived = state.clone();
                derived.set_attr("additional_policy_arns", Value::Null);
                Self::derive(&mut derived, &env);
                let own: BTreeSet<String> = derived
                    .get("policy_arns")
                    .as_string_list()
                    .into_iter()
                    .collect();
                let extra: Vec<Value> = remote
                    .managed_policy_arns
                    .difference(&own)
                    .cloned()
                    .map(Value::String)
                    .collect();
                state.set_attr(
                    "additional_policy_arns",
                    if extra.is_empty() {
                        Value::Null
                    } else {
                        Value::Set(extra)
                    },
                );
            }
        }
        if F::INSTANCE_PROFILE {
            let profile_name = state
                .get("instance_profile_name")
                .as_str()
                .unwrap_or(&name)
                .to_string();
            match iam::read_instance_profile(&iam_client, &profile_name, deadline).await? {
                Some(p) if p.roles.iter().any(|r| r == &name) => {
                    state.set_attr("instance_profile_name", Value::string(p.name));
                    state.set_attr("instance_profile_arn", Value::string(p.arn));
                }
                _ => {
                    state.set_attr("instance_profile_name", Value::string(profile_name));
                    state.set_attr("instance_profile_arn", Value::Null);
                }
            }
        }
        Ok(Some(Applied::new(state)))
    }

    async fn update(&self, ctx: &ProviderContext, change: Change) -> Result<Applied, Diagnostics> {
        let deadline = deadline(change.timeout);
        let mut state = change.planned.clone();
        if !state.get("assume_role_policy").is_known()
            || !state.get("policy_arns").is_known()
            || !state.get("policy").is_known()
        {
            let env = env(ctx).await?;
            Self::derive(&mut state, &env);
        }
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
        Self::apply_remote(&mut state, &remote);
        // Keep the planned renderings (apply_remote keeps ours when equivalent).
        if F::INSTANCE_PROFILE {
            Self::ensure_profile(ctx, &mut state, deadline).await?;
        }
        Ok(Applied::new(state))
    }

    async fn delete(&self, ctx: &ProviderContext, change: Change) -> Result<(), Diagnostics> {
        let deadline = deadline(change.timeout);
        let iam_client = ctx.aws.iam();
        let name = change
            .prior
            .get("name")
            .as_str()
            .unwrap_or_default()
            .to_string();
        if F::INSTANCE_PROFILE {
            let profile = change
                .prior
                .get("instance_profile_name")
                .as_str()
                .unwrap_or(&name)
                .to_string();
            iam::delete_instance_profile(&iam_client, &profile, deadline).await?;
        }
        iam::delete_role(&iam_client, &name, deadline).await?;
        Ok(())
    }

    async fn import(&self, _ctx: &ProviderContext, id: &str) -> Result<Applied, Diagnostics> {
        if validate_role_name(&Value::string(id)).is_err() {
            return Err(Diagnostic::error(
                "Invalid import ID",
                format!(
                    "{} is imported by role name (1 to 64 letters, digits and +=,.@_-), got {id:?}",
                    F::TYPE_NAME
                ),
            )
            .into());
        }
        Ok(Applied::new(Value::object([
            ("id", Value::string(id)),
            ("name", Value::string(id)),
        ])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names() {
        assert!(validate_role_name(&Value::string("joiner-node_role+=,.@")).is_ok());
        assert!(validate_role_name(&Value::string("")).is_err());
        assert!(validate_role_name(&Value::string("a b")).is_err());
        assert!(validate_role_name(&Value::string("x".repeat(65))).is_err());
    }

    #[test]
    fn paths() {
        assert!(validate_path(&Value::string("/")).is_ok());
        assert!(validate_path(&Value::string("/eks/nodes/")).is_ok());
        assert!(validate_path(&Value::string("eks/")).is_err());
        assert!(validate_path(&Value::string("/eks")).is_err());
        assert!(validate_path(&Value::string("/a b/")).is_err());
    }

    #[test]
    fn tags() {
        assert!(validate_tags(&Value::string_map([("a", "b")])).is_ok());
        assert!(validate_tags(&Value::string_map([("aws:x", "b")])).is_err());
        assert!(validate_tags(&Value::string_map([("k".repeat(129), "b".to_string())])).is_err());
    }
}
