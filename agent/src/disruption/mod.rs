//! Disruption: taking capacity away when it is no longer needed (consolidation), and
//! replacing nodes that expired or drifted, within the NodePools' disruption budgets.
//!
//! - [`cron`], [`budgets`]: budget windows and allowances (pure).
//! - [`drift`]: the hashes stamped on NodeClaims and the drift checks (pure).
//! - [`decide`]: one pass's decisions, simulated with the scheduler (pure).
//! - `controller` (feature `controllers`): reads the cluster, runs [`decide::decide`],
//!   launches replacements first, then deletes the chosen NodeClaims through the
//!   termination path; an Event and metrics for every decision.

pub mod budgets;
pub mod cron;
pub mod decide;
pub mod drift;
#[cfg(feature = "controllers")]
pub mod metrics;

pub use budgets::{Budgets, Reason};
pub use decide::{decide, Candidate, Config, Decision, Outcome, PoolPolicy, World};
#[cfg(feature = "controllers")]
pub mod controller;
