//! `joiner_node_overlay` as a struct, and its mapping to and from the agent's
//! `NodeOverlaySpec`.

use std::collections::BTreeMap;

use joiner_agent::api::node_overlay::{NodeOverlaySpec, OverlayRequirement};

use super::attr::{model, Planned};
use crate::protocol::prelude::*;

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct NodeOverlayModel {
        pub id: Option<String>,
        pub cluster_name: Option<String>,
        pub name: Option<String>,
        pub weight: Option<i64>,
        /// Planned, as the requirements are: the catalogue match needs both known.
        pub price: Planned<Option<String>>,
        pub price_adjustment: Planned<Option<String>>,
        pub capacity: BTreeMap<String, String>,
        pub requirements: Planned<Vec<OverlayRequirementModel>> => "requirement",
        /// Computed at plan time; carried through untouched.
        pub selected_instance_types: Value,
        pub timeouts: Value,
    }
}

model! {
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct OverlayRequirementModel {
        pub key: String,
        pub operator: String,
        pub values: Vec<String>,
    }
}

impl NodeOverlayModel {
    /// The CRD spec this configuration declares.
    pub fn spec(&self) -> NodeOverlaySpec {
        NodeOverlaySpec {
            requirements: self
                .requirements
                .iter()
                .map(|r| OverlayRequirement {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: r.values.clone(),
                })
                .collect(),
            price: (*self.price).clone(),
            price_adjustment: (*self.price_adjustment).clone(),
            capacity: self.capacity.clone(),
            weight: self.weight.map(|w| w as i32),
        }
    }

    /// The configuration a stored spec corresponds to.
    pub fn from_spec(cluster: &str, name: &str, s: &NodeOverlaySpec) -> NodeOverlayModel {
        NodeOverlayModel {
            id: Some(format!("{cluster}:{name}")),
            cluster_name: Some(cluster.into()),
            name: Some(name.into()),
            weight: s.weight.map(i64::from),
            price: s.price.clone().into(),
            price_adjustment: s.price_adjustment.clone().into(),
            capacity: s.capacity.clone(),
            requirements: s
                .requirements
                .iter()
                .map(|r| OverlayRequirementModel {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: r.values.clone(),
                })
                .collect::<Vec<_>>()
                .into(),
            selected_instance_types: Value::Null,
            timeouts: Value::Null,
        }
    }
}
