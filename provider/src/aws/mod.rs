//! AWS plumbing shared by resources, and one module per service API we call.

pub mod client;
pub mod ec2;
pub mod eks;
pub mod error;
pub mod eventbridge;
pub mod iam;
pub mod retry;
pub mod sqs;
pub mod sts;
