//! A reflector for the agent's own CRDs that survives malformed objects.
//!
//! kube's typed watcher fails the whole list when one object does not deserialize, which
//! would let one bad NodePool stop the agent serving every other one. Here objects are
//! watched untyped and converted one by one: a malformed object is logged, counted, kept
//! aside with its error (so its owner controller can report it on the object's status),
//! and the others are served.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use super::Change;
use crate::controllers::operator::metrics::Metrics;

/// The latest version of every object of one kind, by name (the agent's CRDs are cluster
/// scoped).
pub struct CrdStore<T> {
    items: RwLock<HashMap<String, Arc<T>>>,
    malformed: RwLock<HashMap<String, String>>,
    ready: watch::Sender<bool>,
}

impl<T> Default for CrdStore<T> {
    fn default() -> Self {
        CrdStore {
            items: RwLock::new(HashMap::new()),
            malformed: RwLock::new(HashMap::new()),
            ready: watch::channel(false).0,
        }
    }
}

impl<T> CrdStore<T> {
    pub fn get(&self, name: &str) -> Option<Arc<T>> {
        self.items
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn list(&self) -> Vec<Arc<T>> {
        self.items
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.items.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects that exist but could not be read, with the reason.
    pub fn malformed(&self) -> Vec<(String, String)> {
        self.malformed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    pub async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Inserts an object the agent just wrote, so a caller sees it before the watch does.
    pub fn insert(&self, name: &str, obj: T) {
        self.items
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), Arc::new(obj));
    }
}

fn is_not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(r))
        | watcher::Error::WatchStartFailed(kube::Error::Api(r))
        | watcher::Error::WatchFailed(kube::Error::Api(r)) => r.code == 404,
        _ => false,
    }
}

fn convert<T: DeserializeOwned>(obj: &DynamicObject, read: Reader) -> Result<T, String> {
    let mut v = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    read(&mut v);
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// What turns a served object into the agent's type before it is parsed: nothing for a
/// kind of the same shape; see [`kwok_node_class`] for one that is not.
pub type Reader = fn(&mut serde_json::Value);

pub fn as_is(_: &mut serde_json::Value) {}

/// A `KWOKNodeClass` has nothing to select (no subnets, groups or images): it reads as a
/// class whose selector terms are empty, which the KWOK cloud never consults.
pub fn kwok_node_class(v: &mut serde_json::Value) {
    let spec = v
        .as_object_mut()
        .map(|o| o.entry("spec").or_insert_with(|| serde_json::json!({})));
    if let Some(spec) = spec.and_then(|s| s.as_object_mut()) {
        for key in [
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "amiSelectorTerms",
        ] {
            spec.entry(key).or_insert_with(|| serde_json::json!([]));
        }
    }
}

/// The served resource a store watches, and how its objects are read.
pub struct Source {
    pub resource: ApiResource,
    pub read: Reader,
}

/// Watches `T` until the stream ends (never, in practice): kube's watcher re-lists on
/// errors with backoff.
pub async fn run<T>(
    client: Client,
    source: Source,
    store: Arc<CrdStore<T>>,
    metrics: Arc<Metrics>,
    changes: broadcast::Sender<Change>,
    change: fn(String) -> Change,
) where
    T: Resource + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    let Source { resource: ar, read } = source;
    let kind = ar.kind.clone();
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    type Snapshot<T> = (HashMap<String, Arc<T>>, HashMap<String, String>);
    let mut buffer: Option<Snapshot<T>> = None;
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                // A kind the API server does not serve (its CRD not installed, an older
                // cluster) has no objects: the store is ready, empty, while the watch
                // retries. Waiting would hold every loop back for a kind that may never come.
                if is_not_served(&e) && !store.is_ready() {
                    store.ready.send_replace(true);
                }
                tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
                continue;
            }
        };
        let accept = |mut obj: DynamicObject,
                      items: &mut HashMap<String, Arc<T>>,
                      bad: &mut HashMap<String, String>| {
            // No loop reads them, and they would be kept for every NodeClaim of the
            // cluster (a few kB each on a real API server).
            obj.metadata.managed_fields = None;
            let name = obj.metadata.name.clone().unwrap_or_default();
            match convert::<T>(&obj, read) {
                Ok(t) => {
                    bad.remove(&name);
                    items.insert(name.clone(), Arc::new(t));
                }
                Err(e) => {
                    tracing::warn!(kind = %kind, name = %name, error = %e, "malformed object ignored");
                    metrics.malformed(&kind);
                    items.remove(&name);
                    bad.insert(name.clone(), e);
                }
            }
            name
        };
        match ev {
            watcher::Event::Init => buffer = Some((HashMap::new(), HashMap::new())),
            watcher::Event::InitApply(obj) => {
                if let Some((items, bad)) = buffer.as_mut() {
                    accept(obj, items, bad);
                }
            }
            watcher::Event::InitDone => {
                if let Some((items, bad)) = buffer.take() {
                    let names: Vec<String> = items.keys().chain(bad.keys()).cloned().collect();
                    *store.items.write().unwrap_or_else(|p| p.into_inner()) = items;
                    *store.malformed.write().unwrap_or_else(|p| p.into_inner()) = bad;
                    for n in names {
                        let _ = changes.send(change(n));
                    }
                }
                store.ready.send_replace(true);
            }
            watcher::Event::Apply(obj) => {
                let name = {
                    let mut items = store.items.write().unwrap_or_else(|p| p.into_inner());
                    let mut bad = store.malformed.write().unwrap_or_else(|p| p.into_inner());
                    accept(obj, &mut items, &mut bad)
                };
                let _ = changes.send(change(name));
            }
            watcher::Event::Delete(obj) => {
                let name = obj.metadata.name.clone().unwrap_or_default();
                store
                    .items
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
                store
                    .malformed
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
                let _ = changes.send(change(name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeClass, NodePool};

    fn object(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_kwok_node_class_reads_as_a_class_with_nothing_to_select() {
        let obj = object(serde_json::json!({
            "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
        }));
        assert!(
            convert::<NodeClass>(&obj, as_is).is_err(),
            "no selector terms"
        );
        let class = convert::<NodeClass>(&obj, kwok_node_class).expect("read as a class");
        assert!(class.spec.subnet_selector_terms.is_empty());
        assert_eq!(class.status.unwrap().conditions[0].status, "True");
    }

    #[test]
    fn a_karpenter_pool_with_numeric_limits_reads() {
        let obj = object(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
                "limits": {"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": 0.5},
            },
        }));
        let pool = convert::<NodePool>(&obj, as_is).expect("Karpenter's int-or-string limits");
        assert_eq!(pool.spec.limits["cpu"], "1000");
        assert_eq!(pool.spec.limits["memory"], "1000Gi");
        assert_eq!(pool.spec.limits["nvidia.com/gpu"], "0.5");
        assert_eq!(pool.spec.template.spec.node_class_ref.kind, "EC2NodeClass");
    }
}
