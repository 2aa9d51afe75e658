//! The agent doing its job in the test world (`joiner-agent-world`): a cluster (kube-sim, or
//! the real control plane in the `real_control_plane` modules), the AWS emulator under
//! enforced IAM, and the agent in process or as processes. One module per area.

mod accelerators;
mod adoption;
mod attach;
mod beside_node_groups;
mod capacity;
mod catalog_parity;
mod cloud_ec2;
mod disruption;
mod drain;
mod ec2_fixture;
mod ephemeral_storage;
mod fargate;
mod iam;
mod ice;
mod interruption;
mod interruption_queue;
mod karpenter_api;
mod karpenter_suite;
mod kms;
mod kwok_cloud;
mod labels;
mod lifecycle;
mod monitoring;
mod nodeclass;
mod price_list;
mod pricing;
mod process;
mod provisioning;
mod rbac;
mod volumes;
