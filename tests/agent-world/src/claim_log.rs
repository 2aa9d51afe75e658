//! Every NodeClaim deletion, in the API server's order, from one watch: what the tests
//! assert transient states on (how many claims were deleting at once, whether one was
//! deleted inside a window) instead of sampling lists, which miss a claim that comes and
//! goes between two samples on a loaded machine.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};

use joiner_agent::api::NodeClaim;

/// One step of a claim's deletion, with the resourceVersion of the write that made it. Both
/// kube-sim and etcd number every write from one global counter, so these versions also
/// order a claim's deletion against writes to other objects (a NodePool patch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The claim got its deletionTimestamp (or, without finalizers, went at once: then
    /// `Deleting` and `Gone` carry the same version).
    Deleting { claim: String, rv: u64 },
    /// The claim is gone from the API.
    Gone { claim: String, rv: u64 },
}

#[derive(Default)]
struct State {
    steps: Vec<Step>,
    deleting: BTreeSet<String>,
    seen: BTreeSet<String>,
    /// Times the watch had to list again: events between two lists may be lost, so a log
    /// with a relist after the first one cannot vouch for the sequence.
    relists: usize,
}

pub struct ClaimLog {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

fn rv(c: &NodeClaim) -> u64 {
    c.resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

impl ClaimLog {
    /// Starts watching every NodeClaim; returns once the watch's initial list is in.
    pub async fn start(client: kube::Client) -> ClaimLog {
        let state = Arc::new(Mutex::new(State::default()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let s = state.clone();
        let task = tokio::spawn(async move {
            let api: Api<NodeClaim> = Api::all(client);
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut ready = Some(ready_tx);
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut st = s.lock().unwrap();
                match ev {
                    watcher::Event::Init => st.relists += 1,
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                        let name = c.name_any();
                        st.seen.insert(name.clone());
                        if c.metadata.deletion_timestamp.is_some()
                            && st.deleting.insert(name.clone())
                        {
                            st.steps.push(Step::Deleting {
                                claim: name,
                                rv: rv(&c),
                            });
                        }
                    }
                    watcher::Event::Delete(c) => {
                        let name = c.name_any();
                        if st.deleting.insert(name.clone()) {
                            st.steps.push(Step::Deleting {
                                claim: name.clone(),
                                rv: rv(&c),
                            });
                        }
                        st.steps.push(Step::Gone {
                            claim: name,
                            rv: rv(&c),
                        });
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .expect("the NodeClaim watch lists within 30 s")
            .expect("the NodeClaim watch task runs");
        ClaimLog { state, task }
    }

    /// The deletion steps so far, in order; panics if the watch relisted (the sequence may
    /// have a gap).
    pub fn steps(&self) -> Vec<Step> {
        let st = self.state.lock().unwrap();
        assert_eq!(
            st.relists, 1,
            "the NodeClaim watch had to list again: the deletion sequence may have gaps"
        );
        st.steps.clone()
    }

    /// Whether every claim in `names` is gone (its deletion seen to the end).
    pub fn all_gone(&self, names: &BTreeSet<String>) -> bool {
        let st = self.state.lock().unwrap();
        names.iter().all(|n| {
            st.steps
                .iter()
                .any(|s| matches!(s, Step::Gone { claim, .. } if claim == n))
        })
    }
}

impl Drop for ClaimLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The most claims deleting at once along `steps` (from their deletionTimestamp until gone).
pub fn most_deleting_at_once(steps: &[Step]) -> usize {
    let mut now = BTreeSet::new();
    let mut most = 0;
    for s in steps {
        match s {
            Step::Deleting { claim, .. } => {
                now.insert(claim.as_str());
                most = most.max(now.len());
            }
            Step::Gone { claim, .. } => {
                now.remove(claim.as_str());
            }
        }
    }
    most
}

/// The claims whose deletion began at a write before resourceVersion `rv`.
pub fn deleting_before(steps: &[Step], rv: u64) -> Vec<String> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Deleting { claim, rv: r } if *r < rv => Some(claim.clone()),
            _ => None,
        })
        .collect()
}
