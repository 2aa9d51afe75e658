//! The Kubernetes version kube-sim reports on `/version`: the EKS cluster's own, as EKS's
//! API server reports the version the cluster runs. Clients branch on it: the agent picks
//! the EKS-optimized AMI parameters of that version (`/aws/service/eks/optimized-ami/<v>/…`),
//! and a cluster upgrade is what makes an AMI alias resolve to a newer image. A fixed
//! version would test those paths against a cluster no one runs.
//!
//! With the AWS emulator, the version is that of the emulator's cluster of this name
//! (`eks:DescribeCluster`), re-read on every poll so an `UpdateClusterVersion` shows; until
//! the cluster exists, the version EKS would create it with (`eks:DescribeClusterVersions`
//! with `defaultOnly`). Without an emulator, [`FALLBACK`].

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fargate::eks_client;

/// The version reported when there is no emulator to ask: EKS's default version, as the
/// local EKS (`tests/aws-local/joiner_local/eks_versions.py`, `DEFAULT_VERSION`) serves it.
pub const FALLBACK: &str = "1.36";

/// The reported `major.minor`, shared by the server and the poller.
#[derive(Debug)]
pub struct ClusterVersion(RwLock<String>);

impl Default for ClusterVersion {
    fn default() -> Self {
        ClusterVersion(RwLock::new(FALLBACK.to_string()))
    }
}

impl ClusterVersion {
    /// The `major.minor` reported now.
    pub fn get(&self) -> String {
        self.0.read().unwrap().clone()
    }

    fn set(&self, v: &str) {
        let mut cur = self.0.write().unwrap();
        if *cur != v {
            tracing::info!(from = %cur, to = %v, "the cluster's Kubernetes version");
            *cur = v.to_string();
        }
    }

    /// The `/version` body, in the shape of k8s.io/apimachinery's `version.Info`.
    pub fn info(&self) -> Value {
        let v = self.get();
        let (major, minor) = v.split_once('.').unwrap_or(("1", "0"));
        json!({
            "major": major, "minor": minor, "gitVersion": format!("v{major}.{minor}.0-kube-sim"),
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26.0", "compiler": "gc",
            "platform": "linux/amd64",
        })
    }
}

/// The cluster's version, or when the emulator has no such cluster yet its default version;
/// None when neither answer names one.
async fn read(client: &aws_sdk_eks::Client, cluster: &str) -> anyhow::Result<Option<String>> {
    use aws_sdk_eks::error::ProvideErrorMetadata;
    match client.describe_cluster().name(cluster).send().await {
        Ok(out) => return Ok(out.cluster().and_then(|c| c.version()).map(str::to_string)),
        Err(e) if e.code() == Some("ResourceNotFoundException") => {}
        Err(e) => anyhow::bail!(
            "eks:DescribeCluster {cluster}: {}: {}",
            e.code().unwrap_or("error"),
            e.message().unwrap_or(&format!("{e}"))
        ),
    }
    let out = client
        .describe_cluster_versions()
        .default_only(true)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "eks:DescribeClusterVersions: {}: {}",
                e.code().unwrap_or("error"),
                e.message().unwrap_or(&format!("{e}"))
            )
        })?;
    Ok(out
        .cluster_versions()
        .iter()
        .find(|v| v.default_version())
        .and_then(|v| v.cluster_version())
        .map(str::to_string))
}

/// One read, kept: the cluster's version when an answer names one. A failure is logged
/// when it differs from the last one, and the version reported stays as it was.
async fn refresh(
    client: &aws_sdk_eks::Client,
    cluster: &str,
    version: &ClusterVersion,
    last_error: &mut String,
) {
    match read(client, cluster).await {
        Ok(Some(v)) => {
            last_error.clear();
            version.set(&v);
        }
        Ok(None) => last_error.clear(),
        Err(e) => {
            let msg = format!("{e:#}");
            if msg != *last_error {
                tracing::warn!("cluster version: {msg}");
            }
            *last_error = msg;
        }
    }
}

/// Reads the version once, so that the first `/version` answer is already the cluster's,
/// then re-reads it every `poll` until shutdown.
pub async fn follow(
    version: Arc<ClusterVersion>,
    (endpoint, region, cluster): (String, String, String),
    poll: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let client = eks_client(&endpoint, &region).await;
    let mut last_error = String::new();
    refresh(&client, &cluster, &version, &mut last_error).await;
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(poll);
        interval.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = interval.tick() => {}
            }
            refresh(&client, &cluster, &version, &mut last_error).await;
        }
    });
}
