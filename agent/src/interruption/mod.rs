//! Interruption handling: the agent drains nodes ahead of Spot interruptions and other EC2
//! events delivered by EventBridge to the interruption queue.
//!
//! - [`messages`]: the five event kinds as typed structs (pure).
//! - [`actions`]: what to do about each, rebalance opt-in and rate limit, duplicates (pure).
//! - `queue` (feature `controllers`): the SQS consumer: 20 s long polls of 10 messages,
//!   handled in parallel, each deleted only after it was acted on.
//! - `controller` (feature `controllers`): the actions against the cluster: replacement
//!   first, then cordon and drain through the termination path.

pub mod actions;
#[cfg(feature = "controllers")]
pub mod controller;
pub mod messages;
#[cfg(feature = "controllers")]
pub mod metrics;
#[cfg(feature = "controllers")]
pub mod queue;
