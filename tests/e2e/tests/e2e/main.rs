//! The provider end to end: the real Terraform CLI (1.0.3, or `$TERRAFORM`) driving the built
//! provider against the local AWS world and kube-sim.
//!
//! `lifecycle` holds every resource's and data source's lifecycle and the protocol paths
//! (debug/reattach, install from mirrors, a killed provider): `scripts/test` runs it again
//! under OpenTofu and current Terraform, whose clients send RPCs and fields 1.0.3 never does.
//! The other modules add no protocol surface and run under 1.0.3 only. Modules named
//! `real_control_plane` need the real control plane and are `#[ignore]`d in the main pass.

mod common;
mod lifecycle {
    mod access_entry;
    mod caller_identity;
    mod cluster;
    mod data_sources;
    mod eks_token;
    mod fargate_profile;
    mod groupless_cluster;
    mod iam_roles;
    mod install_from_mirror;
    mod interruption_queue;
    mod interruption_rules;
    mod kubernetes_half;
    mod provider_binary;
    mod provider_killed;
}

mod agent_rbac;
mod convert;
mod crd_rules;
mod deployer_policy;
mod examples;
mod iam_enforced;
mod node_pool_capacity;
mod pricing;
mod written_objects;
