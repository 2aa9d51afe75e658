//! Batching of pending pods, as Karpenter does: a batch opens with the first new pending
//! pod and closes after `idle` without another one, or `max` after it opened. A Deployment
//! scaled from 4 to 100 thus becomes one scheduling round, not 96.

use std::collections::HashMap;
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
    /// Pending pods already planned for, by uid, with the resourceVersion the round saw.
    /// A replay of that version (a watch relisting) is not a new arrival; a rewrite is:
    /// kube-scheduler rewrites a pending pod's status when a new attempt fails for a new
    /// reason, typically because the node the round planned for it was filled with other
    /// pods. Karpenter re-triggers on every such update; without it such a pod waited for
    /// the periodic re-check (30 s), which was most of joiner's scale-out time.
    pub seen: HashMap<String, String>,
}

impl Batcher {
    pub fn new(rx: broadcast::Receiver<Change>, idle: Duration, max: Duration) -> Batcher {
        Batcher {
            rx,
            idle,
            max,
            resync: (max * 3).max(Duration::from_secs(10)),
            seen: HashMap::new(),
        }
    }

    /// Whether a change starts or extends a batch.
    fn classify(&mut self, c: Result<Change, RecvError>) -> Option<Trigger> {
        match c {
            Ok(Change::Pod {
                uid,
                version,
                provisionable: true,
                ..
            }) => (self.seen.insert(uid, version.clone()).as_ref() != Some(&version)).then(|| {
                Trigger::Pods {
                    last_seen: Instant::now(),
                }
            }),
            // A claim, volume or class that changed may make a pod left out for its
            // volumes (its claim not seen yet, unbound) plannable; the pod itself may not
            // change again.
            Ok(Change::NodePool(_))
            | Ok(Change::NodeClass(_))
            | Ok(Change::NodeOverlay(_))
            | Ok(Change::Volume) => Some(Trigger::Kick),
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
        let (tx, mut b) = batcher();
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

    /// A batcher with 1 s / 10 s windows (so a 30 s re-check) and its change sender.
    fn batcher() -> (broadcast::Sender<Change>, Batcher) {
        let (tx, rx) = broadcast::channel(64);
        (
            tx,
            Batcher::new(rx, Duration::from_secs(1), Duration::from_secs(10)),
        )
    }

    /// A batcher that planned pod `p1` at version 7.
    fn planned_p1() -> (broadcast::Sender<Change>, Batcher) {
        let (tx, mut b) = batcher();
        b.seen.insert("p1".into(), "7".into());
        (tx, b)
    }

    fn pod(uid: &str, version: &str) -> Change {
        Change::Pod {
            uid: uid.into(),
            version: version.into(),
            provisionable: true,
            node: None,
        }
    }

    /// A relist replays a planned pod at the version the round saw: no batch. A new pod
    /// opens one.
    #[tokio::test(start_paused = true)]
    async fn a_replayed_pod_opens_no_batch_but_a_new_one_does() {
        let (tx, mut b) = planned_p1();
        tx.send(pod("p1", "7")).unwrap();
        let kick = tokio::sync::Notify::new();
        let started = tokio::time::Instant::now();
        let t = tokio::time::timeout(Duration::from_secs(5), b.next(&kick)).await;
        assert!(t.is_err(), "a replay opened a batch: {t:?}");
        tx.send(pod("p2", "9")).unwrap();
        let t = b.next(&kick).await;
        assert!(matches!(t, Trigger::Pods { .. }), "{t:?}");
        assert_eq!(b.seen.get("p2").map(String::as_str), Some("9"));
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited for the re-check"
        );
    }

    /// kube-scheduler rewrote a planned pod (it tried again and failed): a batch opens at
    /// once, not at the 30 s re-check.
    #[tokio::test(start_paused = true)]
    async fn a_rewritten_pod_opens_a_batch() {
        let (tx, mut b) = planned_p1();
        tx.send(pod("p1", "8")).unwrap();
        let started = tokio::time::Instant::now();
        let t = b.next(&tokio::sync::Notify::new()).await;
        assert!(matches!(t, Trigger::Pods { .. }), "{t:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "more than one idle period"
        );
        assert_eq!(b.seen.get("p1").map(String::as_str), Some("8"));
    }
}
