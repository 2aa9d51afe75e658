//! Kubernetes errors that say where and what: the endpoint when the API cannot be reached,
//! the operation, object and HTTP status when it answers with an error.

use crate::protocol::prelude::*;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The connection settings themselves are unusable (bad CA, missing cluster...).
    #[error("{0}")]
    Config(String),
    /// No answer: DNS, TCP, TLS, timeout.
    #[error("cannot reach the Kubernetes API at {endpoint}: {cause}")]
    Unreachable { endpoint: String, cause: String },
    /// The API answered with an error status.
    #[error("Kubernetes {operation} {object}: {code} {reason}: {message}")]
    Api {
        operation: String,
        object: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// The API server refused the provider's EKS token (401), with what the provider could
    /// find out about why.
    #[error("Kubernetes {operation} {object}: {explanation}")]
    Unauthorized {
        operation: String,
        object: String,
        explanation: String,
    },
    /// The EKS cluster does not exist (deleted, or never created): its objects are gone.
    #[error("{0}")]
    ClusterGone(String),
    /// A wait ran past its deadline.
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    Other(String),
}

impl KubeError {
    /// Classifies a kube-rs error from `operation` on `object` at `endpoint`.
    pub fn from_kube(e: kube::Error, endpoint: &str, operation: &str, object: &str) -> KubeError {
        match e {
            kube::Error::Api(s) => KubeError::Api {
                operation: operation.into(),
                object: object.into(),
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => KubeError::Unreachable {
                endpoint: endpoint.into(),
                cause: root_cause(&e),
            },
            other => KubeError::Other(format!(
                "Kubernetes {operation} {object} at {endpoint}: {}",
                root_cause(&other)
            )),
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, KubeError::Api { code: 404, .. })
    }

    pub fn is_unreachable(&self) -> bool {
        matches!(self, KubeError::Unreachable { .. })
    }
}

/// The whole `source()` chain, so "connection refused" is not hidden behind "client error".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

impl From<KubeError> for Diagnostic {
    fn from(e: KubeError) -> Diagnostic {
        let summary = match &e {
            KubeError::Config(_) => "Kubernetes connection settings",
            KubeError::ClusterGone(_) => "Cluster not found",
            KubeError::Unreachable { .. } => "Kubernetes API unreachable",
            KubeError::Api { .. } => "Kubernetes API error",
            KubeError::Unauthorized { .. } => "Kubernetes API refused the provider's EKS token",
            KubeError::Timeout(_) => "Timed out waiting on Kubernetes",
            KubeError::Other(_) => "Kubernetes error",
        };
        Diagnostic::error(summary, e.to_string())
    }
}
