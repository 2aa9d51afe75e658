//! Kubernetes Events (core/v1, what `kubectl describe` and `kubectl get events` show) for
//! the objects the agent acts on. The same (object, reason, message) is published at most
//! once per `DEDUP` so a pod that stays unplaceable does not flood the API.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::api::served::Served;

const DEDUP: Duration = Duration::from_secs(300);
const COMPONENT: &str = "joiner-agent";
const JOINER_V1: &str = "joiner.dev/v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Normal,
    Warning,
}

pub struct Recorder {
    client: Client,
    identity: String,
    served: Served,
    recent: Mutex<HashMap<(String, String, String), Instant>>,
}

/// A reference to any object, for [`Recorder::publish`]. The agent's own kinds are named by
/// their types' `joiner.dev/v1`; the recorder moves them to the served API.
pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(obj.name_any()),
        namespace: obj.namespace(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        ..Default::default()
    }
}

impl Recorder {
    /// `regarding` as the served API names it: one of the agent's kinds under Karpenter's
    /// API is `karpenter.sh/v1 NodeClaim`, not the type's `joiner.dev/v1 NodeClaim`.
    fn in_served_api(&self, regarding: &ObjectReference) -> ObjectReference {
        let mut r = regarding.clone();
        if r.api_version.as_deref() != Some(JOINER_V1) {
            return r;
        }
        let served = match r.kind.as_deref() {
            Some("NodePool") => self.served.node_pools(),
            Some("NodeClaim") => self.served.node_claims(),
            Some("NodeClass") => self.served.node_classes(),
            Some("NodeOverlay") => self.served.node_overlays(),
            _ => return r,
        };
        r.api_version = Some(served.api_version);
        r.kind = Some(served.kind);
        r
    }

    pub fn new(client: Client, identity: &str, served: Served) -> Recorder {
        Recorder {
            client,
            identity: identity.to_string(),
            served,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an Event; failures are logged, never returned (an Event is best effort).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        ty: Type,
        reason: &str,
        message: &str,
    ) {
        let key = (
            regarding
                .uid
                .clone()
                .unwrap_or_else(|| regarding.name.clone().unwrap_or_default()),
            reason.to_string(),
            message.to_string(),
        );
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.get(&key).is_some_and(|t| t.elapsed() < DEDUP) {
                return;
            }
            if recent.len() > 10_000 {
                recent.retain(|_, t| t.elapsed() < DEDUP);
            }
            recent.insert(key, Instant::now());
        }
        let ns = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let now = jiff::Timestamp::now();
        let name = format!(
            "{}.{:x}",
            regarding.name.clone().unwrap_or_default(),
            now.as_nanosecond() as u64 ^ rand::random::<u32>() as u64
        );
        // Event messages are capped at 1 KiB by the API server.
        let mut message = message.to_string();
        if message.len() > 1000 {
            let mut cut = 1000;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: self.in_served_api(regarding),
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(match ty {
                Type::Normal => "Normal".into(),
                Type::Warning => "Warning".into(),
            }),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.identity.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            tracing::warn!(error = %e, reason, "creating an Event (core/v1 Event create)");
        }
    }
}
