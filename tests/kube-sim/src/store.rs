//! The object store: every object is a JSON value keyed by collection (group/plural),
//! namespace and name, under one global resourceVersion counter.
//!
//! All writes, from HTTP clients and from the simulated controllers alike, go through
//! [`Store`], so that resourceVersion, generation, finalizers and watch events behave the
//! same whoever makes the change. Each collection keeps a bounded event log so a watch can
//! resume from a resourceVersion, and answers 410 Gone once that version has been compacted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use crate::admission;
pub use crate::meta::{meta_str, name_of, namespace_of, now_rfc3339, rv_of};
use crate::resources::{builtin_types, types_from_crd, ResourceType};
use crate::status::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change to one object. `previous` lets a filtered watch turn a MODIFIED that moves
/// an object out of (or into) its selector into DELETED (or ADDED), as the real server does.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventKind,
    pub key: String,
    pub object: Arc<Value>,
    pub previous: Option<Arc<Value>>,
}

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The main resource: status changes are ignored when a status subresource exists.
    Main,
    /// The status subresource: only `status` changes.
    Status,
    /// The simulated controllers: everything may change.
    Internal,
}

type ObjKey = (String, String);

#[derive(Default)]
struct Collection {
    items: BTreeMap<ObjKey, Arc<Value>>,
    log: VecDeque<Arc<Event>>,
    /// Highest resourceVersion dropped from `log`; older resumes get 410 Gone.
    compacted: u64,
}

struct Inner {
    rv: u64,
    types: Vec<Arc<ResourceType>>,
    collections: HashMap<String, Collection>,
}

pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
    history: usize,
    mutators: Mutex<Vec<Mutator>>,
}

/// A mutating admission step run on every create after the built-in defaults (kube-sim's
/// stand-in for webhooks such as EKS's Fargate one). It runs under the store lock, so it
/// must not call the store.
pub type Mutator = Arc<dyn Fn(&ResourceType, &mut Value) + Send + Sync>;

/// Where a watch starts: the events to replay, a receiver for what follows, and the
/// resourceVersion at subscription.
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>, u64);

/// Options for a delete: preconditions checked against the current object.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// Everything except metadata (and status, when it has its own subresource): a change
/// here is a spec change and bumps `metadata.generation`.
fn spec_view(obj: &Value, has_status: bool) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if has_status {
            m.remove("status");
        }
    }
    v
}

/// The object minus the fields the server always rewrites, to detect no-op updates.
fn comparable(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    v
}

impl Store {
    pub fn new(history: usize) -> Arc<Store> {
        let (events, _) = broadcast::channel(1 << 16);
        let store = Arc::new(Store {
            inner: Mutex::new(Inner {
                rv: 1,
                types: builtin_types().into_iter().map(Arc::new).collect(),
                collections: HashMap::new(),
            }),
            events,
            history: history.max(16),
            mutators: Mutex::new(Vec::new()),
        });
        let ns = store
            .find_type("", "v1", "namespaces")
            .expect("namespaces type");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store
                .create(&ns, None, json!({"metadata": {"name": name}}))
                .expect("create built-in namespace");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a mutating admission step for objects created from now on.
    pub fn add_mutator(&self, m: Mutator) {
        self.mutators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(m);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn types(&self) -> Vec<Arc<ResourceType>> {
        self.lock().types.clone()
    }

    pub fn find_type(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock()
            .types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The type serving `kind` at `apiVersion`, for owner references and the like.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.lock()
            .types
            .iter()
            .find(|t| t.api_version() == api_version && t.kind == kind)
            .cloned()
    }

    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> ApiResult<Arc<Value>> {
        let inner = self.lock();
        inner
            .collections
            .get(&rt.key())
            .and_then(|c| {
                c.items
                    .get(&(ns.unwrap_or("").to_string(), name.to_string()))
            })
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// A consistent snapshot of a collection (optionally one namespace) and its version.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = match inner.collections.get(&rt.key()) {
            None => Vec::new(),
            Some(c) => match ns {
                Some(ns) => c
                    .items
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
                None => c.items.values().cloned().collect(),
            },
        };
        (items, inner.rv)
    }

    /// Starts a watch: the events after `since` still in the log, and a receiver for what
    /// follows, taken under one lock so that nothing falls in between.
    pub fn watch_from(&self, rt: &ResourceType, since: Option<u64>) -> ApiResult<WatchStart> {
        let inner = self.lock();
        let key = rt.key();
        let rx = self.events.subscribe();
        let replay = match (since, inner.collections.get(&key)) {
            (None, Some(c)) => c
                .items
                .values()
                .map(|o| {
                    Arc::new(Event {
                        rv: rv_of(o),
                        kind: EventKind::Added,
                        key: key.clone(),
                        object: o.clone(),
                        previous: None,
                    })
                })
                .collect(),
            (None, None) => Vec::new(),
            (Some(since), c) => {
                let compacted = c.map(|c| c.compacted).unwrap_or(0);
                if since < compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {since} ({compacted})"
                    )));
                }
                c.map(|c| c.log.iter().filter(|e| e.rv > since).cloned().collect())
                    .unwrap_or_default()
            }
        };
        Ok((replay, rx, inner.rv))
    }

    pub fn create(&self, rt: &ResourceType, ns: Option<&str>, obj: Value) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        self.create_locked(&mut inner, rt, ns, obj)
    }

    fn create_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        check_type_meta(rt, &mut obj)?;
        let ns = resolve_namespace(rt, ns, &mut obj)?;
        if let Some(ns) = &ns {
            let ns_key = ("".to_string(), ns.clone());
            match inner.collections.get("/namespaces").and_then(|c| c.items.get(&ns_key)) {
                None => return Err(ApiError::not_found("", "namespaces", ns)),
                Some(n) if n["metadata"].get("deletionTimestamp").is_some() => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!("{} is forbidden: unable to create new content in namespace {ns} because it is being terminated", rt.plural),
                    ))
                }
                _ => {}
            }
        }
        {
            let meta = metadata_mut(&mut obj);
            if meta
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                if let Some(prefix) = meta.get("generateName").and_then(Value::as_str) {
                    let name = format!("{prefix}{}", random_suffix(5));
                    meta.insert("name".into(), json!(name));
                }
            }
        }
        admission::validate(rt, &obj, None)?;
        let name = name_of(&obj).to_string();
        let key = (ns.clone().unwrap_or_default(), name.clone());
        if inner
            .collections
            .get(&rt.key())
            .is_some_and(|c| c.items.contains_key(&key))
        {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        admission::default_on_create(rt, &mut obj);
        for m in self
            .mutators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            m(rt, &mut obj);
        }
        let crd_types = if rt.key() == "apiextensions.k8s.io/customresourcedefinitions" {
            let types = types_from_crd(&obj).map_err(|m| {
                ApiError::invalid(&rt.kind, &rt.group, &name, vec![("spec".into(), m)])
            })?;
            Some(types)
        } else {
            None
        };
        inner.rv += 1;
        let rv = inner.rv;
        {
            let meta = metadata_mut(&mut obj);
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            meta.insert("generation".into(), json!(1));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
        }
        if let Some(types) = crd_types {
            register_crd(inner, types);
        }
        let obj = Arc::new(obj);
        self.emit(inner, rt.key(), key, EventKind::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object (PUT). A resourceVersion in the body must match the stored one.
    pub fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        mode: Write,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, rt, ns, name, obj, mode)
    }

    /// Read-modify-write under the store lock: `f` sees the current object and returns the
    /// new one. Patches and controllers use this, so they never conflict with themselves.
    pub fn modify(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        mode: Write,
        f: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        let current = lookup(&inner, rt, ns, name)?;
        let mut new = f(&current)?;
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        self.update_locked(&mut inner, rt, ns, name, new, mode)
    }

    /// Server-side apply's upsert: `f` gets the current object, or None to create.
    pub fn upsert(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        mode: Write,
        f: impl FnOnce(Option<&Value>) -> ApiResult<Value>,
    ) -> ApiResult<(Arc<Value>, bool)> {
        let mut inner = self.lock();
        match lookup(&inner, rt, ns, name) {
            Ok(current) => {
                let mut new = f(Some(&current))?;
                if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                Ok((
                    self.update_locked(&mut inner, rt, ns, name, new, mode)?,
                    false,
                ))
            }
            Err(e) if e.code == 404 => {
                let new = f(None)?;
                Ok((self.create_locked(&mut inner, rt, ns, new)?, true))
            }
            Err(e) => Err(e),
        }
    }

    fn update_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        mode: Write,
    ) -> ApiResult<Arc<Value>> {
        let old = lookup(inner, rt, ns, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        check_type_meta(rt, &mut new)?;
        let body_name = meta_str(&new, "name").unwrap_or("");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion") {
            if !rv.is_empty() && rv != meta_str(&old, "resourceVersion").unwrap_or("") {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name));
            }
        }
        let has_status = rt.has_sub("status");
        let mut new = match mode {
            Write::Status => {
                let mut o = (*old).clone();
                o["status"] = new.get("status").cloned().unwrap_or(Value::Null);
                if o["status"].is_null() {
                    o.as_object_mut().expect("object").remove("status");
                }
                o
            }
            Write::Main if has_status => {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().expect("object").remove("status");
                    }
                }
                new
            }
            _ => new,
        };
        {
            let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
            let meta = metadata_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(k) {
                    Some(v) => meta.insert(k.into(), v.clone()),
                    None => meta.remove(k),
                };
            }
            meta.insert("name".into(), json!(name));
            match ns {
                Some(ns) if rt.namespaced => meta.insert("namespace".into(), json!(ns)),
                _ => meta.remove("namespace"),
            };
            if !meta.contains_key("managedFields") {
                if let Some(mf) = old_meta.get("managedFields") {
                    meta.insert("managedFields".into(), mf.clone());
                }
            }
        }
        if spec_view(&old, has_status) != spec_view(&new, has_status) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        admission::validate(rt, &new, Some(&old))?;
        if comparable(&new) == comparable(&old) {
            return Ok(old);
        }
        let crd_types = if rt.key() == "apiextensions.k8s.io/customresourcedefinitions" {
            Some(types_from_crd(&new).map_err(|m| {
                ApiError::invalid(&rt.kind, &rt.group, name, vec![("spec".into(), m)])
            })?)
        } else {
            None
        };
        inner.rv += 1;
        let rv = inner.rv;
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        if let Some(types) = crd_types {
            register_crd(inner, types);
        }
        let key = (ns.unwrap_or("").to_string(), name.to_string());
        let finalizing = new["metadata"].get("deletionTimestamp").is_some()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        let new = Arc::new(new);
        if finalizing {
            self.remove_locked(inner, rt, key, new.clone(), Some(old));
        } else {
            self.emit(
                inner,
                rt.key(),
                key,
                EventKind::Modified,
                new.clone(),
                Some(old),
            );
        }
        Ok(new)
    }

    /// Deletes an object, or marks it for deletion while finalizers remain. Returns the
    /// object and whether it is gone now.
    pub fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<(Arc<Value>, bool)> {
        if rt.key() == "/namespaces" && ["default", "kube-system", "kube-public"].contains(&name) {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
            ));
        }
        let mut inner = self.lock();
        let old = lookup(&inner, rt, ns, name)?;
        if let Some(uid) = &opts.uid {
            if meta_str(&old, "uid") != Some(uid.as_str()) {
                return Err(ApiError::new(409, "Conflict", format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    rt.plural, meta_str(&old, "uid").unwrap_or("")
                )));
            }
        }
        if let Some(rv) = &opts.resource_version {
            if meta_str(&old, "resourceVersion") != Some(rv.as_str()) {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name));
            }
        }
        let key = (ns.unwrap_or("").to_string(), name.to_string());
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old["metadata"].get("deletionTimestamp").is_some() {
                return Ok((old, false));
            }
            let mut new = (*old).clone();
            inner.rv += 1;
            new["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            new["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
            let new = Arc::new(new);
            self.emit(
                &mut inner,
                rt.key(),
                key,
                EventKind::Modified,
                new.clone(),
                Some(old),
            );
            return Ok((new, false));
        }
        let mut last = (*old).clone();
        inner.rv += 1;
        last["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        let last = Arc::new(last);
        self.remove_locked(&mut inner, rt, key, last.clone(), Some(old));
        Ok((last, true))
    }

    /// Removes an object and cascades what the real server cascades synchronously:
    /// a namespace's contents and a CRD's custom objects.
    fn remove_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        key: ObjKey,
        last: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        let ckey = rt.key();
        if let Some(c) = inner.collections.get_mut(&ckey) {
            c.items.remove(&key);
        }
        self.emit(
            inner,
            ckey.clone(),
            key.clone(),
            EventKind::Deleted,
            last.clone(),
            previous,
        );
        if ckey == "/namespaces" {
            let ns = key.1;
            let namespaced: Vec<String> = inner
                .types
                .iter()
                .filter(|t| t.namespaced)
                .map(|t| t.key())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            for ck in namespaced {
                let victims: Vec<(ObjKey, Arc<Value>)> = match inner.collections.get(&ck) {
                    Some(c) => c
                        .items
                        .range((ns.clone(), String::new())..)
                        .take_while(|((n, _), _)| *n == ns)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    None => continue,
                };
                for (k, v) in victims {
                    self.drop_object(inner, &ck, k, v);
                }
            }
        } else if ckey == "apiextensions.k8s.io/customresourcedefinitions" {
            if let Ok(types) = types_from_crd(&last) {
                if let Some(t) = types.first() {
                    let tk = t.key();
                    let victims: Vec<(ObjKey, Arc<Value>)> = inner
                        .collections
                        .get(&tk)
                        .map(|c| {
                            c.items
                                .iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect()
                        })
                        .unwrap_or_default();
                    for (k, v) in victims {
                        self.drop_object(inner, &tk, k, v);
                    }
                    inner.types.retain(|x| x.key() != tk);
                }
            }
        }
    }

    fn drop_object(&self, inner: &mut Inner, ckey: &str, key: ObjKey, old: Arc<Value>) {
        if let Some(c) = inner.collections.get_mut(ckey) {
            c.items.remove(&key);
        }
        inner.rv += 1;
        let mut last = (*old).clone();
        last["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        self.emit(
            inner,
            ckey.to_string(),
            key,
            EventKind::Deleted,
            Arc::new(last),
            Some(old),
        );
    }

    fn emit(
        &self,
        inner: &mut Inner,
        ckey: String,
        key: ObjKey,
        kind: EventKind,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        let rv = inner.rv;
        let c = inner.collections.entry(ckey.clone()).or_default();
        if kind != EventKind::Deleted {
            c.items.insert(key, object.clone());
        }
        let ev = Arc::new(Event {
            rv,
            kind,
            key: ckey,
            object,
            previous,
        });
        c.log.push_back(ev.clone());
        while c.log.len() > self.history {
            if let Some(old) = c.log.pop_front() {
                c.compacted = old.rv;
            }
        }
        let _ = self.events.send(ev);
    }

    /// Expires all watch history, as if a client had been disconnected through an etcd
    /// compaction: resuming from any version seen so far, even the latest, gets 410 Gone
    /// and the client must re-list. A sim-only hook for testing that path.
    pub fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for c in inner.collections.values_mut() {
            c.log.clear();
            c.compacted = rv + 1;
        }
    }
}

fn lookup(inner: &Inner, rt: &ResourceType, ns: Option<&str>, name: &str) -> ApiResult<Arc<Value>> {
    inner
        .collections
        .get(&rt.key())
        .and_then(|c| {
            c.items
                .get(&(ns.unwrap_or("").to_string(), name.to_string()))
        })
        .cloned()
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
}

fn register_crd(inner: &mut Inner, types: Vec<ResourceType>) {
    if let Some(first) = types.first() {
        let key = first.key();
        inner.types.retain(|t| t.key() != key);
    }
    inner.types.extend(types.into_iter().map(Arc::new));
}

fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    let want = rt.api_version();
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let same_group = match av.split_once('/') {
            Some((g, _)) => g == rt.group,
            None => rt.group.is_empty(),
        };
        if !same_group {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want})"
            )));
        }
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        if kind != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    obj["apiVersion"] = json!(want);
    obj["kind"] = json!(rt.kind);
    Ok(())
}

fn resolve_namespace(
    rt: &ResourceType,
    ns: Option<&str>,
    obj: &mut Value,
) -> ApiResult<Option<String>> {
    let body_ns = meta_str(obj, "namespace").map(str::to_string);
    if !rt.namespaced {
        metadata_mut(obj).remove("namespace");
        return Ok(None);
    }
    let ns = match (ns, body_ns) {
        (Some(p), Some(b)) if !b.is_empty() && p != b => return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        (Some(p), _) => p.to_string(),
        (None, Some(b)) if !b.is_empty() => b,
        _ => "default".to_string(),
    };
    metadata_mut(obj).insert("namespace".into(), json!(ns));
    Ok(Some(ns))
}

/// Lowercase alphanumerics, as the real server uses for generateName suffixes.
pub fn random_suffix(n: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}
