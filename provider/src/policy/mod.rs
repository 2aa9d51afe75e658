//! IAM policy documents for joiner's roles, as pure functions of their inputs.
//!
//! Kept apart from the resources and the SDK so that what each role may do can be read,
//! reviewed and unit-tested (including against IAM's size quotas) without any AWS call.

pub mod agent;
pub mod arn;
pub mod deployer;
pub mod document;
pub mod managed;
pub mod trust;
