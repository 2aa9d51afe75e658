//! terraform-provider-joiner. See ARCHITECTURE.md for the map.
//!
//! `protocol` speaks Terraform's plugin protocol and knows nothing about AWS;
//! `provider` is the provider block and the list it serves; `context` is what resources receive;
//! `resources` and `data_sources` describe the objects we manage; `aws` holds the SDK
//! plumbing (client setup, error mapping, retries) and one module per AWS service;
//! `validators` holds the plan-time checks the resources share.

pub mod aws;
pub mod context;
pub mod convert;
pub mod data_sources;
pub mod kubernetes;
pub mod model;
pub mod policy;
pub mod protocol;
pub mod provider;
pub mod resources;
pub mod validators;
