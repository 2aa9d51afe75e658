//! `joiner_agent_role`: the role `joiner-agent` runs as. Its trust is one service account
//! of this cluster (IRSA by default, since the agent runs on Fargate where Pod Identity is
//! unavailable), and its permissions are the least-privilege policy of
//! [`crate::policy::agent`], scoped to this cluster's tag, queue, node role and cluster.

use crate::aws::iam::RemoteRole;
use crate::model::role::AgentRoleInputs;
use crate::model::Model;
use crate::policy::agent::{agent_policy, AgentScope};
use crate::policy::arn::Arn;
use crate::policy::trust::{self, AgentTrust};
use crate::protocol::prelude::*;
use crate::validators;

use super::fargate_role::cluster_name_attribute;
use super::iam_role::{input, Documents, Env, RoleFlavor, RoleResource};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentRoleFlavor;

pub type AgentRole = RoleResource<AgentRoleFlavor>;

pub const INLINE_POLICY: &str = "joiner-agent";
pub const DEFAULT_NAMESPACE: &str = "joiner";
pub const DEFAULT_SERVICE_ACCOUNT: &str = "joiner-agent";

/// Kubernetes namespace names: DNS labels (RFC 1123), 1-63 characters.
fn validate_dns_label(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if s.is_empty() || s.len() > 63 || !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err(format!(
            "must be a DNS label: 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit; got {s:?}"
        ));
    }
    Ok(())
}

/// Service account names: DNS subdomains, 1-253 characters.
fn validate_dns_subdomain(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.')
            .all(|l| validate_dns_label(&Value::string(l)).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "must be a DNS subdomain: lower-case letters, digits, '-' and '.', at most 253 characters; got {s:?}"
        ))
    }
}

fn validate_issuer(v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some(s) if !s.starts_with("https://") || s.len() <= "https://".len() => Err(format!(
            "must be the cluster's OIDC issuer URL, starting with https://, got {s:?}"
        )),
        _ => Ok(()),
    }
}

impl RoleFlavor for AgentRoleFlavor {
    const TYPE_NAME: &'static str = "joiner_agent_role";
    const SUMMARY: &'static str = "IAM role for joiner-agent: IRSA (default) or EKS Pod Identity trust for one service account, and a least-privilege inline policy scoped to this cluster.";
    const DEFAULT_DESCRIPTION: &'static str = "joiner: in-cluster agent";
    const INLINE_POLICY_NAME: Option<&'static str> = Some(INLINE_POLICY);

    type Inputs = AgentRoleInputs;

    fn attributes() -> Vec<Attribute> {
        vec![
            cluster_name_attribute("The EKS cluster the agent manages; scopes every permission."),
            Attribute::string("trust")
                .default("irsa")
                .validate(validators::one_of(&["irsa", "pod_identity"]))
                .description("How the agent's pods get the role: \"irsa\" (default; works on Fargate) or \"pod_identity\"."),
            Attribute::string("oidc_provider_arn")
                .optional()
                .validate(validators::arn_of("iam", "oidc-provider/"))
                .description("The cluster's IAM OIDC provider ARN (joiner_cluster.oidc_provider_arn). Required for IRSA."),
            Attribute::string("oidc_issuer_url")
                .optional()
                .validate(validate_issuer)
                .description("The cluster's OIDC issuer URL (joiner_cluster.oidc_issuer). Required for IRSA."),
            Attribute::string("namespace")
                .default(DEFAULT_NAMESPACE)
                .validate(validate_dns_label)
                .description("Namespace of the agent's service account."),
            Attribute::string("service_account")
                .default(DEFAULT_SERVICE_ACCOUNT)
                .validate(validate_dns_subdomain)
                .description("Name of the agent's service account."),
            Attribute::string("node_role_arn")
                .required()
                .validate(validators::arn_of("iam", "role/"))
                .description("The node role (joiner_node_role.arn): the only role the agent may pass to EC2."),
            Attribute::string("queue_arn")
                .required()
                .validate(validators::arn_of("sqs", ""))
                .description("The interruption queue (joiner_interruption_queue.arn): the only queue the agent may read."),
            Attribute::string("queue_kms_key_arn")
                .optional()
                .validate(validators::arn_of("kms", "key/"))
                .description("The customer managed KMS key ARN of an SSE-KMS interruption queue (the key given as the queue's kms_key_id). The agent may decrypt with it through SQS only. Leave unset for SQS-managed encryption (the queue's default)."),
        ]
    }

    /// Whether the OIDC settings are missing is asked of the raw value: one set from
    /// `joiner_cluster`'s outputs is unknown here, which is fine, and a model would read it
    /// as absent.
    fn validate(config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        let trust = AgentRoleInputs::from_value(config).trust;
        if trust.as_deref().unwrap_or("irsa") == "irsa" {
            for attr in ["oidc_provider_arn", "oidc_issuer_url"] {
                if config.get(attr).is_null() {
                    d.error_at(
                        attr,
                        "Missing OIDC setting",
                        format!("{attr} is required when trust = \"irsa\" (the default); set it from joiner_cluster, or set trust = \"pod_identity\""),
                    );
                }
            }
        }
        d
    }

    fn documents(inputs: &AgentRoleInputs, env: &Env) -> Documents {
        let cluster = input(&inputs.cluster_name).flatten();
        // Unknown (None) keeps the policy unknown; null (Some(None)) is SSE-SQS.
        let queue_key = input(&inputs.queue_kms_key_arn);
        let policy = match (
            cluster,
            input(&inputs.queue_arn).flatten(),
            input(&inputs.node_role_arn).flatten(),
            queue_key,
        ) {
            (Some(cluster), Some(queue), Some(node_role), Some(key)) => Arn::parse(&format!(
                "arn:{}:eks:{}:{}:cluster/{cluster}",
                env.partition, env.region, env.account
            ))
            .ok()
            .map(|cluster| {
                agent_policy(&AgentScope {
                    cluster,
                    queue_arn: queue.to_string(),
                    node_role_arn: node_role.to_string(),
                    queue_kms_key_arn: key.map(str::to_string),
                })
                .to_json()
            }),
            _ => None,
        };
        let namespace = input(&inputs.namespace).flatten();
        let sa = input(&inputs.service_account).flatten();
        let how = match input(&inputs.trust) {
            Some(Some("pod_identity")) => Some(AgentTrust::PodIdentity),
            Some(_) => match (
                input(&inputs.oidc_provider_arn).flatten(),
                input(&inputs.oidc_issuer_url).flatten(),
            ) {
                (Some(arn), Some(issuer)) => Some(AgentTrust::Irsa {
                    oidc_provider_arn: arn.to_string(),
                    issuer_url: issuer.to_string(),
                }),
                _ => None,
            },
            None => None,
        };
        let trust = match (how, namespace, sa) {
            (Some(how), Some(ns), Some(sa)) => {
                Some(trust::agent_trust(&how, &env.partition, ns, sa).to_json())
            }
            _ => None,
        };
        Documents {
            trust,
            managed_policy_arns: Vec::new(),
            inline: policy,
        }
    }

    /// Every input is written in the documents: the cluster in the `Cluster` statement,
    /// the queue and node role in theirs, and the trust route, OIDC provider, issuer,
    /// namespace and service account in the trust policy.
    fn recover_inputs(role: &RemoteRole, inputs: &mut AgentRoleInputs) {
        let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).ok();
        let statements = |doc: &serde_json::Value| match &doc["Statement"] {
            serde_json::Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        };
        let first =
            |v: &serde_json::Value| v.as_str().or_else(|| v[0].as_str()).map(str::to_string);
        if let Some(policy) = role
            .inline_policies
            .get(INLINE_POLICY)
            .and_then(|p| parse(p))
        {
            for st in statements(&policy) {
                let resource = first(&st["Resource"]);
                match (st["Sid"].as_str(), resource) {
                    (Some("Cluster"), Some(r)) => {
                        if let Ok(arn) = Arn::parse(&r) {
                            inputs.cluster_name = Some(arn.resource_name().to_string()).into();
                        }
                    }
                    (Some("InterruptionQueue"), Some(r)) => inputs.queue_arn = Some(r).into(),
                    (Some("InterruptionQueueKey"), Some(r)) => {
                        inputs.queue_kms_key_arn = Some(r).into()
                    }
                    (Some("PassNodeRole"), Some(r)) => inputs.node_role_arn = Some(r).into(),
                    _ => {}
                }
            }
        }
        if let Some(trust) = parse(&role.trust_policy) {
            for st in statements(&trust) {
                if let Some(fed) = first(&st["Principal"]["Federated"]) {
                    inputs.trust = Some("irsa".to_string()).into();
                    inputs.oidc_provider_arn = Some(fed).into();
                    if let Some(conds) = st["Condition"]["StringEquals"].as_object() {
                        for (k, v) in conds {
                            if let (Some(issuer), Some(sub)) = (k.strip_suffix(":sub"), first(v)) {
                                inputs.oidc_issuer_url = Some(format!("https://{issuer}")).into();
                                if let Some(rest) = sub.strip_prefix("system:serviceaccount:") {
                                    if let Some((ns, sa)) = rest.split_once(':') {
                                        inputs.namespace = Some(ns.to_string()).into();
                                        inputs.service_account = Some(sa.to_string()).into();
                                    }
                                }
                            }
                        }
                    }
                } else if first(&st["Principal"]["Service"])
                    .is_some_and(|s| s.starts_with("pods.eks."))
                {
                    inputs.trust = Some("pod_identity".to_string()).into();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env {
            partition: "aws".into(),
            region: "eu-west-1".into(),
            account: "123456789012".into(),
        }
    }

    fn config() -> Value {
        Value::object([
            ("name", Value::string("agent")),
            ("cluster_name", Value::string("prod")),
            ("trust", Value::string("irsa")),
            (
                "oidc_provider_arn",
                Value::string("arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC"),
            ),
            ("oidc_issuer_url", Value::string("https://oidc.eks.eu-west-1.amazonaws.com/id/ABC")),
            ("namespace", Value::string("joiner")),
            ("service_account", Value::string("joiner-agent")),
            ("node_role_arn", Value::string("arn:aws:iam::123456789012:role/nodes")),
            ("queue_arn", Value::string("arn:aws:sqs:eu-west-1:123456789012:prod-interruptions")),
        ])
    }

    #[test]
    fn policy_is_known_before_the_oidc_provider_exists() {
        let mut c = config();
        c.set_attr("oidc_provider_arn", Value::Unknown);
        let docs = AgentRoleFlavor::documents(&AgentRoleInputs::from_value(&c), &env());
        assert!(docs.trust.is_none());
        assert!(docs
            .inline
            .unwrap()
            .contains("arn:aws:eks:eu-west-1:123456789012:cluster/prod"));
    }

    #[test]
    fn import_recovers_every_input_from_the_documents() {
        let docs = AgentRoleFlavor::documents(&AgentRoleInputs::from_value(&config()), &env());
        let role = RemoteRole {
            trust_policy: docs.trust.unwrap(),
            inline_policies: [(INLINE_POLICY.to_string(), docs.inline.unwrap())].into(),
            ..RemoteRole::default()
        };
        let mut recovered = AgentRoleInputs::default();
        AgentRoleFlavor::recover_inputs(&role, &mut recovered);
        assert_eq!(recovered, AgentRoleInputs::from_value(&config()));
    }

    #[test]
    fn irsa_needs_the_oidc_settings() {
        let mut c = config();
        c.set_attr("oidc_issuer_url", Value::Null);
        let d = AgentRoleFlavor::validate(&c);
        assert_eq!(d.items.len(), 1);
        assert_eq!(d.items[0].path, Some(AttributePath::new("oidc_issuer_url")));
        c.set_attr("trust", Value::string("pod_identity"));
        assert!(AgentRoleFlavor::validate(&c).is_empty());
    }

    #[test]
    fn names() {
        assert!(validate_dns_label(&Value::string("joiner")).is_ok());
        assert!(validate_dns_label(&Value::string("Joiner")).is_err());
        assert!(validate_dns_subdomain(&Value::string("joiner.agent")).is_ok());
        assert!(validate_issuer(&Value::string("http://x")).is_err());
    }
}
