//! The stop signal Terraform sends with StopProvider (e.g. on Ctrl-C).
//!
//! Long waits in resources (cluster creation, eventual consistency retries) should select on
//! [`StopToken::stopped`] so that Terraform's interrupt returns promptly.

use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct StopToken {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for StopToken {
    fn default() -> Self {
        Self::new()
    }
}

impl StopToken {
    pub fn new() -> Self {
        StopToken {
            tx: Arc::new(watch::channel(false).0),
        }
    }
    pub fn stop(&self) {
        self.tx.send_replace(true);
    }
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }
    /// Completes once `stop()` has been called (immediately if it already was).
    pub async fn stopped(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we wait.
        let _ = rx.wait_for(|s| *s).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stop_wakes_waiters() {
        let t = StopToken::new();
        let t2 = t.clone();
        let waiter = tokio::spawn(async move { t2.stopped().await });
        assert!(!t.is_stopped());
        t.stop();
        waiter.await.unwrap();
        assert!(t.is_stopped());
        t.stopped().await;
    }
}
