//! `joiner_cluster` (data source): an EKS cluster joiner did not create, by name.
//!
//! Teams that already run Karpenter have a cluster, usually made by eksctl, a module or the
//! console. They add joiner to it rather than start over: this reads what the rest of
//! `groupless-eks` needs from such a cluster (its ARN, endpoint, CA, subnets, the OIDC
//! issuer and the IAM OIDC provider IRSA trusts, the authentication mode) and changes
//! nothing. A cluster without an IAM OIDC provider is an error naming how to add one, since
//! the agent on Fargate authenticates to AWS through IRSA only.

use std::time::Duration;

use tokio::time::Instant;

use crate::aws::eks::{cluster, oidc};
use crate::context::ProviderContext;
use crate::protocol::prelude::*;

const READ_TIMEOUT: Duration = Duration::from_secs(2 * 60);

pub struct Cluster;

#[async_trait]
impl DataSource<ProviderContext> for Cluster {
    fn type_name(&self) -> &'static str {
        "joiner_cluster"
    }

    fn schema(&self) -> Schema {
        let computed = |name: &str, description: &str| {
            Attribute::string(name).computed().description(description)
        };
        Schema::new(0)
            .description("An existing EKS cluster, read by name; nothing is changed.")
            .attribute(
                Attribute::string("name")
                    .required()
                    .description("The cluster's name."),
            )
            .attribute(computed("arn", "The cluster's ARN."))
            .attribute(computed("version", "Kubernetes version, e.g. 1.31."))
            .attribute(computed("endpoint", "The API server's URL."))
            .attribute(computed(
                "certificate_authority",
                "Base64 of the cluster CA's PEM, as EKS returns it.",
            ))
            .attribute(computed("oidc_issuer", "The cluster's OIDC issuer URL."))
            .attribute(computed(
                "oidc_provider_arn",
                "The IAM OIDC provider registered for the issuer (what IRSA roles trust).",
            ))
            .attribute(computed(
                "authentication_mode",
                "CONFIG_MAP, API_AND_CONFIG_MAP or API: access entries need one of the latter two.",
            ))
            .attribute(computed("vpc_id", "The cluster's VPC."))
            .attribute(computed(
                "cluster_security_group_id",
                "The security group EKS made for the cluster.",
            ))
            .attribute(
                Attribute::string_list("subnet_ids")
                    .computed()
                    .description("The cluster's subnets, sorted."),
            )
    }

    async fn read(&self, ctx: &ProviderContext, config: Value) -> Result<Value, Diagnostics> {
        let name = config.get("name").as_str().unwrap_or_default().to_string();
        let deadline = Instant::now() + READ_TIMEOUT;
        let not_found = || {
            Diagnostic::error_at(
                "name",
                "EKS cluster not found",
                format!(
                    "eks:DescribeCluster found no cluster named {name:?} in this provider's region; \
                     check the name and the provider's region"
                ),
            )
        };
        let info = cluster::describe(&ctx.aws.eks(), &name, deadline)
            .await?
            .ok_or_else(not_found)?;
        let issuer = info.oidc_issuer.clone().unwrap_or_default();
        let provider_arn = if issuer.is_empty() {
            None
        } else {
            oidc::find_provider(&ctx.aws.iam(), &issuer, deadline).await?
        };
        let Some(provider_arn) = provider_arn else {
            return Err(Diagnostic::error_at(
                "name",
                "The cluster has no IAM OIDC provider",
                format!(
                    "cluster {name:?} (issuer {issuer:?}) has no IAM OIDC provider, which the \
                     agent's IRSA role must trust; add one with `eksctl utils \
                     associate-iam-oidc-provider --cluster {name} --approve` or `aws iam \
                     create-open-id-connect-provider --url {issuer} --client-id-list \
                     sts.amazonaws.com`"
                ),
            )
            .into());
        };
        let mut subnets = info.subnet_ids.clone();
        subnets.sort();
        let opt = |v: &Option<String>| v.clone().map(Value::String).unwrap_or(Value::Null);
        let mut state = config;
        state.set_attr("arn", Value::string(&info.arn));
        state.set_attr("version", opt(&info.version));
        state.set_attr("endpoint", opt(&info.endpoint));
        state.set_attr("certificate_authority", opt(&info.certificate_authority));
        state.set_attr("oidc_issuer", Value::string(&issuer));
        state.set_attr("oidc_provider_arn", Value::string(&provider_arn));
        state.set_attr("authentication_mode", opt(&info.authentication_mode));
        state.set_attr("vpc_id", opt(&info.vpc_id));
        state.set_attr(
            "cluster_security_group_id",
            opt(&info.cluster_security_group_id),
        );
        state.set_attr("subnet_ids", Value::string_list(subnets));
        Ok(state)
    }
}
