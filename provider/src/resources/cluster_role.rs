//! `joiner_cluster_role`: the role the EKS control plane assumes to manage AWS resources
//! for the cluster (ENIs in the VPC, load balancers, the cluster security group).

use crate::model::role::NoInputs;
use crate::policy::{managed, trust};
use crate::protocol::prelude::*;

use super::iam_role::{Documents, Env, RoleFlavor, RoleResource};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterRoleFlavor;

pub type ClusterRole = RoleResource<ClusterRoleFlavor>;

impl RoleFlavor for ClusterRoleFlavor {
    const TYPE_NAME: &'static str = "joiner_cluster_role";
    const SUMMARY: &'static str = "IAM role for the EKS control plane: trusted by eks.amazonaws.com, with AmazonEKSClusterPolicy attached.";
    const DEFAULT_DESCRIPTION: &'static str = "joiner: EKS control plane";

    type Inputs = NoInputs;

    fn attributes() -> Vec<Attribute> {
        Vec::new()
    }

    fn documents(_: &NoInputs, env: &Env) -> Documents {
        Documents {
            trust: Some(trust::cluster_trust(&env.partition).to_json()),
            managed_policy_arns: managed::arns(&env.partition, managed::CLUSTER_POLICIES),
            inline: None,
        }
    }
}
