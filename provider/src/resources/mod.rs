//! One module per Terraform resource; each reads like a description of the object it manages.
//! How to write one: see `crate::protocol::resource`. A resource over one `joiner.dev` object
//! in a cluster implements [`custom_object::CustomObject`] instead, and gets the lifecycle the
//! others of its sort share.

use crate::context::ProviderContext;
use crate::protocol::resource::Resource;
use std::sync::Arc;

pub mod access_entry;
pub mod agent;
pub mod agent_role;
pub mod cluster;
pub mod cluster_role;
pub mod custom_object;
pub mod fargate_profile;
pub mod fargate_role;
pub mod iam_role;
pub mod interruption_queue;
pub mod interruption_rules;
pub mod node_class;
pub mod node_overlay;
pub mod node_pool;
pub mod node_role;

/// Every resource the provider serves. One line per resource, in any order.
pub fn all() -> Vec<Arc<dyn Resource<ProviderContext>>> {
    vec![
        Arc::new(interruption_queue::InterruptionQueue),
        Arc::new(cluster_role::ClusterRole::new()),
        Arc::new(node_role::NodeRole::new()),
        Arc::new(fargate_role::FargateRole::new()),
        Arc::new(agent_role::AgentRole::new()),
        Arc::new(interruption_rules::InterruptionRules),
        Arc::new(cluster::Cluster),
        Arc::new(access_entry::AccessEntry),
        Arc::new(fargate_profile::FargateProfile),
        Arc::new(node_class::NodeClass),
        Arc::new(node_pool::NodePool),
        Arc::new(node_overlay::NodeOverlay),
        Arc::new(agent::Agent),
    ]
}
