//! The four role resources (`joiner_cluster_role`, `joiner_node_role`,
//! `joiner_fargate_role`, `joiner_agent_role`) as one struct, generic over the flavour.
//!
//! The attributes every role has are fields here; a flavour's own inputs are its
//! [`RoleFlavor::Inputs`] model, written into the same object; `policy` and the instance
//! profile exist only in the flavours that have them ([`RoleFlavor::INLINE_POLICY_NAME`],
//! [`RoleFlavor::INSTANCE_PROFILE`]), so [`Model::to_value`] writes them only there and each
//! flavour's schema test can check the shape exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use super::fields::*;
use super::nullable::*;
use super::Model;
use crate::protocol::prelude::*;
use crate::resources::iam_role::RoleFlavor;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleModel<F: RoleFlavor> {
    pub id: Option<String>,
    pub name: Option<String>,
    pub path: Option<String>,
    pub description: Option<String>,
    pub permissions_boundary: Option<String>,
    pub additional_policy_arns: Option<BTreeSet<String>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub arn: Option<String>,
    pub unique_id: Option<String>,
    pub assume_role_policy: Option<String>,
    pub policy_arns: Option<BTreeSet<String>>,
    /// Only in flavours with an inline policy.
    pub policy: Option<String>,
    /// Only in flavours with an instance profile.
    pub instance_profile_name: Option<String>,
    pub instance_profile_arn: Option<String>,
    pub inputs: F::Inputs,
    pub timeouts: Value,
    pub flavor: PhantomData<F>,
}

impl<F: RoleFlavor> Model for RoleModel<F> {
    fn from_value(v: &Value) -> Self {
        RoleModel {
            id: string(v, "id"),
            name: string(v, "name"),
            path: string(v, "path"),
            description: string(v, "description"),
            permissions_boundary: string(v, "permissions_boundary"),
            additional_policy_arns: opt_set(v, "additional_policy_arns"),
            tags: nullable_map(v, "tags"),
            arn: string(v, "arn"),
            unique_id: string(v, "unique_id"),
            assume_role_policy: string(v, "assume_role_policy"),
            policy_arns: opt_set(v, "policy_arns"),
            policy: string(v, "policy"),
            instance_profile_name: string(v, "instance_profile_name"),
            instance_profile_arn: string(v, "instance_profile_arn"),
            inputs: F::Inputs::from_value(v),
            timeouts: v.get("timeouts").clone(),
            flavor: PhantomData,
        }
    }

    fn to_value(&self) -> Value {
        let mut v = Value::object([
            ("id", opt_str(&self.id)),
            ("name", opt_str(&self.name)),
            ("path", opt_str(&self.path)),
            ("description", opt_str(&self.description)),
            ("permissions_boundary", opt_str(&self.permissions_boundary)),
            (
                "additional_policy_arns",
                opt_set_value(&self.additional_policy_arns),
            ),
            ("tags", nullable_map_value(&self.tags)),
            ("arn", opt_str(&self.arn)),
            ("unique_id", opt_str(&self.unique_id)),
            ("assume_role_policy", opt_str(&self.assume_role_policy)),
            ("policy_arns", opt_set_value(&self.policy_arns)),
            ("timeouts", self.timeouts.clone()),
        ]);
        if F::INLINE_POLICY_NAME.is_some() {
            v.set_attr("policy", opt_str(&self.policy));
        }
        if F::INSTANCE_PROFILE {
            v.set_attr(
                "instance_profile_name",
                opt_str(&self.instance_profile_name),
            );
            v.set_attr("instance_profile_arn", opt_str(&self.instance_profile_arn));
        }
        if let Value::Object(inputs) = self.inputs.to_value() {
            for (k, x) in inputs {
                v.set_attr(&k, x);
            }
        }
        v
    }
}

impl<F: RoleFlavor> RoleModel<F> {
    pub fn name_or_default(&self) -> String {
        self.name.clone().unwrap_or_default()
    }

    /// The instance profile's name: the role's own unless configured.
    pub fn profile_name(&self) -> String {
        self.instance_profile_name
            .clone()
            .unwrap_or_else(|| self.name_or_default())
    }
}

/// The inputs of a flavour that has none besides the common ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoInputs;

impl Model for NoInputs {
    fn from_value(_: &Value) -> Self {
        NoInputs
    }
    fn to_value(&self) -> Value {
        Value::Object(BTreeMap::new())
    }
}

/// `joiner_fargate_role`'s input: the cluster whose Fargate profiles may use the role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FargateRoleInputs {
    pub cluster_name: Option<String>,
}

impl Model for FargateRoleInputs {
    fn from_value(v: &Value) -> Self {
        FargateRoleInputs {
            cluster_name: string(v, "cluster_name"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([("cluster_name", opt_str(&self.cluster_name))])
    }
}

/// `joiner_agent_role`'s inputs: what scopes the agent's policy and trust.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentRoleInputs {
    pub cluster_name: Option<String>,
    pub trust: Option<String>,
    pub oidc_provider_arn: Option<String>,
    pub oidc_issuer_url: Option<String>,
    pub namespace: Option<String>,
    pub service_account: Option<String>,
    pub node_role_arn: Option<String>,
    pub queue_arn: Option<String>,
}

impl Model for AgentRoleInputs {
    fn from_value(v: &Value) -> Self {
        AgentRoleInputs {
            cluster_name: string(v, "cluster_name"),
            trust: string(v, "trust"),
            oidc_provider_arn: string(v, "oidc_provider_arn"),
            oidc_issuer_url: string(v, "oidc_issuer_url"),
            namespace: string(v, "namespace"),
            service_account: string(v, "service_account"),
            node_role_arn: string(v, "node_role_arn"),
            queue_arn: string(v, "queue_arn"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("cluster_name", opt_str(&self.cluster_name)),
            ("trust", opt_str(&self.trust)),
            ("oidc_provider_arn", opt_str(&self.oidc_provider_arn)),
            ("oidc_issuer_url", opt_str(&self.oidc_issuer_url)),
            ("namespace", opt_str(&self.namespace)),
            ("service_account", opt_str(&self.service_account)),
            ("node_role_arn", opt_str(&self.node_role_arn)),
            ("queue_arn", opt_str(&self.queue_arn)),
        ])
    }
}
