//! `joiner_access_entry` as a struct.

use std::collections::{BTreeMap, BTreeSet};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AccessEntryModel {
        pub id: Option<String>,
        pub cluster_name: Option<String>,
        pub principal_arn: Option<String>,
        /// Planned: a node entry's rules apply only once the type is known.
        pub kind: Planned<Option<String>> => "type",
        pub kubernetes_groups: Option<BTreeSet<String>>,
        /// Planned: set from another resource's output, it is still set.
        pub username: Planned<Option<String>>,
        /// `None` is a null attribute, `Some(empty)` is `tags = {}`.
        pub tags: Option<BTreeMap<String, String>>,
        pub arn: Option<String>,
        pub access_policies: BTreeSet<AccessPolicyModel> => "access_policy",
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
    pub struct AccessPolicyModel {
        pub policy_arn: Option<String>,
        pub scope: Option<String>,
        /// Null for the cluster scope.
        pub namespaces: Option<BTreeSet<String>>,
    }
}
