//! Which pods are bound to which node, kept from the pod watch's own events beside the pod
//! store. Draining, interruption and the capacity check ask for one node's pods, often for
//! many nodes in a row; answering from the store meant copying every pod of the cluster per
//! question.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

/// Pods by the node they are bound to.
#[derive(Default)]
pub struct BoundPods {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    live: Index,
    /// A relist in progress, built apart and swapped in when it is complete, as the
    /// reflector's store does: until then the last complete picture answers.
    relist: Option<Index>,
}

#[derive(Default)]
struct Index {
    by_node: HashMap<String, HashSet<ObjectRef<Pod>>>,
    node_of: HashMap<ObjectRef<Pod>, String>,
}

impl Index {
    fn set(&mut self, pod: &Pod) {
        let key = ObjectRef::from_obj(pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        if self.node_of.get(&key).map(String::as_str) == node {
            return;
        }
        self.remove(&key);
        if let Some(node) = node {
            self.by_node
                .entry(node.to_string())
                .or_default()
                .insert(key.clone());
            self.node_of.insert(key, node.to_string());
        }
    }

    fn remove(&mut self, key: &ObjectRef<Pod>) {
        let Some(old) = self.node_of.remove(key) else {
            return;
        };
        if let Some(set) = self.by_node.get_mut(&old) {
            set.remove(key);
            if set.is_empty() {
                self.by_node.remove(&old);
            }
        }
    }
}

impl BoundPods {
    /// Follows one event of the pod watch.
    pub fn apply(&self, event: &Event<Pod>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Apply(p) => inner.live.set(p),
            Event::Delete(p) => inner.live.remove(&ObjectRef::from_obj(p)),
            Event::Init => inner.relist = Some(Index::default()),
            Event::InitApply(p) => inner.relist.get_or_insert_with(Index::default).set(p),
            Event::InitDone => {
                if let Some(fresh) = inner.relist.take() {
                    inner.live = fresh;
                }
            }
        }
    }

    /// The pods bound to `node` as the watch last said.
    pub fn on(&self, node: &str) -> Vec<ObjectRef<Pod>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .live
            .by_node
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [], "nodeName": node},
        }))
        .unwrap()
    }

    fn names(b: &BoundPods, node: &str) -> Vec<String> {
        let mut v: Vec<String> = b.on(node).into_iter().map(|r| r.name).collect();
        v.sort();
        v
    }

    #[test]
    fn binding_moving_and_deleting_follow_the_events() {
        let b = BoundPods::default();
        b.apply(&Event::Apply(pod("a", None)));
        assert!(b.on("n1").is_empty(), "pending pods are on no node");
        b.apply(&Event::Apply(pod("a", Some("n1"))));
        b.apply(&Event::Apply(pod("b", Some("n1"))));
        assert_eq!(names(&b, "n1"), ["a", "b"]);
        // A pod recreated under the same name elsewhere (a StatefulSet's) moves.
        b.apply(&Event::Apply(pod("a", Some("n2"))));
        assert_eq!(names(&b, "n1"), ["b"]);
        assert_eq!(names(&b, "n2"), ["a"]);
        b.apply(&Event::Delete(pod("b", Some("n1"))));
        assert!(b.on("n1").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_picture_only_when_complete() {
        let b = BoundPods::default();
        b.apply(&Event::Apply(pod("gone", Some("n1"))));
        b.apply(&Event::Apply(pod("stays", Some("n1"))));
        b.apply(&Event::Init);
        b.apply(&Event::InitApply(pod("stays", Some("n1"))));
        // Until the relist is done, the last complete picture answers.
        assert_eq!(names(&b, "n1"), ["gone", "stays"]);
        b.apply(&Event::InitDone);
        assert_eq!(names(&b, "n1"), ["stays"], "a pod deleted while unwatched");
    }
}
