//! The four role resources (`joiner_cluster_role`, `joiner_node_role`,
//! `joiner_fargate_role`, `joiner_agent_role`) as one struct, generic over the flavour.
//!
//! The attributes every role has are fields here; a flavour's own inputs are its
//! [`RoleFlavor::Inputs`] model, written into the same object; `policy` and the instance
//! profile exist only in the flavours that have them ([`RoleFlavor::INLINE_POLICY_NAME`],
//! [`RoleFlavor::INSTANCE_PROFILE`]), so [`Model::to_value`] writes them only there and each
//! flavour's schema test can check the shape exactly. The inputs, and the documents and
//! names derived from them, are [`Planned`]: at plan time an input may come from a resource
//! not created yet, and then what follows from it is unknown, not absent.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use super::attr::{get, model, Attr, Model, Planned};
use crate::aws::iam::RemoteRole;
use crate::protocol::prelude::*;

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

/// One kind of joiner role.
///
/// The `Clone`/`Debug`/`Default`/`PartialEq` bounds let [`RoleModel`] derive them.
pub trait RoleFlavor:
    Send + Sync + 'static + Clone + std::fmt::Debug + Default + PartialEq
{
    const TYPE_NAME: &'static str;
    /// What the resource is, for the schema description.
    const SUMMARY: &'static str;
    const DEFAULT_DESCRIPTION: &'static str;
    /// The inline policy exposed as `policy`, if the flavour has one.
    const INLINE_POLICY_NAME: Option<&'static str> = None;
    /// Whether the role also gets an instance profile (EC2 nodes).
    const INSTANCE_PROFILE: bool = false;

    /// The flavour's own inputs, as attributes and as the model that reads them.
    fn attributes() -> Vec<Attribute>;
    type Inputs: Model + Clone + std::fmt::Debug + Default + PartialEq + Send + Sync;
    /// Cross-attribute checks; `config` may contain unknowns.
    fn validate(_config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    /// The documents for the inputs (which may be unknown, see [`Documents`]).
    /// Takes the raw value rather than [`Self::Inputs`]: "unknown until apply" must stay
    /// apart from null here, and a model reads both as absent.
    fn documents(inputs: &Self::Inputs, env: &Env) -> Documents;
    /// Writes into `inputs` what an existing role's documents say about them, for import.
    fn recover_inputs(_role: &RemoteRole, _inputs: &mut Self::Inputs) {}
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleModel<F: RoleFlavor> {
    pub id: Option<String>,
    pub name: Option<String>,
    pub path: Option<String>,
    pub description: Option<String>,
    pub permissions_boundary: Option<String>,
    pub additional_policy_arns: Planned<Option<BTreeSet<String>>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub arn: Option<String>,
    pub unique_id: Option<String>,
    pub assume_role_policy: Planned<Option<String>>,
    pub policy_arns: Planned<Option<BTreeSet<String>>>,
    /// Only in flavours with an inline policy.
    pub policy: Planned<Option<String>>,
    /// Only in flavours with an instance profile.
    pub instance_profile_name: Planned<Option<String>>,
    pub instance_profile_arn: Option<String>,
    pub inputs: F::Inputs,
    pub timeouts: Value,
    pub flavor: PhantomData<F>,
}

impl<F: RoleFlavor> Attr for RoleModel<F> {
    fn from_attr(v: &Value) -> Self {
        RoleModel {
            id: get(v, "id"),
            name: get(v, "name"),
            path: get(v, "path"),
            description: get(v, "description"),
            permissions_boundary: get(v, "permissions_boundary"),
            additional_policy_arns: get(v, "additional_policy_arns"),
            tags: get(v, "tags"),
            arn: get(v, "arn"),
            unique_id: get(v, "unique_id"),
            assume_role_policy: get(v, "assume_role_policy"),
            policy_arns: get(v, "policy_arns"),
            policy: get(v, "policy"),
            instance_profile_name: get(v, "instance_profile_name"),
            instance_profile_arn: get(v, "instance_profile_arn"),
            inputs: F::Inputs::from_value(v),
            timeouts: v.get("timeouts").clone(),
            flavor: PhantomData,
        }
    }

    fn to_attr(&self) -> Value {
        let mut v = Value::object([
            ("id", self.id.to_attr()),
            ("name", self.name.to_attr()),
            ("path", self.path.to_attr()),
            ("description", self.description.to_attr()),
            ("permissions_boundary", self.permissions_boundary.to_attr()),
            (
                "additional_policy_arns",
                self.additional_policy_arns.to_attr(),
            ),
            ("tags", self.tags.to_attr()),
            ("arn", self.arn.to_attr()),
            ("unique_id", self.unique_id.to_attr()),
            ("assume_role_policy", self.assume_role_policy.to_attr()),
            ("policy_arns", self.policy_arns.to_attr()),
            ("timeouts", self.timeouts.clone()),
        ]);
        if F::INLINE_POLICY_NAME.is_some() {
            v.set_attr("policy", self.policy.to_attr());
        }
        if F::INSTANCE_PROFILE {
            v.set_attr(
                "instance_profile_name",
                self.instance_profile_name.to_attr(),
            );
            v.set_attr("instance_profile_arn", self.instance_profile_arn.to_attr());
        }
        if let Value::Object(inputs) = self.inputs.to_value() {
            for (k, x) in inputs {
                v.set_attr(&k, x);
            }
        }
        v
    }
}

impl<F: RoleFlavor> Model for RoleModel<F> {}

impl<F: RoleFlavor> RoleModel<F> {
    pub fn name_or_default(&self) -> String {
        self.name.clone().unwrap_or_default()
    }

    /// The instance profile's name: the role's own unless configured.
    pub fn profile_name(&self) -> String {
        (*self.instance_profile_name)
            .clone()
            .unwrap_or_else(|| self.name_or_default())
    }
}

/// The inputs of a flavour that has none besides the common ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoInputs;

impl Attr for NoInputs {
    fn from_attr(_: &Value) -> Self {
        NoInputs
    }
    fn to_attr(&self) -> Value {
        Value::Object(BTreeMap::new())
    }
}

impl Model for NoInputs {}

model! {
    /// `joiner_fargate_role`'s input: the cluster whose Fargate profiles may use the role.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct FargateRoleInputs {
        pub cluster_name: Planned<Option<String>>,
    }
}

model! {
    /// `joiner_agent_role`'s inputs: what scopes the agent's policy and trust.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentRoleInputs {
        pub cluster_name: Planned<Option<String>>,
        pub trust: Planned<Option<String>>,
        pub oidc_provider_arn: Planned<Option<String>>,
        pub oidc_issuer_url: Planned<Option<String>>,
        pub namespace: Planned<Option<String>>,
        pub service_account: Planned<Option<String>>,
        pub node_role_arn: Planned<Option<String>>,
        pub queue_arn: Planned<Option<String>>,
        pub queue_kms_key_arn: Planned<Option<String>>,
    }
}
