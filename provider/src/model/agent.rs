//! `joiner_agent` as a struct.

use std::collections::BTreeMap;

use super::fields::*;
use super::Model;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub queue_url: Option<String>,
    pub role_arn: Option<String>,
    pub image: Option<String>,
    pub image_digest: Option<String>,
    pub replicas: Option<i64>,
    pub log_level: Option<String>,
    pub namespace: Option<String>,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub tolerations: Vec<TolerationModel>,
    pub timeouts: Value,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TolerationModel {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
}

impl Model for TolerationModel {
    fn from_value(v: &Value) -> Self {
        TolerationModel {
            key: string(v, "key"),
            operator: string(v, "operator"),
            value: string(v, "value"),
            effect: string(v, "effect"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("key", opt_str(&self.key)),
            ("operator", opt_str(&self.operator)),
            ("value", opt_str(&self.value)),
            ("effect", opt_str(&self.effect)),
        ])
    }
}

impl Model for AgentModel {
    fn from_value(v: &Value) -> Self {
        AgentModel {
            id: string(v, "id"),
            cluster_name: string(v, "cluster_name"),
            queue_url: string(v, "queue_url"),
            role_arn: string(v, "role_arn"),
            image: string(v, "image"),
            image_digest: string(v, "image_digest"),
            replicas: int(v, "replicas"),
            log_level: string(v, "log_level"),
            namespace: string(v, "namespace"),
            env: map(v, "env"),
            labels: map(v, "labels"),
            tolerations: blocks(v, "toleration"),
            timeouts: v.get("timeouts").clone(),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("id", opt_str(&self.id)),
            ("cluster_name", opt_str(&self.cluster_name)),
            ("queue_url", opt_str(&self.queue_url)),
            ("role_arn", opt_str(&self.role_arn)),
            ("image", opt_str(&self.image)),
            ("image_digest", opt_str(&self.image_digest)),
            ("replicas", opt_int(self.replicas)),
            ("log_level", opt_str(&self.log_level)),
            ("namespace", opt_str(&self.namespace)),
            ("env", opt_map(&self.env)),
            ("labels", opt_map(&self.labels)),
            ("toleration", block_list(&self.tolerations)),
            ("timeouts", self.timeouts.clone()),
        ])
    }
}
