//! Disruption, the pure half: taking capacity away when it is no longer needed
//! (consolidation), and replacing nodes that expired or drifted, within the NodePools'
//! disruption budgets.
//!
//! - [`budgets`]: budget windows (schedules are `crate::api::cron`) and allowances.
//! - [`drift`]: the hashes stamped on NodeClaims and the drift checks.
//! - [`decide`]: one pass's decisions, simulated with the scheduler; [`balanced`], the
//!   `Balanced` policy's score.
//! - [`do_not_disrupt`]: how long the do-not-disrupt annotation protects a pod.
//! - [`quiet`]: when a pass may be skipped (nothing changed since one that decided nothing).
//! - [`repair`]: which unhealthy nodes to replace (node repair).
//! - [`static_pools`]: which nodes a static pool over its `replicas` gives up.
//!
//! The loop that reads the cluster, runs [`decide::decide`] and disrupts the chosen
//! NodeClaims is `crate::controllers::disruption` (feature `controllers`); repair's is
//! `crate::controllers::repair`.

pub mod balanced;
pub mod budgets;
pub mod decide;
pub mod do_not_disrupt;
pub mod drift;
pub mod quiet;
pub mod repair;
pub mod static_pools;

pub use budgets::{Budgets, Reason};
pub use decide::{decide, Candidate, Config, Decision, Outcome, PoolPolicy, World};
