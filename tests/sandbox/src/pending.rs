//! How long pods waited, followed through every event of one pod watch (snapshots every
//! 250 ms could miss a pod pending for less), split three ways:
//! - **waited for capacity**: unbound while kube-scheduler's latest verdict on the pod is
//!   `PodScheduled=False`, reason `Unschedulable` (it tried every node and none could take
//!   it), and the pod could not have been bound in any order: what the agent exists to
//!   prevent;
//! - **waited for its turn**: the same verdict, on a pod that, with the unbound pods its
//!   topology spreads count, could all have been bound to the nodes as they stood had
//!   kube-scheduler taken them in another order. kube-scheduler counts only bound pods, so
//!   a required spread whose domains are short at once (a storm drains nodes in two zones)
//!   admits their pods only alternately and refuses one for an attempt. kube-sim judges
//!   this at the verdict, on the state it judged by, and logs it ([`turn_only`]);
//! - **waited for the scheduler**: unbound without that verdict: a pod a ReplicaSet just
//!   recreated is Pending until kube-scheduler binds it even when room exists.
//!
//! The messages of the Unschedulable verdicts are kept, so a run that waited for capacity
//! says why (which filter refused which nodes).

use std::collections::{BTreeMap, HashMap, HashSet};
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

/// One kind of wait: since when each pod is in it, and the seconds of each pod's waits that
/// ended.
#[derive(Default)]
struct Tally {
    since: HashMap<String, Instant>,
    done: HashMap<String, f64>,
}

impl Tally {
    fn set(&mut self, uid: &str, on: bool) {
        if on {
            self.since
                .entry(uid.to_string())
                .or_insert_with(Instant::now);
            self.done.entry(uid.to_string()).or_default();
        } else if let Some(t) = self.since.remove(uid) {
            *self.done.entry(uid.to_string()).or_default() += t.elapsed().as_secs_f64();
        }
    }

    /// The pods `keep` selects, with their seconds (waits still going counted up to now).
    fn figure(&self, keep: impl Fn(&str) -> bool) -> Waited {
        let mut w = Waited::default();
        for (uid, secs) in &self.done {
            if !keep(uid) {
                continue;
            }
            let ongoing = self
                .since
                .get(uid)
                .map_or(0.0, |t| t.elapsed().as_secs_f64());
            w.pods += 1;
            w.pod_secs += secs + ongoing;
        }
        w
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
    pub turn: Waited,
    pub scheduler: Waited,
    /// kube-scheduler's messages for the capacity waits and the turns, most frequent first.
    pub reasons: Vec<(String, usize)>,
    /// The watch had to list again: events in between may be missing, so the figures are
    /// lower bounds.
    pub relisted: bool,
}

/// The pods kube-sim's log shows refused only for their turn: every verdict on them was
/// explained `fits_in_some_order=true` (`kube_sim::scheduler::VERDICT_LOG`). A pod with any
/// other answer, or none, waited for capacity.
pub fn turn_only(kube_sim_log: &str) -> HashSet<String> {
    let mut answers: HashMap<String, bool> = HashMap::new();
    for line in kube_sim_log.lines() {
        let Some((_, rest)) = line.split_once("unschedulable verdict explained: ") else {
            continue;
        };
        let field = |name: &str| {
            rest.split_whitespace()
                .find_map(|t| t.strip_prefix(name))
                .map(str::to_string)
        };
        let (Some(uid), Some(fits)) = (field("uid="), field("fits_in_some_order=")) else {
            continue;
        };
        let all = answers.entry(uid).or_insert(true);
        *all &= fits == "true";
    }
    answers
        .into_iter()
        .filter(|(_, all)| *all)
        .map(|(uid, _)| uid)
        .collect()
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

    /// The waits so far (those still going counted up to now); `turn_only`: the pods whose
    /// verdicts were all refusals for their turn ([`turn_only`]).
    pub fn figures(&self, turn_only: &HashSet<String>) -> Figures {
        let st = self.state.lock().unwrap();
        let mut reasons: Vec<(String, usize)> =
            st.reasons.iter().map(|(m, n)| (m.clone(), *n)).collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Figures {
            capacity: st.capacity.figure(|uid| !turn_only.contains(uid)),
            turn: st.capacity.figure(|uid| turn_only.contains(uid)),
            scheduler: st.scheduler.figure(|_| true),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_refused_only_for_its_turn_when_every_verdict_on_it_says_so() {
        let log = "\
2026-11-29T11:00:06Z  INFO kube_sim::scheduler: unschedulable verdict explained: uid=a pod=web/a fits_in_some_order=true
2026-11-29T11:00:06Z  INFO kube_sim::scheduler: unschedulable verdict explained: uid=b pod=web/b fits_in_some_order=true
2026-11-29T11:00:07Z  INFO kube_sim::scheduler: unschedulable verdict explained: uid=b pod=web/b fits_in_some_order=false
2026-11-29T11:00:07Z  INFO kube_sim::scheduler: unschedulable verdict explained: uid=c pod=web/c fits_in_some_order=unknown
2026-11-29T11:00:07Z  INFO kube_sim::aws: instance i-1: nodeadm refused the user data
";
        let turn = turn_only(log);
        assert_eq!(turn, HashSet::from(["a".to_string()]));
    }

    #[test]
    fn capacity_and_turn_waits_are_counted_apart() {
        let mut t = Tally::default();
        t.set("a", true);
        t.set("b", true);
        t.set("a", false);
        let turn = HashSet::from(["a".to_string()]);
        let capacity = t.figure(|uid| !turn.contains(uid));
        let turns = t.figure(|uid| turn.contains(uid));
        assert_eq!((capacity.pods, turns.pods), (1, 1));
        assert!(capacity.pod_secs >= 0.0 && turns.pod_secs >= 0.0);
    }
}
