//! Disruption, the pure half: taking capacity away when it is no longer needed
//! (consolidation), and replacing nodes that expired or drifted, within the NodePools'
//! disruption budgets.
//!
//! - [`cron`], [`budgets`]: budget windows and allowances.
//! - [`drift`]: the hashes stamped on NodeClaims and the drift checks.
//! - [`decide`]: one pass's decisions, simulated with the scheduler.
//!
//! The loop that reads the cluster, runs [`decide::decide`] and disrupts the chosen
//! NodeClaims is `crate::controllers::disruption` (feature `controllers`).

pub mod budgets;
pub mod cron;
pub mod decide;
pub mod drift;

pub use budgets::{Budgets, Reason};
pub use decide::{decide, Candidate, Config, Decision, Outcome, PoolPolicy, World};
