//! `joiner_node_role`: the role of every EC2 worker node, with the instance profile that
//! carries it (EC2 attaches roles to instances only through an instance profile, and the
//! agent launches nodes with that profile).

use crate::model::role::NoInputs;
use crate::policy::{managed, trust};
use crate::protocol::prelude::*;

use super::iam_role::{Documents, Env, RoleFlavor, RoleResource};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRoleFlavor;

pub type NodeRole = RoleResource<NodeRoleFlavor>;

impl RoleFlavor for NodeRoleFlavor {
    const TYPE_NAME: &'static str = "joiner_node_role";
    const SUMMARY: &'static str = "IAM role and instance profile for EC2 worker nodes: trusted by ec2.amazonaws.com, with the EKS worker node, CNI, ECR pull-only and SSM core policies.";
    const DEFAULT_DESCRIPTION: &'static str = "joiner: EKS worker nodes";
    const INSTANCE_PROFILE: bool = true;

    type Inputs = NoInputs;

    fn attributes() -> Vec<Attribute> {
        Vec::new()
    }

    fn documents(_: &NoInputs, env: &Env) -> Documents {
        Documents {
            trust: Some(trust::node_trust(&env.partition).to_json()),
            managed_policy_arns: managed::arns(&env.partition, managed::NODE_POLICIES),
            inline: None,
        }
    }
}
