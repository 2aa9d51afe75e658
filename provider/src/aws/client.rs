//! The AWS SDK configuration every resource shares.
//!
//! One `SdkConfig` is loaded when Terraform configures the provider and every service
//! client is built from it, so credentials are resolved once and connections are pooled
//! across resources. The standard environment is honoured as the AWS CLI does
//! (`AWS_REGION`, `AWS_PROFILE`, `AWS_ACCESS_KEY_ID`..., and `AWS_ENDPOINT_URL` /
//! `AWS_ENDPOINT_URL_<SERVICE>`, which is how tests point the provider at the emulator):
//! `aws_config::defaults` reads all of those itself, so we only layer the provider
//! block's explicit settings on top.
//!
//! The HTTP client is built here rather than by the SDK's default feature because the
//! default pulls aws-lc; the workspace uses rustls with ring everywhere.

use aws_config::{AppName, BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// Settings from the provider block; every field falls back to the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsSettings {
    pub region: Option<String>,
    pub profile: Option<String>,
    /// Overrides `AWS_ENDPOINT_URL` for every service (emulators, VPC endpoints).
    pub endpoint_url: Option<String>,
}

/// An HTTPS (and plain HTTP, for local emulators) client on rustls + ring.
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The provider's name in the user agent of every request it makes (`app/...`), so that
/// CloudTrail, and the local world's IAM decisions, can tell its calls from others made with
/// the same credentials.
pub const APP_NAME: &str = "terraform-provider-joiner";

/// Loads the shared SDK configuration.
pub async fn load_config(settings: &AwsSettings) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .app_name(AppName::new(APP_NAME).expect("a valid app name"));
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(profile) = &settings.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}

/// The service clients the provider uses. Cloning is cheap (clients share the config
/// and the connection pool).
#[derive(Debug, Clone)]
pub struct AwsClients {
    config: SdkConfig,
}

impl AwsClients {
    pub async fn load(settings: &AwsSettings) -> AwsClients {
        AwsClients::from_config(load_config(settings).await)
    }

    pub fn from_config(config: SdkConfig) -> AwsClients {
        AwsClients { config }
    }

    pub fn config(&self) -> &SdkConfig {
        &self.config
    }

    /// The configured region, if any could be resolved.
    pub fn region(&self) -> Option<&str> {
        self.config.region().map(|r| r.as_ref())
    }

    pub fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.config)
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.config)
    }

    pub fn sts(&self) -> aws_sdk_sts::Client {
        aws_sdk_sts::Client::new(&self.config)
    }

    pub fn eks(&self) -> aws_sdk_eks::Client {
        aws_sdk_eks::Client::new(&self.config)
    }

    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.config)
    }

    pub fn eventbridge(&self) -> aws_sdk_eventbridge::Client {
        aws_sdk_eventbridge::Client::new(&self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provider must reach the emulator through `AWS_ENDPOINT_URL` alone, as the
    /// e2e harness sets it; this proves the SDK picks the variable up (and our explicit
    /// setting wins over it) with our custom HTTP client, against a real moto server.
    #[tokio::test]
    async fn endpoint_and_region_reach_the_emulator() {
        let moto = joiner_test_support::MotoServer::start();
        let settings = AwsSettings {
            region: Some("eu-west-3".into()),
            profile: None,
            endpoint_url: Some(moto.endpoint()),
        };
        // Dummy credentials through the environment, as the harness passes them.
        for (k, v) in moto.env() {
            if k.starts_with("AWS_ACCESS") || k.starts_with("AWS_SECRET") {
                std::env::set_var(k, v);
            }
        }
        let clients = AwsClients::load(&settings).await;
        assert_eq!(clients.region(), Some("eu-west-3"));
        let me = clients.sts().get_caller_identity().send().await.unwrap();
        assert!(me.account().is_some());
        let roles = clients.iam().list_roles().send().await.unwrap();
        assert!(roles.roles().is_empty());
    }
}
