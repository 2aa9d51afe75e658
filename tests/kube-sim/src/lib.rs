//! kube-sim: a small Kubernetes API server with simulated controllers, for joiner's
//! end-to-end tests and sandbox. It is a test tool, not a Kubernetes: see docs/kube-sim.md.
//!
//! In a test:
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! let sim = kube_sim::KubeSim::start(kube_sim::Options::default())?;
//! let client = sim.client().await?;            // a kube::Client, admin token
//! let path = sim.kubeconfig_path();            // for kubectl, terraform, the agent
//! # Ok(()) }
//! ```

pub mod addons;
pub mod admission;
pub mod api;
pub mod attach;
pub mod authn;
pub mod authz;
pub mod aws;
pub mod cluster_version;
pub mod controllers;
pub mod eks_auth;
pub mod eviction;
pub mod fargate;
pub mod kubeconfig;
pub mod meta;
pub mod network;
pub mod node_auth;
pub mod patch;
pub mod proto;
pub mod quantity;
pub mod resources;
pub mod runner;
pub mod scheduler;
pub mod selectors;
pub mod server;
pub mod statefulsets;
pub mod status;
pub mod store;
pub mod table;
pub mod target;
pub mod tls;
pub mod volumes;

pub use controllers::ControllerSet;
pub use runner::ImageSource;
pub use server::{KubeSim, Options, Server};
pub use target::TargetCluster;
