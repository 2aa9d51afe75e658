//! Running the agent as a service: flags ([`config`]), leader election ([`leader`]),
//! metrics ([`metrics`], and the cluster-wide gauges of [`inventory`]) and health
//! ([`http`]), logging ([`logging`]), freed heap returned to the system ([`memory`]).
//! Graceful shutdown is [`crate::controllers::run`]'s `shutdown` channel, which `main`
//! ties to SIGTERM.

pub mod config;
pub mod http;
pub mod inventory;
pub mod leader;
pub mod logging;
pub mod memory;
pub mod metrics;
