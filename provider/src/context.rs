//! What every resource and data source receives once Terraform has configured the provider.
//!
//! It lives apart from the provider block so that resources take their context from here and
//! never import the module that lists them.

use crate::aws::client::AwsClients;
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
