//! Retries above the SDK's own, for the two failures a Terraform apply must ride out.
//!
//! The SDK's standard retry (3 attempts) covers a blip, not an account under pressure:
//! a large `terraform apply` creates dozens of objects at once and IAM or EC2 throttle it
//! for longer than three attempts. And IAM is eventually consistent: a role created a
//! second ago may be refused by EKS as "cannot be assumed", and a trust policy naming an
//! OIDC provider created a second ago may be refused as an invalid principal. Those are
//! not user errors, so the provider waits them out, but never past the resource's timeout
//! (the deadline), and never longer than [`RetryPolicy::consistency_window`] for an
//! apparent consistency error: a principal that is *really* invalid must still fail fast
//! enough to be useful.
//!
//! The classifier and the jitter are plain function pointers and the sleep is tokio's, so
//! tests inject a sequence of errors and run under tokio's paused clock without waiting.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::error::{AwsError, FailureKind};

/// What a failure means for retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transience {
    /// Retrying cannot help (bad input, access denied, not found...).
    Permanent,
    /// The service asked us to slow down.
    Throttled,
    /// A transient server-side or network failure.
    Transient,
    /// IAM has not yet propagated a principal we (or another resource) just created.
    NotYetConsistent,
}

/// Error codes AWS services use to say "slow down". Spellings differ per service.
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "RequestThrottled",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "SlowDown",
    "EC2ThrottledException",
    "PriorRequestNotComplete",
    "BandwidthLimitExceeded",
];

/// Server-side failures worth another attempt. `ConcurrentModification` is IAM's and
/// EventBridge's answer when two calls touch the same object at once (e.g. two roles'
/// policy attachments racing); it clears by itself.
const TRANSIENT_CODES: &[&str] = &[
    "InternalFailure",
    "InternalError",
    "InternalServerError",
    "InternalException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "ServerException",
    "RequestTimeout",
    "RequestTimeoutException",
    "ConcurrentModification",
    "ConcurrentModificationException",
];

/// Codes under which services report a principal that has not propagated yet. They are
/// also used for genuine input errors, so the message decides (see [`CONSISTENCY_HINTS`]).
const CONSISTENCY_CODES: &[&str] = &[
    "MalformedPolicyDocument",
    "InvalidParameterValue",
    "InvalidParameterException",
    "InvalidParameterCombination",
    "InvalidRequestException",
    "AccessDeniedException",
];

/// Lower-case message fragments seen while IAM propagates, e.g.
/// - EKS: "Role with arn: ... could not be assumed because it does not exist or the trusted
///   entity is not correct";
/// - IAM: "Invalid principal in policy: ..." (an OIDC provider or role created just before);
/// - EC2: "Value (...) for parameter iamInstanceProfile.name is invalid. Invalid IAM
///   Instance Profile name";
/// - EventBridge/SQS/Lambda: "The role defined for the function cannot be assumed".
const CONSISTENCY_HINTS: &[&str] = &[
    "could not be assumed",
    "cannot be assumed",
    "can't be assumed",
    "unable to assume",
    "invalid principal",
    "invalid iam instance profile",
    "iaminstanceprofile",
    "does not exist or the trusted entity",
    "not authorized to perform: sts:assumerole",
    "misconfigured podexecutionrole",
];

/// The default classifier, shared by every resource.
pub fn classify(err: &AwsError) -> Transience {
    match err.kind {
        // The SDK already retried these; one more round at our pace costs little and
        // covers a moment's network trouble during a long apply.
        FailureKind::Dispatch | FailureKind::Timeout => return Transience::Transient,
        FailureKind::Construction | FailureKind::Response => return Transience::Permanent,
        FailureKind::Service => {}
    }
    let Some(code) = err.code() else {
        return match err.status {
            Some(429) => Transience::Throttled,
            Some(500..=599) => Transience::Transient,
            _ => Transience::Permanent,
        };
    };
    if THROTTLING_CODES.contains(&code) {
        return Transience::Throttled;
    }
    if TRANSIENT_CODES.contains(&code) {
        return Transience::Transient;
    }
    if CONSISTENCY_CODES.contains(&code) {
        let message = err.message().to_ascii_lowercase();
        if CONSISTENCY_HINTS.iter().any(|h| message.contains(h)) {
            return Transience::NotYetConsistent;
        }
    }
    Transience::Permanent
}

/// Exponential backoff with "equal jitter": the n-th delay is drawn from
/// `[cap/2, cap]` where `cap = min(max_delay, base * 2^n)`. Half of it is fixed so the
/// delay keeps growing under sustained throttling; the random half spreads concurrent
/// resources (Terraform runs 10 at once) so they do not retry in lock step.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest we keep retrying an apparent IAM consistency error, counted from the first
    /// one. AWS documents propagation as "usually within seconds"; two minutes is ample
    /// and still lets a genuinely invalid principal fail within one coffee.
    pub consistency_window: Duration,
    pub classify: fn(&AwsError) -> Transience,
    /// Returns a uniform sample in `[0, 1)`; replaced by a constant in tests.
    pub jitter: fn() -> f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(20),
            consistency_window: Duration::from_secs(120),
            classify,
            jitter: || rand::random::<f64>(),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (0-based) for a given jitter sample.
    pub fn delay(&self, retry: u32, sample: f64) -> Duration {
        let exp = 2f64.powi(retry.min(30) as i32);
        let cap = (self.base_delay.as_secs_f64() * exp).min(self.max_delay.as_secs_f64());
        let sample = sample.clamp(0.0, 1.0);
        Duration::from_secs_f64(cap / 2.0 + cap / 2.0 * sample)
    }

    /// Runs `op` until it succeeds, fails permanently, or the next wait would cross
    /// `deadline` (or the consistency window). The last error is returned with the number
    /// of attempts, so the user sees what kept failing and for how long we tried.
    pub async fn run<T, F, Fut>(&self, deadline: Instant, mut op: F) -> Result<T, AwsError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        let mut attempts: u32 = 0;
        let mut consistency_since: Option<Instant> = None;
        loop {
            attempts += 1;
            let err = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let transience = (self.classify)(&err);
            let give_up = |mut err: AwsError| {
                err.attempts = attempts;
                Err(err)
            };
            if transience == Transience::Permanent {
                return give_up(err);
            }
            let delay = self.delay(attempts - 1, (self.jitter)());
            let now = Instant::now();
            let wake = now + delay;
            if wake > deadline {
                return give_up(err);
            }
            if transience == Transience::NotYetConsistent {
                let since = *consistency_since.get_or_insert(now);
                if wake > since + self.consistency_window {
                    return give_up(err);
                }
            }
            tracing::warn!(
                operation = %err.operation,
                code = err.code().unwrap_or("-"),
                ?transience,
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                "retrying AWS call"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// Retries `op` with the default policy until `deadline`.
pub async fn retry<T, F, Fut>(deadline: Instant, op: F) -> Result<T, AwsError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, AwsError>>,
{
    RetryPolicy::default().run(deadline, op).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    fn err(code: &str, message: &str) -> AwsError {
        AwsError::service("iam:CreateRole", code, message)
    }

    /// An operation that returns the queued errors in order, then `Ok(attempt number)`.
    fn scripted(
        errors: Vec<AwsError>,
    ) -> (
        Arc<Mutex<u32>>,
        impl FnMut() -> std::future::Ready<Result<u32, AwsError>>,
    ) {
        let calls = Arc::new(Mutex::new(0));
        let queue = Arc::new(Mutex::new(VecDeque::from(errors)));
        let c = calls.clone();
        let op = move || {
            let mut n = c.lock().unwrap();
            *n += 1;
            let r = match queue.lock().unwrap().pop_front() {
                Some(e) => Err(e),
                None => Ok(*n),
            };
            std::future::ready(r)
        };
        (calls, op)
    }

    fn fixed_policy() -> RetryPolicy {
        RetryPolicy {
            jitter: || 1.0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn classifies_throttling_across_services() {
        for code in [
            "Throttling",
            "ThrottlingException",
            "RequestLimitExceeded",
            "TooManyRequestsException",
        ] {
            assert_eq!(classify(&err(code, "Rate exceeded")), Transience::Throttled);
        }
        let mut bare429 = err("x", "");
        bare429.code = None;
        bare429.status = Some(429);
        assert_eq!(classify(&bare429), Transience::Throttled);
    }

    #[test]
    fn classifies_iam_propagation_by_message() {
        let cases = [
            (
                "InvalidParameterException",
                "Role with arn: arn:aws:iam::123456789012:role/x could not be assumed because it does not exist or the trusted entity is not correct",
            ),
            (
                "MalformedPolicyDocument",
                "Invalid principal in policy: \"Federated\":\"arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC\"",
            ),
            (
                "InvalidParameterValue",
                "Value (p) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
            ),
        ];
        for (code, message) in cases {
            assert_eq!(
                classify(&err(code, message)),
                Transience::NotYetConsistent,
                "{code}"
            );
        }
    }

    #[test]
    fn genuine_input_errors_are_permanent() {
        assert_eq!(
            classify(&err("MalformedPolicyDocument", "Syntax errors in policy.")),
            Transience::Permanent
        );
        assert_eq!(
            classify(&err("InvalidParameterValue", "name is too long")),
            Transience::Permanent
        );
        assert_eq!(classify(&err("NoSuchEntity", "")), Transience::Permanent);
        assert_eq!(classify(&err("AccessDenied", "no")), Transience::Permanent);
        assert_eq!(
            classify(&err("ConcurrentModification", "")),
            Transience::Transient
        );
    }

    #[test]
    fn backoff_doubles_within_jitter_band_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(0, 0.0), Duration::from_millis(125));
        assert_eq!(p.delay(0, 1.0), Duration::from_millis(250));
        assert_eq!(p.delay(3, 1.0), Duration::from_millis(2000));
        assert_eq!(p.delay(3, 0.0), Duration::from_millis(1000));
        assert_eq!(p.delay(20, 1.0), Duration::from_secs(20));
        assert_eq!(p.delay(u32::MAX, 0.5), Duration::from_secs(15));
        for retry in 0..12 {
            for s in [0.0, 0.3, 0.999] {
                let d = p.delay(retry, s);
                let cap = p.delay(retry, 1.0);
                assert!(d >= cap / 2 && d <= cap, "retry {retry} sample {s}: {d:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_then_success_waits_the_backoff_sum() {
        let (calls, op) = scripted(vec![
            err("Throttling", "Rate exceeded"),
            err("ThrottlingException", "Rate exceeded"),
            err("RequestLimitExceeded", "Request limit exceeded."),
        ]);
        let start = Instant::now();
        let out = fixed_policy()
            .run(start + Duration::from_secs(600), op)
            .await
            .unwrap();
        assert_eq!(out, 4);
        assert_eq!(*calls.lock().unwrap(), 4);
        // 250 ms + 500 ms + 1 s with the jitter pinned at its top.
        assert_eq!(start.elapsed(), Duration::from_millis(1750));
    }

    #[tokio::test(start_paused = true)]
    async fn consistency_error_then_success() {
        let (calls, op) = scripted(vec![
            err(
                "MalformedPolicyDocument",
                "Invalid principal in policy: \"Federated\":\"arn:aws:iam::1:oidc-provider/x\"",
            ),
            err(
                "MalformedPolicyDocument",
                "Invalid principal in policy: \"Federated\":\"arn:aws:iam::1:oidc-provider/x\"",
            ),
        ]);
        let start = Instant::now();
        let out = retry(start + Duration::from_secs(60), op).await.unwrap();
        assert_eq!(out, 3);
        assert_eq!(*calls.lock().unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_error_is_returned_at_once() {
        let (calls, op) = scripted(vec![err("AccessDenied", "User is not authorized")]);
        let start = Instant::now();
        let e = retry(start + Duration::from_secs(600), op)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("AccessDenied"));
        assert_eq!(e.attempts, 1);
        assert_eq!(*calls.lock().unwrap(), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn endless_throttling_stops_at_the_deadline() {
        let (calls, op) = scripted(vec![err("Throttling", "Rate exceeded"); 1000]);
        let start = Instant::now();
        let deadline = start + Duration::from_secs(30);
        let e = fixed_policy().run(deadline, op).await.unwrap_err();
        assert!(start.elapsed() <= Duration::from_secs(30));
        let n = *calls.lock().unwrap();
        assert_eq!(e.attempts, n);
        // 0.25+0.5+1+2+4+8 = 15.75 s; the next wait (16 s) would cross 30 s.
        assert_eq!(n, 7);
        assert!(e.to_string().contains("gave up after 7 attempts"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_really_invalid_principal_fails_after_the_consistency_window() {
        let invalid = err(
            "MalformedPolicyDocument",
            "Invalid principal in policy: \"AWS\":\"arn:aws:iam::1:role/never-created\"",
        );
        let (_calls, op) = scripted(vec![invalid; 1000]);
        let start = Instant::now();
        let policy = RetryPolicy {
            consistency_window: Duration::from_secs(10),
            ..fixed_policy()
        };
        let e = policy
            .run(start + Duration::from_secs(3600), op)
            .await
            .unwrap_err();
        assert!(start.elapsed() <= Duration::from_secs(10));
        assert!(e.attempts > 1);
        assert_eq!(e.code(), Some("MalformedPolicyDocument"));
    }
}
