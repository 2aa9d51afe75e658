//! The joiner provider itself: its configuration block and the context every resource gets.

use crate::aws::client::{AwsClients, AwsSettings};
use crate::aws::error::AwsError;
use crate::protocol::prelude::*;
use std::sync::Arc;

/// What resources and data sources receive once Terraform has configured the provider.
#[derive(Clone, Debug)]
pub struct ProviderContext {
    /// AWS service clients sharing one SDK configuration (`ctx.aws.sqs()`, `ctx.aws.iam()`...).
    pub aws: AwsClients,
    /// The region every call goes to.
    pub region: String,
    /// Fired when Terraform asks the provider to stop (Ctrl-C); long waits should watch it.
    pub stop: StopToken,
    pub terraform_version: String,
    /// Reaches clusters' Kubernetes APIs (EKS by default, or the `kubernetes {}` block);
    /// resolved lazily so that Kubernetes objects plan before their cluster exists.
    pub kube: Arc<crate::kubernetes::Connector>,
    account: Arc<tokio::sync::OnceCell<crate::aws::sts::CallerIdentity>>,
}

impl ProviderContext {
    pub fn new(
        aws: AwsClients,
        region: String,
        stop: StopToken,
        terraform_version: String,
    ) -> Self {
        let kube = Arc::new(crate::kubernetes::Connector::new(
            crate::kubernetes::KubeSettings::FromEks,
            aws.clone(),
            region.clone(),
        ));
        ProviderContext {
            aws,
            region,
            stop,
            terraform_version,
            kube,
            account: Arc::default(),
        }
    }

    /// Uses the provider block's `kubernetes {}` settings instead of EKS discovery.
    pub fn with_kube(mut self, settings: crate::kubernetes::KubeSettings) -> Self {
        self.kube = Arc::new(crate::kubernetes::Connector::new(
            settings,
            self.aws.clone(),
            self.region.clone(),
        ));
        self
    }

    /// Who the credentials belong to (`sts:GetCallerIdentity`, asked once per run).
    pub async fn caller(&self) -> Result<&crate::aws::sts::CallerIdentity, AwsError> {
        self.account
            .get_or_try_init(|| async { crate::aws::sts::caller_identity(&self.aws.sts()).await })
            .await
    }

    /// `arn:<partition>:<service>:<region>:<account>:<resource>` in this provider's region,
    /// for naming an object before it exists (e.g. in its own policy).
    pub async fn arn(&self, service: &str, resource: &str) -> Result<String, AwsError> {
        let account = &self.caller().await?.account_id;
        Ok(format!(
            "arn:{}:{service}:{}:{account}:{resource}",
            crate::aws::sts::partition(&self.region),
            self.region
        ))
    }
}

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
