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
        // Wait for a batch to open. The re-check is due `resync` after the wait began, not
        // after the last change: KWOK or kubelet heartbeats and status updates arrive every
        // second in a busy cluster, and a timer re-armed by each of them never fired, so
        // pods that kube-scheduler could not place where the round planned them (on a node
        // it filled with other pods) were never looked at again.
        let resync_at = tokio::time::Instant::now() + self.resync;
        let first = loop {
            tokio::select! {
                c = self.rx.recv() => {
                    if let Err(RecvError::Closed) = c { return Trigger::Resync; }
                    if let Some(t) = self.classify(c) { break t; }
                }
                _ = kick.notified() => break Trigger::Kick,
                _ = tokio::time::sleep_until(resync_at) => return Trigger::Resync,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes that open no batch (a Node heartbeat, a bound pod) keep arriving every
    /// second; the re-check still comes when it is due.
    #[tokio::test(start_paused = true)]
    async fn the_recheck_comes_on_time_while_unrelated_changes_keep_arriving() {
        let (tx, rx) = broadcast::channel(64);
        let mut b = Batcher::new(rx, Duration::from_secs(1), Duration::from_secs(10));
        let noise = tokio::spawn(async move {
            loop {
                let _ = tx.send(Change::Node("kwok-a".into()));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let started = tokio::time::Instant::now();
        let kick = tokio::sync::Notify::new();
        let t = tokio::time::timeout(Duration::from_secs(120), b.next(&kick)).await;
        noise.abort();
        assert_eq!(t.ok(), Some(Trigger::Resync), "no re-check within 120 s");
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    /// A pod already seen pending does not open a batch again by a status rewrite.
    #[tokio::test(start_paused = true)]
    async fn a_seen_pod_opens_no_batch_but_a_new_one_does() {
        let (tx, rx) = broadcast::channel(64);
        let mut b = Batcher::new(rx, Duration::from_secs(1), Duration::from_secs(10));
        b.seen.insert("p1".into());
        let pod = |uid: &str| Change::Pod {
            uid: uid.into(),
            provisionable: true,
            node: None,
        };
        tx.send(pod("p1")).unwrap();
        tx.send(pod("p2")).unwrap();
        let t = b.next(&tokio::sync::Notify::new()).await;
        assert!(matches!(t, Trigger::Pods { .. }), "{t:?}");
        assert!(b.seen.contains("p2"));
    }
}
