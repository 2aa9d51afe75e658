//! `joiner_fargate_profile` as a struct.

use std::collections::{BTreeMap, BTreeSet};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
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
        /// Planned: whether CoreDNS is selected is judged once every selector is known.
        pub selectors: Planned<Vec<SelectorModel>> => "selector",
        /// Whether this profile switches the `coredns` add-on onto Fargate once it is ACTIVE.
        pub coredns_on_fargate: Option<bool>,
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SelectorModel {
        pub namespace: Option<String>,
        /// Null and `{}` both match any labels; state keeps whichever the user wrote.
        pub labels: Option<BTreeMap<String, String>>,
    }
}
