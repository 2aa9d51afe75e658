//! Amazon EKS: the control plane, its Fargate profiles, the CoreDNS add-on and the IAM
//! OIDC provider that makes IRSA work.
//!
//! Every call goes through the shared retry layer (throttling, IAM propagation) and every
//! long-running change ends in a poll-until-status wait bounded by the resource's timeout,
//! because EKS answers "CREATING" immediately and takes 10+ minutes to get to "ACTIVE".

pub mod access_entry;
pub mod addon;
pub mod cluster;
pub mod fargate;
pub mod oidc;
#[cfg(test)]
pub(crate) mod recording;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) use super::tests::moto_clients;
}
pub mod wait;

use std::time::Duration;

use super::error::AwsError;

/// Why an EKS operation did not reach the state we wanted.
#[derive(Debug, thiserror::Error)]
pub enum EksError {
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The object stayed in a transitional state past the resource's timeout.
    #[error(
        "timed out after {waited:?} waiting for {what} to become {target} (last status: {last}); \
         raise the resource's `timeouts` if this is expected"
    )]
    Timeout {
        what: String,
        target: String,
        last: String,
        waited: Duration,
    },
    /// EKS reported a terminal failure (e.g. a cluster in FAILED, an update that failed).
    #[error("{what} reached status {status}{}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Failed {
        what: String,
        status: String,
        detail: Option<String>,
    },
}

impl EksError {
    /// True when the addressed object does not exist (drift: deleted out of band).
    pub fn is_not_found(&self) -> bool {
        matches!(self, EksError::Aws(e) if e.is_not_found())
    }
}

/// A random idempotency token, so that a create retried after a lost response does not
/// fail with "already exists" (EKS deduplicates calls carrying the same token).
pub(crate) fn request_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}
