//! The provider's Kubernetes side: reaching a cluster (EKS by default, or the provider
//! block's `kubernetes {}`), presigned EKS tokens, and server-side apply of untyped objects
//! with the field manager `joiner`.

pub mod connect;
pub mod crds;
pub mod custom;
pub mod eks_token;
pub mod error;
pub mod objects;
pub mod unauthorized;
pub mod wait;

pub use connect::{Connector, Kube, KubeSettings};
pub use error::KubeError;
pub use objects::{kinds, Kind, FIELD_MANAGER};
