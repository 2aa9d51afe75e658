//! How long pods waited, followed through every event of one pod watch (snapshots every
//! 250 ms could miss a pod pending for less), split in two:
//! - **waited for capacity**: unbound while kube-scheduler's latest verdict on the pod is
//!   `PodScheduled=False`, reason `Unschedulable` (it tried every node and none could take
//!   it): what the agent exists to prevent;
//! - **waited for the scheduler**: unbound without that verdict: a pod a ReplicaSet just
//!   recreated is Pending until kube-scheduler binds it even when room exists.
//!
//! The messages of the Unschedulable verdicts are kept, so a run that waited for capacity
//! says why (which filter refused which nodes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

/// What a watched pod is waiting for right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    Nothing,
    Scheduler,
    Capacity,
}

/// One kind of wait: since when each pod is in it, and the seconds of waits that ended.
#[derive(Default)]
struct Tally {
    since: HashMap<String, Instant>,
    pods: BTreeSet<String>,
    done_secs: f64,
}

impl Tally {
    fn set(&mut self, uid: &str, on: bool) {
        if on {
            self.pods.insert(uid.to_string());
            self.since
                .entry(uid.to_string())
                .or_insert_with(Instant::now);
        } else if let Some(t) = self.since.remove(uid) {
            self.done_secs += t.elapsed().as_secs_f64();
        }
    }

    fn figure(&self) -> Waited {
        let ongoing: f64 = self.since.values().map(|t| t.elapsed().as_secs_f64()).sum();
        Waited {
            pods: self.pods.len(),
            pod_secs: self.done_secs + ongoing,
        }
    }
}

#[derive(Default)]
struct State {
    capacity: Tally,
    scheduler: Tally,
    /// Unschedulable messages seen, with how many verdicts carried each.
    reasons: BTreeMap<String, usize>,
    relisted: bool,
}

/// Pods that waited one way, and their pod-seconds of waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Waited {
    pub pods: usize,
    pub pod_secs: f64,
}

/// What the watch saw up to now.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub capacity: Waited,
    pub scheduler: Waited,
    /// kube-scheduler's messages for the capacity waits, most frequent first.
    pub reasons: Vec<(String, usize)>,
    /// The watch had to list again: events in between may be missing, so the figures are
    /// lower bounds.
    pub relisted: bool,
}

/// A running watch of the pods in a namespace.
pub struct PendingWatch {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

/// The pod's wait, and kube-scheduler's message when it is waiting for capacity.
fn waiting(p: &Pod) -> (Waiting, Option<String>) {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let finished = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
    if bound || finished || p.metadata.deletion_timestamp.is_some() {
        return (Waiting::Nothing, None);
    }
    let verdict = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    match verdict {
        Some(c) => (Waiting::Capacity, c.message.clone()),
        None => (Waiting::Scheduler, None),
    }
}

impl State {
    fn update(&mut self, uid: &str, now: Waiting, message: Option<String>) {
        self.capacity.set(uid, now == Waiting::Capacity);
        self.scheduler.set(uid, now == Waiting::Scheduler);
        if let Some(m) = message {
            *self.reasons.entry(m).or_default() += 1;
        }
    }
}

impl PendingWatch {
    /// Starts watching; returns once the first list is in, so nothing after is missed.
    pub async fn start(client: Client, namespace: &str) -> PendingWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut tx = Some(tx);
            let mut lists = 0;
            // The message last counted per pod: a status rewrite that repeats it is the
            // same verdict, not a new one.
            let mut last_message: HashMap<String, String> = HashMap::new();
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => {
                        lists += 1;
                        st.relisted |= lists > 1;
                    }
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                        let uid = p.uid().unwrap_or_default();
                        let (now, message) = waiting(&p);
                        let fresh = message.filter(|m| last_message.get(&uid) != Some(m));
                        if let Some(m) = &fresh {
                            last_message.insert(uid.clone(), m.clone());
                        }
                        st.update(&uid, now, fresh);
                    }
                    watcher::Event::Delete(p) => {
                        let uid = p.uid().unwrap_or_default();
                        last_message.remove(&uid);
                        st.update(&uid, Waiting::Nothing, None);
                    }
                    watcher::Event::InitDone => {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    }
                }
            }
        });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), rx).await;
        PendingWatch { state, task }
    }

    /// The waits so far (those still going counted up to now).
    pub fn figures(&self) -> Figures {
        let st = self.state.lock().unwrap();
        let mut reasons: Vec<(String, usize)> =
            st.reasons.iter().map(|(m, n)| (m.clone(), *n)).collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Figures {
            capacity: st.capacity.figure(),
            scheduler: st.scheduler.figure(),
            reasons,
            relisted: st.relisted,
        }
    }
}

impl Drop for PendingWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
