//! Interruption handling, the pure half: what the EC2 events delivered by EventBridge to
//! the interruption queue say and what to do about them.
//!
//! - [`messages`]: the five event kinds as typed structs.
//! - [`actions`]: what to do about each, rebalance opt-in and rate limit, duplicates, the
//!   deadline a notice gives.
//!
//! The loop that consumes the queue and disrupts NodeClaims is
//! `crate::controllers::interruption` (feature `controllers`).

pub mod actions;
pub mod messages;
