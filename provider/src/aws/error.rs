//! One error type for every AWS call the provider makes.
//!
//! The SDK's own `Display` for a failed call is "service error", which tells a Terraform user
//! nothing. Every diagnostic we show must instead name the operation (`iam:CreateRole`) and
//! the AWS error code and message, because that is what a user pastes into a search engine
//! or an IAM policy. Resources also need to branch on a few codes (not found, already
//! exists) without matching each service's generated error enum, so the code is kept as a
//! plain string and the helpers below know the spellings used across services.

use std::fmt;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_types::request_id::RequestId;

/// Where a call failed. Only `Service` errors carry an AWS error code; the others never
/// reached (or never came back from) the service and are usually transient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The service answered with an error (it has a code and usually a message).
    Service,
    /// The request could not be built (bad input we sent, missing region or credentials).
    Construction,
    /// The connection failed (DNS, TCP, TLS, credentials provider) before a response.
    Dispatch,
    /// The call took longer than the SDK's timeout.
    Timeout,
    /// A response arrived but could not be parsed.
    Response,
}

/// A failed AWS call: `<service>:<Operation> failed: <Code>: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsError {
    /// IAM-style action name, e.g. `iam:CreateRole`, so that it can be matched against a
    /// policy when the code is `AccessDenied`.
    pub operation: String,
    pub kind: FailureKind,
    /// The AWS error code (`NoSuchEntity`, `ThrottlingException`...), when the service sent one.
    pub code: Option<String>,
    pub message: Option<String>,
    /// HTTP status of the response, when there was one (lets callers tell an emulator's bare
    /// 404 for an unimplemented API from a real `ResourceNotFoundException`).
    pub status: Option<u16>,
    pub request_id: Option<String>,
    /// How many attempts the retry layer made before giving up (1 when it did not retry).
    pub attempts: u32,
}

impl AwsError {
    /// Converts an SDK error, keeping the code, message, status and request ID.
    pub fn from_sdk<E>(operation: impl Into<String>, err: SdkError<E, HttpResponse>) -> AwsError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let operation = operation.into();
        let status = err.raw_response().map(|r| r.status().as_u16());
        let request_id = err.request_id().map(str::to_string);
        let kind = match &err {
            SdkError::ServiceError(_) => FailureKind::Service,
            SdkError::ConstructionFailure(_) => FailureKind::Construction,
            SdkError::DispatchFailure(_) => FailureKind::Dispatch,
            SdkError::TimeoutError(_) => FailureKind::Timeout,
            SdkError::ResponseError(_) => FailureKind::Response,
            // `SdkError` is non-exhaustive; anything new is treated like a dispatch failure.
            _ => FailureKind::Dispatch,
        };
        let (code, message) = match kind {
            FailureKind::Service => (
                err.code().map(str::to_string),
                err.message()
                    .map(str::to_string)
                    .or_else(|| Some(DisplayErrorContext(&err).to_string())),
            ),
            _ => (None, Some(DisplayErrorContext(&err).to_string())),
        };
        AwsError {
            operation,
            kind,
            code,
            message,
            status,
            request_id,
            attempts: 1,
        }
    }

    /// A service error built by hand: used by tests that inject failures into the retry
    /// layer, and by code that must report an AWS-side condition the SDK does not model
    /// (e.g. a waiter that sees a FAILED status).
    pub fn service(operation: &str, code: &str, message: &str) -> AwsError {
        AwsError {
            operation: operation.to_string(),
            kind: FailureKind::Service,
            code: Some(code.to_string()),
            message: Some(message.to_string()),
            status: None,
            request_id: None,
            attempts: 1,
        }
    }

    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    pub fn message(&self) -> &str {
        self.message.as_deref().unwrap_or("")
    }

    /// True when the error code is exactly `code`.
    pub fn is_code(&self, code: &str) -> bool {
        self.code() == Some(code)
    }

    /// True when the object the call addressed does not exist. Each service spells this
    /// differently, and drift detection (deleted out of band → plan recreates) depends on
    /// recognising all of them.
    pub fn is_not_found(&self) -> bool {
        const CODES: &[&str] = &[
            "NoSuchEntity",                                // IAM
            "ResourceNotFoundException",                   // EKS, EventBridge
            "NotFoundException",                           // EKS (some operations)
            "AWS.SimpleQueueService.NonExistentQueue",     // SQS (query protocol)
            "QueueDoesNotExist",                           // SQS (JSON protocol)
            "InvalidVpcID.NotFound",                       // EC2
            "InvalidSubnetID.NotFound",                    // EC2
            "InvalidGroup.NotFound",                       // EC2
            "InvalidLaunchTemplateName.NotFoundException", // EC2
            "InvalidLaunchTemplateId.NotFound",            // EC2
            "InvalidInstanceID.NotFound",                  // EC2
            "ParameterNotFound",                           // SSM
        ];
        match self.code() {
            Some(code) => CODES.contains(&code),
            None => false,
        }
    }

    /// True when a create call found the object already there.
    pub fn is_already_exists(&self) -> bool {
        matches!(
            self.code(),
            Some(
                "EntityAlreadyExists"
                    | "ResourceAlreadyExistsException"
                    | "ResourceInUseException"
                    | "QueueAlreadyExists"
                    | "QueueNameExists"
                    | "InvalidLaunchTemplateName.AlreadyExistsException"
            )
        )
    }

    /// True for an access-denied answer, so callers can add a hint about the caller's policy.
    pub fn is_access_denied(&self) -> bool {
        matches!(
            self.code(),
            Some("AccessDenied" | "AccessDeniedException" | "UnauthorizedOperation")
        )
    }

    /// True when the endpoint answered 404 without an AWS error code: the API itself is
    /// missing (e.g. an emulator that does not implement it), as opposed to a missing object.
    pub fn is_unsupported_api(&self) -> bool {
        self.status == Some(404) && !self.is_not_found()
    }
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: ", self.operation)?;
        match self.kind {
            FailureKind::Service => {
                let code = self.code.as_deref().unwrap_or("UnknownError");
                match self.message.as_deref() {
                    Some(m) if !m.is_empty() => write!(f, "{code}: {m}")?,
                    _ => write!(f, "{code}")?,
                }
                if let Some(status) = self.status {
                    write!(f, " (HTTP {status}")?;
                    if let Some(id) = &self.request_id {
                        write!(f, ", request ID {id}")?;
                    }
                    write!(f, ")")?;
                }
            }
            kind => {
                let what = match kind {
                    FailureKind::Construction => "could not build the request",
                    FailureKind::Dispatch => "could not reach the AWS endpoint",
                    FailureKind::Timeout => "timed out",
                    FailureKind::Response => "could not read the response",
                    FailureKind::Service => unreachable!(),
                };
                write!(f, "{what}: {}", self.message())?;
            }
        }
        if self.attempts > 1 {
            write!(f, " (gave up after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

impl std::error::Error for AwsError {}

/// `.aws("iam:CreateRole")?` on an SDK result: names the operation once, at the call site.
pub trait AwsResultExt<T> {
    fn aws(self, operation: &str) -> Result<T, AwsError>;
}

impl<T, E> AwsResultExt<T> for Result<T, SdkError<E, HttpResponse>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    fn aws(self, operation: &str) -> Result<T, AwsError> {
        self.map_err(|e| AwsError::from_sdk(operation, e))
    }
}

/// AWS failures become Terraform errors whose summary names the operation and code, so
/// they can be searched for, and whose detail carries the message.
impl From<AwsError> for crate::protocol::diagnostics::Diagnostic {
    fn from(e: AwsError) -> Self {
        let summary = match e.code() {
            Some(code) => format!("{} failed: {code}", e.operation),
            None => format!("{} failed", e.operation),
        };
        crate::protocol::diagnostics::Diagnostic::error(summary, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_operation_code_and_message() {
        let e = AwsError::service(
            "sqs:CreateQueue",
            "InvalidAttributeValue",
            "Invalid value for the parameter MessageRetentionPeriod.",
        );
        assert_eq!(
            e.to_string(),
            "sqs:CreateQueue failed: InvalidAttributeValue: Invalid value for the parameter MessageRetentionPeriod."
        );
    }

    #[test]
    fn display_mentions_attempts_and_status() {
        let mut e = AwsError::service("iam:CreateRole", "Throttling", "Rate exceeded");
        e.status = Some(400);
        e.request_id = Some("abc".into());
        e.attempts = 7;
        assert_eq!(
            e.to_string(),
            "iam:CreateRole failed: Throttling: Rate exceeded (HTTP 400, request ID abc) (gave up after 7 attempts)"
        );
    }

    #[test]
    fn not_found_spellings_across_services() {
        for code in [
            "NoSuchEntity",
            "ResourceNotFoundException",
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
        ] {
            assert!(AwsError::service("x:Y", code, "").is_not_found(), "{code}");
        }
        assert!(!AwsError::service("x:Y", "AccessDenied", "").is_not_found());
        assert!(AwsError::service("x:Y", "AccessDenied", "").is_access_denied());
    }

    #[test]
    fn bare_404_is_an_unsupported_api_not_a_missing_object() {
        let mut e = AwsError::service("eks:CreateAddon", "UnknownError", "");
        e.code = None;
        e.status = Some(404);
        assert!(e.is_unsupported_api());
        let mut missing = AwsError::service("eks:DescribeAddon", "ResourceNotFoundException", "");
        missing.status = Some(404);
        assert!(!missing.is_unsupported_api());
    }
}
