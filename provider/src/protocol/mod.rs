//! Terraform plugin protocol v6: handshake, DynamicValue codec, schema, gRPC server.
//!
//! This layer knows Terraform and go-plugin, and nothing about AWS: it is generic over the
//! provider's context type. Resources implement the traits in [`resource`].

pub mod convert;
pub mod diagnostics;
pub mod json;
pub mod msgpack;
pub mod p521;
pub mod plan;
pub mod plugin;
pub mod proto;
pub mod resource;
pub mod schema;
pub mod server;
pub mod stop;
pub mod timeouts;
pub mod value;

/// Everything a resource or data source file needs from the protocol layer.
pub mod prelude {
    pub use super::diagnostics::{Diagnostic, Diagnostics, Severity};
    pub use super::resource::{
        Applied, Change, ConfigureRequest, DataSource, Plan, Provider, ReadRequest, Resource,
    };
    pub use super::schema::{validators, Attribute, Block, NestedBlock, Nesting, Schema};
    pub use super::stop::StopToken;
    pub use super::timeouts::Timeouts;
    pub use super::value::{AttributePath, Number, Type, Value};
    pub use async_trait::async_trait;
}
