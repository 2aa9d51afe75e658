//! Polling waits bounded by a resource's timeout and by Ctrl-C.
//!
//! The protocol server also bounds each operation by its timeout, but with a generic
//! message; our waits end a little earlier so the error can say what was still missing
//! (the last status seen), which is what the user needs to act.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::error::KubeError;
use crate::protocol::stop::StopToken;

/// One poll's verdict.
pub enum Step<T> {
    Done(T),
    /// Not yet, with a short status for progress and for the timeout message.
    Pending(String),
}

/// A deadline a little before the operation's own timeout.
pub fn deadline(timeout: Option<Duration>, default: Duration) -> Instant {
    let t = timeout.unwrap_or(default);
    let margin = (t / 20).min(Duration::from_secs(5));
    Instant::now() + t.saturating_sub(margin)
}

/// Calls `check` every `every` until it is done, the deadline passes (an error naming
/// `what` and the last status) or Terraform asks the provider to stop.
pub async fn until<T, F, Fut>(
    what: &str,
    deadline: Instant,
    every: Duration,
    stop: &StopToken,
    mut check: F,
) -> Result<T, KubeError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step<T>, KubeError>>,
{
    let started = Instant::now();
    let mut last = String::new();
    loop {
        match check().await? {
            Step::Done(v) => return Ok(v),
            Step::Pending(status) => {
                if status != last {
                    tracing::info!(
                        "waiting for {what}: {status} ({}s)",
                        started.elapsed().as_secs()
                    );
                    last = status;
                }
            }
        }
        if Instant::now() + every > deadline {
            return Err(KubeError::Timeout(format!(
                "timed out after {}s waiting for {what}: {last}; raise the resource's \
                 `timeouts` if this is expected",
                started.elapsed().as_secs()
            )));
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.stopped() => {
                return Err(KubeError::Other(format!(
                    "stopped by Terraform while waiting for {what}: {last}"
                )))
            }
        }
    }
}
