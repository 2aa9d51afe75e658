//! Batching of pending pods, as Karpenter does: a batch opens with the first new pending
//! pod and closes after `idle` without another one, or `max` after it opened. A Deployment
//! scaled from 4 to 100 thus becomes one scheduling round, not 96.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::{self, error::RecvError};

use crate::controllers::state::Change;

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// New pending pods; `last_seen` is when the last one arrived.
    Pods { last_seen: Instant },
    /// Something else that may change the plan (a claim gone, a NodePool changed).
    Kick,
    /// The periodic re-check while pods stay pending.
    Resync,
}

pub struct Batcher {
    rx: broadcast::Receiver<Change>,
    idle: Duration,
    max: Duration,
    resync: Duration,
    /// Pending pods already seen, so a status rewrite of the same pod is not a new arrival.
    pub seen: HashSet<String>,
}

impl Batcher {
    pub fn new(rx: broadcast::Receiver<Change>, idle: Duration, max: Duration) -> Batcher {
        Batcher {
            rx,
            idle,
            max,
            resync: (max * 3).max(Duration::from_secs(10)),
            seen: HashSet::new(),
        }
    }

    /// Whether a change starts or extends a batch.
    fn classify(&mut self, c: Result<Change, RecvError>) -> Option<Trigger> {
        match c {
            Ok(Change::Pod {
                uid,
                provisionable: true,
                ..
            }) => self.seen.insert(uid).then(|| Trigger::Pods {
                last_seen: Instant::now(),
            }),
            Ok(Change::NodePool(_)) | Ok(Change::NodeClass(_)) | Ok(Change::NodeOverlay(_)) => {
                Some(Trigger::Kick)
            }
            Err(RecvError::Lagged(_)) => Some(Trigger::Kick),
            _ => None,
        }
    }

    /// Waits for the next batch to close. `kicked` is set by the caller's own signals
    /// (a NodeClaim deleted) through [`Batcher::kick`].
    pub async fn next(&mut self, kick: &tokio::sync::Notify) -> Trigger {
        // Wait for a batch to open.
        let first = loop {
            tokio::select! {
                c = self.rx.recv() => {
                    if let Err(RecvError::Closed) = c { return Trigger::Resync; }
                    if let Some(t) = self.classify(c) { break t; }
                }
                _ = kick.notified() => break Trigger::Kick,
                _ = tokio::time::sleep(self.resync) => return Trigger::Resync,
            }
        };
        let opened = Instant::now();
        let mut result = first;
        let mut last = opened;
        loop {
            let deadline = (last + self.idle).min(opened + self.max);
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => return result,
                c = self.rx.recv() => {
                    if let Err(RecvError::Closed) = c { return result; }
                    match self.classify(c) {
                        Some(Trigger::Pods { last_seen }) => {
                            last = last_seen;
                            result = Trigger::Pods { last_seen };
                        }
                        Some(_) => {}
                        None => {}
                    }
                }
                _ = kick.notified() => {}
            }
        }
    }
}
