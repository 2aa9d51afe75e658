//! `joiner_fargate_role`: the pod execution role Fargate uses to pull images and write
//! logs for the system pods (kube-system, the agent), trusted only by this cluster's
//! Fargate profiles.

use crate::model::role::FargateRoleInputs;
use crate::policy::{managed, trust};
use crate::protocol::prelude::*;
use crate::validators;

use super::iam_role::{input, Documents, Env, RoleFlavor, RoleResource};
use crate::aws::iam::RemoteRole;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FargateRoleFlavor;

pub type FargateRole = RoleResource<FargateRoleFlavor>;

pub fn cluster_name_attribute(what: &str) -> Attribute {
    Attribute::string("cluster_name")
        .required()
        .validate(validators::cluster_name)
        .description(what)
}

impl RoleFlavor for FargateRoleFlavor {
    const TYPE_NAME: &'static str = "joiner_fargate_role";
    const SUMMARY: &'static str = "IAM pod execution role for Fargate: trusted by eks-fargate-pods.amazonaws.com for this cluster's Fargate profiles only, with AmazonEKSFargatePodExecutionRolePolicy.";
    const DEFAULT_DESCRIPTION: &'static str = "joiner: Fargate pod execution";

    type Inputs = FargateRoleInputs;

    fn attributes() -> Vec<Attribute> {
        vec![cluster_name_attribute(
            "The EKS cluster whose Fargate profiles may use the role (aws:SourceArn condition); updated in place.",
        )]
    }

    fn documents(inputs: &FargateRoleInputs, env: &Env) -> Documents {
        let trust = match input(&inputs.cluster_name) {
            Some(Some(cluster)) => Some(
                trust::fargate_trust(&env.partition, &env.region, &env.account, cluster).to_json(),
            ),
            _ => None,
        };
        Documents {
            trust,
            managed_policy_arns: managed::arns(&env.partition, managed::FARGATE_POLICIES),
            inline: None,
        }
    }

    /// The cluster name is the `<cluster>` in the SourceArn condition
    /// `arn:...:fargateprofile/<cluster>/*`.
    fn recover_inputs(role: &RemoteRole, inputs: &mut FargateRoleInputs) {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&role.trust_policy) else {
            return;
        };
        let statements = match &doc["Statement"] {
            serde_json::Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        };
        for st in statements {
            let source = &st["Condition"]["ArnLike"]["aws:SourceArn"];
            let source = source.as_str().or_else(|| source[0].as_str());
            if let Some(cluster) = source
                .and_then(|s| s.split_once(":fargateprofile/"))
                .and_then(|(_, rest)| rest.split('/').next())
            {
                inputs.cluster_name = Some(cluster.to_string()).into();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names() {
        assert!(validators::cluster_name(&Value::string("prod-eu_1")).is_ok());
        assert!(validators::cluster_name(&Value::string("-x")).is_err());
        assert!(validators::cluster_name(&Value::string("a.b")).is_err());
        assert!(validators::cluster_name(&Value::string("c".repeat(101))).is_err());
    }

    #[test]
    fn recovers_cluster_from_trust() {
        let env = Env {
            partition: "aws".into(),
            region: "us-east-1".into(),
            account: "123456789012".into(),
        };
        let inputs = FargateRoleInputs {
            cluster_name: Some("prod".to_string()).into(),
        };
        let docs = FargateRoleFlavor::documents(&inputs, &env);
        let role = RemoteRole {
            trust_policy: docs.trust.unwrap(),
            ..RemoteRole::default()
        };
        let mut inputs = FargateRoleInputs::default();
        FargateRoleFlavor::recover_inputs(&role, &mut inputs);
        assert_eq!(inputs.cluster_name.as_deref(), Some("prod"));
    }
}
