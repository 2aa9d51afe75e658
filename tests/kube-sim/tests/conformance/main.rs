//! kube-sim against real clients (kubectl, kube-rs, the AWS SDK) and the local AWS world.
//!
//! The bodies in `shared` run on every `TargetCluster`: kube-sim always, and the real control
//! plane when `JOINER_REAL_CLUSTER` asks for it (`scripts/test` runs them there, by this
//! module's path, after its Go build), so that where kube-sim and Kubernetes differ, a test
//! says so.

mod common;
mod shared {
    mod bridge_targets;
    mod kube_rs;
    mod kubectl;
    mod rbac;
}

mod aws_e2e;
mod binary;
mod cluster_version;
mod empty_root;
mod fargate;
mod image;
mod image_push;
mod irsa;
mod runner;
mod scheduler_differential;
mod volumes;
