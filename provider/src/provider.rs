//! The joiner provider itself: its configuration block, and the resources and data sources it serves.

use crate::aws::client::{AwsClients, AwsSettings};
use crate::context::ProviderContext;
use crate::protocol::prelude::*;
use std::sync::Arc;

/// `provider "joiner" { ... }`.
#[derive(Clone, Copy, Debug, Default)]
pub struct JoinerProvider;

#[async_trait]
impl Provider for JoinerProvider {
    type Context = ProviderContext;

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("Groupless EKS clusters: control plane, IAM, interruption handling and just-in-time nodes.")
            .attribute(
                Attribute::string("region")
                    .optional()
                    .description("AWS region. Defaults to AWS_REGION / the AWS profile, as the AWS CLI does."),
            )
            .attribute(
                Attribute::string("endpoint")
                    .optional()
                    .description("Override the AWS endpoint URL for every service (emulators, proxies). Defaults to AWS_ENDPOINT_URL.")
                    .validate(|v| match v.as_str() {
                        Some(s) if s.starts_with("http://") || s.starts_with("https://") => Ok(()),
                        _ => Err("must be an http:// or https:// URL".to_string()),
                    }),
            )
            .attribute(
                Attribute::string("profile")
                    .optional()
                    .description("AWS shared-config profile. Defaults to AWS_PROFILE."),
            )
            .block(crate::kubernetes::KubeSettings::block())
    }

    fn validate(&self, config: &Value) -> Diagnostics {
        let mut d = Diagnostics::new();
        crate::kubernetes::KubeSettings::validate(config.get("kubernetes"), &mut d);
        d
    }

    async fn configure(&self, req: ConfigureRequest) -> Result<ProviderContext, Diagnostics> {
        let known = |name: &str| req.config.get(name).as_str().map(str::to_string);
        let settings = AwsSettings {
            region: known("region"),
            profile: known("profile"),
            endpoint_url: known("endpoint"),
        };
        let aws = AwsClients::load(&settings).await;
        let Some(region) = aws.region().map(str::to_string) else {
            return Err(Diagnostic::error_at(
                "region",
                "No AWS region",
                "set `region` in the provider block, or AWS_REGION in the environment",
            )
            .into());
        };
        let kube = crate::kubernetes::KubeSettings::from_config(req.config.get("kubernetes"));
        Ok(ProviderContext::new(aws, region, req.stop, req.terraform_version).with_kube(kube))
    }

    fn resources(&self) -> Vec<Arc<dyn Resource<ProviderContext>>> {
        crate::resources::all()
    }

    fn data_sources(&self) -> Vec<Arc<dyn DataSource<ProviderContext>>> {
        crate::data_sources::all()
    }
}
