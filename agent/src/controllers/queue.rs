//! A keyed work queue, as controller-runtime's: a key waits at most once, a key being
//! worked on is not handed to a second worker (a change during the work re-queues it once),
//! and a reconcile may ask to be run again after a delay. The lifecycle and termination
//! loops use it so one NodeClaim is never launched or drained twice at the same time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[derive(Default)]
struct Inner {
    ready: VecDeque<String>,
    queued: HashSet<String>,
    running: HashSet<String>,
    dirty: HashSet<String>,
    delayed: HashMap<String, Instant>,
}

#[derive(Default)]
pub struct Queue {
    inner: Mutex<Inner>,
    notify: Notify,
}

impl Queue {
    pub fn new() -> Arc<Queue> {
        Arc::new(Queue::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keys waiting: ready or delayed, not those being worked on.
    pub fn len(&self) -> usize {
        let i = self.lock();
        i.ready.len() + i.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn add(&self, key: &str) {
        let mut i = self.lock();
        if i.running.contains(key) {
            i.dirty.insert(key.to_string());
            return;
        }
        if i.queued.insert(key.to_string()) {
            i.ready.push_back(key.to_string());
            drop(i);
            self.notify.notify_one();
        }
    }

    /// Adds `key` after `delay`; an earlier pending deadline for the same key wins.
    pub fn add_after(self: &Arc<Self>, key: &str, delay: Duration) {
        let due = Instant::now() + delay;
        {
            let mut i = self.lock();
            if i.delayed.get(key).is_some_and(|d| *d <= due) {
                return;
            }
            i.delayed.insert(key.to_string(), due);
        }
        let q = self.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let fire = {
                let mut i = q.lock();
                if i.delayed.get(&key) == Some(&due) {
                    i.delayed.remove(&key);
                    true
                } else {
                    false
                }
            };
            if fire {
                q.add(&key);
            }
        });
    }

    async fn next(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut i = self.lock();
                if let Some(k) = i.ready.pop_front() {
                    i.queued.remove(&k);
                    i.running.insert(k.clone());
                    let more = !i.ready.is_empty();
                    drop(i);
                    if more {
                        self.notify.notify_one();
                    }
                    return k;
                }
            }
            notified.await;
        }
    }

    fn done(&self, key: &str) {
        let again = {
            let mut i = self.lock();
            i.running.remove(key);
            i.dirty.remove(key)
        };
        if again {
            self.add(key);
        }
    }

    /// Runs `workers` workers forever: each takes a key, runs `f`, and re-queues the key
    /// after the delay `f` returns, if any.
    pub async fn run<F, Fut>(self: Arc<Self>, workers: usize, f: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Duration>> + Send + 'static,
    {
        let f = Arc::new(f);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let q = self.clone();
            let f = f.clone();
            set.spawn(async move {
                loop {
                    let key = q.next().await;
                    // Boxed: a worker waits far more than it works, and awaited in
                    // place the work's future (a reconcile with its AWS and Kubernetes
                    // calls, tens of kB) would sit in every idle worker's frame. Boxed,
                    // it exists only while a key is worked.
                    let again = Box::pin(f(key.clone())).await;
                    q.done(&key);
                    if let Some(d) = again {
                        q.add_after(&key, d);
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_key_is_worked_once_and_requeued_on_request() {
        let q = Queue::new();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        q.add("a");
        q.add("a");
        let runner = tokio::spawn(q.clone().run(2, move |_k| {
            let c = c.clone();
            async move {
                let n = c.fetch_add(1, Ordering::SeqCst);
                (n == 0).then_some(Duration::from_millis(20))
            }
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "once, then once more after the delay"
        );
        runner.abort();
    }
}
