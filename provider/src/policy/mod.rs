//! IAM policy documents for joiner's roles, and the EventBridge patterns of the interruption
//! rules, as pure functions of their inputs.
//!
//! Kept apart from the resources and the SDK so that what each role may do, and what each rule
//! matches, can be read, reviewed and unit-tested (including against IAM's size quotas) without
//! any AWS call.

pub mod agent;
pub mod arn;
pub mod deployer;
pub mod document;
pub mod events;
pub mod managed;
pub mod trust;
