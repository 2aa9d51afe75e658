//! Polling an EKS object until it reaches a status, bounded by the resource's deadline.
//!
//! EKS has no push notifications; like the AWS console we poll Describe*. Each poll is
//! logged at INFO with the status and the time spent, so that a user running
//! `TF_LOG=info terraform apply` sees why a cluster create is taking twelve minutes.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::EksError;

/// How often to poll, per kind of object. EKS control planes take minutes; Fargate
/// profiles and add-ons take tens of seconds.
#[derive(Debug, Clone, Copy)]
pub struct PollInterval(pub Duration);

impl PollInterval {
    /// Honours `JOINER_EKS_POLL_MS` so that tests against fast emulators do not sleep.
    pub fn from_env_or(default: Duration) -> PollInterval {
        let ms = std::env::var("JOINER_EKS_POLL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        PollInterval(ms.map(Duration::from_millis).unwrap_or(default))
    }
}

/// One observation of the object being waited on.
#[derive(Debug)]
pub enum Observed<T> {
    /// Reached the target status.
    Done(T),
    /// Still transitioning; the string is the current status, for the log and the timeout.
    Pending(String),
    /// A terminal status we cannot recover from.
    Failed {
        status: String,
        detail: Option<String>,
    },
}

/// Polls `observe` until it reports `Done`, fails, or `deadline` passes.
pub async fn until<T, F, Fut>(
    what: &str,
    target: &str,
    deadline: Instant,
    poll: PollInterval,
    mut observe: F,
) -> Result<T, EksError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Observed<T>, EksError>>,
{
    let started = Instant::now();
    loop {
        match observe().await? {
            Observed::Done(v) => {
                tracing::info!(
                    what,
                    target,
                    elapsed_s = started.elapsed().as_secs(),
                    "reached status"
                );
                return Ok(v);
            }
            Observed::Failed { status, detail } => {
                return Err(EksError::Failed {
                    what: what.to_string(),
                    status,
                    detail,
                });
            }
            Observed::Pending(status) => {
                let now = Instant::now();
                if now + poll.0 > deadline {
                    return Err(EksError::Timeout {
                        what: what.to_string(),
                        target: target.to_string(),
                        last: status,
                        waited: now - started,
                    });
                }
                tracing::info!(
                    what,
                    status = %status,
                    target,
                    elapsed_s = (now - started).as_secs(),
                    "still waiting"
                );
                tokio::time::sleep(poll.0).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn returns_once_the_target_status_is_seen() {
        let n = AtomicU32::new(0);
        let deadline = Instant::now() + Duration::from_secs(600);
        let got = until(
            "cluster \"a\"",
            "ACTIVE",
            deadline,
            PollInterval(Duration::from_secs(10)),
            || async {
                let i = n.fetch_add(1, Ordering::SeqCst);
                Ok::<_, EksError>(if i < 3 {
                    Observed::Pending("CREATING".into())
                } else {
                    Observed::Done(i)
                })
            },
        )
        .await
        .unwrap();
        assert_eq!(got, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn times_out_with_the_last_status() {
        let deadline = Instant::now() + Duration::from_secs(25);
        let err = until(
            "cluster \"a\"",
            "ACTIVE",
            deadline,
            PollInterval(Duration::from_secs(10)),
            || async { Ok::<Observed<()>, EksError>(Observed::Pending("CREATING".into())) },
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("timed out"), "{text}");
        assert!(text.contains("last status: CREATING"), "{text}");
        assert!(text.contains("timeouts"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_terminal_status_fails_at_once() {
        let deadline = Instant::now() + Duration::from_secs(600);
        let err = until(
            "cluster \"a\"",
            "ACTIVE",
            deadline,
            PollInterval(Duration::from_secs(10)),
            || async {
                Ok::<Observed<()>, EksError>(Observed::Failed {
                    status: "FAILED".into(),
                    detail: Some("subnet-1 has no free IPs".into()),
                })
            },
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cluster \"a\" reached status FAILED: subnet-1 has no free IPs"
        );
    }
}
