//! `joiner_agent` as a struct.

use std::collections::BTreeMap;

use super::attr::model;
use crate::protocol::prelude::*;

model! {
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
        pub adopt_karpenter_namespace: Option<String>,
        pub api: Option<String>,
        pub env: BTreeMap<String, String>,
        pub labels: BTreeMap<String, String>,
        pub tolerations: Vec<TolerationModel> => "toleration",
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TolerationModel {
        pub key: Option<String>,
        pub operator: Option<String>,
        pub value: Option<String>,
        pub effect: Option<String>,
    }
}
