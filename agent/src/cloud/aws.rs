//! The agent's AWS SDK configuration and the mapping of SDK errors to [`CloudError`].
//!
//! The standard environment is honoured (`AWS_REGION`, the web-identity variables IRSA
//! injects, `AWS_ENDPOINT_URL` for the emulator); explicit flags win over it. The HTTP client
//! is rustls on ring, as everywhere in this workspace, so aws-lc is never built. Throttling
//! (`RequestLimitExceeded`, `Throttling`...) and transient 5xx answers are retried by the
//! SDK's standard retry mode with more attempts than its default of 3: EC2 throttles per
//! account, and a controller that gives up after three tries turns a busy minute into failed
//! launches.

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

use super::CloudError;

/// How the agent reaches AWS; every field falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    pub region: Option<String>,
    /// `--aws-endpoint`: the emulator locally, a VPC endpoint in a locked-down VPC.
    pub endpoint_url: Option<String>,
    /// Attempts per call, first one included (default 8).
    pub max_attempts: Option<u32>,
    /// Credentials instead of the default chain ([`Config::aws_credentials`]).
    ///
    /// [`Config::aws_credentials`]: crate::controllers::Config::aws_credentials
    pub credentials: Option<aws_credential_types::provider::SharedCredentialsProvider>,
}

/// Attempts per SDK call when not configured.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// Loads the SDK configuration shared by every client the agent builds.
pub async fn load_config(settings: &AwsSettings) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let retry = RetryConfig::standard()
        .with_max_attempts(settings.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS));
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .retry_config(retry);
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some(credentials) = &settings.credentials {
        loader = loader.credentials_provider(credentials.clone());
    }
    loader.load().await
}

/// Turns an SDK error into a [`CloudError`] naming the operation (`ec2:CreateFleet`) and the
/// AWS error code. Errors without a code (timeouts, connection failures) get a code that
/// says which kind they are, so metrics by code stay meaningful.
pub fn cloud_error<E, R>(operation: &str, err: aws_sdk_ec2::error::SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_ec2::error::SdkError;
    let (code, message) = match &err {
        SdkError::ServiceError(e) => (
            e.err().code().unwrap_or("Unknown").to_string(),
            e.err()
                .message()
                .map(str::to_string)
                .unwrap_or_else(|| e.err().to_string()),
        ),
        SdkError::TimeoutError(_) => ("Timeout".to_string(), format!("{err:?}")),
        SdkError::DispatchFailure(d) => (
            "DispatchFailure".to_string(),
            format!("{:?}", d.as_connector_error()),
        ),
        SdkError::ResponseError(_) => ("ResponseError".to_string(), format!("{err:?}")),
        _ => (
            err.code().unwrap_or("Unknown").to_string(),
            err.message()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{err:?}")),
        ),
    };
    CloudError {
        operation: operation.to_string(),
        code,
        message,
    }
}

/// `Result` adapter: `.send().await.cloud("ec2:DescribeSubnets")?`.
pub trait CloudResultExt<T> {
    fn cloud(self, operation: &str) -> Result<T, CloudError>;
}

impl<T, E, R> CloudResultExt<T> for Result<T, aws_sdk_ec2::error::SdkError<E, R>>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    fn cloud(self, operation: &str) -> Result<T, CloudError> {
        self.map_err(|e| cloud_error(operation, e))
    }
}

impl CloudError {
    pub fn new(operation: &str, code: &str, message: impl Into<String>) -> CloudError {
        CloudError {
            operation: operation.to_string(),
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// The resource does not exist (any service's spelling of it).
    pub fn is_not_found(&self) -> bool {
        self.code.contains("NotFound")
            || self.code == "ResourceNotFoundException"
            || self.code == "ParameterNotFound"
    }

    /// Worth retrying: throttled, or the service (or the network) failed transiently.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.code.as_str(),
            "RequestLimitExceeded"
                | "Throttling"
                | "ThrottlingException"
                | "InternalError"
                | "InternalFailure"
                | "ServiceUnavailable"
                | "Unavailable"
                | "Timeout"
                | "DispatchFailure"
                | "ResponseError"
        )
    }
}
