//! One module per Terraform resource; each reads like a description of the object it manages.

pub mod agent_role;
pub mod cluster;
pub mod cluster_role;
pub mod fargate_profile;
pub mod fargate_role;
pub mod interruption_queue;
pub mod interruption_rules;
pub mod node_role;
