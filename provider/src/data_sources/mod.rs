//! One module per Terraform data source. How to write one: see `crate::protocol::resource`.

use crate::context::ProviderContext;
use crate::protocol::resource::DataSource;
use std::sync::Arc;

pub mod caller_identity;
pub mod cluster;
pub mod instance_types;
pub mod security_groups;
pub mod subnets;

/// Every data source the provider serves. One line per data source, in any order.
pub fn all() -> Vec<Arc<dyn DataSource<ProviderContext>>> {
    vec![
        Arc::new(caller_identity::CallerIdentity),
        Arc::new(cluster::Cluster),
        Arc::new(subnets::Subnets),
        Arc::new(security_groups::SecurityGroups),
        Arc::new(instance_types::InstanceTypes),
    ]
}
