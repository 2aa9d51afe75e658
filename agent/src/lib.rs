//! joiner-agent's library: the API types (CRDs), the instance catalogue and the pure
//! scheduling core. See ARCHITECTURE.md for the map.
//!
//! Nothing in this crate's scheduling path does I/O or reads a clock: it takes plain data in
//! and gives decisions out, so that the provider can call the same code at plan time and the
//! benchmarks can measure it in isolation.
//!
//! - [`catalog`]: instance types, prices, allocatable, DaemonSet overhead.
//! - [`requirements`]: the node-requirement algebra; [`labels`]: well-known labels.
//! - [`resources`], [`taints`]: quantities, taints and tolerations.
//! - [`admission`]: which instance types a NodePool admits.

pub mod admission;
pub mod api;
pub mod catalog;
#[cfg(feature = "controllers")]
pub mod cloud;
#[cfg(feature = "controllers")]
pub mod controllers;
pub mod disruption;
pub mod fargate;
pub mod interruption;
pub mod labels;
pub mod monitoring;
pub mod requirements;
pub mod resources;
pub mod scheduler;
pub mod taints;
#[cfg(feature = "controllers")]
pub mod task;
