//! The pods of one app, from one watch: what a test waits on (each event wakes the wait,
//! so a state that lasts between two lists is not missed) and every verdict the scheduler
//! wrote in a pod's `PodScheduled` condition. A pod refused for a moment because a node
//! could not reach its volumes is seen even when it is bound a second later.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};

/// kube-scheduler's reasons for a node that cannot reach a pod's volumes: VolumeBinding's
/// (a bound volume's node affinity excludes the node; an unbound WaitForFirstConsumer
/// claim's class does not allow its topology) and VolumeZone's. kube-sim writes the same.
pub const VOLUME_ZONE_REASONS: [&str; 3] = [
    kube_sim::volumes::NODE_CONFLICT,
    kube_sim::volumes::BIND_CONFLICT,
    kube_sim::volumes::ZONE_CONFLICT,
];

/// One `Unschedulable` verdict on a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub pod: String,
    pub message: String,
}

impl Verdict {
    /// Whether the verdict refused a node for its reach to the pod's volumes.
    pub fn names_a_volume_zone(&self) -> bool {
        VOLUME_ZONE_REASONS.iter().any(|r| self.message.contains(r))
    }
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Pod>,
    /// The pods of a list in progress (the watch restarted), swapped in when it is done.
    relisting: Option<BTreeMap<String, Pod>>,
    verdicts: Vec<Verdict>,
    /// The message last recorded per pod uid: a status rewrite repeating it is no new one.
    last: BTreeMap<String, String>,
    /// Pods in the order they were first seen leaving (a deletion timestamp, or gone).
    leaving: Vec<String>,
}

pub struct PodWatch {
    state: Arc<Mutex<State>>,
    changed: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// The pod's `Unschedulable` verdict message, when its latest `PodScheduled` is one.
fn unschedulable(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| c.message.clone().unwrap_or_default())
}

impl PodWatch {
    /// Starts watching the pods labelled `app=<app>` in `namespace`; returns once the first
    /// list is in.
    pub async fn start(client: kube::Client, namespace: &str, app: &str) -> PodWatch {
        PodWatch::start_selecting(client, namespace, &format!("app={app}")).await
    }

    /// [`PodWatch::start`] for the pods a label selector picks.
    pub async fn start_selecting(
        client: kube::Client,
        namespace: &str,
        selector: &str,
    ) -> PodWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(selector);
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                {
                    let mut st = s.lock().unwrap();
                    match ev {
                        watcher::Event::Init => st.relisting = Some(BTreeMap::new()),
                        watcher::Event::InitApply(p) => {
                            st.note_verdict(&p);
                            if let Some(l) = st.relisting.as_mut() {
                                l.insert(p.name_any(), p);
                            }
                        }
                        watcher::Event::InitDone => {
                            if let Some(l) = st.relisting.take() {
                                st.pods = l;
                            }
                        }
                        watcher::Event::Apply(p) => {
                            st.note_verdict(&p);
                            if p.metadata.deletion_timestamp.is_some() {
                                st.note_leaving(&p.name_any());
                            }
                            st.pods.insert(p.name_any(), p);
                        }
                        watcher::Event::Delete(p) => {
                            st.note_leaving(&p.name_any());
                            st.pods.remove(&p.name_any());
                        }
                    }
                }
                tx.send_modify(|n| *n += 1);
            }
        });
        let mut w = PodWatch {
            state,
            changed,
            task,
        };
        // The first send comes after the initial list (InitDone at the latest).
        let _ = tokio::time::timeout(Duration::from_secs(30), w.changed.changed()).await;
        w
    }

    /// The pods seen leaving so far, in the order the watch saw each start to.
    pub fn leaving(&self) -> Vec<String> {
        self.state.lock().unwrap().leaving.clone()
    }

    /// Every `Unschedulable` verdict seen so far, oldest first.
    pub fn verdicts(&self) -> Vec<Verdict> {
        self.state.lock().unwrap().verdicts.clone()
    }

    /// The verdicts that refused a node for its reach to a pod's volumes.
    pub fn volume_zone_verdicts(&self) -> Vec<Verdict> {
        self.verdicts()
            .into_iter()
            .filter(Verdict::names_a_volume_zone)
            .collect()
    }

    /// Waits until `f` answers Some on the pods as the watch has them (by name), checking
    /// after each event; panics naming `what` after `timeout`.
    pub async fn until<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&BTreeMap<String, Pod>) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(v) = f(&self.state.lock().unwrap().pods) {
                return v;
            }
            let next = tokio::time::timeout_at(deadline, self.changed.changed());
            if !matches!(next.await, Ok(Ok(()))) {
                let names: Vec<String> = self.state.lock().unwrap().pods.keys().cloned().collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; pods {names:?}, verdicts {:?}",
                    self.verdicts()
                );
            }
        }
    }
}

impl State {
    fn note_leaving(&mut self, name: &str) {
        if !self.leaving.iter().any(|n| n == name) {
            self.leaving.push(name.to_string());
        }
    }

    fn note_verdict(&mut self, p: &Pod) {
        let uid = p.uid().unwrap_or_default();
        if let Some(message) = unschedulable(p) {
            if self.last.get(&uid) != Some(&message) {
                self.last.insert(uid, message.clone());
                self.verdicts.push(Verdict {
                    pod: p.name_any(),
                    message,
                });
            }
        }
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The node a pod is bound to, when it is Running there.
pub fn running_on(p: &Pod) -> Option<&str> {
    let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
    let node = p.spec.as_ref()?.node_name.as_deref()?;
    (running && p.metadata.deletion_timestamp.is_none()).then_some(node)
}
