//! Pending pod-seconds: how long pods waited for capacity, followed through every event of
//! one pod watch (snapshots every 250 ms could miss a pod pending for less). A pod counts
//! as pending while kube-scheduler has marked it `PodScheduled=False`, reason
//! `Unschedulable`, and it is unbound: what the agent reacts to.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

#[derive(Default)]
struct State {
    since: HashMap<String, Instant>,
    went_pending: BTreeSet<String>,
    done_secs: f64,
    relisted: bool,
}

/// A running watch of the pods in a namespace.
pub struct PendingWatch {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

fn pending(p: &Pod) -> bool {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !bound
        && p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
}

impl State {
    fn update(&mut self, uid: String, now_pending: bool) {
        if now_pending {
            self.went_pending.insert(uid.clone());
            self.since.entry(uid).or_insert_with(Instant::now);
        } else if let Some(t) = self.since.remove(&uid) {
            self.done_secs += t.elapsed().as_secs_f64();
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
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => {
                        lists += 1;
                        st.relisted |= lists > 1;
                    }
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                        let now = pending(&p);
                        st.update(p.uid().unwrap_or_default(), now);
                    }
                    watcher::Event::Delete(p) => st.update(p.uid().unwrap_or_default(), false),
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

    /// Pods that went pending since the watch started, pending pod-seconds so far (those
    /// still pending counted up to now), and whether the watch had to list again (events
    /// in between may be missing: the figure is then a lower bound).
    pub fn figures(&self) -> (usize, f64, bool) {
        let st = self.state.lock().unwrap();
        let ongoing: f64 = st.since.values().map(|t| t.elapsed().as_secs_f64()).sum();
        (st.went_pending.len(), st.done_secs + ongoing, st.relisted)
    }
}

impl Drop for PendingWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
