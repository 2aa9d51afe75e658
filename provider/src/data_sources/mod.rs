//! One module per Terraform data source.

pub mod caller_identity;
pub mod instance_types;
pub mod security_groups;
pub mod subnets;
