//! `joiner_access_entry` as a struct.

use std::collections::{BTreeMap, BTreeSet};

use super::fields::*;
use super::nullable::*;
use super::Model;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccessEntryModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub principal_arn: Option<String>,
    pub kind: Option<String>,
    pub kubernetes_groups: Option<BTreeSet<String>>,
    pub username: Option<String>,
    /// `None` is a null attribute, `Some(empty)` is `tags = {}`.
    pub tags: Option<BTreeMap<String, String>>,
    pub arn: Option<String>,
    pub access_policies: Vec<AccessPolicyModel>,
    pub timeouts: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct AccessPolicyModel {
    pub policy_arn: Option<String>,
    pub scope: Option<String>,
    /// Null for the cluster scope.
    pub namespaces: Option<BTreeSet<String>>,
}

impl Model for AccessPolicyModel {
    fn from_value(v: &Value) -> Self {
        AccessPolicyModel {
            policy_arn: string(v, "policy_arn"),
            scope: string(v, "scope"),
            namespaces: opt_set(v, "namespaces"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("policy_arn", opt_str(&self.policy_arn)),
            ("scope", opt_str(&self.scope)),
            ("namespaces", opt_set_value(&self.namespaces)),
        ])
    }
}

impl Model for AccessEntryModel {
    fn from_value(v: &Value) -> Self {
        AccessEntryModel {
            id: string(v, "id"),
            cluster_name: string(v, "cluster_name"),
            principal_arn: string(v, "principal_arn"),
            kind: string(v, "type"),
            kubernetes_groups: opt_set(v, "kubernetes_groups"),
            username: string(v, "username"),
            tags: nullable_map(v, "tags"),
            arn: string(v, "arn"),
            access_policies: match v.get("access_policy") {
                Value::Set(xs) | Value::List(xs) => {
                    xs.iter().map(AccessPolicyModel::from_value).collect()
                }
                _ => Vec::new(),
            },
            timeouts: v.get("timeouts").clone(),
        }
    }

    fn to_value(&self) -> Value {
        Value::object([
            ("id", opt_str(&self.id)),
            ("cluster_name", opt_str(&self.cluster_name)),
            ("principal_arn", opt_str(&self.principal_arn)),
            ("type", opt_str(&self.kind)),
            ("kubernetes_groups", opt_set_value(&self.kubernetes_groups)),
            ("username", opt_str(&self.username)),
            ("tags", nullable_map_value(&self.tags)),
            ("arn", opt_str(&self.arn)),
            (
                "access_policy",
                Value::Set(self.access_policies.iter().map(Model::to_value).collect()),
            ),
            ("timeouts", self.timeouts.clone()),
        ])
    }
}
