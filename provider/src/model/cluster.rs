//! `joiner_cluster` as a struct.
//!
//! Collections are `Option`s: null and empty differ in this resource's state (state must
//! read back the way the configuration wrote it, `tags = {}` or no tags at all, or the plan
//! shows a diff forever), and every set is a `BTreeSet` because EKS reports them unordered.

use std::collections::{BTreeMap, BTreeSet};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ClusterModel {
        pub id: Option<String>,
        /// Planned, like the tags and `discovery_tag_value`: `tags_all` is computed from them
        /// once all three are known.
        pub name: Planned<Option<String>>,
        pub version: Option<String>,
        pub role_arn: Option<String>,
        pub subnet_ids: Option<BTreeSet<String>>,
        pub security_group_ids: Option<BTreeSet<String>>,
        pub endpoint_public_access: Option<bool>,
        pub endpoint_private_access: Option<bool>,
        /// Planned: set from another resource's output, it is still set.
        pub public_access_cidrs: Planned<Option<BTreeSet<String>>>,
        pub kms_key_arn: Option<String>,
        pub enabled_log_types: Option<BTreeSet<String>>,
        pub tags: Planned<Option<BTreeMap<String, String>>>,
        pub discovery_tag_value: Planned<Option<String>>,
        pub tags_all: Option<BTreeMap<String, String>>,
        pub enable_irsa: Option<bool>,
        pub oidc_thumbprints: Planned<Option<Vec<String>>>,
        pub coredns_on_fargate: Option<bool>,
        pub authentication_mode: Option<String>,
        pub bootstrap_cluster_creator_admin_permissions: Planned<Option<bool>>,
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
}

impl ClusterModel {
    /// Whether the inputs of `tags_all` (`tags`, `name`, `discovery_tag_value`) are known:
    /// at plan time, the tags computed from them are trusted only then.
    pub fn tag_inputs_known(&self) -> bool {
        self.tags.is_known() && self.name.is_known() && self.discovery_tag_value.is_known()
    }

    pub fn name_or_default(&self) -> String {
        self.name.as_deref().unwrap_or_default().to_string()
    }
}
