//! `joiner_cluster` as a struct.
//!
//! Collections are `Option`s: null and empty differ in this resource's state (see
//! [`super::nullable`]), and every set is a `BTreeSet` because EKS reports them unordered.

use std::collections::{BTreeMap, BTreeSet};

use super::fields::*;
use super::nullable::*;
use super::Model;
use crate::protocol::prelude::*;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterModel {
    pub id: Option<String>,
    pub name: Option<String>,
    pub version: Option<String>,
    pub role_arn: Option<String>,
    pub subnet_ids: Option<BTreeSet<String>>,
    pub security_group_ids: Option<BTreeSet<String>>,
    pub endpoint_public_access: Option<bool>,
    pub endpoint_private_access: Option<bool>,
    pub public_access_cidrs: Option<BTreeSet<String>>,
    pub kms_key_arn: Option<String>,
    pub enabled_log_types: Option<BTreeSet<String>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub discovery_tag_value: Option<String>,
    pub tags_all: Option<BTreeMap<String, String>>,
    pub enable_irsa: Option<bool>,
    pub oidc_thumbprints: Option<Vec<String>>,
    pub coredns_on_fargate: Option<bool>,
    pub authentication_mode: Option<String>,
    pub bootstrap_cluster_creator_admin_permissions: Option<bool>,
    pub arn: Option<String>,
    pub status: Option<String>,
    pub endpoint: Option<String>,
    pub certificate_authority: Option<String>,
    pub oidc_issuer: Option<String>,
    pub oidc_provider_arn: Option<String>,
    pub cluster_security_group_id: Option<String>,
    pub vpc_id: Option<String>,
    pub platform_version: Option<String>,
    pub timeouts: Value,
}

impl Model for ClusterModel {
    fn from_value(v: &Value) -> Self {
        ClusterModel {
            id: string(v, "id"),
            name: string(v, "name"),
            version: string(v, "version"),
            role_arn: string(v, "role_arn"),
            subnet_ids: opt_set(v, "subnet_ids"),
            security_group_ids: opt_set(v, "security_group_ids"),
            endpoint_public_access: boolean(v, "endpoint_public_access"),
            endpoint_private_access: boolean(v, "endpoint_private_access"),
            public_access_cidrs: opt_set(v, "public_access_cidrs"),
            kms_key_arn: string(v, "kms_key_arn"),
            enabled_log_types: opt_set(v, "enabled_log_types"),
            tags: nullable_map(v, "tags"),
            discovery_tag_value: string(v, "discovery_tag_value"),
            tags_all: nullable_map(v, "tags_all"),
            enable_irsa: boolean(v, "enable_irsa"),
            oidc_thumbprints: opt_strings(v, "oidc_thumbprints"),
            coredns_on_fargate: boolean(v, "coredns_on_fargate"),
            authentication_mode: string(v, "authentication_mode"),
            bootstrap_cluster_creator_admin_permissions: boolean(
                v,
                "bootstrap_cluster_creator_admin_permissions",
            ),
            arn: string(v, "arn"),
            status: string(v, "status"),
            endpoint: string(v, "endpoint"),
            certificate_authority: string(v, "certificate_authority"),
            oidc_issuer: string(v, "oidc_issuer"),
            oidc_provider_arn: string(v, "oidc_provider_arn"),
            cluster_security_group_id: string(v, "cluster_security_group_id"),
            vpc_id: string(v, "vpc_id"),
            platform_version: string(v, "platform_version"),
            timeouts: v.get("timeouts").clone(),
        }
    }

    fn to_value(&self) -> Value {
        Value::object([
            ("id", opt_str(&self.id)),
            ("name", opt_str(&self.name)),
            ("version", opt_str(&self.version)),
            ("role_arn", opt_str(&self.role_arn)),
            ("subnet_ids", opt_set_value(&self.subnet_ids)),
            (
                "security_group_ids",
                opt_set_value(&self.security_group_ids),
            ),
            (
                "endpoint_public_access",
                opt_bool(self.endpoint_public_access),
            ),
            (
                "endpoint_private_access",
                opt_bool(self.endpoint_private_access),
            ),
            (
                "public_access_cidrs",
                opt_set_value(&self.public_access_cidrs),
            ),
            ("kms_key_arn", opt_str(&self.kms_key_arn)),
            ("enabled_log_types", opt_set_value(&self.enabled_log_types)),
            ("tags", nullable_map_value(&self.tags)),
            ("discovery_tag_value", opt_str(&self.discovery_tag_value)),
            ("tags_all", nullable_map_value(&self.tags_all)),
            ("enable_irsa", opt_bool(self.enable_irsa)),
            ("oidc_thumbprints", opt_list_value(&self.oidc_thumbprints)),
            ("coredns_on_fargate", opt_bool(self.coredns_on_fargate)),
            ("authentication_mode", opt_str(&self.authentication_mode)),
            (
                "bootstrap_cluster_creator_admin_permissions",
                opt_bool(self.bootstrap_cluster_creator_admin_permissions),
            ),
            ("arn", opt_str(&self.arn)),
            ("status", opt_str(&self.status)),
            ("endpoint", opt_str(&self.endpoint)),
            (
                "certificate_authority",
                opt_str(&self.certificate_authority),
            ),
            ("oidc_issuer", opt_str(&self.oidc_issuer)),
            ("oidc_provider_arn", opt_str(&self.oidc_provider_arn)),
            (
                "cluster_security_group_id",
                opt_str(&self.cluster_security_group_id),
            ),
            ("vpc_id", opt_str(&self.vpc_id)),
            ("platform_version", opt_str(&self.platform_version)),
            ("timeouts", self.timeouts.clone()),
        ])
    }
}

impl ClusterModel {
    /// Whether the inputs of `tags_all` (`tags`, `name`, `discovery_tag_value`) are known
    /// in `v`. A model reads unknown as absent, so at plan time this must be asked of the
    /// raw value before [`ClusterModel::all_tags`] is trusted.
    pub fn tag_inputs_known(v: &Value) -> bool {
        v.get("tags").is_fully_known()
            && v.get("name").is_known()
            && v.get("discovery_tag_value").is_known()
    }

    pub fn name_or_default(&self) -> String {
        self.name.clone().unwrap_or_default()
    }
}
