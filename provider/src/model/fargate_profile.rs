//! `joiner_fargate_profile` as a struct.

use std::collections::{BTreeMap, BTreeSet};

use super::fields::*;
use super::nullable::*;
use super::Model;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FargateProfileModel {
    pub id: Option<String>,
    pub cluster_name: Option<String>,
    pub name: Option<String>,
    pub pod_execution_role_arn: Option<String>,
    pub subnet_ids: Option<BTreeSet<String>>,
    /// `None` is a null attribute, `Some(empty)` is `tags = {}`.
    pub tags: Option<BTreeMap<String, String>>,
    pub arn: Option<String>,
    pub status: Option<String>,
    pub selectors: Vec<SelectorModel>,
    /// Whether this profile switches the `coredns` add-on onto Fargate once it is ACTIVE.
    pub coredns_on_fargate: Option<bool>,
    pub timeouts: Value,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectorModel {
    pub namespace: Option<String>,
    /// Null and `{}` both match any labels; state keeps whichever the user wrote.
    pub labels: Option<BTreeMap<String, String>>,
}

impl Model for SelectorModel {
    fn from_value(v: &Value) -> Self {
        SelectorModel {
            namespace: string(v, "namespace"),
            labels: nullable_map(v, "labels"),
        }
    }
    fn to_value(&self) -> Value {
        Value::object([
            ("namespace", opt_str(&self.namespace)),
            ("labels", nullable_map_value(&self.labels)),
        ])
    }
}

impl Model for FargateProfileModel {
    fn from_value(v: &Value) -> Self {
        FargateProfileModel {
            id: string(v, "id"),
            cluster_name: string(v, "cluster_name"),
            name: string(v, "name"),
            pod_execution_role_arn: string(v, "pod_execution_role_arn"),
            subnet_ids: opt_set(v, "subnet_ids"),
            tags: nullable_map(v, "tags"),
            arn: string(v, "arn"),
            status: string(v, "status"),
            selectors: blocks(v, "selector"),
            coredns_on_fargate: boolean(v, "coredns_on_fargate"),
            timeouts: v.get("timeouts").clone(),
        }
    }

    fn to_value(&self) -> Value {
        Value::object([
            ("id", opt_str(&self.id)),
            ("cluster_name", opt_str(&self.cluster_name)),
            ("name", opt_str(&self.name)),
            (
                "pod_execution_role_arn",
                opt_str(&self.pod_execution_role_arn),
            ),
            ("subnet_ids", opt_set_value(&self.subnet_ids)),
            ("tags", nullable_map_value(&self.tags)),
            ("arn", opt_str(&self.arn)),
            ("status", opt_str(&self.status)),
            ("selector", block_list(&self.selectors)),
            ("coredns_on_fargate", opt_bool(self.coredns_on_fargate)),
            ("timeouts", self.timeouts.clone()),
        ])
    }
}
